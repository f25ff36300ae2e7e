"""CGRA back end: a parametric dataflow CGRA, modulo scheduling and placement/routing.

RedPanda (../shared/papers/08-redpanda.md) maps its IR onto dataflow CGRAs in two modes:
*spatial* (one instruction per PE, the fabric is a pipeline) and *temporal* (each PE holds up
to ``contexts`` instructions and time-multiplexes them). The mapper places and schedules on the
time-extended resource graph: a node occupies (PE, cycle mod II); a value routed from PE a to
PE b costs ``hops(a, b) - 1`` extra cycles on the mesh. The initiation interval (II) is bounded
below by resources (ResMII) and recurrences (RecMII: loop-carried cycles through carry /
invariant operators). The default mapper is a list scheduler that tries every PE for every
node in priority order; :mod:`.modulo` solves the schedule exactly with HiGHS.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import networkx as nx

from schedlab.core.errors import BadInputError
from schedlab.redpanda.graph import Graph
from schedlab.redpanda.simulator import Timing, node_latency

MEMORY_KINDS = frozenset({"load", "store"})


@dataclass(frozen=True)
class CGRA:
    """A rows x cols mesh; memory ops only on the border columns (next to the SRAM banks)."""

    rows: int = 4
    cols: int = 4
    contexts: int = 16         # instructions one PE can hold in temporal mode
    hop_latency: int = 1       # cycles per mesh hop beyond the first
    buffer_depth: int = 2      # default FIFO slots per PE input

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 2 or self.contexts < 1:
            raise BadInputError("a CGRA needs rows >= 1, cols >= 2 and contexts >= 1",
                                field="rows/cols/contexts")

    @property
    def pes(self) -> list[tuple[int, int]]:
        return [(r, c) for r in range(self.rows) for c in range(self.cols)]

    def memory_capable(self, pe: tuple[int, int]) -> bool:
        return pe[1] in (0, self.cols - 1)

    def hops(self, a: tuple[int, int], b: tuple[int, int]) -> int:
        return abs(a[0] - b[0]) + abs(a[1] - b[1])

    def delay(self, a: tuple[int, int], b: tuple[int, int]) -> int:
        return max(self.hops(a, b) - 1, 0) * self.hop_latency


@dataclass
class Mapping:
    """Where and when every instruction runs, and what that costs."""

    graph: Graph
    arch: CGRA
    mode: str
    ii: int
    min_ii: int
    res_mii: int
    rec_mii: int
    place: dict[int, tuple[int, int]] = field(default_factory=dict)
    start: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    mapper: str = "list"
    slot_ii: int = 0  # II of the modulo reservation table (contexts used per PE)

    def timing(self, size_buffers: bool) -> Timing:
        """Latencies, routing delays and FIFO depths for the cycle simulator."""
        delay, capacity = {}, {}
        for src, dst, operand in self.graph.edges():
            if src in self.place and dst in self.place:
                delay[(dst, operand)] = self.arch.delay(self.place[src], self.place[dst])
            if size_buffers and src in self.start and dst in self.start:
                life = self.start[dst] - self.start[src] + (self.ii if back_edge(
                    self.graph, dst, operand) else 0)
                capacity[(dst, operand)] = max(self.arch.buffer_depth,
                                               math.ceil(max(life, 1) / self.ii) + 1)
        pe_of = None
        if self.mode == "temporal":
            index = {pe: i for i, pe in enumerate(self.arch.pes)}
            pe_of = {n: index[pe] for n, pe in self.place.items()}
        return Timing(delay=delay, capacity=capacity, default_capacity=self.arch.buffer_depth,
                      pe_of=pe_of)

    def metrics(self) -> dict[str, float]:
        used = len(set(self.place.values()))
        n = len(self.place)
        return dict(ii=self.ii, min_ii=self.min_ii, res_mii=self.res_mii, rec_mii=self.rec_mii,
                    slot_ii=self.slot_ii, instructions=n, pes_used=used,
                    pe_utilisation=n / (len(self.arch.pes) * self.ii),
                    mapping_seconds=self.seconds)


def back_edge(graph: Graph, dst: int, operand: int) -> bool:
    """Operands consumed for the *next* emission of a loop operator (distance 1)."""
    kind = graph.nodes[dst].kind
    return (kind == "carry" and operand >= 1) or (kind == "invariant" and operand == 0)


def mapped_nodes(graph: Graph) -> list[int]:
    return [n.id for n in graph.instructions()]


def min_ii(graph: Graph, arch: CGRA, mode: str) -> tuple[int, int, int]:
    """(MII, ResMII, RecMII) assuming one-hop routing on every edge."""
    nodes = mapped_nodes(graph)
    n_mem = sum(graph.nodes[n].kind in MEMORY_KINDS for n in nodes)
    mem_pes = sum(arch.memory_capable(p) for p in arch.pes)
    if mode == "spatial":
        if len(nodes) > len(arch.pes) or n_mem > mem_pes:
            raise BadInputError(
                f"{graph.name}: {len(nodes)} instructions ({n_mem} memory) do not fit a "
                f"{arch.rows}x{arch.cols} spatial CGRA; use --temporal or a larger fabric",
                field="rows/cols")
        res = 1
    else:
        if len(nodes) > len(arch.pes) * arch.contexts or n_mem > mem_pes * arch.contexts:
            raise BadInputError(
                f"{graph.name}: {len(nodes)} instructions ({n_mem} memory) exceed "
                f"{arch.rows}x{arch.cols} PEs x {arch.contexts} contexts", field="contexts")
        res = max(math.ceil(len(nodes) / len(arch.pes)), math.ceil(n_mem / max(mem_pes, 1)))
    rec = rec_mii(graph, {})
    return max(res, rec), res, rec


def rec_mii(graph: Graph, extra: dict[tuple[int, int], int], latency=node_latency) -> int:
    """Smallest II with no positive cycle of latency - II * distance (Bellman-Ford);
    ``latency(node)`` gives unit latencies (default: the token simulator's)."""
    lat = {n.id: latency(n) for n in graph.nodes.values()}
    edges = [(s, d, lat[s] + extra.get((d, i), 0), int(back_edge(graph, d, i)))
             for s, d, i in graph.edges()]
    if not any(dist for *_, dist in edges):
        return 1

    def feasible(ii: int) -> bool:
        dist = dict.fromkeys(graph.nodes, 0)
        for _ in range(len(graph.nodes)):
            changed = False
            for s, d, w, k in edges:
                if dist[s] + w - ii * k > dist[d]:
                    dist[d] = dist[s] + w - ii * k
                    changed = True
            if not changed:
                return True
        return False

    lo, hi = 1, max(1, sum(w for _, _, w, _ in edges))
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(mid) else (mid + 1, hi)
    return lo


def _order(graph: Graph) -> list[int]:
    dag = nx.DiGraph()
    nodes = set(mapped_nodes(graph))
    dag.add_nodes_from(sorted(nodes))
    dag.add_edges_from((s, d) for s, d, i in graph.edges()
                       if s in nodes and d in nodes and not back_edge(graph, d, i))
    return list(nx.lexicographical_topological_sort(dag))


def _free(arch: CGRA, mode: str, ii: int, pe, taken: set) -> int:
    """Instruction slots still free on ``pe`` (bounded by its contexts)."""
    if mode == "spatial":
        return int(pe not in taken)
    used = sum((pe, s) in taken for s in range(ii))
    return max(min(ii, arch.contexts) - used, 0)


def _try_ii(graph: Graph, arch: CGRA, mode: str, ii: int, order: list[int]):
    preds: dict[int, list[tuple[int, int]]] = {n: [] for n in order}
    for s, d, i in graph.edges():
        if d in preds and s in preds and not back_edge(graph, d, i):
            preds[d].append((s, i))
    lat = {n: node_latency(graph.nodes[n]) for n in order}
    loops_to: dict[int, list[int]] = {n: [] for n in order}  # recurrence successors
    for s, d, i in graph.edges():
        if s in loops_to and d in loops_to and back_edge(graph, d, i):
            loops_to[s].append(d)
    place, start, taken = {}, {}, set()
    mem_left = sum(graph.nodes[n].kind in MEMORY_KINDS for n in order)
    for n in order:
        best = None
        memory = graph.nodes[n].kind in MEMORY_KINDS
        mem_free = sum(_free(arch, mode, ii, pe, taken) for pe in arch.pes
                       if arch.memory_capable(pe))
        for pe in arch.pes:
            if memory != arch.memory_capable(pe) and (memory or mem_free <= mem_left):
                continue  # memory ops need border PEs; keep enough of those for them
            ready = max((start[s] + lat[s] + arch.delay(place[s], pe) for s, _ in preds[n]),
                        default=0)
            if mode == "spatial":
                if pe in taken:
                    continue
                t = ready
            elif not _free(arch, mode, ii, pe, taken):
                continue
            else:
                t = next((x for x in range(ready, ready + ii) if (pe, x % ii) not in taken), None)
                if t is None:
                    continue
            wire = sum(arch.hops(place[s], pe) for s, _ in preds[n])
            # closing a recurrence far from its loop operator would stretch the II
            back = sum(arch.delay(pe, place[d]) for d in loops_to[n] if d in place)
            if best is None or (t + back, wire) < best[:2]:
                best = (t + back, wire, pe, t)
        if best is None:
            return None
        _, _, pe, t = best
        mem_left -= memory
        place[n], start[n] = pe, t
        taken.add(pe if mode == "spatial" else (pe, t % ii))
    return place, start


def map_graph(graph: Graph, arch: CGRA, mode: str = "spatial", max_extra: int = 64) -> Mapping:
    """Place and modulo-schedule ``graph``; the smallest II the list scheduler achieves."""
    if mode not in ("spatial", "temporal"):
        raise BadInputError(f"unknown CGRA mode '{mode}'", field="mode")
    began = time.perf_counter()
    mii, res, rec = min_ii(graph, arch, mode)
    order = _order(graph)
    limit = mii + max_extra
    for ii in range(mii, limit + 1):
        found = _try_ii(graph, arch, mode, ii, order)
        if found is None:
            continue
        place, start = found
        routed = {(d, i): arch.delay(place[s], place[d]) for s, d, i in graph.edges()
                  if s in place and d in place}
        achieved = max(ii, rec_mii(graph, routed))  # recurrences pay the routing they got
        return Mapping(graph, arch, mode, achieved, mii, res, rec, place, start,
                       time.perf_counter() - began, slot_ii=ii)
    raise BadInputError(f"{graph.name}: no mapping with II <= {limit} on a {arch.rows}x"
                        f"{arch.cols} CGRA with {arch.contexts} contexts", field="contexts",
                        hint="try more --contexts or a larger fabric")


class CGRABackend:
    """The CGRA target behind the :class:`~schedlab.redpanda.backends.base.Backend` protocol."""

    name = "cgra"

    def compile(self, graph: Graph, arch: CGRA | None = None, mode: str = "spatial",
                mapper: str = "list") -> Mapping:
        arch = arch or CGRA()
        if mapper not in ("list", "milp"):
            from schedlab.core.errors import UnknownNameError

            raise UnknownNameError("mapper", mapper, ["list", "milp"])
        if mapper == "milp":
            from schedlab.redpanda.backends.modulo import map_graph_milp

            return map_graph_milp(graph, arch, mode)
        return map_graph(graph, arch, mode)


# ---- the place-and-route back end (architecture file, PathFinder, configuration) ---------
def compile_config(graph: Graph, arch, mode: str = "temporal", size_buffers: bool = True,
                   router: str = "pathfinder"):
    """Place, route (PathFinder, II search) and emit the checked per-cycle configuration.

    ``arch`` is an :class:`~schedlab.redpanda.backends.arch.Architecture` (or a shipped name /
    JSON path). Returns ``(PnR, configuration dict)``; the configuration has passed
    :func:`~schedlab.redpanda.backends.config.check_config` (no link slot over capacity).
    """
    from schedlab.redpanda.backends.arch import Architecture, load_arch
    from schedlab.redpanda.backends.config import check_config, emit_config
    from schedlab.redpanda.backends.router import place_and_route

    if not isinstance(arch, Architecture):
        arch = load_arch(arch)
    pnr = place_and_route(graph, arch, mode, router=router)
    config = emit_config(pnr, size_buffers)
    check_config(config)
    return pnr, config


def compile_arch_file(
    path,
    arch,
    flow: str = "redpanda",
    mode: str = "temporal",
    seed: int = 0,
    config_out=None,
    simulate: bool = True,
    inputs=None,
    limits=None,
    function: str | None = None,
    defines: dict[str, int] | None = None,
    router: str = "pathfinder",
) -> dict:
    """``schedlab redpanda compile --arch FILE``: a kernel file through place and route.

    The cycle count is the emitted configuration executed by :mod:`.config_sim` on ``inputs``
    (a .npz/.json file or a mapping; else seeded random data), checked against xDSL's
    interpreter (which names a trap or a non-terminating loop first); ``config_out`` receives
    the configuration JSON.
    """
    from schedlab.redpanda.api import Limits, check_run, prepare_inputs
    from schedlab.redpanda.backends.config import write_config
    from schedlab.redpanda.backends.config_sim import run_config
    from schedlab.redpanda.compiler import middle_end, outputs_match
    from schedlab.redpanda.dialect import print_ir
    from schedlab.redpanda.frontend import load_kernel
    from schedlab.redpanda.policies import get_flow

    limits = limits or Limits()
    kernel = load_kernel(path, function=function, defines=defines)
    chosen = get_flow(flow)
    graph = middle_end(kernel, chosen, mode)  # type: ignore[arg-type]
    pnr, config = compile_config(graph, arch, mode, chosen.size_buffers, router)
    metrics: dict[str, object] = dict(
        pnr.metrics(), flow=flow, arch=pnr.arch.name, router=router,
        instruction_kinds=graph.kind_counts(),
    )
    note = "simulation not run (--no-simulate)"
    if simulate:
        data, origin = prepare_inputs(kernel, inputs, seed)

        def run(reference):
            done = run_config(config, data, limits.max_cycles, limits.time_limit)
            return dict(cycles=done.cycles, sim_max_link_load=done.max_link_load,
                        link_words=done.link_words, port_stalls=done.port_stalls), \
                outputs_match(done, reference)

        extra, note = check_run(kernel, data, origin, run, limits)
        metrics.update(extra)
    files = {}
    if config_out is not None:
        files["config"] = str(write_config(config, config_out))
    schedule = [
        dict(node=i["node"], op=f"{i['kind']}.{i['fn']}".rstrip("."), pe=i["pe"],
             cycle=i["cycle"], slot=i["context"])
        for i in config["instructions"]
    ]
    return dict(kernel=kernel.name, mode=mode, target="cgra", metrics=metrics,
                schedule=schedule, simulation_note=note, files=files, ir=print_ir(graph))
