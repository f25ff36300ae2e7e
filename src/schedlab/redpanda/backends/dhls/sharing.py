"""Resource sharing of functional units, where time-multiplexing analysis allows it.

RedPanda (../shared/papers/08-redpanda.md) compiles with the time-multiplexing of its targets
in mind. On the DHLS target that means: an expensive unit (multiplier = DSP block, divider
core) that is idle most cycles can serve several operations. The analysis reads each loop's
initiation interval II (from buffer placement): an operation in a loop with interval II keeps
its unit busy 1/II of the time, so operations of the same function and width can share one unit
as long as their occupancies add up to at most 1 (first-fit decreasing bin packing). Operations
outside every loop run once and occupy nothing. The shared unit itself is ``rp_share`` (a
round-robin arbiter plus credit-based output FIFOs, so sharing can slow a circuit but never
deadlock it).
"""

from __future__ import annotations

from schedlab.redpanda.backends.dhls.buffers import Buffering
from schedlab.redpanda.backends.dhls.circuit import SHAREABLE, Circuit


def occupancy(circuit: Circuit, buffering: Buffering, nid: int) -> float:
    """Fraction of cycles node ``nid`` keeps its unit busy in steady state."""
    loop = circuit.innermost(nid)
    if loop is None:
        return 0.0
    ii = buffering.ii.get(circuit.loops.index(loop), 1.0)
    return 1.0 / max(ii, 1.0)


def share_units(circuit: Circuit, buffering: Buffering) -> list[list[int]]:
    """Groups (two or more nodes) that share one functional unit."""
    g = circuit.graph
    classes: dict[tuple, list[int]] = {}
    for node in g.nodes.values():
        if node.kind == "alu" and node.fn in SHAREABLE and "guard" not in node.attrs:
            key = (node.fn, node.attrs["bits"], node.attrs["out_bits"])
            classes.setdefault(key, []).append(node.id)
    groups: list[list[int]] = []
    for members in classes.values():
        bins: list[tuple[float, list[int]]] = []
        ranked = sorted(members, key=lambda n: (-occupancy(circuit, buffering, n), n))
        for nid in ranked:
            load = occupancy(circuit, buffering, nid)
            for k, (used, group) in enumerate(bins):
                if used + load <= 1.0 + 1e-9:
                    bins[k] = (used + load, [*group, nid])
                    break
            else:
                bins.append((load, [nid]))
        groups.extend(sorted(group) for _, group in bins if len(group) > 1)
    return sorted(groups)
