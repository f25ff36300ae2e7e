"""CGRA architecture descriptions (JSON), in the spirit of CGRA-Mapper's architecture file.

RedPanda (../shared/papers/08-redpanda.md) maps onto dataflow CGRAs; CGRA-Mapper
(github.com/tancheng/CGRA-Mapper) describes its target in JSON (rows, columns, the functions
each tile adds, bypass/register/control-memory limits). Ours says the same things, validated
with Pydantic so a bad file gets one line naming its field:

```json
{"name": "mesh4x4", "rows": 4, "cols": 4, "contexts": 16, "registers": 4,
 "topology": "mesh", "link_capacity": 1, "hops_per_cycle": 1,
 "extra_links": [[[0, 0], [3, 3]]],
 "pe_ops": [{"pes": "all", "ops": ["alu", "mul", "control"]},
            {"pes": {"cols": [0]}, "ops": ["memory", "div"]}],
 "memory": {"ports_per_array": 2, "bank_pes": [[0, 0], [1, 0], [2, 0], [3, 0]]},
 "latency": {"mul": 2, "div": 4, "load": 2, "store": 1}, "buffer_depth": 2}
```

* ``topology``: ``mesh`` (N/E/S/W neighbours), ``torus`` (mesh plus wrap-around links),
  ``diagonal`` (mesh plus the four diagonals); ``extra_links`` adds bidirectional links.
* ``link_capacity``: words one directed link carries per cycle; ``hops_per_cycle``: how many
  links a value may cross in one cycle (HyCUBE-style single-cycle multi-hop bypass; 1 = every
  hop is a registered pipeline stage).
* ``registers``: routing registers per PE (a value waiting in a PE for a later link slot holds
  one for each cycle it waits); ``contexts``: instruction slots per PE (configuration memory).
* ``pe_ops``: groups of PEs and the operation classes they add: ``alu`` (add/sub/logic/
  compare/shift/cast/select), ``mul``, ``div`` (div and rem), ``control`` (steer, carry,
  invariant, merge, join, triggered constants), ``memory`` (load, store). A PE can run an
  instruction only if its class is in the union of its groups' ops.
* ``memory.ports_per_array``: accesses one array serves per cycle (a dual-port BRAM = 2); the
  mapper schedules (temporal) or an arbiter grants (spatial) at most that many per cycle.
"""

from __future__ import annotations

import json
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schedlab.core.errors import UnknownNameError
from schedlab.core.io import read_json, validate_model
from schedlab.redpanda.graph import Node

OP_CLASSES = ("alu", "mul", "div", "control", "memory")
PE = tuple[int, int]

#: default unit latencies in cycles (the token simulator's, so both back ends agree)
DEFAULT_LATENCY = {"load": 2, "store": 1, "mul": 2, "div": 4, "rem": 4}


def op_class(node: Node) -> str:
    """The operation class a PE must support to run ``node``."""
    if node.kind in ("load", "store"):
        return "memory"
    if node.kind in ("alu", "select"):
        if node.fn == "mul":
            return "mul"
        if node.fn in ("div", "rem"):
            return "div"
        return "alu"
    return "control"


