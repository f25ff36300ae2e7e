"""The CUDA-stream path of the same task graph (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from schedlab.synergyscale import BUILTIN_MODELS, synthetic_batches, train, train_reference

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_streams_train_close_to_reference() -> None:
    cfg = BUILTIN_MODELS["gpt-tiny"]
    batches = synthetic_batches(cfg, 4, 0)
    losses, _ = train_reference(cfg, batches, 0)
    states = 16 * 234_880
    report = train(cfg, batches, "synergyscale", int(0.45 * states), 4 * states,
                   executor="cuda", device="cuda")
    # GPU kernels differ from CPU ones: close, not bit-identical, to the CPU reference
    assert report.losses == pytest.approx(losses, rel=1e-3)
    assert report.device_peak <= int(0.45 * states)
