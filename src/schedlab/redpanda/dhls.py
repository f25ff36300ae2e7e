"""The DHLS flow end to end: compile a kernel to Verilog, simulate it, estimate resources.

RedPanda (../shared/papers/08-redpanda.md), DHLS half. One call runs the shared middle end
under a flow, the DHLS back end (forks, buffer placement, sharing, Verilog), Icarus Verilog on
the same seeded inputs the xDSL interpreter gets (outputs must match), and optionally Yosys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from schedlab.redpanda.backends.dhls.backend import Design, DHLSBackend, RtlRun
from schedlab.redpanda.backends.dhls.memory import MemoryConfig
from schedlab.redpanda.backends.dhls.tools import Resources
from schedlab.redpanda.compiler import middle_end, outputs_match
from schedlab.redpanda.frontend import Kernel
from schedlab.redpanda.policies import FLOWS, BranchShape, Flow, Mode, RedPanda
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import SimulationError


@dataclass(frozen=True)
class DynamaticPipelined:
    """A Dynamatic-style DHLS flow *with* loop pipelining (Josipović et al., FPGA'18/'20).

    What Dynamatic does without RedPanda's analyses: a dataflow circuit whose loops overlap
    iterations as far as tokens allow (pipelined), one memory interface per array (accesses of
    different arrays are never ordered; loads of one array are not ordered among themselves),
    and every load/store pair of one array that involves a store kept in program order within
    and across iterations -- the order Dynamatic's load-store queue guarantees, here enforced
    statically by ordering tokens (an LSQ may additionally let a load pass an earlier store to
    a different address at run time; that is not modelled). Branches stay control flow
    (branch/merge, Dynamatic's native lowering) or are all if-converted (``branches``). No
    steer fusion and no unit sharing.
    """

    name: str = "dynamatic-pipelined"
    branches: str = "steer"
    pipelined: bool = True
    fuse: bool = False
    size_buffers: bool = False
    share_units: bool = False

    def memory_key(self, memref: str) -> str:
        return memref

    def orders_reads(self) -> bool:
        return False

    def may_alias(self, a, b) -> bool:
        return True

    def carried(self, loop: object, accesses: list) -> bool:
        return True

    def branch_mode(self, shape: BranchShape, mode: Mode):
        return "steer" if shape.has_loops else self.branches  # type: ignore[return-value]


#: every DHLS flow by name: the CGRA flows plus the pipelined Dynamatic-style baselines
DHLS_FLOW_FACTORIES: dict[str, Callable[[], Flow]] = {
    **FLOWS,
    "dynamatic-pipelined": DynamaticPipelined,
    "dynamatic-pipelined-pred": lambda: DynamaticPipelined(name="dynamatic-pipelined-pred",
                                                           branches="predicate"),
    # ablation: RedPanda without multiplier/divider sharing (what sharing costs in cycles)
    "redpanda-no-sharing": lambda: RedPanda(name="redpanda-no-sharing", share_units=False),
}
#: the baselines of the DHLS claim: the project's Dynamatic-style flows WITH loop pipelining
#: (``baseline``: one ordering chain through every access, predication; the two above)
PIPELINED_BASELINES = ("baseline", "dynamatic-pipelined", "dynamatic-pipelined-pred")


def get_dhls_flow(name: str) -> Flow:
    from schedlab.core.registry import lookup

    return lookup(DHLS_FLOW_FACTORIES, "flow", name)()


@dataclass
class DhlsEvaluation:
    """One (kernel, flow) circuit, measured."""

    kernel: str
    flow: str
    design: Design
    run: RtlRun
    correct: bool
    resources: Resources | None = None

    def row(self) -> dict[str, object]:
        m = self.design.metrics()
        row = dict(kernel=self.kernel, flow=self.flow, cycles=self.run.cycles,
                   clock_ns=m["clock_ns"], exec_ns=self.run.cycles * float(m["clock_ns"]),
                   units=m["units"], buffer_slots=m["buffer_slots"],
                   max_ports=max(m["memory_ports"].values(), default=0),
                   shared_ports=m["shared_ports"],
                   shared_ops=m["shared_ops"], arith_units=m["arith_units"],
                   correct=self.correct, luts=None, ffs=None, dsps=None, synth_levels=None,
                   carry4=None)
        if self.resources is not None:
            r = self.resources
            row.update(luts=r.luts, ffs=r.ffs, dsps=r.dsps, synth_levels=r.levels,
                       carry4=r.carry4)
        return row


def reject_float(kernel: Kernel) -> None:
    """One-line error for a floating-point kernel: the circuits have no FP units."""
    from schedlab.core.errors import BadInputError
    from schedlab.redpanda.frontend import first_float_op

    op = first_float_op(kernel)
    if op is not None:
        line = kernel.op_line(op)
        at = f" at {Path(kernel.path).name} line {line}" if line else f" in {kernel.name}"
        raise BadInputError(
            f"the dynamic-HLS back end has integer datapaths only: {op.name}{at}",
            path=kernel.path, line=line, field=op.name,
        )


def compile_dhls(kernel: Kernel, flow: Flow, index_bits: int = 32,
                 memory: MemoryConfig | None = None) -> Design:
    """Middle end under ``flow`` (spatial: a circuit executes every op in its own unit);
    ``memory`` is the port budget per array (default: dual-port BRAMs)."""
    reject_float(kernel)
    graph = middle_end(kernel, flow, "spatial")
    return DHLSBackend().compile(graph, share=flow.share_units, index_bits=index_bits,
                                 memory=memory)


def evaluate_dhls(kernel: Kernel, flow: Flow, inputs: Mapping[str, object],
                  reference: tuple[list[int], dict] | None = None, synthesize: bool = False,
                  directory: str | Path | None = None, memory: MemoryConfig | None = None
                  ) -> DhlsEvaluation:
    """Compile, simulate in Verilog, check against xDSL; Yosys resources if asked."""
    design = compile_dhls(kernel, flow, memory=memory)
    run = design.simulate(inputs, directory)
    if reference is None:
        reference = run_reference(kernel, inputs)
    correct = run.complete and outputs_match(run, reference)  # type: ignore[arg-type]
    if not correct:
        raise SimulationError(f"{kernel.name}/{flow.name}: the Verilog circuit's outputs differ "
                              "from the xDSL interpreter (back-end bug)")
    resources = design.resources() if synthesize else None
    return DhlsEvaluation(kernel.name, flow.name, design, run, correct, resources)
