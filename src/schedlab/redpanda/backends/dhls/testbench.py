"""Testbench generation: the same inputs the xDSL interpreter gets, fed to the circuit.

RedPanda (../shared/papers/08-redpanda.md) must produce circuits that compute what the source
kernel computes. The testbench holds every memref as a synchronous-read RAM initialised from a
``.hex`` file with as many read/write ports as the circuit has for it (its port budget: a
dual-port BRAM by default; a write does not change the port's read register), reports any
cycle in which two ports meet at one address with a write (``COLLISION``: undefined on a
BRAM), drives the scalar arguments, releases reset, and counts cycles while the circuit's
``active`` output says tokens still move. It stops once nothing has moved for ``IDLE``
cycles (or at ``limit``) and prints the cycle count, every result and every memory word,
which :func:`parse_output` reads back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.dhls.verilog import Interface, ident, literal

IDLE = 32


def hex_words(values: np.ndarray, width: int) -> str:
    digits = max(1, math.ceil(width / 4))
    mask = (1 << width) - 1
    return "".join(f"{int(v) & mask:0{digits}x}\n" for v in np.asarray(values).ravel())


def testbench(iface: Interface, inputs: Mapping[str, object], limit: int = 2_000_000
              ) -> tuple[str, dict[str, str]]:
    """(testbench Verilog, {hex file name: contents})."""
    lines = ["`timescale 1ns/1ps", "module tb;", "  reg clk = 0; reg rst = 1;",
             "  always #5 clk = ~clk;", "  wire active;"]
    files: dict[str, str] = {}
    conns = [".clk(clk)", ".rst(rst)", ".active(active)"]
    for name, (size, width) in sorted(iface.memories.items()):
        if name not in inputs:
            raise BadInputError(f"missing input memref '{name}'", field=name)
        data = np.asarray(inputs[name], dtype=np.int64)
        if data.size != size:
            raise BadInputError(f"memref '{name}' needs {size} values, got {data.size}",
                                field=name)
        files[f"{ident(name)}.hex"] = hex_words(data, width)
        lines += [f"  reg [{width - 1}:0] mem_{ident(name)} [0:{size - 1}];",
                  f'  initial $readmemh("{ident(name)}.hex", mem_{ident(name)});']
    by_memref: dict[str, list[tuple[int, int]]] = {}
    for name, k, aw, width in iface.ports:
        by_memref.setdefault(name, []).append((k, aw))
        port, mem = f"m_{ident(name)}_p{k}", f"mem_{ident(name)}"
        lines += [f"  wire {port}_en, {port}_we; wire [{aw - 1}:0] {port}_addr; "
                  f"wire [{width - 1}:0] {port}_wdata; reg [{width - 1}:0] {port}_rdata = 0;",
                  f"  always @(posedge clk) if ({port}_en) begin if ({port}_we) "
                  f"{mem}[{port}_addr] <= {port}_wdata; else {port}_rdata <= {mem}[{port}_addr]; "
                  "end"]
        conns += [f".{port}_{s}({port}_{s})" for s in ("en", "we", "addr", "wdata", "rdata")]
    # two ports touching one word in one cycle, one of them writing: undefined on a BRAM
    lines.append("  integer collisions = 0;")
    for name, ports in sorted(by_memref.items()):
        for i, (a, _) in enumerate(ports):
            for b, _ in ports[i + 1:]:
                pa, pb = f"m_{ident(name)}_p{a}", f"m_{ident(name)}_p{b}"
                lines.append(f"  always @(posedge clk) if (!rst && {pa}_en && {pb}_en && "
                             f"{pa}_addr == {pb}_addr && ({pa}_we || {pb}_we)) begin "
                             f'if (collisions == 0) $display("COLLISION {name} %0d", {pa}_addr);'
                             " collisions = collisions + 1; end")
    for name, width in iface.args:
        if name not in inputs:
            raise BadInputError(f"missing input scalar '{name}'", field=name)
        conns.append(f".arg_{ident(name)}({literal(int(inputs[name]), width)})")
    for index, width in iface.results:
        lines.append(f"  wire [{width - 1}:0] res{index}; wire got{index};")
        conns += [f".res{index}(res{index})", f".got{index}(got{index})"]
    lines.append(f"  {iface.top} dut ({', '.join(conns)});")
    lines += _driver(iface, limit)
    return "\n".join(lines) + "\n", files


def _driver(iface: Interface, limit: int) -> list[str]:
    out = ["  integer cycle = 0; integer idle = 0; integer last = 0; integer i;",
           "  always @(negedge clk) if (!rst) begin",
           "    cycle = cycle + 1;",
           "    if (active) begin last = cycle; idle = 0; end else idle = idle + 1;",
           "  end",
           "  initial begin",
           "    repeat (2) @(posedge clk);",
           "    #1 rst = 0;",
           f"    wait (idle >= {IDLE} || cycle >= {limit});",
           f'    if (cycle >= {limit}) $display("TIMEOUT");',
           '    $display("CYCLES %0d", last);']
    for index, _width in iface.results:
        out.append(f'    $display("RESULT {index} %0d %0d", got{index}, $signed(res{index}));')
    for name, (size, _) in sorted(iface.memories.items()):
        mem = f"mem_{ident(name)}"
        out.append(f'    for (i = 0; i < {size}; i = i + 1) '
                   f'$display("MEM {name} %0d %0d", i, $signed({mem}[i]));')
    out += ['    $display("END");', "    $finish;", "  end", "endmodule"]
    return out


def collisions(text: str) -> list[str]:
    """Arrays on which two ports met at one address in one cycle with a write (``COLLISION``)."""
    return [line.split()[1] for line in text.splitlines() if line.startswith("COLLISION ")]


def parse_output(text: str) -> tuple[int, dict[int, tuple[bool, int]], dict[str, dict[int, int]],
                                      bool]:
    """(cycles, {result: (got, value)}, {memref: {index: value}}, timed_out)."""
    cycles, results, memory, timeout = -1, {}, {}, False
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "CYCLES":
            cycles = int(parts[1])
        elif parts[0] == "RESULT":
            results[int(parts[1])] = (parts[2] == "1", int(parts[3]))
        elif parts[0] == "MEM":
            memory.setdefault(parts[1], {})[int(parts[2])] = int(parts[3])
        elif parts[0] == "TIMEOUT":
            timeout = True
    return cycles, results, memory, timeout
