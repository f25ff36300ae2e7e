"""On a real NVIDIA GPU: the shim confines PyTorch (skipped without one)."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device and a CUDA PyTorch")
def test_shim_confines_pytorch_on_a_real_gpu() -> None:
    from schedlab.gpooling.gpu_check import check

    result = check(seconds=5.0)
    assert result["memory_ok"], result["memory"]
    assert result["compute_ok"], (result["full"], result["sliced"])
