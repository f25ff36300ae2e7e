"""Memory as an FPGA has it: a port budget per array and a memory controller per port.

RedPanda's DHLS circuits (../shared/papers/08-redpanda.md) keep every array in a block RAM
outside the datapath. A block RAM has a fixed number of ports (a true dual-port BRAM: two, each
able to read or write one word per cycle), so a kernel with more accesses to one array than it
has ports must share them. This module decides which accesses share which port; the circuit
then gets, per port, a Dynamatic-style memory controller (``rp_memport`` in ``rtl/rp_units.v``):
a round-robin arbiter that grants the port to one requesting load/store per cycle and
multiplexes its address and write data. Requests are ``valid && predicate`` only (never a ready
signal), so the arbiter adds no combinational valid/ready cycle; the priority rotates on every
grant, so a granted access that cannot advance costs at most one cycle in N and never blocks the
others. A load on a shared port keeps the word it read (``HOLD``), because the port's read
register may be overwritten by the next access before the load's pipeline moves on.

Ordering between accesses stays what the middle end decided (ordering tokens): a store's
completion token leaves only after the controller has actually written, so an access ordered
after it sees the new value whatever the arbitration did.

Assignment: accesses of one array are dealt round-robin over its ports in order of their
innermost loop (then node id), so the accesses of one loop body are spread as evenly as the
budget allows; :func:`port_pressure` gives, per loop, the most accesses any port must serve per
iteration, which the buffer-placement MILP uses as a lower bound on that loop's II.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from schedlab.core.errors import BadInputError

#: ports of one true dual-port block RAM (Xilinx RAMB18/36, Intel M20K in true dual-port mode)
DEFAULT_PORTS = 2


@dataclass(frozen=True)
class MemoryConfig:
    """Port budget per array: ``ports`` for every array, ``per_array`` overriding by name.

    ``ports=0`` means one private port per access (an idealised memory, for ablations).
    """

    ports: int = DEFAULT_PORTS
    per_array: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.ports, int) or self.ports < 0:
            raise BadInputError(
                f"memory ports must be an integer >= 0, got {self.ports!r}", field="mem_ports"
            )
        for name, value in self.per_array.items():
            if not isinstance(value, int) or value < 1:
                raise BadInputError(
                    f"memory ports of array '{name}' must be an integer >= 1, got {value!r}",
                    field=f"mem_ports.{name}",
                )

    def budget(self, memref: str) -> int:
        return int(self.per_array.get(memref, self.ports))

    @classmethod
    def parse(cls, text: str | int | None) -> MemoryConfig:
        """``"2"``, ``"1"``, ``"0"`` (unlimited) or ``"2,A=1,B=4"`` (per-array overrides)."""
        if text is None:
            return cls()
        if isinstance(text, int):
            return cls(ports=text)
        ports, per_array = DEFAULT_PORTS, {}
        for item in (part.strip() for part in str(text).split(",")):
            if not item:
                continue
            name, eq, value = item.partition("=")
            try:
                number = int(value if eq else name)
            except ValueError:
                raise BadInputError(
                    f"memory ports: '{item}' is not N or ARRAY=N", field="mem_ports"
                ) from None
            if eq:
                per_array[name.strip()] = number
            else:
                ports = number
        return cls(ports=ports, per_array=per_array)


@dataclass
class PortMap:
    """Which accesses each physical port of each array serves."""

    ports: dict[str, list[list[int]]]  # memref -> [port -> [load/store node ids]]
    of: dict[int, tuple[str, int]]  # node id -> (memref, port index)

    def count(self, memref: str) -> int:
        return len(self.ports.get(memref, []))

    def shared(self, nid: int) -> bool:
        memref, port = self.of[nid]
        return len(self.ports[memref][port]) > 1


def assign_ports(circuit, config: MemoryConfig) -> PortMap:
    """Deal each array's accesses over at most ``config.budget(array)`` ports."""
    g = circuit.graph
    accesses: dict[str, list[int]] = {}
    for node in sorted(g.nodes.values(), key=lambda n: n.id):
        if node.kind in ("load", "store"):
            accesses.setdefault(node.attrs["memref"], []).append(node.id)
    unknown = sorted(set(config.per_array) - set(accesses))
    if unknown:  # a mistyped array name would otherwise be ignored silently
        raise BadInputError(
            f"no array '{unknown[0]}' is accessed by {g.name} (arrays: "
            f"{', '.join(sorted(accesses)) or 'none'})",
            field="mem_ports",
        )
    ports: dict[str, list[list[int]]] = {}
    of: dict[int, tuple[str, int]] = {}
    for memref, nids in accesses.items():
        budget = config.budget(memref)
        count = len(nids) if budget == 0 else min(budget, len(nids))

        def where(nid: int) -> tuple[int, int]:
            loop = circuit.innermost(nid)
            return (-1 if loop is None else circuit.loops.index(loop), nid)

        lanes: list[list[int]] = [[] for _ in range(count)]
        for k, nid in enumerate(sorted(nids, key=where)):
            lanes[k % count].append(nid)
            of[nid] = (memref, k % count)
        ports[memref] = [sorted(lane) for lane in lanes]
    return PortMap(ports, of)


def port_pressure(circuit, portmap: PortMap) -> dict[int, int]:
    """Loop index -> the most accesses one port serves per iteration of that loop's body."""
    out: dict[int, int] = {}
    for lanes in portmap.ports.values():
        for lane in lanes:
            per_loop: dict[int, int] = {}
            for nid in lane:
                loop = circuit.innermost(nid)
                if loop is not None:
                    k = circuit.loops.index(loop)
                    per_loop[k] = per_loop.get(k, 0) + 1
            for k, n in per_loop.items():
                out[k] = max(out.get(k, 0), n)
    return out


_PORT = re.compile(r"^\s*output\s+m_(\w+)_p(\d+)_en\s*,?\s*$", re.MULTILINE)


def ports_in_verilog(verilog: str) -> dict[str, int]:
    """Memory ports per array, read back from a generated top module's port list."""
    found: dict[str, set[int]] = {}
    for name, index in _PORT.findall(verilog):
        found.setdefault(name, set()).add(int(index))
    return {name: len(indices) for name, indices in sorted(found.items())}
