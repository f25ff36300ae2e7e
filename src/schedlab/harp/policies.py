"""HARP's hybrid schedule and the baselines it is compared with, behind one protocol.

HARP (../shared/papers/16-harp.md) builds hybrid schedules that exploit inter-layer parallelism
(tokens flow through consecutive ops as soon as their own rows are ready) and intra-layer
parallelism (replicated crossbars serve several tokens at once; data-parallel digital kernels
split a batch of rows over units), overlapping analog and digital execution while respecting
each unit's dataflow constraints (an encoder's QK^T needs every key; a digital kernel in
data-parallel mode needs its whole batch). Baselines:

* ``non-pipelined``: op after op; each op finishes every token before the next op starts.
* ``single-vector``: the first, simplified vector pipeline — tokens flow op to op, but each op
  handles one vector at a time (even with replicas) and digital ops run in vector mode.
* ``mnsim-pipeline`` / ``mnsim-nopipe``: the two latency rules of MNSIM 2.0, read from its code
  (thu-nics/MNSIM-2.0, ``MNSIM/Latency_Model/Model_latency.py``), see
  :class:`MnsimScheduler`. These are the faithful baselines the claims are stated against.

A policy only writes a :class:`~schedlab.harp.plan.Plan`; the engines never see its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from schedlab.core.registry import lookup
from schedlab.harp.arch import ArchConfig
from schedlab.harp.costs import analog_row_ns, digital_row_cycles, row_share
from schedlab.harp.mapping import Mapping
from schedlab.harp.plan import Dep, Order, Plan, Stage, even_bounds
from schedlab.harp.workloads import Op, Workload

DIGITAL = "digital"


class Scheduler(Protocol):
    """Turns a mapped workload into a plan the simulator and estimator can execute."""

    name: str

    def plan(self, work: Workload, mapping: Mapping, arch: ArchConfig) -> Plan: ...


@dataclass(frozen=True)
class Choice:
    """What a policy decides for one op: its items, mode, concurrency and dependencies."""

    items: int  # number of row chunks
    data_parallel: bool = False
    max_inflight: int = 0
    barrier: bool = False  # wait for every row of every producer


def _stage(op: Op, choice: Choice, index: dict[str, int], work: Workload, mapping: Mapping,
           arch: ArchConfig) -> tuple[Stage, str, int]:
    """One op as a stage, with the pool it needs and that pool's capacity."""
    deps = tuple(Dep(index[src], "all" if choice.barrier else pat) for src, pat in op.inputs)
    bounds = even_bounds(work.tokens, choice.items)
    share = row_share(op, work.tokens)  # an op on fewer rows (patch embedding, pooler)
    if op.kind == "static":
        pool = f"xbar:{op.name}"
        return (Stage(op.name, op.kind, pool, bounds, 0.0, analog_row_ns(op, arch) * share,
                      0.0, deps,
                      max_inflight=choice.max_inflight, mode="analog"),
                pool, mapping.replicas_of(op.name))
    dig = arch.digital
    base, grow = digital_row_cycles(op, arch, choice.data_parallel)
    overhead = dig.dp_overhead_cycles if choice.data_parallel else dig.vector_overhead_cycles
    cyc = dig.cycle_ns
    return (Stage(op.name, op.kind, DIGITAL, bounds, overhead * cyc, base * cyc * share,
                  grow * cyc * share, deps, max_inflight=choice.max_inflight,
                  mode="data-parallel" if choice.data_parallel else "vector"),
            DIGITAL, dig.count)


def build_plan(policy: str, work: Workload, mapping: Mapping, arch: ArchConfig,
               choose: Callable[[Op, dict[str, Choice]], Choice], order: Order) -> Plan:
    """Apply a policy's per-op choice to every op, in topological order."""
    stages: list[Stage] = []
    pools: dict[str, int] = {}
    index: dict[str, int] = {}
    chosen: dict[str, Choice] = {}
    for op in work.ops:
        choice = choose(op, chosen)
        stage, pool, capacity = _stage(op, choice, index, work, mapping, arch)
        depth = len(stages)
        stage.priority = -depth if order == "token-first" else depth
        index[op.name], chosen[op.name] = depth, choice
        stages.append(stage)
        pools[pool] = capacity
    return Plan(policy, work.tokens, stages, pools, order).validate()