class PESelector(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rows: list[int] | None = None
    cols: list[int] | None = None


class PEGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pes: Literal["all"] | PESelector | list[tuple[int, int]] = "all"
    ops: list[Literal["alu", "mul", "div", "control", "memory"]]


class MemorySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ports_per_array: int = Field(2, ge=1, le=64)


class Architecture(BaseModel):
    """One CGRA: grid, per-PE operation sets, registers, links and their capacity, memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "cgra"
    rows: int = Field(4, ge=1, le=64)
    cols: int = Field(4, ge=1, le=64)
    contexts: int = Field(16, ge=1, le=1024)
    registers: int = Field(4, ge=0, le=256)
    topology: Literal["mesh", "torus", "diagonal"] = "mesh"
    link_capacity: int = Field(1, ge=1, le=64)
    hops_per_cycle: int = Field(1, ge=1, le=16)
    extra_links: list[tuple[tuple[int, int], tuple[int, int]]] = []
    pe_ops: list[PEGroup] = [PEGroup(pes="all", ops=list(OP_CLASSES))]
    memory: MemorySpec = MemorySpec()
    latency: dict[str, int] = {}
    buffer_depth: int = Field(2, ge=1, le=64)

    @field_validator("latency")
    @classmethod
    def _latency(cls, value: dict[str, int]) -> dict[str, int]:
        for key, cycles in value.items():
            if key not in DEFAULT_LATENCY and key not in ("alu", "control"):
                raise ValueError(
                    f"unknown unit '{key}' (valid: {', '.join(DEFAULT_LATENCY)}, alu, control)"
                )
            if not 1 <= cycles <= 64:
                raise ValueError(f"latency of '{key}' must be 1..64 cycles, got {cycles}")
        return value

    @model_validator(mode="after")
    def _check(self) -> Architecture:
        def inside(pe, where: str) -> None:
            if not (0 <= pe[0] < self.rows and 0 <= pe[1] < self.cols):
                raise ValueError(
                    f"{where}: PE {list(pe)} is outside the {self.rows}x{self.cols} grid"
                )

        for i, group in enumerate(self.pe_ops):
            if isinstance(group.pes, list):
                for pe in group.pes:
                    inside(pe, f"pe_ops.{i}.pes")
            elif isinstance(group.pes, PESelector):
                for r in group.pes.rows or []:
                    if not 0 <= r < self.rows:
                        raise ValueError(f"pe_ops.{i}.pes.rows: row {r} outside 0..{self.rows - 1}")
                for c in group.pes.cols or []:
                    if not 0 <= c < self.cols:
                        raise ValueError(f"pe_ops.{i}.pes.cols: col {c} outside 0..{self.cols - 1}")
        for i, (a, b) in enumerate(self.extra_links):
            inside(a, f"extra_links.{i}")
            inside(b, f"extra_links.{i}")
            if tuple(a) == tuple(b):
                raise ValueError(f"extra_links.{i}: a link needs two different PEs")
        if not any(self.ops_of(pe) for pe in self.pes):
            raise ValueError("pe_ops: no PE supports any operation")
        return self

    # ---- derived structure ---------------------------------------------------------------
    @cached_property
    def pes(self) -> list[PE]:
        return [(r, c) for r in range(self.rows) for c in range(self.cols)]

    @cached_property
    def _ops(self) -> dict[PE, frozenset[str]]:
        ops: dict[PE, set[str]] = {pe: set() for pe in self.pes}
        for group in self.pe_ops:
            for pe in self._select(group.pes):
                ops[pe].update(group.ops)
        return {pe: frozenset(v) for pe, v in ops.items()}

    def _select(self, sel) -> list[PE]:
        if sel == "all":
            return self.pes
        if isinstance(sel, PESelector):
            return [
                (r, c)
                for r, c in self.pes
                if (sel.rows is None or r in sel.rows) and (sel.cols is None or c in sel.cols)
            ]
        return [tuple(pe) for pe in sel]

    def ops_of(self, pe: PE) -> frozenset[str]:
        return self._ops[pe]

    def supports(self, pe: PE, node: Node) -> bool:
        return op_class(node) in self._ops[pe]

    def memory_capable(self, pe: PE) -> bool:
        return "memory" in self._ops[pe]

    @cached_property
    def links(self) -> list[tuple[PE, PE]]:
        """Directed links (each carries ``link_capacity`` words per cycle)."""
        out: set[tuple[PE, PE]] = set()
        steps = [(0, 1), (1, 0), (0, -1), (-1, 0)]
        if self.topology == "diagonal":
            steps += [(1, 1), (1, -1), (-1, 1), (-1, -1)]
        for r, c in self.pes:
            for dr, dc in steps:
                nr, nc = r + dr, c + dc
                if self.topology == "torus":
                    nr, nc = nr % self.rows, nc % self.cols
                if 0 <= nr < self.rows and 0 <= nc < self.cols and (nr, nc) != (r, c):
                    out.add(((r, c), (nr, nc)))
        for a, b in self.extra_links:
            out.add((tuple(a), tuple(b)))
            out.add((tuple(b), tuple(a)))
        return sorted(out)

    @cached_property
    def neighbours(self) -> dict[PE, list[PE]]:
        nb: dict[PE, list[PE]] = {pe: [] for pe in self.pes}
        for a, b in self.links:
            nb[a].append(b)
        return nb

    @cached_property
    def distance(self) -> dict[PE, dict[PE, int]]:
        """Links on a shortest path between every pair of PEs (BFS)."""
        out = {}
        for src in self.pes:
            dist, frontier = {src: 0}, [src]
            while frontier:
                nxt = []
                for pe in frontier:
                    for nb in self.neighbours[pe]:
                        if nb not in dist:
                            dist[nb] = dist[pe] + 1
                            nxt.append(nb)
                frontier = nxt
            out[src] = dist
        return out

    def route_cycles(self, a: PE, b: PE) -> int:
        """Fewest extra cycles a value needs from PE ``a`` to PE ``b`` (0 on the same PE or
        within ``hops_per_cycle`` links: those feed the consumer in the producer's output cycle;
        each further ``hops_per_cycle`` links is one registered stage)."""
        hops = self.distance[a].get(b)
        if hops is None:
            return 10**6
        return max(-(-hops // self.hops_per_cycle) - 1, 0)

    def unit_latency(self, node: Node) -> int:
        lat = {**DEFAULT_LATENCY, **self.latency}
        if node.kind in lat:
            return lat[node.kind]
        if node.kind in ("alu", "select") and node.fn in lat:
            return lat[node.fn]
        return lat.get("alu" if node.kind in ("alu", "select") else "control", 1)

    def describe(self) -> dict:
        return json.loads(self.model_dump_json())


def load_arch(source: str | Path) -> Architecture:
    """An architecture from a JSON file, or a shipped one by name (``mesh4x4``, ...)."""
    path = Path(source)
    if not path.suffix and not path.exists():
        if str(source) not in shipped_archs():
            raise UnknownNameError("architecture", str(source), shipped_archs())
        text = resources.files("schedlab.redpanda").joinpath(f"archs/{source}.json").read_text()
        return validate_model(Architecture, json.loads(text), path=f"{source}.json")
    data = read_json(path, what="architecture file")
    return validate_model(Architecture, data, path=path)


def shipped_archs() -> list[str]:
    folder = resources.files("schedlab.redpanda").joinpath("archs")
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )


def mesh(
    rows: int, cols: int, contexts: int = 16, memory_cols: tuple[int, ...] | None = None, **changes
) -> Architecture:
    """A homogeneous mesh; memory PEs on ``memory_cols`` (default: both border columns)."""
    memory_cols = memory_cols if memory_cols is not None else tuple(sorted({0, cols - 1}))
    groups = [
        PEGroup(pes="all", ops=["alu", "mul", "div", "control"]),
        PEGroup(pes=PESelector(cols=list(memory_cols)), ops=["memory"]),
    ]
    data = dict(name=f"mesh{rows}x{cols}", rows=rows, cols=cols, contexts=contexts, pe_ops=groups)
    return validate_model(Architecture, {**data, **changes})  # one line naming the field
