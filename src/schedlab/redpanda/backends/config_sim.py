"""Execute an emitted CGRA configuration cycle by cycle.

RedPanda (../shared/papers/08-redpanda.md) targets dataflow CGRAs: statically configured
instructions and routes, dynamically fired. This simulator reads only the configuration
(:mod:`.config`), never the mapper's objects:

* every cycle ``c``, each PE may fire the instruction of context ``c mod II`` (temporal; a
  spatial PE's one instruction may fire every cycle) if its operands have arrived, every
  consumer's operand FIFO has room (credits count values still in flight) and, for a memory
  access, its array grants a port (``ports_per_array`` per cycle, round-robin among the
  requesters);
* a fired value leaves its unit ``latency`` cycles later and travels its net's configured
  route tree: each ``link`` hop puts one word on that directed link in cycle
  ``leave + offset``, each ``reg`` hop holds a routing register of that PE for one cycle; the
  consumer receives it at ``leave + arrive``. The simulator counts the words on every link and
  the values in every register file in every cycle and stops with an error if a capacity is
  exceeded, or if a hop uses a link slot other than the one the configuration reserved;
* results and final memories are compared with xDSL's interpreter by the callers.

The firing rules of the control operators are :mod:`schedlab.redpanda.control`'s (the token
simulator's), so both simulators execute the same dataflow semantics.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.redpanda.control import control_rule
from schedlab.redpanda.graph import Node
from schedlab.redpanda.simulator import CycleLimitError, SimulationError, Simulator


@dataclass
class ConfigRun:
    results: list[int]
    memory: dict[str, np.ndarray]
    cycles: int
    firings: int
    max_link_load: int  # most words seen on one link in one cycle
    link_words: int  # words moved over links in total
    max_registers: int  # most waiting values seen in one PE in one cycle
    port_stalls: int  # firings deferred because the array had no free port


class ConfigSimulator:
    """One configuration on one set of inputs."""

    def __init__(
        self,
        config: Mapping,
        inputs: Mapping[str, object],
        max_cycles: int = 2_000_000,
        time_limit: float | None = None,
    ) -> None:
        self.cfg, self.max_cycles, self.time_limit = config, max_cycles, time_limit
        self.ii = int(config["ii"])
        self.temporal = config["mode"] == "temporal"
        arch = config["arch"]
        self.link_cap, self.regs = arch["link_capacity"], arch["registers"]
        self.ports = config["memory"]["ports_per_array"]
        self.memory = {}
        for name, shape in config["memrefs"].items():
            if name not in inputs:
                raise BadInputError(f"missing input memref '{name}'", field=name)
            data = np.array(inputs[name], dtype=np.int64)
            if data.size != int(np.prod(shape)):
                raise BadInputError(
                    f"memref '{name}' needs {int(np.prod(shape))} values, got {data.size}",
                    field=name,
                )
            self.memory[name] = data.reshape(shape).copy()
        for name in config["args"]:
            if name not in inputs:
                raise BadInputError(f"missing input scalar '{name}'", field=name)
        self.nodes: dict[int, Node] = {}
        self.slot: dict[int, int] = {}
        self.pe: dict[int, str] = {}
        self.lat: dict[int, int] = {}
        self.queues: dict[int, list[deque | None]] = {}
        self.imm: dict[int, list[int | None]] = {}
        self.depth: dict[tuple[int, int], int] = {}
        self.state: dict[int, list] = {}
        for ins in config["instructions"]:
            nid = ins["node"]
            ops = ins["operands"]
            self.nodes[nid] = Node(
                nid, ins["kind"], ins["fn"], [None] * len(ops), ins["n_out"], dict(ins["attrs"])
            )
            self.slot[nid], self.pe[nid], self.lat[nid] = ins["context"], ins["pe"], ins["latency"]
            self.queues[nid] = [None if "imm" in op else deque() for op in ops]
            self.imm[nid] = [op.get("imm") for op in ops]
            self.state[nid] = [0, None]
            for i, op in enumerate(ops):
                if "imm" not in op:
                    self.depth[(nid, i)] = op["depth"]
                if "arg" in op:
                    self.queues[nid][i].append((0, int(inputs[op["arg"]])))
                elif op.get("start"):
                    self.queues[nid][i].append((0, 0))
        # nets by producer output: sinks (node, operand, arrive) and the words it moves
        self.sinks: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        self.hops: dict[tuple[int, int], list[tuple[str, str, str, int]]] = defaultdict(list)
        self.reserved: set[tuple[str, str, int]] = set()
        for link in config.get("links", []):
            self.reserved.add((link["link"][0], link["link"][1], link["slot"]))
        for net in config["nets"]:
            key = (net["src"], net["port"])
            seen = set()
            for sink in net["sinks"]:
                self.sinks[key].append((sink["node"], sink["operand"], sink["arrive"]))
                for hop in sink["hops"]:
                    h = tuple(hop)
                    if h not in seen:  # the sinks of one net share one word per hop
                        seen.add(h)
                        self.hops[key].append(h)
        self.outputs_of: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.outputs: dict[int, int] = {}
        for out in config["outputs"]:
            if "src" in out:
                self.outputs_of[(out["src"], out["port"])].append(out["index"])
            else:
                self.outputs[out["index"]] = int(out["imm"] if "imm" in out else inputs[out["arg"]])
        self.link_load: dict[int, dict[tuple[str, str], int]] = defaultdict(
            lambda: defaultdict(int)
        )
        self.reg_load: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.max_link = self.max_reg = self.words = self.stalls = 0
        self.rr: dict[str, int] = defaultdict(int)  # round-robin pointer per array

    # ---- the interface control.control_rule uses -----------------------------------------
    def _ready(self, nid: int, i: int, t: int) -> bool:
        q = self.queues[nid][i]
        return q is None or (bool(q) and q[0][0] <= t)

    def _peek(self, nid: int, i: int) -> int:
        q = self.queues[nid][i]
        return self.imm[nid][i] if q is None else q[0][1]

    # ---- firing ------------------------------------------------------------------------
    def _space(self, nid: int) -> bool:
        for port in range(self.nodes[nid].n_out):
            for dst, i, _ in self.sinks.get((nid, port), ()):
                if len(self.queues[dst][i]) >= self.depth[(dst, i)]:
                    return False
        return True

    def _rule(self, node: Node, t: int):
        nid, kind = node.id, node.kind
        if kind in ("carry", "invariant", "merge", "steer"):
            return control_rule(self, node, t)
        everything = list(range(len(node.inputs)))
        if not all(self._ready(nid, i, t) for i in everything):
            return None
        vals = [self._peek(nid, i) for i in range(node.n_values)]
        fired = self._datapath(node, vals, everything)
        if fired is not None:
            return fired
        if kind in ("load", "store"):
            return self._memory(node, vals, everything)
        raise SimulationError(f"configuration holds an unknown instruction kind '{kind}'")

    # loads and stores fire as in the token simulator (same predicate, wrap and bounds rules)
    _memory = Simulator._memory
    _datapath = staticmethod(Simulator._datapath)
    _index = Simulator._index

    def _send(self, nid: int, port: int, value: int, t: int, wake: list) -> int:
        """Move one value over its route tree; returns the last arrival cycle."""
        leave = t + self.lat[nid]
        key = (nid, port)
        for kind, a, b, offset in self.hops.get(key, ()):
            cycle = leave + offset
            if kind == "link":
                slot = cycle % self.ii
                if (a, b, slot) not in self.reserved:
                    raise SimulationError(
                        f"node {nid}'s value crosses link {a}->{b} in slot "
                        f"{slot}, which the configuration does not reserve"
                    )
                load = self.link_load[cycle]
                load[(a, b)] += 1
                self.words += 1
                if load[(a, b)] > self.link_cap:
                    raise SimulationError(
                        f"link {a}->{b} carries {load[(a, b)]} words in cycle "
                        f"{cycle} (capacity {self.link_cap})"
                    )
                self.max_link = max(self.max_link, load[(a, b)])
            else:
                held = self.reg_load[cycle]
                held[a] += 1
                if held[a] > self.regs:
                    raise SimulationError(
                        f"PE {a} holds {held[a]} waiting values in cycle "
                        f"{cycle} ({self.regs} registers)"
                    )
                self.max_reg = max(self.max_reg, held[a])
        last = leave
        for dst, i, arrive in self.sinks.get(key, ()):
            at = leave + arrive
            self.queues[dst][i].append((at, value))
            heapq.heappush(wake, (at, dst))
            last = max(last, at)
        for index in self.outputs_of.get(key, ()):
            self.outputs[index] = value
        return last

    def run(self) -> ConfigRun:
        ii, temporal = self.ii, self.temporal
        producers: dict[int, set[int]] = defaultdict(set)  # who to wake when a slot frees up
        for (src, _port), sinks in self.sinks.items():
            for dst, _, _ in sinks:
                producers[dst].add(src)
        active = set(self.nodes)
        wake: list[tuple[int, int]] = []
        t = last = firings = rounds = 0
        started = time.monotonic()
        while active or wake:
            rounds += 1
            if (
                self.time_limit is not None
                and rounds % 2048 == 0
                and time.monotonic() - started > self.time_limit
            ):
                raise CycleLimitError(
                    self.cfg["kernel"],
                    f"the {self.time_limit:g} s time limit (cycle {t:,})",
                    "--time-limit",
                )
            while wake and wake[0][0] <= t:
                active.add(heapq.heappop(wake)[1])
            nxt: set[int] = set()
            busy: set[str] = set()
            granted: dict[str, int] = defaultdict(int)
            # memory requesters of one array are served round-robin (rotating priority)
            candidates = sorted(active, key=self._priority)
            for nid in candidates:
                if temporal and t % ii != self.slot[nid]:
                    heapq.heappush(wake, (t + (self.slot[nid] - t) % ii, nid))
                    continue
                node = self.nodes[nid]
                if not self._space(nid):
                    continue
                memref = node.attrs.get("memref") if node.kind in ("load", "store") else None
                if memref is not None and granted[memref] >= self.ports:
                    if not self._operands_ready(node, t):
                        continue
                    self.stalls += 1
                    nxt.add(nid)
                    continue
                rule = self._rule(node, t)
                if rule is None:
                    continue
                if self.pe[nid] in busy:
                    raise SimulationError(
                        f"two instructions fire on PE {self.pe[nid]} in cycle {t}"
                    )
                busy.add(self.pe[nid])
                if memref is not None:
                    granted[memref] += 1
                    self.rr[memref] = nid + 1
                consume, emit = rule
                for i in consume:
                    q = self.queues[nid][i]
                    if q is not None:
                        q.popleft()
                        nxt.update(producers[nid])  # a credit returns to the producers
                for port, value in emit:
                    last = max(last, self._send(nid, port, value, t, wake))
                last = max(last, t + self.lat[nid])
                firings += 1
                nxt.add(nid)
            self.link_load.pop(t, None)
            self.reg_load.pop(t, None)
            active = nxt
            t = t + 1 if active else (wake[0][0] if wake else t + 1)
            if t > self.max_cycles:
                raise CycleLimitError(
                    self.cfg["kernel"],
                    f"the cycle limit ({self.max_cycles:,} cycles)",
                    "--max-cycles",
                )
        missing = [i for i in range(self.cfg["results"]) if i not in self.outputs]
        if missing:
            raise SimulationError(
                f"{self.cfg['kernel']}: configuration deadlocked at cycle {t}, "
                f"results {missing} missing"
            )
        return ConfigRun(
            [self.outputs[i] for i in range(self.cfg["results"])],
            self.memory,
            last,
            firings,
            self.max_link,
            self.words,
            self.max_reg,
            self.stalls,
        )

    def _priority(self, nid: int) -> int:
        node = self.nodes[nid]
        if node.kind in ("load", "store"):
            return (nid - self.rr[node.attrs["memref"]]) % 1_000_000
        return nid

    def _operands_ready(self, node: Node, t: int) -> bool:
        return all(self._ready(node.id, i, t) for i in range(len(node.inputs)))


def run_config(
    config: Mapping,
    inputs: Mapping[str, object],
    max_cycles: int = 2_000_000,
    time_limit: float | None = None,
) -> ConfigRun:
    """Execute ``config`` on ``inputs``: results, final memory, cycles and link statistics."""
    return ConfigSimulator(config, inputs, max_cycles, time_limit).run()
