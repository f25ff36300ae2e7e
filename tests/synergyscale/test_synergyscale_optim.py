"""Optimizers and training loops users have, through the engine vs plain torch, bit for bit:
every ``torch.optim`` optimizer, parameter groups, global-norm clipping, gradient accumulation,
LR schedulers, bf16 autocast and checkpoint save/resume."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from schedlab.core.errors import ConfigError, SchedlabError  # noqa: E402
from schedlab.synergyscale import initialize  # noqa: E402
from schedlab.synergyscale.parity import Loop, max_gap, train_engine, train_plain  # noqa: E402

V, D, STEPS = 40, 16, 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Net(nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.l1 = nn.Linear(D, 2 * D, bias=bias)
        self.norm = nn.LayerNorm(2 * D) if bias else nn.Identity()
        self.l2 = nn.Linear(2 * D, D, bias=bias)
        self.out = nn.Linear(D, V, bias=bias)

    def forward(self, x):
        h = self.emb(x)
        h = h + self.l2(F.gelu(self.norm(self.l1(h))))
        return self.out(h)


def _make(bias: bool = True):
    def make():
        torch.manual_seed(0)
        return Net(bias)

    return make


def _batches(n: int):
    g = torch.Generator().manual_seed(2)
    xs = [torch.randint(0, V, (4, 8), generator=g) for _ in range(n)]
    return [(x, (5 * x + 1) % V) for x in xs]


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))


def _grouped(cls, **kw):
    """Two parameter groups: weights with decay, biases/norms without, at another lr."""

    def make(model):
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in model.named_parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}]
        if rest:
            groups.append({"params": rest, "weight_decay": 0.0, "lr": kw.get("lr", 1e-2) / 2})
        return cls(groups, **kw)

    return make


OPTIMIZERS = {
    "SGD-nesterov": _grouped(torch.optim.SGD, lr=5e-2, momentum=0.9, nesterov=True),
    "Adam": _grouped(torch.optim.Adam, lr=1e-2),
    "Adam-amsgrad": _grouped(torch.optim.Adam, lr=1e-2, amsgrad=True),
    "AdamW": _grouped(torch.optim.AdamW, lr=1e-2),
    "Adamax": _grouped(torch.optim.Adamax, lr=1e-2),
    "NAdam": _grouped(torch.optim.NAdam, lr=1e-2),
    "RAdam": _grouped(torch.optim.RAdam, lr=1e-2),
    "RMSprop": _grouped(torch.optim.RMSprop, lr=1e-2, momentum=0.5),
    "Adagrad": _grouped(torch.optim.Adagrad, lr=5e-2),
    "Adadelta": _grouped(torch.optim.Adadelta, lr=1.0),
    "ASGD": _grouped(torch.optim.ASGD, lr=5e-2),
    "Rprop": lambda m: torch.optim.Rprop(m.parameters(), lr=1e-2),
    "Adafactor": _grouped(torch.optim.Adafactor, lr=1e-2),
}
TIGHT = {"device_budget": 0.25, "prefetch_depth": 0}  # 0.25 x 16 B/param: nothing resident
RESIDENT = {"device_budget": 0.7, "prefetch_depth": 1}


def _nvme(tmp_path) -> dict:
    return {"device_budget": 0.3, "tier": "nvme", "nvme_dir": tmp_path, "prefetch_depth": 1}


def _compare(make_opt, loop: Loop, config: dict, make_model=None) -> tuple:
    make_model = make_model or _make()
    batches = _batches(loop.steps * loop.accumulation)
    ref = train_plain(make_model, make_opt, batches, _loss, loop)
    got = train_engine(make_model, make_opt, batches, _loss, loop, config)
    return ref, got


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_torch_optimizer_with_parameter_groups_bit_for_bit(name) -> None:
    ref, got = _compare(OPTIMIZERS[name], Loop(steps=STEPS), TIGHT)
    assert ref.losses[-1] < ref.losses[0]
    assert max_gap(ref, got) == 0.0


@pytest.mark.parametrize("name", ["AdamW", "Adafactor", "ASGD"])
def test_optimizer_states_on_nvme_bit_for_bit(name, tmp_path) -> None:
    ref, got = _compare(OPTIMIZERS[name], Loop(steps=STEPS), _nvme(tmp_path))
    assert max_gap(ref, got) == 0.0


def test_muon_on_matrices_bit_for_bit() -> None:
    def make_opt(model):
        return torch.optim.Muon(model.parameters(), lr=2e-2, weight_decay=0.1)

    ref, got = _compare(make_opt, Loop(steps=STEPS), TIGHT, make_model=_make(bias=False))
    assert max_gap(ref, got) == 0.0


def _clip_cases(tmp_path):
    return {"tight": TIGHT, "resident": RESIDENT, "nvme": _nvme(tmp_path)}


@pytest.mark.parametrize("where", ["tight", "resident", "nvme"])
def test_global_norm_clipping_bit_for_bit(where, tmp_path) -> None:
    loop = Loop(steps=STEPS, clip=0.05)  # well under the gradient norm: every step clips
    ref, got = _compare(OPTIMIZERS["AdamW"], loop, _clip_cases(tmp_path)[where])
    assert max_gap(ref, got) == 0.0


def test_clipping_really_clips_and_reports_the_norm() -> None:
    model = _make()()
    engine = initialize(
        model, torch.optim.SGD(model.parameters(), lr=0.1), {**TIGHT, "gradient_clipping": 0.05}
    )
    engine.backward(_loss(engine, _batches(1)[0]))
    engine.step()
    assert engine.grad_norm is not None and engine.grad_norm > 0.05
    engine.close()


@pytest.mark.parametrize("where", ["tight", "resident", "nvme"])
def test_gradient_accumulation_bit_for_bit(where, tmp_path) -> None:
    loop = Loop(steps=3, accumulation=3)
    ref, got = _compare(OPTIMIZERS["AdamW"], loop, _clip_cases(tmp_path)[where])
    assert max_gap(ref, got) == 0.0


def _onecycle(optimizer):
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=[2e-2, 1e-2], total_steps=STEPS + 1
    )


def _step_lr(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.3)


@pytest.mark.parametrize("make_scheduler", [_onecycle, _step_lr], ids=["OneCycleLR", "StepLR"])
def test_lr_schedulers_reach_every_unit(make_scheduler) -> None:
    loop = Loop(steps=STEPS, make_scheduler=make_scheduler)
    ref, got = _compare(OPTIMIZERS["AdamW"], loop, TIGHT)
    assert max_gap(ref, got) == 0.0
    # without the scheduler the run differs: it did change the learning rate
    plain = train_plain(_make(), OPTIMIZERS["AdamW"], _batches(STEPS), _loss, Loop(steps=STEPS))
    assert max_gap(plain, got) > 0


@pytest.mark.parametrize("config", [TIGHT, RESIDENT], ids=["tight", "resident"])
def test_bf16_autocast_bit_for_bit(config) -> None:
    ref, got = _compare(OPTIMIZERS["AdamW"], Loop(steps=STEPS, autocast=True), config)
    assert max_gap(ref, got) == 0.0


def test_everything_at_once(tmp_path) -> None:
    loop = Loop(steps=3, accumulation=2, clip=0.1, autocast=True, make_scheduler=_step_lr)
    ref, got = _compare(OPTIMIZERS["NAdam"], loop, _nvme(tmp_path))
    assert max_gap(ref, got) == 0.0


@pytest.mark.parametrize("tier", ["host", "nvme"])
def test_checkpoint_resume_matches_an_uninterrupted_plain_run(tier, tmp_path) -> None:
    """3 steps, save, a fresh engine loads and runs 3 more == 6 plain torch steps (AdamW,
    parameter groups, StepLR whose state rides in ``extra``)."""
    batches, make_opt = _batches(6), OPTIMIZERS["AdamW"]
    ref = train_plain(_make(), make_opt, batches, _loss, Loop(steps=6, make_scheduler=_step_lr))
    config = TIGHT if tier == "host" else _nvme(tmp_path / "nvme")
    losses = []
    for part in range(2):
        model = _make()()  # the second run starts from a fresh init, overwritten by the load
        optimizer = make_opt(model)
        scheduler = _step_lr(optimizer)
        engine = initialize(model, optimizer, config)
        if part:
            scheduler.load_state_dict(engine.load_checkpoint(tmp_path / "ck")["scheduler"])
        for step in range(3 * part, 3 * part + 3):
            loss = _loss(engine, batches[step])
            engine.backward(loss)
            engine.step()
            scheduler.step()
            losses.append(loss.item())
        if not part:
            engine.save_checkpoint(tmp_path / "ck", extra={"scheduler": scheduler.state_dict()})
        params, _ = engine.full_state()
        engine.close()
    assert losses == ref.losses
    assert all(torch.equal(params[n], ref.params[n]) for n in ref.params)


@pytest.mark.parametrize("cls", [torch.optim.LBFGS, torch.optim.SparseAdam])
def test_optimizers_that_are_not_per_parameter_are_refused_in_one_line(cls) -> None:
    model = _make()()
    with pytest.raises(ConfigError) as info:
        initialize(model, cls(model.parameters()), TIGHT)
    assert "\n" not in str(info.value) and cls.__name__ in str(info.value)


def test_step_in_the_middle_of_accumulation_is_one_line() -> None:
    model = _make()()
    engine = initialize(
        model, torch.optim.AdamW(model.parameters()), {**TIGHT, "gradient_accumulation_steps": 2}
    )
    engine.backward(_loss(engine, _batches(1)[0]))
    with pytest.raises(SchedlabError, match="after 1 backward passes"):
        engine.step()
    engine.backward(_loss(engine, _batches(1)[0]))
    with pytest.raises(SchedlabError, match="backward\\(\\) number 3"):
        engine(_batches(1)[0][0])
        engine.backward(_loss(engine, _batches(1)[0]))
    engine.close()


def test_transformers_gpt2_with_the_usual_fine_tuning_loop(tmp_path) -> None:
    """transformers' GPT-2 (tied head) with AdamW over decay/no-decay groups, clipping at 1.0,
    2-step accumulation and a warm-up cosine schedule, on the NVMe tier: bit for bit."""
    pytest.importorskip("transformers", reason="needs transformers")
    from schedlab.synergyscale.examples import build_model

    size = dict(vocab_size=V, n_positions=8, n_embd=16, n_layer=2, n_head=2)

    def make_model():
        return build_model("gpt2", size, seed=0)

    def make_opt(model):
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in model.named_parameters() if p.dim() < 2]
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
            lr=3e-3,
        )

    def cosine(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min(1.0, (s + 1) / 2) * 0.5 * (1 + math.cos(math.pi * s / 8))
        )

    def loss_fn(model, batch):
        return model(batch[0], labels=batch[0]).loss

    loop = Loop(steps=3, accumulation=2, clip=1.0, make_scheduler=cosine)
    batches = _batches(6)
    ref = train_plain(make_model, make_opt, batches, loss_fn, loop)
    got = train_engine(make_model, make_opt, batches, loss_fn, loop, _nvme(tmp_path))
    assert max_gap(ref, got) == 0.0
