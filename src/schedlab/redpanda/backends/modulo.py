"""Exact modulo scheduling with HiGHS (``scipy.optimize.milp``), then slot-aware placement.

RedPanda (../shared/papers/08-redpanda.md) maps onto the time-extended CGRA resource graph.
For a candidate II the MILP decides each instruction's modulo slot ``z[n, s]`` and stage
``k[n]`` (start time ``t = II k + s``) subject to: at most #PEs instructions (and at most #memory
PEs memory instructions) per slot, every dependence ``t_v >= t_u + lat_u`` and every recurrence
``t_v + II >= t_u + lat_u``. The smallest II for which it is feasible is the exact minimum II of
this model (tests compare it with brute force); PEs are then assigned slot by slot next to the
producers, and routing delays are charged to the recurrences afterwards.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

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


def schedule_ii(graph: Graph, ii: int, pes: int | None, mem_pes: int | None,
                time_limit: float = 10.0) -> dict[int, int] | None:
    """Start times meeting resources and dependences at ``ii``, or None if infeasible."""
    nodes = mapped_nodes(graph)
    col = {n: i for i, n in enumerate(nodes)}
    n_nodes = len(nodes)
    n_z = n_nodes * ii
    size = n_z + n_nodes  # z[n, s] then k[n]
    rows, lo, hi = [], [], []

    def t_coeffs(n: int, sign: int, row: dict[int, float]) -> None:
        for s in range(ii):
            row[col[n] * ii + s] = row.get(col[n] * ii + s, 0) + sign * s
        row[n_z + col[n]] = row.get(n_z + col[n], 0) + sign * ii

    for n in nodes:
        rows.append({col[n] * ii + s: 1 for s in range(ii)})
        lo.append(1)
        hi.append(1)
    for s in range(ii):
        if pes is not None:
            rows.append({col[n] * ii + s: 1 for n in nodes})
            lo.append(0)
            hi.append(pes)
        memory = [n for n in nodes if graph.nodes[n].kind in MEMORY_KINDS]
        if mem_pes is not None and memory:
            rows.append({col[n] * ii + s: 1 for n in memory})
            lo.append(0)
            hi.append(mem_pes)
    for src, dst, operand in graph.edges():
        if src not in col or dst not in col:
            continue
        row: dict[int, float] = {}
        t_coeffs(dst, 1, row)
        t_coeffs(src, -1, row)
        rows.append(row)
        lo.append(node_latency(graph.nodes[src]) - (ii if back_edge(graph, dst, operand) else 0))
        hi.append(np.inf)
    matrix = lil_matrix((len(rows), size))
    for r, row in enumerate(rows):
        for c, v in row.items():
            matrix[r, c] = v
    cost = np.zeros(size)
    cost[n_z:] = ii  # minimise the sum of start times (stage part dominates)
    for n in nodes:
        cost[col[n] * ii: col[n] * ii + ii] = np.arange(ii)
    upper = np.concatenate([np.ones(n_z), np.full(n_nodes, n_nodes + 1)])
    result = milp(cost, constraints=LinearConstraint(matrix.tocsr(), lo, hi),
                  integrality=np.ones(size), bounds=Bounds(np.zeros(size), upper),
                  options=dict(time_limit=time_limit, disp=False))
    if result.x is None:
        return None
    x = np.round(result.x).astype(int)
    return {n: int(ii * x[n_z + col[n]] + np.argmax(x[col[n] * ii: col[n] * ii + ii]))
            for n in nodes}


def _place(graph: Graph, arch: CGRA, mode: str, ii: int, start: dict[int, int]):
    place: dict[int, tuple[int, int]] = {}
    taken: set = set()
    load: dict[tuple[int, int], int] = {}
    preds: dict[int, list[int]] = {n: [] for n in start}
    for s, d, _ in graph.edges():
        if s in start and d in start:
            preds[d].append(s)
    for n in sorted(start, key=lambda m: (start[m], m)):
        memory = graph.nodes[n].kind in MEMORY_KINDS
        options = [pe for pe in arch.pes if (not memory or arch.memory_capable(pe))
                   and (pe if mode == "spatial" else (pe, start[n] % ii)) not in taken
                   and (mode == "spatial" or load.get(pe, 0) < arch.contexts)]
        if not options:
            return None
        pe = min(options, key=lambda p: (sum(arch.hops(place[s], p) for s in preds[n]
                                             if s in place), memory != arch.memory_capable(p)))
        place[n] = pe
        load[pe] = load.get(pe, 0) + 1
        taken.add(pe if mode == "spatial" else (pe, start[n] % ii))
    return place


def map_graph_milp(graph: Graph, arch: CGRA, mode: str = "temporal",
                   time_limit: float = 10.0) -> Mapping:
    """Minimum-II modulo schedule (HiGHS) plus placement; II grows until both succeed."""
    began = time.perf_counter()
    mii, res, rec = min_ii(graph, arch, mode)
    temporal = mode == "temporal"
    pes = len(arch.pes) if temporal else None
    mem = sum(arch.memory_capable(p) for p in arch.pes) if temporal else None
    top = mii + 64
    for ii in range(mii, top + 1):
        start = schedule_ii(graph, ii, pes, mem, time_limit)
        if start is None:
            continue
        place = _place(graph, arch, mode, ii, start)
        if place is None:
            continue
        routed = {(d, i): arch.delay(place[s], place[d]) for s, d, i in graph.edges()
                  if s in place and d in place}
        return Mapping(graph, arch, mode, max(ii, rec_mii(graph, routed)), mii, res, rec,
                       place, start, time.perf_counter() - began, mapper="milp", slot_ii=ii)
    raise BadInputError(f"{graph.name}: HiGHS found no schedule with II <= {top}",
                        field="contexts")
