"""Every mapper through the same invariants; compiled rules against the interpreter; allocation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.iflux.intents import CARDINALITY, FEATURES, Intent, Mode, Usage, random_codes
from schedlab.iflux.policies import MAPPERS, allocate, make_mapper, shared_mapper
from schedlab.iflux.rules import (
    DEFAULT_RULES,
    Soft,
    Tier,
    all_points,
    compile_rules,
    interpret,
    rule,
)

COL = {name: i for i, (name, _) in enumerate(FEATURES)}


def code(enum_value) -> int:
    return list(type(enum_value)).index(enum_value)


@pytest.mark.parametrize("name", MAPPERS)
def test_mapper_invariants(name: str) -> None:
    mapper = make_mapper(name)
    codes = random_codes(3000, 7)
    result = mapper.map(codes)
    assert result.chain_ids.shape == result.soft.shape == (len(codes),)
    assert result.chain_ids.max() < len(result.chains)
    for chain_id, soft in zip(result.chain_ids, result.soft, strict=True):
        chain = result.chains[chain_id]
        assert chain and all(isinstance(t, Tier) for t in chain)
        if chain == (Tier.PFS,):
            assert soft == 0  # no staging or caching onto the PFS itself
    read_only = codes[:, COL["mode"]] == code(Mode.READ_ONLY)
    flushes = (result.soft & (Soft.STAGE_OUT | Soft.WRITE_BACK | Soft.AGGREGATE)) != 0
    assert not (read_only & flushes & (codes[:, COL["usage"]] != code(Usage.OUTPUT))).any()
    assert result.chain_ids.dtype == np.uint8
    empty = mapper.map(random_codes(0, 0))
    assert len(empty.chain_ids) == 0


@pytest.mark.parametrize("name", MAPPERS)
def test_allocation_never_exceeds_capacity(name: str) -> None:
    rng = np.random.default_rng(3)
    intents = [Intent(path=f"/p/{i}", usage="input", mode="read-only", pattern="small-random",
                      size=int(rng.integers(1, 3 << 30))) for i in range(12)]
    intents += [Intent(path=f"/q/{i}", usage="output", pattern="checkpoint",
                       size=int(rng.integers(1, 3 << 30))) for i in range(6)]
    capacity = {Tier.RAMDISK: 40 << 30, Tier.NVME: 40 << 30, Tier.SHARED_BB: 40 << 30,
                Tier.GPU_DIRECT: 1 << 30, Tier.PFS: 1 << 62}
    allocation = allocate(intents, make_mapper(name), capacity)
    used: dict[Tier, int] = {}
    for placement in allocation.placements:
        assert placement.tier in placement.chain
        used[placement.tier] = used.get(placement.tier, 0) + placement.intent.size
    assert all(used[t] <= capacity[t] for t in used)
    assert [p.intent for p in allocation.placements] == intents  # order preserved


def test_compiled_table_equals_interpreter_on_every_point() -> None:
    table = compile_rules()
    points = all_points()
    assert len(points) == np.prod(CARDINALITY)
    chains, soft = table.lookup(points)
    for point, chain_id, mask in zip(points, chains, soft, strict=True):
        decision = interpret(point.tolist())
        assert table.chains[chain_id] == decision.tiers and mask == decision.soft


@given(st.integers(0, 10_000), st.integers(1, 500))
def test_fused_lookup_equals_numpy_lookup(seed: int, n: int) -> None:
    table = shared_mapper("iflux").table  # type: ignore[attr-defined]
    codes = random_codes(n, seed)
    a, b = table.lookup(codes), table.lookup_numpy(codes)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()


def test_rule_semantics_match_the_paper_intent() -> None:
    strong = Intent(path="/a", usage="output", sharing="shared", consistency="strong",
                    mode="write-only", pattern="checkpoint", size=1 << 30)
    ckpt = Intent(path="/b", usage="output", pattern="checkpoint", mode="write-only",
                  size=1 << 30)
    random_in = Intent(path="/c", usage="input", mode="read-only", pattern="small-random",
                       size=1 << 20)
    scratch = Intent(path="/d", usage="temporary", pattern="checkpoint", size=1 << 20)
    huge = Intent(path="/e", usage="input", mode="read-only", size=1 << 40)
    placed = allocate([strong, ckpt, random_in, scratch, huge], make_mapper("iflux"))
    tiers = [p.tier for p in placed.placements]
    soft = [p.soft for p in placed.placements]
    assert tiers == [Tier.PFS, Tier.NVME, Tier.RAMDISK, Tier.NVME, Tier.SHARED_BB]
    assert soft[1] & Soft.WRITE_BACK and soft[1] & Soft.STAGE_OUT
    assert soft[2] & Soft.STAGE_IN and not soft[2] & Soft.STAGE_OUT
    assert not soft[3] & (Soft.STAGE_OUT | Soft.WRITE_BACK)  # temporary data is never flushed


def test_custom_rules_priority_and_removal() -> None:
    rules = (rule("base", 0, [Tier.PFS]),
             rule("a", 5, [Tier.NVME], Soft.STAGE_IN | Soft.COMPRESS, usage=Usage.INPUT),
             rule("b", 9, [Tier.RAMDISK], usage=Usage.INPUT, pattern="small-random"),
             rule("c", 1, remove=Soft.COMPRESS, pattern="small-random"))
    point = [0] * len(FEATURES)
    point[COL["usage"]] = code(Usage.INPUT)
    point[COL["pattern"]] = 0  # small-random
    decision = interpret(point, rules)
    assert decision.tiers == (Tier.RAMDISK,) and decision.soft == Soft.STAGE_IN
    assert DEFAULT_RULES[0].name == "default-pfs"


def test_capacity_error_before_deploy_names_intent() -> None:
    intents = [Intent(path="/big", usage="output", pattern="checkpoint", size=1 << 40)]
    with pytest.raises(BadInputError, match="capacity cannot be met") as err:
        allocate(intents, make_mapper("iflux"), {Tier.NVME: 1 << 30, Tier.SHARED_BB: 1 << 30})
    assert err.value.field == "intents[0].size"


def test_unknown_mapper() -> None:
    with pytest.raises(UnknownNameError, match="iflux"):
        make_mapper("magic")


def test_no_gpu_direct_placement_without_a_gpu() -> None:
    from schedlab.iflux.engine import decide
    from schedlab.iflux.storage import has_gpu

    samples = Intent(path="/p/samples", usage="input", data="sample", level="operation",
                     size="1GiB")
    placement = decide([samples]).allocation.placements[0]
    assert placement.chain[0] is Tier.GPU_DIRECT, "the rule still prefers it where it exists"
    assert (placement.tier is Tier.GPU_DIRECT) == has_gpu()
