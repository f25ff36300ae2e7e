"""Models that read parameters outside their owning module, tie, share or reuse them: the engine
must train them exactly as plain torch does (losses, weights and buffers bit for bit), or refuse.

Before parameter-access tracing, ``TiedExternal`` and ``CrossRead`` trained on the released
placeholder (the loss stuck at ln(vocab)); these tests failed then.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from schedlab.core.errors import ConfigError, SchedlabError  # noqa: E402
from schedlab.synergyscale import initialize  # noqa: E402
from schedlab.synergyscale.parity import Loop, max_gap, train_engine, train_plain  # noqa: E402

V, D, STEPS = 48, 16, 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TiedExternal(nn.Module):
    """The usual tied head: the parent reads ``emb.weight`` after ``emb`` has run."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.l1, self.l2 = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        h = self.l2(torch.tanh(self.l1(self.emb(x))))
        return F.linear(h, self.emb.weight)


class TiedModules(nn.Module):
    """transformers' way: a head module whose weight *is* the embedding's."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.mid = nn.Linear(D, D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.relu(self.mid(self.emb(x))))


class SharedLinear(nn.Module):
    """Two modules sharing one weight (different biases), plus the head reading it transposed."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)
        self.b.weight = self.a.weight
        self.out = nn.Linear(D, V)

    def forward(self, x):
        h = self.b(torch.tanh(self.a(self.emb(x))))
        h = h + h @ self.a.weight.t()
        return self.out(h)


class Reused(nn.Module):
    """One block called three times per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.block = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D))
        self.out = nn.Linear(D, V)

    def forward(self, x):
        h = self.emb(x)
        for _ in range(3):
            h = h + self.block(h)
        return self.out(h)


class CrossRead(nn.Module):
    """Reads a child's weight before the child runs, another's after, through einsum and a view;
    the parent owns a parameter; BatchNorm buffers and a frozen projection."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.gate = nn.Parameter(torch.ones(D))
        self.l1, self.l2 = nn.Linear(D, D), nn.Linear(D, D)
        self.norm = nn.BatchNorm1d(D)
        self.frozen = nn.Linear(D, D)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(D, V)

    def forward(self, x):
        h = self.emb(x) * self.gate
        h = h + self.l1.bias.view(1, 1, -1)  # l1 has not run yet
        h = torch.tanh(self.l1(h))
        h = self.l2(h) + torch.einsum("btd,ed->bte", h, self.l2.weight) * 0.1
        h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        h = h + self.frozen(h)
        return self.out(h) + 0.01 * self.emb.weight[x].sum(-1, keepdim=True)


MODELS = [TiedExternal, TiedModules, SharedLinear, Reused, CrossRead]


def _make(cls):
    def make():
        torch.manual_seed(0)
        return cls()

    return make


def _batches(n: int):
    g = torch.Generator().manual_seed(1)
    xs = [torch.randint(0, V, (4, 8), generator=g) for _ in range(n)]
    return [(x, (7 * x + 3) % V) for x in xs]  # a learnable map: the loss falls


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))


def _adam(model):
    return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)


def _tight_budget(cls, depth: int) -> int:
    """The smallest budget the engine takes: the fetch window, nothing resident."""
    largest = max(
        sum(p.numel() for p in m.parameters(recurse=False) if p.requires_grad)
        for m in cls().modules()
    )
    return (depth + 3) * largest * 4


CONFIGS = {
    "host-tight": lambda cls, tmp: dict(device_budget=_tight_budget(cls, 0), prefetch_depth=0),
    "host-resident": lambda cls, tmp: dict(device_budget=0.8, prefetch_depth=1),
    "host-offload-only": lambda cls, tmp: dict(
        device_budget=_tight_budget(cls, 2), schedule="offload-only"
    ),
    "nvme": lambda cls, tmp: dict(
        device_budget=_tight_budget(cls, 2), tier="nvme", nvme_dir=tmp, io_threads=2
    ),
}


CASES = [
    (cls, config)
    for cls in MODELS
    for config in sorted(CONFIGS)
    if config != "nvme" or cls in (TiedExternal, SharedLinear, CrossRead)  # NVMe is slow here
]


@pytest.mark.parametrize(("cls", "config"), CASES, ids=[f"{c}-{cls.__name__}" for cls, c in CASES])
def test_model_trains_bit_for_bit_like_plain_torch(cls, config, tmp_path) -> None:
    loop, batches = Loop(steps=STEPS), _batches(STEPS)
    ref = train_plain(_make(cls), _adam, batches, _loss, loop)
    got = train_engine(_make(cls), _adam, batches, _loss, loop, CONFIGS[config](cls, tmp_path))
    assert ref.losses[-1] < ref.losses[0]  # the reference trains
    assert max_gap(ref, got) == 0.0


