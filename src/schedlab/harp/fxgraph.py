"""``from_torch``: the original entry point, now a thin wrapper over ``torch.export``.

The first importer here used ``torch.fx.symbolic_trace``; it failed on every Hugging Face model
and on ``nn.TransformerEncoderLayer``, treated ``nn.MultiheadAttention`` as opaque, and read a
ViT's channels as tokens. :mod:`schedlab.harp.torch_export` replaces it; this name stays so
existing code keeps working.
"""

from __future__ import annotations

from typing import Any

from schedlab.harp.workloads import Workload


def from_torch(module: Any, example: Any, name: str = "torch-model",
               causal: bool | None = None) -> Workload:
    """Import ``module`` run on ``example`` (a tensor or a tuple of positional inputs).

    ``causal``: None reads each attention's mask from the traced values (see
    :func:`schedlab.harp.torch_export.from_export`); True/False forces it.
    """
    from schedlab.harp.torch_export import from_export

    return from_export(module, example, name=name, causal=causal)