def _data_parallel_pays(op: Op, work: Workload, arch: ArchConfig) -> bool:
    """Whether one data-parallel chunk per unit beats streaming the same rows in vector mode.

    Each unit gets ceil(tokens / units) rows either way; data-parallel pays one larger setup
    for a faster per-row rate, which loses on short sequences (a row or two per unit).
    """
    dig = arch.digital
    rows = -(-work.tokens // dig.count)
    mid = (work.tokens + 1) / 2  # average causal growth factor
    vec, vec_grow = digital_row_cycles(op, arch, data_parallel=False)
    dp, dp_grow = digital_row_cycles(op, arch, data_parallel=True)
    vector = rows * (dig.vector_overhead_cycles + vec + vec_grow * mid)
    batched = dig.dp_overhead_cycles + rows * (dp + dp_grow * mid)
    return batched < vector


@dataclass(frozen=True)
class HarpScheduler:
    """HARP's hybrid schedule.

    Every op is pipelined at token granularity across layers; replicated crossbars serve
    tokens concurrently. A digital op runs data-parallel (one chunk of rows per digital unit)
    when its rows can only arrive together anyway — it waits on every key/value (encoder
    attention) or on a producer that already runs data-parallel — and in vector mode when its
    rows stream in one by one (causal attention, LayerNorm, GELU), so digital work overlaps the
    analog pipeline instead of waiting for it. A shared pool serves its ready work earliest op
    first, then oldest token: the head of the pipeline is the chain every later token still has
    to traverse, so keeping it moving beats draining early tokens (token-first loses 20-25% on
    GPT-2 in the simulator when the digital units are contended).
    """

    name: str = "harp"
    data_parallel: bool = True

    def plan(self, work: Workload, mapping: Mapping, arch: ArchConfig) -> Plan:
        units = arch.digital.count

        def choose(op: Op, chosen: dict[str, Choice]) -> Choice:
            if op.kind == "static":
                return Choice(items=work.tokens)
            # one token row (a KV-cache decode step) also "arrives together"
            batched = work.tokens == 1 or any(p == "all" for _, p in op.inputs) or any(
                chosen[src].data_parallel for src, _ in op.inputs)
            if self.data_parallel and batched and _data_parallel_pays(op, work, arch):
                return Choice(items=units, data_parallel=True)
            return Choice(items=work.tokens)

        return build_plan(self.name, work, mapping, arch, choose, "stage-first")


@dataclass(frozen=True)
class SingleVectorScheduler:
    """Baseline: a single-vector pipeline; one vector in flight per op, vector-mode digital."""

    name: str = "single-vector"

    def plan(self, work: Workload, mapping: Mapping, arch: ArchConfig) -> Plan:
        def choose(op: Op, chosen: dict[str, Choice]) -> Choice:
            return Choice(items=work.tokens, max_inflight=1)

        return build_plan(self.name, work, mapping, arch, choose, "token-first")


@dataclass(frozen=True)
class NonPipelinedScheduler:
    """Baseline: layer-by-layer, op-by-op execution with a barrier after every op.

    Within an op it is not naive: replicas serve tokens in parallel and digital ops run
    data-parallel over all units, so the gap to HARP is the pipelining alone.
    """

    name: str = "non-pipelined"

    def plan(self, work: Workload, mapping: Mapping, arch: ArchConfig) -> Plan:
        units = arch.digital.count

        def choose(op: Op, chosen: dict[str, Choice]) -> Choice:
            if op.kind == "static":
                return Choice(items=work.tokens, barrier=True)
            return Choice(items=units, data_parallel=True, barrier=True)

        return build_plan(self.name, work, mapping, arch, choose, "stage-first")


@dataclass(frozen=True)
class MnsimScheduler:
    """MNSIM 2.0's latency rules, on HARP's hardware model and digital units.

    ``calculate_model_latency`` (pipelined; MNSIM-2.0 ``Model_latency.py``): a layer computes its
    output vectors in order; the vector at position p begins at ``max(finish of the last input
    vector it needs in every input layer, finish of this layer's previous vector)`` and takes one
    whole tile latency (``begin_time = max(max_prelayer_time, self.pre_max_time)``,
    ``compute_time = tile_latency + merge + transfer + begin_time``). A replicated layer
    (``multiple``) splits its positions over the copies (``Split_map``), each copy one vector at
    a time; the digital layers (``element_sum``, ``pooling``) follow the same one-position-at-a-
    time rule. A transformer's linear layer is a per-token 1x1 layer here (MNSIM's ``fc`` type
    waits for the whole input, which would make every token wait for the previous op). We give
    copies the next token dynamically (any idle copy), which is never slower than MNSIM's
    contiguous split. ``calculate_model_latency_nopipe``: the same per-vector rule, but a layer
    begins only when its producers have finished every vector (``barrier``).

    MNSIM has no softmax/LayerNorm/QK^T units; those run on HARP's shared digital pool in vector
    mode, ``digital_inflight`` vectors of one op at a time (1 = MNSIM's per-layer rule; 0 = as many
    as the pool has units). ``static_inflight`` 0 lets every replica work (MNSIM's ``multiple``);
    1 is one vector per op. ``data_parallel`` lets the baseline use HARP's data-parallel digital
    mode where HARP's rule would (a sensitivity variant, not MNSIM).
    """

    name: str = "mnsim-pipeline"
    barrier: bool = False
    digital_inflight: int = 1
    static_inflight: int = 0
    data_parallel: bool = False

    def plan(self, work: Workload, mapping: Mapping, arch: ArchConfig) -> Plan:
        units = arch.digital.count

        def choose(op: Op, chosen: dict[str, Choice]) -> Choice:
            if op.kind == "static":
                return Choice(items=work.tokens, max_inflight=self.static_inflight,
                              barrier=self.barrier)
            batched = self.barrier or any(p == "all" for _, p in op.inputs) or any(
                chosen[src].data_parallel for src, _ in op.inputs)
            if self.data_parallel and batched and _data_parallel_pays(op, work, arch):
                return Choice(items=units, data_parallel=True, barrier=self.barrier)
            return Choice(items=work.tokens, max_inflight=self.digital_inflight,
                          barrier=self.barrier)

        return build_plan(self.name, work, mapping, arch, choose, "token-first")


SCHEDULERS: dict[str, Callable[[], Scheduler]] = {
    "harp": HarpScheduler,
    "harp-vector": lambda: HarpScheduler(name="harp-vector", data_parallel=False),
    "single-vector": SingleVectorScheduler,
    "non-pipelined": NonPipelinedScheduler,
    "mnsim-pipeline": MnsimScheduler,
    "mnsim-nopipe": lambda: MnsimScheduler(name="mnsim-nopipe", barrier=True),
}


def make_scheduler(name: str) -> Scheduler:
    return lookup(SCHEDULERS, "scheduler", name)()


def plan_summary(plan: Plan) -> dict[str, int]:
    """Items per execution mode: a quick look at what a policy decided."""
    modes: dict[str, int] = {}
    for stage in plan.stages:
        modes[stage.mode] = modes.get(stage.mode, 0) + stage.items
    return modes

