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


def _cuda_reference(steps: int, size: dict) -> list[float]:
    from schedlab.synergyscale.examples import batch, build_model, loss_of

    model = build_model("nanogpt", size, 0).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        x, y = (t.cuda() for t in batch("nanogpt", model, step, 0, 4))
        loss = loss_of("nanogpt", model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("tier", ["host", "nvme"])
def test_initialize_on_cuda_matches_torch_adam(tmp_path, tier: str) -> None:
    """Copy streams, event waits and record_stream: offloaded CUDA training equals plain CUDA
    training with torch.optim.Adam (Adam on the host masters, kernels on the GPU)."""
    from schedlab.synergyscale.engine import initialize
    from schedlab.synergyscale.examples import batch, build_model, loss_of

    size = dict(vocab=512, seq=64, d_model=128, n_layer=4, n_head=4)
    ref = _cuda_reference(10, size)
    model = build_model("nanogpt", size, 0)
    engine = initialize(model, torch.optim.Adam(model.parameters(), lr=1e-3),
                        dict(device="cuda", device_budget=0.35, tier=tier, nvme_dir=tmp_path))
    losses = []
    for step in range(10):
        x, y = (t.cuda() for t in batch("nanogpt", model, step, 0, 4))
        loss = loss_of("nanogpt", engine, x, y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    stats = engine.stats()
    engine.close()
    # CPU Adam on the masters vs CUDA Adam: same formula, different kernels
    assert max(abs(a - b) for a, b in zip(ref, losses, strict=True)) < 1e-4
    assert stats["device_peak"] <= stats["device_budget"]
