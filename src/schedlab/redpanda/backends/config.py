"""The per-cycle CGRA configuration the back end emits, as JSON, and its static checks.

RedPanda (../shared/papers/08-redpanda.md) lowers its IR to a target configuration. Ours says,
for one kernel on one :class:`~schedlab.redpanda.backends.arch.Architecture`:

* ``instructions``: which operation runs on which PE in which context (slot of the II-cycle
  period), with its unit latency, attributes and operand sources (an immediate in the
  instruction word, a routed net with the depth of the operand FIFO, a kernel argument or the
  start token written by the host);
* ``nets``: every value's route tree: per consumer the hops ``[kind, from PE, to PE, offset]``
  (``link`` or ``reg`` = wait one cycle in a routing register) and the arrival offset, offsets
  counted from the cycle the value leaves its unit;
* ``links`` / ``registers``: the resulting schedule, which net uses which directed link or
  routing register in which slot (the same every period);
* ``memory``: the per-array port budget and which accesses own which port slot.

:func:`check_config` recounts link and register loads from ``nets`` alone and rejects a
configuration that puts more words on a link slot than ``link_capacity`` (or more waiting
values in a PE than ``registers``); :mod:`.config_sim` executes it cycle by cycle.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.core.io import read_json, write_text
from schedlab.redpanda.backends.arch import Architecture
from schedlab.redpanda.backends.router import PnR, back_edge

FORMAT = "schedlab.redpanda.cgra-config/1"


def _pe(pe) -> str:
    return f"{pe[0]},{pe[1]}"


def fifo_depths(pnr: PnR, size_buffers: bool) -> dict[tuple[int, int], int]:
    """Operand FIFO depth per (node, operand): default, or sized from the schedule's slack."""
    depth: dict[tuple[int, int], int] = {}
    base = pnr.arch.buffer_depth
    for net in pnr.nets:
        for sink in net.sinks:
            d = base
            if size_buffers:
                dst, operand = sink
                life = (
                    pnr.start[dst]
                    - pnr.start[net.src]
                    + (pnr.ii if back_edge(pnr.graph, dst, operand) else 0)
                )
                d = max(base, -(-max(life, 1) // pnr.ii) + 1)
            depth[sink] = d
    return depth


def emit_config(pnr: PnR, size_buffers: bool = True) -> dict:
    """The configuration of a routed mapping, as a JSON-ready dict."""
    g, ii = pnr.graph, pnr.ii
    net_id = {(n.src, n.port): i for i, n in enumerate(pnr.nets)}
    depth = fifo_depths(pnr, size_buffers)
    instructions = []
    for nid in sorted(pnr.place, key=lambda n: (pnr.start[n], n)):
        node = g.nodes[nid]
        operands = []
        for i, port in enumerate(node.inputs):
            src = g.nodes[port.node]
            if src.is_immediate:
                operands.append(dict(imm=int(src.attrs["value"])))
            elif src.kind == "arg":
                operands.append(dict(arg=src.fn, depth=depth.get((nid, i), pnr.arch.buffer_depth)))
            elif src.kind == "source":
                operands.append(dict(start=True, depth=pnr.arch.buffer_depth))
            else:
                operands.append(dict(net=net_id[(port.node, port.index)], depth=depth[(nid, i)]))
        attrs = {k: v for k, v in node.attrs.items() if k not in ("value",) or node.kind == "const"}
        instructions.append(
            dict(
                node=nid,
                kind=node.kind,
                fn=node.fn,
                n_out=node.n_out,
                pe=_pe(pnr.place[nid]),
                context=pnr.start[nid] % ii,
                cycle=pnr.start[nid],
                latency=pnr.latency(nid),
                attrs=_jsonable(attrs),
                operands=operands,
            )
        )
    nets, links, registers = [], [], []
    for i, net in enumerate(pnr.nets):
        sinks = []
        for sink in net.sinks:
            hops = []
            prev = (net.pe, 0, 0)
            steps = net.steps[sink]
            # the steps of one sink start at some node of the tree; rebuild from the tree
            for state, res in steps:
                if res is not None:
                    if res[0] == "L":
                        hops.append(["link", _pe(res[1]), _pe(res[2]), state[1]])
                    else:
                        hops.append(["reg", _pe(res[1]), _pe(res[1]), state[1] - 1])
                prev = state
            del prev
            sinks.append(
                dict(
                    node=sink[0],
                    operand=sink[1],
                    pe=_pe(net.sink_pe[sink]),
                    arrive=net.arrive[sink],
                    hops=hops,
                )
            )
        nets.append(
            dict(
                id=i,
                src=net.src,
                port=net.port,
                pe=_pe(net.pe),
                ready_slot=net.ready % ii,
                sinks=sinks,
            )
        )
        for res, offset in sorted(net.usage, key=lambda u: (u[1], str(u[0]))):
            if res[0] == "L":
                links.append(
                    dict(link=[_pe(res[1]), _pe(res[2])], slot=res[3], net=i, offset=offset)
                )
            else:
                registers.append(dict(pe=_pe(res[1]), slot=res[2], net=i, offset=offset))
    outputs = []
    for node in g.nodes.values():
        if node.kind == "output":
            port = node.inputs[0]
            src = g.nodes[port.node]
            entry = dict(index=node.attrs["index"])
            if src.is_immediate:
                entry["imm"] = int(src.attrs["value"])
            elif src.kind == "arg":
                entry["arg"] = src.fn
            else:
                entry.update(src=port.node, port=port.index)
            outputs.append(entry)
    ports: dict[tuple[str, int], list[int]] = defaultdict(list)
    for nid in pnr.place:
        node = g.nodes[nid]
        if node.kind in ("load", "store"):
            ports[(node.attrs["memref"], pnr.start[nid] % ii)].append(nid)
    memory = dict(
        ports_per_array=pnr.arch.memory.ports_per_array,
        arbitration="static slots" if pnr.mode == "temporal" else "round-robin",
        port_slots=[dict(memref=m, slot=s, nodes=sorted(v)) for (m, s), v in sorted(ports.items())],
    )
    return dict(
        format=FORMAT,
        kernel=g.name,
        mode=pnr.mode,
        ii=ii,
        arch=pnr.arch.describe(),
        memrefs={k: list(v) for k, v in g.memrefs.items()},
        args=list(g.args),
        results=g.results,
        instructions=instructions,
        nets=nets,
        links=links,
        registers=registers,
        outputs=outputs,
        memory=memory,
        metrics=_jsonable(pnr.metrics()),
    )


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def link_loads(config: dict) -> dict[tuple[str, str, int], int]:
    """Words per (from PE, to PE, slot), recounted from the nets' hops (not from ``links``)."""
    ii = config["ii"]
    seen: set[tuple] = set()
    loads: dict[tuple[str, str, int], int] = defaultdict(int)
    for net in config["nets"]:
        for sink in net["sinks"]:
            for kind, a, b, offset in sink["hops"]:
                if kind != "link":
                    continue
                key = (net["id"], a, b, offset)  # a net's sinks share one word per offset
                if key in seen:
                    continue
                seen.add(key)
                loads[(a, b, (net["ready_slot"] + offset) % ii)] += 1
    return dict(loads)


def register_loads(config: dict) -> dict[tuple[str, int], int]:
    ii = config["ii"]
    seen: set[tuple] = set()
    loads: dict[tuple[str, int], int] = defaultdict(int)
    for net in config["nets"]:
        for sink in net["sinks"]:
            for kind, a, _b, offset in sink["hops"]:
                if kind == "reg" and (net["id"], a, offset) not in seen:
                    seen.add((net["id"], a, offset))
                    loads[(a, (net["ready_slot"] + offset) % ii)] += 1
    return dict(loads)


def check_config(config: dict) -> dict[str, int]:
    """Reject a configuration that overloads a link slot, a register file, a PE or a port."""
    arch = config["arch"]
    cap, regs = arch["link_capacity"], arch["registers"]
    links = {(a, b) for a, b in (_link(x) for x in Architecture.model_validate(arch).links)}
    for (a, b, slot), words in sorted(link_loads(config).items()):
        if (a, b) not in links:
            raise BadInputError(
                f"net uses link {a}->{b}, which '{arch['name']}' does not have", field="nets"
            )
        if words > cap:
            raise BadInputError(
                f"link {a}->{b} carries {words} words in slot {slot}; its "
                f"capacity is {cap} per cycle",
                field="nets",
            )
    for (pe, slot), held in sorted(register_loads(config).items()):
        if held > regs:
            raise BadInputError(
                f"PE {pe} holds {held} waiting values in slot {slot}; it has "
                f"{regs} routing registers",
                field="nets",
            )
    slots: dict[tuple[str, int], int] = defaultdict(int)
    for ins in config["instructions"]:
        slots[(ins["pe"], ins["context"] if config["mode"] == "temporal" else 0)] += 1
    for (pe, slot), n in slots.items():
        if n > 1:
            raise BadInputError(
                f"PE {pe} holds {n} instructions in context {slot}", field="instructions"
            )
    if config["mode"] == "temporal":
        budget = config["memory"]["ports_per_array"]
        for entry in config["memory"]["port_slots"]:
            if len(entry["nodes"]) > budget:
                raise BadInputError(
                    f"array {entry['memref']} gets {len(entry['nodes'])} "
                    f"accesses in slot {entry['slot']}; it has {budget} ports",
                    field="memory",
                )
    loads = link_loads(config)
    return dict(max_link_load=max(loads.values(), default=0), link_slots=len(loads))


def _link(pair) -> tuple[str, str]:
    return _pe(pair[0]), _pe(pair[1])


def write_config(config: dict, path: str | Path) -> Path:
    """Atomically write the configuration as JSON."""
    if Path(path).is_dir():
        raise BadInputError(
            "is a directory; give a file name (e.g. k.cgra.json)", path=path, field="--config-out"
        )
    return write_text(path, json.dumps(config, indent=1) + "\n")


def read_config(path: str | Path) -> dict:
    data = read_json(path, what="CGRA configuration")
    if data.get("format") != FORMAT:
        raise BadInputError(
            f"not a {FORMAT} file (format={data.get('format')!r})", path=path, field="format"
        )
    for key in ("ii", "mode", "arch", "instructions", "nets", "outputs", "memory"):
        if key not in data:
            raise BadInputError("missing key", path=path, field=key)
    return data
