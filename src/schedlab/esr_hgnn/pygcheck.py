"""Whether PyTorch Geometric is installed, as one line naming the extra when it is not.

Why a module of its own: the typed graph (``typed``), the PyG adapters (``pyg``) and the PyG
HAN (``han_pyg``) all check it, and ``pyg`` builds on ``typed``; the check sits below both.
"""

from __future__ import annotations

from schedlab.core.errors import MissingServiceError


def require_pyg():
    """Import torch_geometric or fail with one line naming the extra."""
    try:
        import torch_geometric
    except ImportError:
        raise MissingServiceError(
            "torch_geometric is not installed", hint="pip install 'schedlab[pyg]'"
        ) from None
    return torch_geometric
