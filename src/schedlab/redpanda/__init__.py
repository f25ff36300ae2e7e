"""RedPanda: one compiler for dataflow CGRAs and dynamic HLS (../shared/papers/08-redpanda.md).

Front end (xDSL-parsed MLIR) -> RedPanda IR (an xDSL dialect / a plain dataflow graph) ->
middle end (branch handling, memory ordering, pipelining, instruction-count reduction) ->
back ends (CGRA; dynamic HLS as elastic Verilog circuits). Everything is checked against
xDSL's interpreter: by a token-level cycle simulator (CGRA) or by simulating the generated
Verilog with Icarus Verilog (DHLS).
"""

from schedlab.redpanda.api import compile_dhls_file, compile_file
from schedlab.redpanda.backends import BACKENDS, CGRA, Backend, CGRABackend, Mapping, map_graph
from schedlab.redpanda.backends.dhls import Design, DHLSBackend
from schedlab.redpanda.compiler import Evaluation, evaluate, middle_end
from schedlab.redpanda.dhls import DhlsEvaluation, compile_dhls, evaluate_dhls
from schedlab.redpanda.dialect import RedPandaDialect, from_xdsl, print_ir, to_xdsl
from schedlab.redpanda.frontend import Kernel, load_kernel, parse_kernel
from schedlab.redpanda.graph import Graph, Node, Port
from schedlab.redpanda.lowering import lower
from schedlab.redpanda.policies import FLOWS, Flow, RedPanda, get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import SimResult, SimulationError, Timing, simulate
from schedlab.redpanda.workloads import KERNELS, kernel_text, load_suite_kernel, random_inputs

__all__ = [
    "BACKENDS", "CGRA", "DHLSBackend", "FLOWS", "KERNELS", "Backend", "CGRABackend", "Design",
    "DhlsEvaluation", "Evaluation", "Flow", "compile_dhls", "compile_dhls_file", "evaluate_dhls",
    "Graph", "Kernel", "Mapping", "Node", "Port", "RedPanda", "RedPandaDialect", "SimResult",
    "SimulationError", "Timing", "compile_file", "evaluate", "from_xdsl", "get_flow",
    "kernel_text", "load_kernel", "load_suite_kernel", "lower", "map_graph", "middle_end",
    "parse_kernel", "print_ir", "random_inputs", "run_reference", "simulate", "to_xdsl",
]
