"""Placement, PathFinder routing and the II search of the CGRA back end.

RedPanda (../shared/papers/08-redpanda.md) maps its dataflow IR onto a CGRA described by an
:class:`~schedlab.redpanda.backends.arch.Architecture`. For a candidate II:

1. **place and schedule** (list scheduling on the modulo reservation table): each instruction
   gets a PE that supports its operation class, a context slot ``t mod II`` free on that PE, a
   free PE output slot ``(t + latency) mod II``, and (memory ops) a port of its array free in
   that slot (``ports_per_array``); ``t`` is the earliest cycle every operand can reach the PE
   (shortest-path cycles on the interconnect), and loop back edges must close within II;
2. **route** every value (a net: one producer output, its consumers) on the time-extended
   routing-resource graph (:mod:`.rrg`) with **PathFinder** negotiated congestion (McMurchie &
   Ebeling): nets are ripped up and rerouted with present-congestion and history costs until no
   link slot carries more words than ``link_capacity`` and no PE holds more waiting values
   than ``registers``; every sink must be reached by its scheduled cycle;
3. accept the II only if routing converged; otherwise try II + 1 (temporal) or another
   placement (spatial fabrics route at II = 1: every net owns its links).

In *spatial* mode each PE holds one instruction that may fire every cycle; in *temporal* mode a
PE holds up to ``contexts`` instructions and runs the one of context ``cycle mod II``.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.arch import PE, Architecture, op_class
from schedlab.redpanda.backends.fabric import MEMORY_KINDS, back_edge
from schedlab.redpanda.backends.fabric import rec_mii as bellman_ford_rec_mii
from schedlab.redpanda.backends.rrg import (
    NetRoute,
    Resource,
    State,
    Unroutable,
    arrival,
    capacity,
    search,
)
from schedlab.redpanda.graph import Graph


@dataclass
class PnR:
    """A placed, scheduled and routed kernel."""

    graph: Graph
    arch: Architecture
    mode: str
    ii: int  # the configuration's period (contexts cycled)
    achieved_ii: int  # recurrence bound with the routed delays (>= ii)
    min_ii: int
    res_mii: int
    rec_mii: int
    place: dict[int, PE]
    start: dict[int, int]
    nets: list[NetRoute]
    seconds: float
    router_iterations: int
    attempts: list[dict]
    router: str = "pathfinder"  # "exact", or "exact (fallback)" when PathFinder gave up

    def latency(self, node: int) -> int:
        return self.arch.unit_latency(self.graph.nodes[node])

    def link_loads(self) -> dict[Resource, int]:
        """Words per (link or register, slot), counted from the routes."""
        occ: dict[Resource, int] = defaultdict(int)
        for net in self.nets:
            for res, _ in net.usage:
                occ[res] += 1
        return dict(occ)

    def metrics(self) -> dict[str, float]:
        used = len(set(self.place.values()))
        n = len(self.place)
        loads = self.link_loads()
        links = [v for k, v in loads.items() if k[0] == "L"]
        regs = [v for k, v in loads.items() if k[0] == "R"]
        return dict(
            ii=self.achieved_ii,
            config_ii=self.ii,
            min_ii=self.min_ii,
            res_mii=self.res_mii,
            rec_mii=self.rec_mii,
            instructions=n,
            pes_used=used,
            pe_utilisation=n / (len(self.arch.pes) * self.ii),
            mapping_seconds=self.seconds,
            router_iterations=self.router_iterations,
            exact_fallback=int(self.router == "exact (fallback)"),
            max_link_load=max(links, default=0),
            link_capacity=self.arch.link_capacity,
            link_slots_used=len(links),
            max_register_load=max(regs, default=0),
            route_hops=sum(1 for n_ in self.nets for r, _ in n_.usage if r[0] == "L"),
        )


# ---- lower bounds ------------------------------------------------------------------------
def instructions(graph: Graph) -> list[int]:
    return [n.id for n in graph.instructions()]


def rec_mii(graph: Graph, arch: Architecture, extra: dict[tuple[int, int], int]) -> int:
    """Smallest II with no positive cycle of latency + routing - II * distance."""
    return bellman_ford_rec_mii(graph, extra, arch.unit_latency)


def array_accesses(graph: Graph) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for n in graph.instructions():
        if n.kind in MEMORY_KINDS:
            out[n.attrs["memref"]] += 1
    return dict(out)


def min_ii(graph: Graph, arch: Architecture, mode: str) -> tuple[int, int, int]:
    """(MII, ResMII, RecMII): PEs per operation class, ports per array, recurrences."""
    nodes = [graph.nodes[n] for n in instructions(graph)]
    by_class: dict[str, int] = defaultdict(int)
    for n in nodes:
        by_class[op_class(n)] += 1
    ports = arch.memory.ports_per_array
    port_bound = max((math.ceil(a / ports) for a in array_accesses(graph).values()), default=1)
    if mode == "spatial":
        if len(nodes) > len(arch.pes):
            raise BadInputError(
                f"{graph.name}: {len(nodes)} instructions do not fit the "
                f"{len(arch.pes)} PEs of spatial '{arch.name}'; use --temporal "
                "or a larger fabric",
                field="arch",
            )
        for cls, count in by_class.items():
            able = sum(cls in arch.ops_of(pe) for pe in arch.pes)
            if count > able:
                raise BadInputError(
                    f"{graph.name}: {count} '{cls}' instructions but only "
                    f"{able} PEs of '{arch.name}' support '{cls}'; "
                    + (
                        "use --temporal or a larger fabric"
                        if able
                        else f"add '{cls}' to some PEs' pe_ops"
                    ),
                    field="arch.pe_ops",
                )
        res = port_bound  # accesses to one array share its ports every cycle
    else:
        res = max(math.ceil(len(nodes) / len(arch.pes)), port_bound)
        for cls, count in by_class.items():
            able = sum(cls in arch.ops_of(pe) for pe in arch.pes)
            if able == 0:
                raise BadInputError(
                    f"{graph.name}: no PE of '{arch.name}' supports '{cls}' instructions; "
                    f"add '{cls}' to some PEs' pe_ops",
                    field="arch.pe_ops",
                )
            res = max(res, math.ceil(count / able))
        if res > arch.contexts:
            raise BadInputError(
                f"{graph.name}: needs II >= {res} but '{arch.name}' has "
                f"{arch.contexts} contexts per PE",
                field="arch.contexts",
            )
    rec = rec_mii(graph, arch, {})
    return max(res, rec), res, rec


# ---- placement and scheduling ------------------------------------------------------------
def _order(graph: Graph) -> list[int]:
    nodes = set(instructions(graph))
    dag = nx.DiGraph()
    dag.add_nodes_from(sorted(nodes))
    dag.add_edges_from(
        (s, d)
        for s, d, i in graph.edges()
        if s in nodes and d in nodes and not back_edge(graph, d, i)
    )
    return list(nx.lexicographical_topological_sort(dag))


def place_and_schedule(
    graph: Graph,
    arch: Architecture,
    mode: str,
    ii: int,
    rng: random.Random | None = None,
    penalty: dict[PE, float] | None = None,
):
    """List-schedule every instruction onto (PE, slot); None if some instruction finds none."""
    order = _order(graph)
    nodes = set(order)
    lat = {n: arch.unit_latency(graph.nodes[n]) for n in order}
    preds: dict[int, list[int]] = {n: [] for n in order}
    loops_to: dict[int, list[int]] = {n: [] for n in order}
    for s, d, i in graph.edges():
        if s in nodes and d in nodes:
            (loops_to[s].append(d) if back_edge(graph, d, i) else preds[d].append(s))
    rc = arch.route_cycles
    place: dict[int, PE] = {}
    start: dict[int, int] = {}
    slot_used: set[tuple[PE, int]] = set()
    out_used: set[tuple[PE, int]] = set()
    port_used: dict[tuple[str, int], int] = defaultdict(int)
    pe_count: dict[PE, int] = defaultdict(int)
    ports = arch.memory.ports_per_array
    per_pe = 1 if mode == "spatial" else min(ii, arch.contexts)
    capable = {
        cls: [pe for pe in arch.pes if cls in arch.ops_of(pe)]
        for cls in {op_class(graph.nodes[n]) for n in order}
    }
    left = defaultdict(int)  # instructions still to place per class (to keep scarce PEs)
    for n in order:
        left[op_class(graph.nodes[n])] += 1
    for n in order:
        node = graph.nodes[n]
        cls = op_class(node)
        left[cls] -= 1
        memref = node.attrs.get("memref") if node.kind in MEMORY_KINDS else None
        best = None
        for pe in capable[cls]:
            if pe_count[pe] >= per_pe:
                continue
            # keep PEs that scarcer classes need (memory/div PEs) for those classes
            if mode == "spatial" and len(arch.ops_of(pe)) > 0:
                scarce = [
                    c
                    for c in arch.ops_of(pe)
                    if c != cls
                    and left[c] > 0
                    and sum(pe_count[p] < per_pe for p in capable.get(c, [])) <= left[c]
                ]
                if scarce:
                    continue
            ready = max((start[s] + lat[s] + rc(place[s], pe) for s in preds[n]), default=0)
            t = None
            for x in range(ready, ready + (1 if mode == "spatial" else ii)):
                s_ = x % ii
                if mode == "temporal" and (
                    (pe, s_) in slot_used or (pe, (x + lat[n]) % ii) in out_used
                ):
                    continue
                if memref is not None and mode == "temporal" and port_used[(memref, s_)] >= ports:
                    continue
                t = x
                break
            if t is None:
                continue
            # closing a recurrence late stretches the loop's period: price it, do not forbid it
            back = sum(
                max(t + lat[n] + rc(pe, place[d]) - (start[d] + ii), 0)
                for d in loops_to[n]
                if d in place
            )
            wire = sum(rc(place[s], pe) for s in preds[n]) + sum(
                rc(pe, place[d]) for d in loops_to[n] if d in place
            )
            noise = rng.random() if rng is not None else 0.0
            key = (t + 2 * back, wire + (penalty or {}).get(pe, 0.0) + noise)
            if best is None or key < best[:2]:
                best = (*key, pe, t)
        if best is None:
            return None
        _, _, pe, t = best
        place[n], start[n] = pe, t
        pe_count[pe] += 1
        slot_used.add((pe, t % ii))
        out_used.add((pe, (t + lat[n]) % ii))
        if memref is not None:
            port_used[(memref, t % ii)] += 1
    return place, start


def anneal_spatial(
    graph: Graph,
    arch: Architecture,
    place: dict[int, PE],
    rng: random.Random,
    moves_per_node: int = 150,
) -> tuple[dict, dict]:
    """Simulated-annealing refinement of a spatial placement; returns (place, start).

    Cost: every edge's link count, plus 8x its extra routing cycles on edges inside a
    recurrence (a strongly connected component: those delays stretch the loop's period).
    Moves swap two instructions, or move one to a free PE, that support each other's class.
    Start times are then the ASAP schedule with the new routing delays.
    """
    nodes = sorted(place)
    lat = {n: arch.unit_latency(graph.nodes[n]) for n in nodes}
    dg = nx.DiGraph()
    dg.add_nodes_from(nodes)
    edges = [(s_, d) for s_, d, _ in graph.edges() if s_ in place and d in place and s_ != d]
    dg.add_edges_from(edges)
    comp = {}
    for k, scc in enumerate(nx.strongly_connected_components(dg)):
        for n in scc:
            comp[n] = k
    incident: dict[int, list[tuple[int, int, float]]] = {n: [] for n in nodes}
    for s_, d in edges:
        w = 8.0 if comp[s_] == comp[d] else 0.0
        incident[s_].append((s_, d, w))
        incident[d].append((s_, d, w))
    pes = arch.pes
    pe_index = {pe: i for i, pe in enumerate(pes)}
    far = 99
    # cost of an edge between PE i and PE j: links, and the weight of extra routing cycles
    links = [[arch.distance[a].get(b, far) for b in pes] for a in pes]
    cycles = [[arch.route_cycles(a, b) for b in pes] for a in pes]
    inc = {n: [(s_, d, w) for s_, d, w in incident[n]] for n in nodes}
    where = {n: pe_index[pe] for n, pe in place.items()}

    def node_cost(n: int) -> float:
        total = 0.0
        for s_, d, w in inc[n]:
            a, b = where[s_], where[d]
            total += links[a][b] + w * cycles[a][b] if w else links[a][b]
        return total

    occupant = {i: n for n, i in where.items()}
    cls = {n: op_class(graph.nodes[n]) for n in nodes}
    able = {c: [pe_index[pe] for pe in pes if c in arch.ops_of(pe)] for c in set(cls.values())}
    total_moves = moves_per_node * len(nodes)
    temp = 2.0
    cool = (0.02 / temp) ** (1 / max(total_moves, 1))
    for _ in range(total_moves):
        n = nodes[rng.randrange(len(nodes))]
        choices = able[cls[n]]
        target = choices[rng.randrange(len(choices))]
        old = where[n]
        if target == old:
            continue
        other = occupant.get(target)
        if other is not None and old not in able[cls[other]]:
            continue
        before = node_cost(n) + (node_cost(other) if other is not None else 0.0)
        where[n] = target
        if other is not None:
            where[other] = old
        after = node_cost(n) + (node_cost(other) if other is not None else 0.0)
        delta = after - before
        if delta <= 0 or rng.random() < math.exp(-delta / temp):
            occupant[target] = n
            if other is not None:
                occupant[old] = other
            else:
                del occupant[old]
        else:
            where[n] = old
            if other is not None:
                where[other] = target
        temp *= cool
    where = {n: pes[i] for n, i in where.items()}
    rc = arch.route_cycles
    preds: dict[int, list[int]] = defaultdict(list)
    for s_, d, i in graph.edges():
        if s_ in where and d in where and not back_edge(graph, d, i):
            preds[d].append(s_)
    start: dict[int, int] = {}
    for n in _order(graph):
        start[n] = max(
            (start[s_] + lat[s_] + rc(where[s_], where[n]) for s_ in preds[n]), default=0
        )
    return where, start


# ---- nets and PathFinder -------------------------------------------------------------------
def build_nets(
    graph: Graph, arch: Architecture, mode: str, ii: int, place, start, slack: int
) -> list[NetRoute]:
    """One net per producer output with placed consumers; deadlines from the schedule."""
    nets: dict[tuple[int, int], NetRoute] = {}
    for node in graph.nodes.values():
        for i, port in enumerate(node.inputs):
            if port is None or port.node not in place or node.id not in place:
                continue
            src = port.node
            lat = arch.unit_latency(graph.nodes[src])
            net = nets.get((src, port.index))
            if net is None:
                net = nets[(src, port.index)] = NetRoute(
                    src, port.index, place[src], start[src] + lat
                )
            sink = (node.id, i)
            net.sinks.append(sink)
            shortest = arch.route_cycles(place[src], place[node.id])
            due = shortest + slack
            if mode == "temporal":
                planned = start[node.id] + (ii if back_edge(graph, node.id, i) else 0) - net.ready
                due = max(planned, shortest) + slack
            net.deadline[sink] = due
            net.sink_pe[sink] = place[node.id]
    return list(nets.values())


def pathfinder(
    arch: Architecture,
    ii: int,
    nets: list[NetRoute],
    max_iterations: int = 120,
    pres_fac: float = 0.5,
    pres_growth: float = 1.7,
    hist_fac: float = 0.6,
    patience: int = 40,
    seed: int = 0,
) -> int:
    """Negotiated-congestion routing of ``nets`` in place; returns the iterations used.

    McMurchie–Ebeling PathFinder: every iteration rips up and reroutes every net; the
    present-congestion factor grows each iteration and history costs grow on overused resources.
    When the total overuse stalls, the net order is reshuffled (seeded) and the present factor
    restarts, so the negotiation is not stuck in one order's cycle; gives up when the overuse
    has not improved for ``patience`` iterations.
    """
    occ: dict[Resource, int] = defaultdict(int)
    best_total, since_best = None, 0
    hist: dict[Resource, float] = defaultdict(float)
    order = sorted(nets, key=lambda n: min(n.deadline.values(), default=0))
    shuffle = random.Random(seed)
    pres_start = pres_fac
    worst = 0
    for iteration in range(1, max_iterations + 1):
        for net in order:
            for res, _ in net.usage:
                occ[res] -= 1
            net.usage = set()
            net.steps, net.arrive = {}, {}
            tree: set[State] = {(net.pe, 0, 0)}
            parent: dict[State, tuple[State, Resource | None]] = {}
            usage = net.usage

            def cost(res: Resource, o: int, usage=usage, pres_fac=pres_fac) -> float:
                if (res, o) in usage:
                    return 0.0
                over = occ[res] + 1 - capacity(arch, res)
                base = 1.0 if res[0] == "L" else 1.3
                return (base + hist[res]) * (1.0 + pres_fac * max(over, 0))

            for sink in sorted(net.sinks, key=lambda s: net.deadline[s]):
                found = search(
                    arch, ii, net.ready, tree, net.sink_pe[sink], net.deadline[sink], cost
                )
                if found is None:
                    raise Unroutable(
                        f"value of node {net.src} cannot reach node {sink[0]} "
                        f"within {net.deadline[sink]} cycles"
                    )
                path, origin = found
                prev = origin
                for state, res in path:
                    tree.add(state)
                    parent.setdefault(state, (prev, res))
                    prev = state
                    if res is not None:
                        o = _offset_before(state, res)
                        if (res, o) not in usage:
                            usage.add((res, o))
                            occ[res] += 1
                last = path[-1][0] if path else origin
                full, cur = [], last
                while cur in parent:  # the whole route from the producer, through the tree
                    before, res = parent[cur]
                    full.append((cur, res))
                    cur = before
                net.steps[sink] = full[::-1]
                net.arrive[sink] = arrival(last)
        over = {r: v - capacity(arch, r) for r, v in occ.items() if v > capacity(arch, r)}
        if not over:
            return iteration
        worst = max(over.values())
        total = sum(over.values())
        if best_total is None or total < best_total:
            best_total, since_best = total, 0
        else:
            since_best += 1
            if since_best >= patience:
                break
            if since_best % 6 == 0:  # stalled: a new net order and a fresh present factor
                shuffle.shuffle(order)
                pres_fac = pres_start
        for r, v in over.items():
            hist[r] += hist_fac * v
        pres_fac = min(pres_fac * pres_growth, 1e6)
    raise Unroutable(
        f"congestion left after {iteration} PathFinder iterations "
        f"({len(over)} overused resources, worst +{worst})",
        worst,
    )


def _offset_before(state: State, res: Resource) -> int:
    """Offset of the cycle in which ``res`` was used to enter ``state``."""
    if res[0] == "R":
        return state[1] - 1
    return state[1]


# ---- the II search -------------------------------------------------------------------------
def effective_ii(ii: int, routed_rec: int) -> int:
    """Period a loop really gets: instructions fire only in their slot, so a recurrence of
    ``routed_rec`` cycles closes after ``ceil(routed_rec / ii)`` periods."""
    return ii * -(-routed_rec // ii)


SPATIAL_PLACEMENTS = 8  # spatial placements tried before the exact fallback
#: placements per II searched for the lowest effective II (issue 57)
TEMPORAL_PLACEMENTS, SPATIAL_SEARCH = 12, 6
EXACT_FALLBACK_ARCS = 400_000  # consumers x time-extended arcs: HiGHS decides these in seconds
EXACT_FALLBACK_SECONDS = 30.0


def _lower_bound(graph: Graph, arch: Architecture, mode: str, ii: int, place) -> int:
    """Effective II a placement can reach at best: recurrences with shortest-path delays."""
    extra = {}
    for s_, d, i in graph.edges():
        if s_ in place and d in place:
            extra[(d, i)] = arch.route_cycles(place[s_], place[d])
    routed = rec_mii(graph, arch, extra)
    return max(ii, routed) if mode == "spatial" else effective_ii(ii, routed)


def _program_size(arch: Architecture, nets: list[NetRoute]) -> int:
    """Upper estimate of the exact program's flow columns (one per consumer and arc)."""
    fan = 1 + 4 * arch.hops_per_cycle  # the links out of a state, a wait, a latch
    pes = len(arch.pes)
    return sum(
        pes * (d + 1) * arch.hops_per_cycle * fan for net in nets for d in net.deadline.values()
    )


def _route(
    arch: Architecture, ii: int, nets: list[NetRoute], router: str, seed: int,
    quick: bool = False,
) -> tuple[int, str]:
    """Route ``nets`` in place; returns (PathFinder iterations, router used)."""
    if router == "exact":  # HiGHS decides routability of this placement exactly
        from schedlab.redpanda.backends.exact_route import exact_route

        exact_route(arch, ii, nets)
        return 0, "exact"
    if quick:  # a first try with a fallback after it: give up early
        return pathfinder(arch, ii, nets, max_iterations=30, patience=8, seed=seed), "pathfinder"
    return pathfinder(arch, ii, nets, seed=seed), "pathfinder"


def _exact_fallback(graph, arch, mode, mii, res, rec, failed, attempts) -> PnR | None:
    """PathFinder routed no placement: let HiGHS decide the ones small enough, smallest II
    first; the first routed one is returned with ``router="exact (fallback)"``."""
    from schedlab.redpanda.backends.exact_route import exact_route

    for ii, attempt, place, start, nets in sorted(failed, key=lambda f: (f[0], f[1])):
        if _program_size(arch, nets) > EXACT_FALLBACK_ARCS:
            attempts.append(dict(ii=ii, attempt=attempt, result="exact fallback: too large"))
            continue
        try:
            exact_route(arch, ii, nets, time_limit=EXACT_FALLBACK_SECONDS)
        except Unroutable as exc:
            attempts.append(dict(ii=ii, attempt=attempt, result=f"exact fallback: {exc.reason}"))
            continue
        extra = {sink: a for net in nets for sink, a in net.arrive.items()}
        routed = rec_mii(graph, arch, extra)
        achieved = max(ii, routed) if mode == "spatial" else effective_ii(ii, routed)
        attempts.append(
            dict(
                ii=ii,
                attempt=attempt,
                result="routed",
                router="exact (fallback)",
                iterations=0,
                effective_ii=achieved,
            )
        )
        return PnR(
            graph,
            arch,
            mode,
            ii,
            achieved,
            mii,
            res,
            rec,
            place,
            start,
            nets,
            0.0,
            0,
            attempts,
            "exact (fallback)",
        )
    return None


def place_and_route(
    graph: Graph,
    arch: Architecture,
    mode: str = "temporal",
    max_extra: int = 16,
    attempts_per_ii: int = 2,
    seed: int = 0,
    slack: int | None = None,
    anneal: bool = True,
    router: str = "pathfinder",
    exact_fallback: bool = True,
    placements_per_ii: int | None = None,
) -> PnR:
    """Place, schedule and route; the II search only accepts mappings PathFinder routed.

    Temporal: every II from MII up to ``min(MII + max_extra, contexts)``; among routed
    mappings the one with the smallest effective II (recurrences with their routed delays) wins,
    and the search stops once II alone reaches the best. Spatial: the fabric routes at II = 1
    (each net owns its link words every cycle), trying a few placements. ``router="exact"``
    routes each placement with the HiGHS program of :mod:`.exact_route` instead of PathFinder
    (small arrays: it proves a placement unroutable rather than giving up). With PathFinder,
    a placement it fails to route is handed to the exact router when the program is small
    (``exact_fallback``, :data:`EXACT_FALLBACK_ARCS`); ``PnR.router`` then says
    ``"exact (fallback)"``. Either way the routing is within every capacity.
    """
    if mode not in ("spatial", "temporal"):
        raise BadInputError(f"unknown CGRA mode '{mode}'", field="mode")
    if router not in ("pathfinder", "exact"):
        from schedlab.core.errors import UnknownNameError

        raise UnknownNameError("router", router, ["pathfinder", "exact"])
    began = time.perf_counter()
    if placements_per_ii is None:  # temporal placements are cheap (no annealing)
        placements_per_ii = TEMPORAL_PLACEMENTS if mode == "temporal" else SPATIAL_SEARCH
    mii, res, rec = min_ii(graph, arch, mode)
    slack = (2 if mode == "spatial" else 1) if slack is None else slack
    attempts: list[dict] = []
    if mode == "spatial":
        # a few placements first; only when PathFinder routes none of them, more (every other
        # one without the crowding penalty, which can push a placement into a dead end)
        candidates, tries = [1], max(attempts_per_ii + 1, SPATIAL_PLACEMENTS)
    else:
        candidates = list(range(mii, min(mii + max_extra, arch.contexts) + 1))
        tries = max(attempts_per_ii, placements_per_ii)
    if not candidates:
        raise BadInputError(
            f"{graph.name}: needs II >= {mii} (RecMII {rec}) but '{arch.name}' "
            f"has {arch.contexts} contexts per PE",
            field="arch.contexts",
        )
    rng = random.Random(seed)
    best: PnR | None = None
    failed: list[tuple] = []  # placements PathFinder did not route, for the exact fallback

    def place_one(ii: int, attempt: int, crowd: dict[PE, float]):
        placed = place_and_schedule(graph, arch, mode, ii, rng if attempt else None, crowd)
        if placed is None:
            attempts.append(dict(ii=ii, attempt=attempt, result="no placement"))
            return None
        place, start = placed
        if mode == "spatial" and anneal:
            place, start = anneal_spatial(graph, arch, place, random.Random(seed + attempt))
        return _lower_bound(graph, arch, mode, ii, place), attempt, place, start

    def route_one(ii: int, attempt: int, place, start, penalty: dict[PE, float]):
        """Route one placement; the PnR, or None (its crowded links added to ``penalty``)."""
        # temporal: a value arriving after its consumer's slot costs a whole period, so
        # the deadlines are the schedule's first (slack 0), relaxed only if that fails
        slacks = (0, slack) if mode == "temporal" and slack > 0 else (slack,)
        for k, s_ in enumerate(slacks):
            nets = build_nets(graph, arch, mode, ii, place, start, s_)
            try:
                iterations, used = _route(arch, ii, nets, router, seed + attempt,
                                          quick=k + 1 < len(slacks))
                break
            except Unroutable as exc:
                if k + 1 < len(slacks):
                    continue
                attempts.append(dict(ii=ii, attempt=attempt, result=exc.reason))
                if router == "pathfinder":
                    failed.append((ii, attempt, place, start, nets))
                # spread the next placement away from the PEs the failed nets crowded
                for net in nets:
                    for r, _o in net.usage:
                        if r[0] == "L":
                            penalty[r[1]] = penalty.get(r[1], 0.0) + 0.25
                return None
        extra = {sink: a for net in nets for sink, a in net.arrive.items()}
        routed = rec_mii(graph, arch, extra)
        achieved = max(ii, routed) if mode == "spatial" else effective_ii(ii, routed)
        attempts.append(dict(ii=ii, attempt=attempt, result="routed", router=used,
                             iterations=iterations, effective_ii=achieved))
        return PnR(graph, arch, mode, ii, achieved, mii, res, rec, place, start, nets, 0.0,
                   iterations, attempts, used)

    for ii in candidates:
        if best is not None and ii >= best.achieved_ii:
            break
        penalty: dict[PE, float] = {}
        # several placements per II, routed in order of their lower bound (recurrences with
        # shortest-path delays); the lowest effective II is kept, not the first routed one
        pool: list = []
        routed_here, made = 0, 0
        bound = ii if mode == "temporal" else mii  # nothing at this II can beat it
        while made < min(placements_per_ii, tries):
            # the first placement alone; the rest only if it misses the bound
            batch = 1 if made == 0 else min(placements_per_ii, tries) - made
            fresh = [place_one(ii, made + j, {}) for j in range(batch)]
            made += batch
            if fresh[0] is None and made == 1 and tries > 1:
                fresh = [place_one(ii, 1, {})]  # one seeded retry: list scheduling is greedy
                made = 2
            fresh = sorted((c for c in fresh if c is not None), key=lambda c: (c[0], c[1]))
            pool += fresh
            for lb, attempt, place, start in fresh:
                if best is not None and lb >= best.achieved_ii:
                    break  # sorted: no later placement can beat the best
                found = route_one(ii, attempt, place, start, penalty)
                if found is not None:
                    routed_here += 1
                    if best is None or found.achieved_ii < best.achieved_ii:
                        best = found
            if not pool or (best is not None and best.achieved_ii <= bound):
                break
        if routed_here or not pool:
            continue
        # none routed: further placements spread away from the links the failures crowded
        # (every other one without that penalty, which can push a placement into a dead end)
        for attempt in range(len(pool), tries):
            crowd = (
                penalty
                if mode == "temporal"
                or attempt <= attempts_per_ii
                or (attempt - attempts_per_ii) % 2 == 0
                else {}
            )
            cand = place_one(ii, attempt, crowd)
            if cand is None:
                break
            found = route_one(ii, attempt, cand[2], cand[3], penalty)
            if found is not None:
                if best is None or found.achieved_ii < best.achieved_ii:
                    best = found
                break
    if best is None and exact_fallback:
        best = _exact_fallback(graph, arch, mode, mii, res, rec, failed, attempts)
    if best is None:
        last = attempts[-1]["result"] if attempts else "nothing tried"
        raise BadInputError(
            f"{graph.name}: no routable {mode} mapping on '{arch.name}' with "
            f"II <= {candidates[-1]} (last attempt: {last})",
            field="arch",
            hint="try --temporal, more contexts, more link capacity (--link-capacity), a "
            "larger fabric, or --router exact (routes every placement tried with HiGHS; by "
            "default only those PathFinder failed on, when small)",
        )
    best.seconds = time.perf_counter() - began
    return best


def xy_route(arch: Architecture, ii: int, nets: list[NetRoute]) -> None:
    """Dimension-ordered (X then Y) routes with no congestion negotiation, in place.

    What a mapper that only charges ``hops - 1`` cycles per edge implicitly assumes; used to
    show that such mappings can overload links (``check_config`` rejects them) and that
    :func:`pathfinder` can route the same placement within capacity.
    """
    for net in nets:
        net.usage, net.steps, net.arrive = set(), {}, {}
        for sink in net.sinks:
            (r, c), (tr, tc) = net.pe, net.sink_pe[sink]
            cells = []
            while c != tc:
                c += 1 if tc > c else -1
                cells.append((r, c))
            while r != tr:
                r += 1 if tr > r else -1
                cells.append((r, c))
            steps, cur, o = [], net.pe, 0
            for j, nxt in enumerate(cells):
                if nxt not in arch.neighbours[cur]:
                    raise Unroutable(f"no link {cur}->{nxt} for an XY route")
                if j:  # latched in the router reached, next hop in the next cycle
                    steps.append(((cur, o + 1, 0), None))
                    o += 1
                res = ("L", cur, nxt, (net.ready + o) % ii)
                steps.append(((nxt, o, 1), res))
                net.usage.add((res, o))
                cur = nxt
            net.steps[sink] = steps
            net.arrive[sink] = o


def route_placement(
    graph: Graph,
    arch: Architecture,
    mode: str,
    ii: int,
    place,
    start,
    router: str = "pathfinder",
    slack: int = 1,
) -> PnR:
    """Route a given placement and schedule (e.g. another mapper's) with ``router``."""
    mii, res, rec = min_ii(graph, arch, mode)
    nets = build_nets(graph, arch, mode, ii, place, start, slack)
    began = time.perf_counter()
    iterations = 0
    if router == "xy":
        xy_route(arch, ii, nets)
    elif router == "exact":
        from schedlab.redpanda.backends.exact_route import exact_route

        exact_route(arch, ii, nets)
    else:
        iterations = pathfinder(arch, ii, nets)
    extra = {sink: a for net in nets for sink, a in net.arrive.items()}
    routed = rec_mii(graph, arch, extra)
    achieved = max(ii, routed) if mode == "spatial" else effective_ii(ii, routed)
    return PnR(
        graph,
        arch,
        mode,
        ii,
        achieved,
        mii,
        res,
        rec,
        dict(place),
        dict(start),
        nets,
        time.perf_counter() - began,
        iterations,
        [dict(ii=ii, result=router)],
    )
