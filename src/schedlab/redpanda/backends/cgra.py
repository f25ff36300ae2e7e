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

import time

import networkx as nx

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.fabric import (
    CGRA,
    MEMORY_KINDS,
    Mapping,
    back_edge,
    mapped_nodes,
    min_ii,
    rec_mii,
)
from schedlab.redpanda.graph import Graph
from schedlab.redpanda.simulator import node_latency

__all__ = ["CGRA", "MEMORY_KINDS", "CGRABackend", "Mapping", "back_edge", "compile_config",
           "map_graph", "mapped_nodes", "min_ii", "rec_mii"]

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