def test_external_read_is_fetched_and_released() -> None:
    """The head's read of ``emb.weight`` is served by the tracer, which drops it right after."""
    torch.manual_seed(0)
    model = TiedExternal()
    engine = initialize(
        model, _adam(model), {"device_budget": _tight_budget(TiedExternal, 0), "prefetch_depth": 0}
    )
    x, y = _batches(1)[0]
    loss = _loss(engine, (x, y))
    assert engine._access_ctl.external_reads >= 1
    assert 0 in model.emb.weight.data.stride()  # released again: a placeholder
    engine.backward(loss)
    engine.step()
    assert engine.stats()["device_peak"] <= engine.stats()["device_budget"]
    engine.close()


class Renorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D, max_norm=1.0)  # renormalises its weight in place
        self.out = nn.Linear(D, V)

    def forward(self, x):
        return self.out(self.emb(x))


def test_in_place_write_to_a_parameter_in_forward_is_refused_in_one_line() -> None:
    torch.manual_seed(0)
    model = Renorm()
    engine = initialize(model, _adam(model), {"device_budget": 0.5, "prefetch_depth": 0})
    with pytest.raises(SchedlabError) as info:
        engine(_batches(1)[0][0])
    message = str(info.value)
    assert "\n" not in message and "emb.weight" in message and "in place" in message
    engine.close()


def test_reading_a_parameter_outside_the_engine_is_loud_not_silent() -> None:
    """Outside engine(...)/backward the weights are offloaded; a read sees NaN, not a value."""
    torch.manual_seed(0)
    model = TiedExternal()
    engine = initialize(model, _adam(model), {"device_budget": 0.5, "prefetch_depth": 0})
    assert torch.isnan(model.l1.weight.sum())
    params, _ = engine.full_state()  # the way to read them
    assert not torch.isnan(params["l1.weight"]).any()
    engine.close()


@pytest.mark.parametrize("tier", ["host", "nvme"])
def test_model_state_dict_holds_the_trained_weights(tier, tmp_path) -> None:
    """``model.state_dict()`` (what users save) gathers every tier, equal to plain torch's."""
    loop, batches = Loop(steps=STEPS), _batches(STEPS)
    ref_model = _make(TiedExternal)()
    ref_opt = _adam(ref_model)
    for batch in batches:
        ref_opt.zero_grad()
        _loss(ref_model, batch).backward()
        ref_opt.step()
    model = _make(TiedExternal)()
    config = {"device_budget": _tight_budget(TiedExternal, 0), "prefetch_depth": 0}
    if tier == "nvme":
        config.update(tier="nvme", nvme_dir=tmp_path)
    engine = initialize(model, _adam(model), config)
    for batch in batches:
        engine.backward(_loss(engine, batch))
        engine.step()
    got, want = model.state_dict(), ref_model.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert loop.steps == STEPS
    engine.close()  # hands the model back: a plain module with the trained weights
    x = batches[0][0]
    assert torch.equal(model(x), ref_model(x))
    assert all(torch.equal(model.state_dict()[k], want[k]) for k in want)


def test_calling_the_users_optimizer_step_is_refused_in_one_line() -> None:
    model = _make(TiedExternal)()
    optimizer = _adam(model)
    engine = initialize(model, optimizer, {"device_budget": 0.5, "prefetch_depth": 0})
    engine.backward(_loss(engine, _batches(1)[0]))
    with pytest.raises(SchedlabError, match="call engine.step"):
        optimizer.step()
    engine.step()
    engine.close()


def test_checkpointing_a_class_that_owns_parameters_is_one_line() -> None:
    model = _make(Reused)()
    with pytest.raises(ConfigError) as info:
        initialize(model, _adam(model), {"activation_checkpointing": ["Linear"]})
    assert "\n" not in str(info.value) and "Linear" in str(info.value)


def test_checkpointing_a_reused_block_bit_for_bit() -> None:
    loop, batches = Loop(steps=STEPS), _batches(STEPS)
    ref = train_plain(_make(Reused), _adam, batches, _loss, loop)
    config = {"device_budget": _tight_budget(Reused, 0), "prefetch_depth": 0}
    config["activation_checkpointing"] = ["Sequential"]
    got = train_engine(_make(Reused), _adam, batches, _loss, loop, config)
    assert max_gap(ref, got) == 0.0
