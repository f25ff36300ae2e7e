"""The DHLS back end: RedPanda graph -> buffered, shared elastic circuit -> Verilog.

RedPanda (../shared/papers/08-redpanda.md) lowers its shared IR to dynamically scheduled
circuits. :class:`DHLSBackend` implements the :class:`~schedlab.redpanda.backends.base.Backend`
protocol: explicit forks, buffer placement (HiGHS MILP), resource sharing, Verilog generation.
The resulting :class:`Design` can write itself out (top module, component library, testbench),
simulate itself with Icarus Verilog on given inputs and estimate its resources with Yosys.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from schedlab.core.io import ensure_directory, write_text
from schedlab.redpanda.backends.dhls import tools
from schedlab.redpanda.backends.dhls.buffers import Buffering, critical_levels, place_buffers
from schedlab.redpanda.backends.dhls.circuit import CP_LEVELS, SHAREABLE, Circuit, build_circuit
from schedlab.redpanda.backends.dhls.memory import (
    MemoryConfig,
    PortMap,
    assign_ports,
    port_pressure,
)
from schedlab.redpanda.backends.dhls.sharing import share_units
from schedlab.redpanda.backends.dhls.testbench import collisions, parse_output, testbench
from schedlab.redpanda.backends.dhls.verilog import Interface, generate
from schedlab.redpanda.graph import Graph
from schedlab.redpanda.simulator import SimulationError


@dataclass
class RtlRun:
    """One Verilog simulation: cycles, results, final memory (like the token simulator's)."""

    cycles: int
    results: list[int]
    memory: dict[str, np.ndarray]
    complete: bool


@dataclass
class Design:
    """A generated circuit and what it took to make it."""

    name: str
    circuit: Circuit
    buffering: Buffering
    groups: list[list[int]]
    verilog: str
    iface: Interface
    portmap: PortMap
    seconds: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def macros(self) -> list[tuple[str, int]]:
        """(fn, width) of every multiplier/divider instance after sharing."""
        g = self.circuit.graph
        shared = {n for grp in self.groups for n in grp}
        units = [(n.fn, n.attrs["bits"]) for n in g.nodes.values()
                 if n.kind == "alu" and n.fn in SHAREABLE and n.id not in shared]
        units += [(g.nodes[grp[0]].fn, g.nodes[grp[0]].attrs["bits"]) for grp in self.groups]
        return sorted(units)

    @property
    def levels(self) -> int:
        """Model estimate of the deepest register-to-register path, in LUT levels."""
        return critical_levels(self.circuit, self.buffering)

    @property
    def clock_ns(self) -> float:
        """Documented clock-period estimate (tools.FF_OVERHEAD_NS + levels x LEVEL_NS)."""
        return round(tools.FF_OVERHEAD_NS + tools.LEVEL_NS * self.levels, 3)

    def metrics(self) -> dict[str, object]:
        g = self.circuit.graph
        return dict(clock_ns=self.clock_ns, logic_levels=self.levels,
                    units=sum(not n.is_immediate for n in g.nodes.values()),
                    channels=len(self.circuit.channels), buffers=self.buffering.count,
                    buffer_slots=self.buffering.slots,
                    loops=len(self.circuit.loops),
                    loop_ii=[self.buffering.ii.get(k) for k in range(len(self.circuit.loops))],
                    shared_groups=len(self.groups),
                    shared_ops=sum(len(grp) for grp in self.groups),
                    arith_units=len(self.macros),
                    memory_ports={m: len(p) for m, p in sorted(self.portmap.ports.items())},
                    shared_ports=sum(len(lane) > 1 for lanes in self.portmap.ports.values()
                                     for lane in lanes),
                    milp=self.buffering.status,
                    generation_seconds=round(self.seconds, 4))

    def write(self, directory: str | Path, inputs: Mapping[str, object] | None = None
              ) -> dict[str, Path]:
        """Write the top module, the component library and (given inputs) a testbench."""
        directory = ensure_directory(directory)
        tools.write_library(directory)
        out = {"top": write_text(directory / f"{self.iface.top}.v", self.verilog)}
        if inputs is not None:
            tb, files = testbench(self.iface, inputs)
            out["testbench"] = write_text(directory / "tb.v", tb)
            for name, text in files.items():
                write_text(directory / name, text)
        return out

    def simulate(self, inputs: Mapping[str, object], directory: str | Path | None = None
                 ) -> RtlRun:
        """Run the circuit on ``inputs`` in Icarus Verilog (a temporary directory if None)."""
        if directory is None:
            with tempfile.TemporaryDirectory(prefix="rp-dhls-") as tmp:
                return self.simulate(inputs, tmp)
        paths = self.write(directory, inputs)
        text = tools.simulate_verilog(Path(directory), paths["top"], paths["testbench"])
        cycles, results, memory, timeout = parse_output(text)
        if timeout or cycles < 0 or "END" not in text:
            raise SimulationError(f"{self.name}: Verilog simulation did not finish")
        clashed = collisions(text)
        if clashed:
            raise SimulationError(f"{self.name}: two ports of array '{clashed[0]}' accessed "
                                  "one address in one cycle with a write (undefined on a "
                                  "dual-port BRAM; back-end bug)")
        memories = {}
        for name, shape in self.circuit.graph.memrefs.items():
            data = np.array(inputs[name], dtype=np.int64).reshape(shape).copy()
            if name in memory:
                flat = data.reshape(-1)
                for index, value in memory[name].items():
                    flat[index] = value
            memories[name] = data
        complete = all(results.get(i, (False, 0))[0] for i in range(self.circuit.graph.results))
        values = [results.get(i, (False, 0))[1] for i in range(self.circuit.graph.results)]
        return RtlRun(cycles, values, memories, complete)

    def resources(self) -> tools.Resources:
        """Yosys LUT/FF/DSP (synth_xilinx, 7-series cells) and depth (cached per Verilog)."""
        return _synthesize(self.verilog, self.iface.top)


@lru_cache(maxsize=256)
def _synthesize(verilog: str, top: str) -> tools.Resources:
    tool = tools.synthesizer()
    cached = _synth_cache_file(verilog, top, tool.label) if tool is not None else None
    if cached is not None and cached.is_file():
        try:
            data = json.loads(cached.read_text())
            data["cells"] = tuple(tuple(c) for c in data["cells"])
            return tools.Resources(**data)
        except (OSError, ValueError, TypeError, KeyError):
            pass  # unreadable entry: synthesise again and overwrite it
    with tempfile.TemporaryDirectory(prefix="rp-yosys-") as tmp:
        directory = Path(tmp)
        tools.write_library(directory)
        top_file = write_text(directory / f"{top}.v", verilog)
        result = tools.synthesize(directory, top_file, top)
    if cached is not None:
        with suppress(OSError):  # the cache is an optimisation; a read-only home is fine
            write_text(cached, json.dumps(asdict(result)))
    return result


def _synth_cache_file(verilog: str, top: str, label: str) -> Path:
    """On-disk cache entry of one synthesis (separate processes, e.g. reproduce's seeds, share
    it): keyed by the design, the component library, the Yosys build and the counting code."""
    parts = [verilog, top, label, Path(tools.__file__).read_text()]
    parts += [tools.rtl_text(name) for name in (*tools.LIBRARY, tools.MACROS)]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return tools.cache_root() / "yosys-synth" / f"{key}.json"


class DHLSBackend:
    """The dynamic-HLS target behind the :class:`Backend` protocol."""

    name = "dhls"

    def compile(self, graph: Graph, share: bool = True, cp_levels: int = CP_LEVELS,
                time_limit: float = 20.0, index_bits: int = 32,
                memory: MemoryConfig | None = None) -> Design:
        """``memory``: the port budget per array (default: dual-port BRAMs, 2 ports each)."""
        began = time.perf_counter()
        circuit = build_circuit(graph, index_bits)
        portmap = assign_ports(circuit, memory or MemoryConfig())
        buffering = place_buffers(circuit, cp_levels, time_limit,
                                  ii_floor=port_pressure(circuit, portmap))
        groups = share_units(circuit, buffering) if share else []
        verilog, iface = generate(circuit, buffering, groups, portmap)
        return Design(graph.name, circuit, buffering, groups, verilog, iface, portmap,
                      time.perf_counter() - began)
