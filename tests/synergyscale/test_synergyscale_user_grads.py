"""The loop's own gradient edits between ``engine.backward`` and ``engine.step`` (issue 46):
``torch.nn.utils.clip_grad_norm_(model.parameters(), c)`` called by the user, as in every plain
torch loop, used to be a silent no-op (offloaded gradients live in host buffers, so it saw
``.grad is None``). It now clips with plain torch's semantics bit for bit, or fails in one line,
never silently differs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from schedlab.core.errors import SchedlabError  # noqa: E402
from schedlab.synergyscale import initialize  # noqa: E402
from schedlab.synergyscale.parity import Loop, max_gap, train_engine, train_plain  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V, D, STEPS = 40, 16, 4


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.l1 = nn.Linear(D, 2 * D)
        self.norm = nn.LayerNorm(2 * D)
        self.l2 = nn.Linear(2 * D, D)
        self.out = nn.Linear(D, V)

    def forward(self, x):
        h = self.emb(x)
        h = h + self.l2(F.gelu(self.norm(self.l1(h))))
        return self.out(h)


def _make():
    torch.manual_seed(0)
    return Net()


def _opt(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def _batches(n: int):
    g = torch.Generator().manual_seed(2)
    xs = [torch.randint(0, V, (4, 8), generator=g) for _ in range(n)]
    return [(x, (5 * x + 1) % V) for x in xs]


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))


TIGHT = {"device_budget": 0.25, "prefetch_depth": 0}  # nothing resident
RESIDENT = {"device_budget": 0.7, "prefetch_depth": 1}  # the last units resident
ALL = {"device_budget": 1.0}  # everything resident (fits)


def _configs(tmp_path):
    return {
        "tight": TIGHT,
        "resident": RESIDENT,
        "all-resident": ALL,
        "nvme": {"device_budget": 0.3, "tier": "nvme", "nvme_dir": tmp_path, "prefetch_depth": 1},
    }


def _attribute_clip(params, c):
    """Looked up at call time, as ``torch.nn.utils.clip_grad_norm_(...)`` in a loop is."""
    return torch.nn.utils.clip_grad_norm_(params, c)


def _prebound_clip(params, c):
    """torch's own function, bound before schedlab was imported (no interception)."""
    fn = torch.nn.utils.clip_grad_norm_
    return getattr(fn, "synergyscale_original", fn)(params, c)


def _value_clip(params, c):
    return torch.nn.utils.clip_grad_value_(params, c / 20)


CLIPS = {"attribute": _attribute_clip, "prebound": _prebound_clip, "value": _value_clip}


@pytest.mark.parametrize("clip", sorted(CLIPS))
@pytest.mark.parametrize("where", ["tight", "resident", "all-resident", "nvme"])
def test_users_own_clipping_bit_for_bit(where, clip, tmp_path) -> None:
    loop = Loop(steps=STEPS, clip=0.05, user_clip=CLIPS[clip])  # every step clips
    batches = _batches(STEPS)
    ref = train_plain(_make, _opt, batches, _loss, loop)
    got = train_engine(_make, _opt, batches, _loss, loop, _configs(tmp_path)[where])
    assert max_gap(ref, got) == 0.0
    unclipped = train_plain(_make, _opt, batches, _loss, Loop(steps=STEPS))
    assert max_gap(unclipped, got) > 1e-3  # it did clip (the old no-op gave this run)


def test_users_clipping_in_bf16_equals_the_engines_own() -> None:
    """bf16 working copies: .grad of an offloaded parameter cannot be its fp32 host buffer, so
    only the intercepted torch.nn.utils call reaches the gradients; it must clip exactly as
    the config's gradient_clipping does."""
    batches = _batches(STEPS)
    config = {**TIGHT, "precision": "bf16"}
    own = train_engine(_make, _opt, batches, _loss, Loop(steps=STEPS, clip=0.05), config)
    user = Loop(steps=STEPS, clip=0.05, user_clip=_attribute_clip)
    got = train_engine(_make, _opt, batches, _loss, user, config)
    assert max_gap(own, got) == 0.0
    plain = train_engine(_make, _opt, batches, _loss, Loop(steps=STEPS), config)
    assert max_gap(plain, got) > 1e-3


def _engine_loop(config, edit_at: int, edit):
    model = _make()
    engine = initialize(model, _opt(model), config)
    try:
        for step, batch in enumerate(_batches(4)):
            engine.backward(_loss(engine, batch))
            if step >= edit_at:
                edit(model)
            engine.step()
    finally:
        engine.close()


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05),
        lambda m: _prebound_clip(m.parameters(), 0.05),
        lambda m: [p.grad.mul_(0.5) for p in m.parameters() if p.grad is not None],
    ],
    ids=["attribute", "prebound", "grad-mul"],
)
@pytest.mark.parametrize("config", [TIGHT, ALL], ids=["tight", "all-resident"])
def test_clipping_that_starts_late_is_one_line_not_silent(edit, config) -> None:
    """Steps 1-2 do not edit gradients, so from step 2 on units step during backward; an edit
    at step 3 comes too late for them: one line, not a differently trained model."""
    with pytest.raises(SchedlabError) as info:
        _engine_loop(config, edit_at=2, edit=edit)
    assert "\n" not in str(info.value)
    assert "gradient" in str(info.value)


def test_an_optimizer_that_edits_gradients_itself_is_no_false_alarm() -> None:
    """Rprop rewrites .grad in place during its own step: not the loop's edit."""

    def rprop(model):
        return torch.optim.Rprop(model.parameters(), lr=1e-2)

    ref = train_plain(_make, rprop, _batches(STEPS), _loss, Loop(steps=STEPS))
    got = train_engine(_make, rprop, _batches(STEPS), _loss, Loop(steps=STEPS), RESIDENT)
    assert max_gap(ref, got) == 0.0


@pytest.mark.parametrize("who", ["optimizer", "model"])
def test_zero_grad_in_the_loop(who) -> None:
    """``optimizer.zero_grad()`` / ``model.zero_grad()`` before the forward or after step (the
    usual places) is fine; between backward and step it would drop the step's gradients: one
    line."""
    model = _make()
    opt = _opt(model)
    engine = initialize(model, opt, RESIDENT)
    zero = opt.zero_grad if who == "optimizer" else model.zero_grad
    batches = _batches(3)
    for batch in batches[:2]:
        zero()
        engine.backward(_loss(engine, batch))
        engine.step()
        zero()  # right after step(), while overlapped steps may run
    engine.backward(_loss(engine, batches[2]))
    with pytest.raises(SchedlabError, match="zero_grad") as info:
        zero()
    assert "\n" not in str(info.value)
    engine.close()
    assert "zero_grad" not in opt.__dict__ and "zero_grad" not in model.__dict__


def test_gradients_are_readable_between_backward_and_step() -> None:
    """On a CPU device in fp32, .grad of every parameter holds plain torch's gradient."""
    ref_model = _make()
    x, y = _batches(1)[0]
    _loss(ref_model, (x, y)).backward()
    model = _make()
    engine = initialize(model, _opt(model), RESIDENT)
    engine.backward(_loss(engine, (x, y)))
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters(), strict=True):
        assert p.grad is not None and torch.equal(p.grad, q.grad), name
    engine.step()
    engine.close()
