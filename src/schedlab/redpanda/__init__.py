"""RedPanda: one compiler for dataflow CGRAs and dynamic HLS (../shared/papers/08-redpanda.md).

Front end (xDSL-parsed MLIR) -> RedPanda IR (an xDSL dialect / a plain dataflow graph) ->
middle end (branch handling, memory ordering, pipelining, instruction-count reduction) ->
back ends (CGRA; dynamic HLS as elastic Verilog circuits). Everything is checked against
xDSL's interpreter: by a token-level cycle simulator (CGRA) or by simulating the generated
Verilog with Icarus Verilog (DHLS).
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "compile_dhls_file": "api", "compile_file": "api", "BACKENDS": "backends",
    "Backend": "backends", "CGRA": "backends", "CGRABackend": "backends", "Mapping": "backends",
    "map_graph": "backends", "DHLSBackend": "backends.dhls", "Design": "backends.dhls",
    "Evaluation": "compiler", "evaluate": "compiler", "middle_end": "compiler",
    "DhlsEvaluation": "dhls", "compile_dhls": "dhls", "evaluate_dhls": "dhls",
    "RedPandaDialect": "dialect", "from_xdsl": "dialect", "print_ir": "dialect",
    "to_xdsl": "dialect", "Kernel": "frontend", "load_kernel": "kernelfile",
    "parse_kernel": "frontend", "Graph": "graph", "Node": "graph", "Port": "graph",
    "lower": "lowering", "FLOWS": "policies", "Flow": "policies", "RedPanda": "policies",
    "get_flow": "policies", "run_reference": "reference", "SimResult": "simulator",
    "SimulationError": "simulator", "Timing": "simulator", "simulate": "simulator",
    "KERNELS": "workloads", "kernel_text": "workloads", "load_suite_kernel": "workloads",
    "random_inputs": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
