"""The RedPanda driver: front end -> middle end (under a flow) -> CGRA back end -> simulation.

RedPanda (../shared/papers/08-redpanda.md). One call compiles a kernel the way a flow says,
maps it, runs the cycle simulator with the mapping's latencies, and checks the outputs against
xDSL's interpreter on the original kernel, so every number we report comes from a graph that
computes the right answer.
"""

from __future__ import annotations

from collections.abc import Mapping as MappingABC
from dataclasses import dataclass

import numpy as np

from schedlab.redpanda.backends.cgra import CGRA, CGRABackend, Mapping
from schedlab.redpanda.frontend import Kernel, cleanup
from schedlab.redpanda.graph import Graph
from schedlab.redpanda.lowering import lower
from schedlab.redpanda.passes import cse, dce, fuse_steers
from schedlab.redpanda.policies import Flow, Mode
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import SimResult, SimulationError, simulate


def middle_end(kernel: Kernel, flow: Flow, mode: Mode = "spatial") -> Graph:
    """xDSL cleanup, CFG-to-dataflow conversion and the flow's passes."""
    graph = lower(cleanup(kernel), flow, mode)
    dce(graph)
    cse(graph)
    if flow.fuse:
        fuse_steers(graph)
    dce(graph)
    graph.validate()
    return graph


@dataclass
class Evaluation:
    """One (kernel, flow, mode) measured end to end."""

    kernel: str
    flow: str
    mode: str
    graph: Graph
    mapping: Mapping
    sim: SimResult
    correct: bool

    def row(self) -> dict[str, object]:
        m = self.mapping.metrics()
        pes = max(m["pes_used"], 1)
        return dict(kernel=self.kernel, flow=self.flow, mode=self.mode,
                    instructions=self.graph.instruction_count(), cycles=self.sim.cycles,
                    ii=m["ii"], min_ii=m["min_ii"], pes_used=m["pes_used"],
                    pe_utilisation=m["pe_utilisation"],
                    efficiency=1e6 / (self.sim.cycles * pes), firings=self.sim.firings,
                    mapping_seconds=m["mapping_seconds"], correct=self.correct,
                    branch_modes=",".join(self.graph.attrs.get("branch_modes", [])))


def outputs_match(sim: SimResult, reference: tuple[list[int], dict]) -> bool:
    results, memory = reference
    return sim.results == results and all(np.array_equal(sim.memory[n], memory[n])
                                          for n in memory)


def evaluate(kernel: Kernel, flow: Flow, inputs: MappingABC[str, object], arch: CGRA,
             mode: Mode = "spatial", mapper: str = "list",
             reference: tuple[list[int], dict] | None = None) -> Evaluation:
    """Compile, map, simulate and check one kernel under one flow."""
    graph = middle_end(kernel, flow, mode)
    mapping = CGRABackend().compile(graph, arch, mode, mapper)
    sim = simulate(graph, inputs, mapping.timing(flow.size_buffers))
    if reference is None:
        reference = run_reference(kernel, inputs)
    correct = outputs_match(sim, reference)
    if not correct:
        raise SimulationError(f"{kernel.name}/{flow.name}: dataflow outputs differ from the "
                              "xDSL interpreter (compiler bug)")
    return Evaluation(kernel.name, flow.name, mode, graph, mapping, sim, correct)
