"""Verilog generator: one top module per kernel, built from the RedPanda component library.

RedPanda (../shared/papers/08-redpanda.md) lowers its IR to an elastic circuit. Each graph node
is one instance of a handshake component from ``rtl/`` (written for schedlab); each channel is
a (data, valid, ready) triple, optionally through an ``rp_eb`` elastic buffer chosen by
:mod:`.buffers`; operations grouped by :mod:`.sharing` are served by one ``rp_share`` unit.
Memories stay outside the module (as block RAM would): each array has the ports its budget
allows (:mod:`.memory`; a dual-port BRAM by default), each port an ``rp_memport`` controller
arbitrating the loads/stores assigned to it; the testbench implements the ports' timing
(synchronous read, one-cycle write). The module raises
``active`` in every cycle in which some token moves, which is how the testbench counts cycles.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from schedlab.redpanda.backends.dhls.buffers import Buffering
from schedlab.redpanda.backends.dhls.circuit import LATENCY, Circuit
from schedlab.redpanda.backends.dhls.memory import MemoryConfig, PortMap, assign_ports
from schedlab.redpanda.graph import Node, Port

_SIGNED_CMP = {"slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "eq": "==", "ne": "!="}
_UNSIGNED_CMP = {"ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
_BINARY = {"add": "+", "sub": "-", "and": "&", "or": "|", "xor": "^"}
_MACRO_OP = {"mul": 0, "div": 1, "rem": 2}


def ident(name: str) -> str:
    """A Verilog identifier from an MLIR name."""
    return re.sub(r"\W", "_", name)


def literal(value: int, width: int) -> str:
    return f"{width}'d{value & ((1 << width) - 1)}"


def fit(expr: str, have: int, want: int) -> str:
    """Sign-extend or truncate a ``have``-bit expression to ``want`` bits."""
    if have == want:
        return expr
    if have > want:
        return f"{expr}[{want - 1}:0]"
    return f"{{{{{want - have}{{{expr}[{have - 1}]}}}}, {expr}}}"


@dataclass
class Interface:
    """What the testbench must drive and read: arguments, results, memory ports."""

    top: str
    args: list[tuple[str, int]] = field(default_factory=list)             # (name, width)
    results: list[tuple[int, int]] = field(default_factory=list)          # (index, width)
    ports: list[tuple[str, int, int, int]] = field(default_factory=list)  # memref, p, AW, W
    memories: dict[str, tuple[int, int]] = field(default_factory=dict)    # name -> size, W


class Generator:
    """Emit the top module of one circuit."""

    def __init__(self, circuit: Circuit, buffering: Buffering, groups: list[list[int]],
                 portmap: PortMap) -> None:
        self.c, self.buf, self.groups, self.portmap = circuit, buffering, groups, portmap
        self.requests: dict[int, tuple[str, str, str, str]] = {}  # access -> req/gnt/go/addr
        self.g = circuit.graph
        self.lines: list[str] = []
        self.ports: list[str] = ["input clk", "input rst", "output active"]
        self.fires: list[str] = []
        self.shared = {n: k for k, grp in enumerate(groups) for n in grp}
        self.iface = Interface(top=f"rp_{ident(self.g.name)}")
        self.consumed = {p for n in self.g.nodes.values() for p in n.inputs}

    # ---- wires ------------------------------------------------------------------------
    def w(self, port: Port) -> int:
        return self.c.width[port]

    def p(self, port: Port) -> str:
        return f"p{port.node}_{port.index}"

    def ch(self, nid: int, i: int) -> str:
        return f"c{nid}_{i}"

    def val(self, node: Node, i: int, want: int) -> str:
        """Operand i's data, fitted to ``want`` bits."""
        return fit(f"{self.ch(node.id, i)}_d", self.w(node.inputs[i]), want)

    def dynamic(self, node: Node) -> list[int]:
        return [i for i, p in enumerate(node.inputs) if not self.g.nodes[p.node].is_immediate]

    # ---- emission ---------------------------------------------------------------------
    def run(self) -> tuple[str, Interface]:
        for node in sorted(self.g.nodes.values(), key=lambda n: n.id):
            if node.is_immediate:
                continue
            for k in range(node.n_out):
                port = Port(node.id, k)
                if node.kind == "output":
                    break
                width = self.w(port)
                self.lines.append(f"  wire [{width - 1}:0] {self.p(port)}_d; wire "
                                  f"{self.p(port)}_v, {self.p(port)}_r;")
                if port not in self.consumed:
                    self.lines.append(f"  assign {self.p(port)}_r = 1'b1;")
            for i, port in enumerate(node.inputs):
                self._channel(node, i, port)
        for node in sorted(self.g.nodes.values(), key=lambda n: n.id):
            if not node.is_immediate and node.id not in self.shared:
                getattr(self, f"_emit_{node.kind}")(node)
        for k, group in enumerate(self.groups):
            self._emit_shared(k, group)
        for memref, lanes in sorted(self.portmap.ports.items()):
            for p, lane in enumerate(lanes):
                self._emit_port(memref, p, lane)
        fires = ", ".join(self.fires) or "1'b0"
        self.lines.append(f"  assign active = |{{{fires}}};")
        header = f"module {self.iface.top} (\n    " + ",\n    ".join(self.ports) + ");"
        text = "\n".join([f"// generated by schedlab.redpanda (DHLS back end) for kernel "
                          f"'{self.g.name}'", header, *self.lines, "endmodule", ""])
        return text, self.iface

    def _channel(self, node: Node, i: int, port: Port) -> None:
        width, c = self.w(port), self.ch(node.id, i)
        src = self.g.nodes[port.node]
        self.lines.append(f"  wire [{width - 1}:0] {c}_d; wire {c}_v, {c}_r;")
        if src.is_immediate:
            self.lines.append(f"  assign {c}_d = {literal(src.attrs['value'], width)}; "
                              f"assign {c}_v = 1'b1; assign {c}_r = 1'b1;")
            return
        p = self.p(port)
        depth = self.buf.depth.get((node.id, i))
        slots = self.buf.transparent.get((node.id, i))
        self.fires.append(f"{c}_v & {c}_r")
        if slots:
            self.fires.append(f"{p}_v & {p}_r")
            self.lines.append(f"  rp_tfifo #(.W({width}), .DEPTH({slots})) tf{node.id}_{i} "
                              f"(.clk(clk), .rst(rst), .in_data({p}_d), .in_valid({p}_v), "
                              f".in_ready({p}_r), .out_data({c}_d), .out_valid({c}_v), "
                              f".out_ready({c}_r));")
        elif depth:
            self.fires.append(f"{p}_v & {p}_r")
            self.lines.append(f"  rp_eb #(.W({width}), .DEPTH({depth})) eb{node.id}_{i} "
                              f"(.clk(clk), .rst(rst), .in_data({p}_d), .in_valid({p}_v), "
                              f".in_ready({p}_r), .out_data({c}_d), .out_valid({c}_v), "
                              f".out_ready({c}_r));")
        else:
            self.lines.append(f"  assign {c}_d = {p}_d; assign {c}_v = {p}_v; "
                              f"assign {p}_r = {c}_r;")

    def _join(self, node: Node, operands: list[int] | None = None) -> tuple[str, str]:
        """Join the node's dynamic operands; returns the (valid, ready) wire names."""
        dyn = self.dynamic(node) if operands is None else operands
        jv, jr = f"n{node.id}_jv", f"n{node.id}_jr"
        self.lines.append(f"  wire {jv}, {jr};")
        if not dyn:
            raise ValueError(f"node {node.id} ({node.kind}) has no dynamic operand")
        if len(dyn) == 1:
            c = self.ch(node.id, dyn[0])
            self.lines.append(f"  assign {jv} = {c}_v; assign {c}_r = {jr};")
        else:
            valids = ", ".join(f"{self.ch(node.id, i)}_v" for i in reversed(dyn))
            readys = ", ".join(f"{self.ch(node.id, i)}_r" for i in reversed(dyn))
            self.lines.append(f"  rp_join #(.N({len(dyn)})) j{node.id} (.in_valid({{{valids}}}),"
                              f" .in_ready({{{readys}}}), .out_valid({jv}), .out_ready({jr}));")
        return jv, jr

    def _unit(self, node: Node, res: str, lat: int, pass_expr: str = "1'b1") -> None:
        jv, jr = self._join(node)
        out, width = self.p(Port(node.id)), self.w(Port(node.id))
        self.lines.append(f"  rp_unit #(.W({width}), .LAT({lat})) u{node.id} (.clk(clk), "
                          f".rst(rst), .in_valid({jv}), .in_ready({jr}), .pass({pass_expr}), "
                          f".res({res}), .out_data({out}_d), .out_valid({out}_v), "
                          f".out_ready({out}_r));")

    # ---- per kind ---------------------------------------------------------------------
    def _emit_source(self, node: Node) -> None:
        out = self.p(Port(node.id))
        self.lines.append(f"  rp_source #(.W(1)) s{node.id} (.clk(clk), .rst(rst), "
                          f".value(1'b0), .out_data({out}_d), .out_valid({out}_v), "
                          f".out_ready({out}_r));")

    def _emit_arg(self, node: Node) -> None:
        width, out, name = self.w(Port(node.id)), self.p(Port(node.id)), ident(node.fn)
        self.ports.append(f"input [{width - 1}:0] arg_{name}")
        self.iface.args.append((node.fn, width))
        self.lines.append(f"  rp_source #(.W({width})) s{node.id} (.clk(clk), .rst(rst), "
                          f".value(arg_{name}), .out_data({out}_d), .out_valid({out}_v), "
                          f".out_ready({out}_r));")

    def _emit_const(self, node: Node) -> None:
        self._unit(node, literal(node.attrs["value"], self.w(Port(node.id))), 0)

    def _emit_join(self, node: Node) -> None:
        self._unit(node, "1'b0", 0)

    def _emit_select(self, node: Node) -> None:
        width = node.attrs["out_bits"]
        cond = f"({self.ch(node.id, 0)}_d != 0)"
        self._unit(node, f"({cond} ? {self.val(node, 1, width)} : {self.val(node, 2, width)})",
                   0)

    def _emit_alu(self, node: Node) -> None:
        fn, bits, out_bits = node.fn, node.attrs["bits"], node.attrs["out_bits"]
        guard = node.attrs.get("guard")
        pass_expr = "1'b1"
        if guard is not None:
            last = node.n_values - 1
            pass_expr = f"(({self.ch(node.id, last)}_d != 0) == 1'b{int(bool(guard))})"
        a = self.val(node, 0, bits)
        if fn == "cast":
            self.lines.append(f"  wire [{bits - 1}:0] n{node.id}_a = {a};")
            self._unit(node, fit(f"n{node.id}_a", bits, out_bits), 0, pass_expr)
            return
        b = self.val(node, 1, bits)
        res = f"n{node.id}_res"
        decl = [f"  wire [{bits - 1}:0] n{node.id}_a = {a};",
                f"  wire [{bits - 1}:0] n{node.id}_b = {b};",
                f"  wire [{out_bits - 1}:0] {res};"]
        sa, sb = f"$signed(n{node.id}_a)", f"$signed(n{node.id}_b)"
        ua, ub = f"n{node.id}_a", f"n{node.id}_b"
        if fn in _MACRO_OP:
            module = "rp_mul" if fn == "mul" else "rp_divmod"
            params = f".W({bits})" + ("" if fn == "mul" else f", .REM({int(fn == 'rem')})")
            decl.append(f"  {module} #({params}) m{node.id} (.a({ua}), .b({ub}), .y({res}));")
        elif fn in _BINARY:
            decl.append(f"  assign {res} = {ua} {_BINARY[fn]} {ub};")
        elif fn in _SIGNED_CMP:
            decl.append(f"  assign {res} = {sa} {_SIGNED_CMP[fn]} {sb};")
        elif fn in _UNSIGNED_CMP:
            decl.append(f"  assign {res} = {ua} {_UNSIGNED_CMP[fn]} {ub};")
        elif fn == "shl":
            decl.append(f"  assign {res} = ({sb} < 0) ? {out_bits}'d0 : ({ua} << {ub});")
        elif fn == "shr":
            # 'sd0 keeps the conditional signed, so >>> stays an arithmetic shift
            decl.append(f"  assign {res} = ({sb} < 0) ? {out_bits}'sd0 : ({sa} >>> {ub});")
        else:
            raise ValueError(f"no Verilog for ALU function '{fn}'")
        self.lines.extend(decl)
        self._unit(node, res, LATENCY.get(fn, 0), pass_expr)

    def _emit_fork(self, node: Node) -> None:
        n, width = node.n_out, self.w(Port(node.id))
        jv, jr = self._join(node)
        outs = [self.p(Port(node.id, k)) for k in reversed(range(n))]
        self.lines.append(
            f"  rp_fork #(.N({n}), .W({width})) f{node.id} (.clk(clk), .rst(rst), "
            f".in_data({self.ch(node.id, 0)}_d), .in_valid({jv}), .in_ready({jr}), "
            f".out_data({{{', '.join(o + '_d' for o in outs)}}}), "
            f".out_valid({{{', '.join(o + '_v' for o in outs)}}}), "
            f".out_ready({{{', '.join(o + '_r' for o in outs)}}}));")

    def _emit_buffer(self, node: Node) -> None:
        width, out, c = self.w(Port(node.id)), self.p(Port(node.id)), self.ch(node.id, 0)
        self.lines.append(f"  rp_eb #(.W({width}), .DEPTH(2)) nb{node.id} (.clk(clk), "
                          f".rst(rst), .in_data({c}_d), .in_valid({c}_v), .in_ready({c}_r), "
                          f".out_data({out}_d), .out_valid({out}_v), .out_ready({out}_r));")

    def _emit_output(self, node: Node) -> None:
        index, width = node.attrs["index"], self.w(node.inputs[0])
        c = self.ch(node.id, 0)
        self.ports += [f"output [{width - 1}:0] res{index}", f"output got{index}"]
        self.iface.results.append((index, width))
        self.lines.append(f"  rp_output #(.W({width})) o{node.id} (.clk(clk), .rst(rst), "
                          f".in_data({c}_d), .in_valid({c}_v), .in_ready({c}_r), "
                          f".value(res{index}), .got(got{index}));")

    # ---- memory ports -----------------------------------------------------------------
    def _address(self, node: Node, first: int) -> tuple[str, int]:
        shape = self.g.memrefs[node.attrs["memref"]]
        size = math.prod(shape)
        aw = max(1, math.ceil(math.log2(max(size, 2))))
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        terms = [f"({self.val(node, first + d, 32)} * 32'd{stride})"
                 for d, stride in enumerate(strides)]
        full = f"n{node.id}_lin"
        total = " + ".join(terms) or "32'd0"
        self.lines.append(f"  wire [31:0] {full} = {total};")
        self.iface.memories[node.attrs["memref"]] = (size, node.attrs["bits"])
        return f"{full}[{aw - 1}:0]", aw

    def _pred(self, node: Node) -> str:
        if not node.attrs.get("predicated"):
            return "1'b1"
        return f"({self.ch(node.id, node.n_values - 1)}_d != 0)"

    def _port_name(self, node: Node) -> str:
        memref, p = self.portmap.of[node.id]
        return f"m_{ident(memref)}_p{p}"

    def _request(self, node: Node, aw: int) -> str:
        """Wires between an access and its port's controller; returns their connections."""
        n = node.id
        self.lines.append(f"  wire n{n}_req, n{n}_gnt, n{n}_go; wire [{aw - 1}:0] n{n}_maddr;")
        self.requests[n] = (f"n{n}_req", f"n{n}_gnt", f"n{n}_go", f"n{n}_maddr")
        return (f".req(n{n}_req), .gnt(n{n}_gnt), .go(n{n}_go), .mem_addr(n{n}_maddr)")

    def _emit_load(self, node: Node) -> None:
        width = node.attrs["bits"]
        addr, aw = self._address(node, 0)
        jv, jr = self._join(node)
        port = self._port_name(node)
        hold = int(self.portmap.shared(node.id))
        value, token = self.p(Port(node.id, 0)), self.p(Port(node.id, 1))
        self.lines.append(f"  wire [{width - 1}:0] n{node.id}_q; wire n{node.id}_qv, "
                          f"n{node.id}_qr;")
        self.lines.append(f"  rp_load #(.AW({aw}), .W({width}), .HOLD({hold})) l{node.id} "
                          f"(.clk(clk), .rst(rst), .in_valid({jv}), .in_ready({jr}), "
                          f".addr({addr}), .pred({self._pred(node)}), "
                          f"{self._request(node, aw)}, .mem_rdata({port}_rdata), "
                          f".out_data(n{node.id}_q), .out_valid(n{node.id}_qv), "
                          f".out_ready(n{node.id}_qr));")
        # value and completion token leave through an eager fork (they go different ways)
        self.lines.append(f"  wire [{2 * width - 1}:0] n{node.id}_fd;")
        self.lines.append(f"  rp_fork #(.N(2), .W({width})) lf{node.id} (.clk(clk), .rst(rst),"
                          f" .in_data(n{node.id}_q), .in_valid(n{node.id}_qv), "
                          f".in_ready(n{node.id}_qr), .out_data(n{node.id}_fd), "
                          f".out_valid({{{token}_v, {value}_v}}), "
                          f".out_ready({{{token}_r, {value}_r}}));")
        self.lines.append(f"  assign {value}_d = n{node.id}_fd[{width - 1}:0]; "
                          f"assign {token}_d = 1'b0;")

    def _emit_store(self, node: Node) -> None:
        width = node.attrs["bits"]
        addr, aw = self._address(node, 1)
        jv, jr = self._join(node)
        out = self.p(Port(node.id))
        self.lines.append(f"  wire [{width - 1}:0] n{node.id}_wdata;")
        self.lines.append(f"  rp_store #(.AW({aw}), .W({width})) st{node.id} (.clk(clk), "
                          f".rst(rst), .in_valid({jv}), .in_ready({jr}), .addr({addr}), "
                          f".data({self.val(node, 0, width)}), .pred({self._pred(node)}), "
                          f"{self._request(node, aw)}, .mem_wdata(n{node.id}_wdata), "
                          f".out_valid({out}_v), .out_ready({out}_r));")
        self.lines.append(f"  assign {out}_d = 1'b0;")

    def _emit_port(self, memref: str, p: int, lane: list[int]) -> None:
        """One block-RAM port of ``memref`` and its controller (``rp_memport``)."""
        size, width = self.iface.memories[memref]
        aw = max(1, math.ceil(math.log2(max(size, 2))))
        name = f"m_{ident(memref)}_p{p}"
        self.ports += [f"output {name}_en", f"output {name}_we",
                       f"output [{aw - 1}:0] {name}_addr", f"output [{width - 1}:0] {name}_wdata",
                       f"input [{width - 1}:0] {name}_rdata"]
        self.iface.ports.append((memref, p, aw, width))
        nodes = [self.g.nodes[n] for n in lane]
        writes = sum(1 << k for k, node in enumerate(nodes) if node.kind == "store")
        zero = f"{width}'d0"
        wdata = [f"n{n.id}_wdata" if n.kind == "store" else zero for n in nodes]

        def cat(items: list[str]) -> str:
            return "{" + ", ".join(reversed(items)) + "}"

        req = [self.requests[n][0] for n in lane]
        gnt = [self.requests[n][1] for n in lane]
        go = [self.requests[n][2] for n in lane]
        addr = [self.requests[n][3] for n in lane]
        self.lines.append(
            f"  rp_memport #(.N({len(lane)}), .AW({aw}), .W({width}), .WR(64'd{writes})) "
            f"mp_{ident(memref)}_{p} (.clk(clk), .rst(rst), .req({cat(req)}), .go({cat(go)}), "
            f".addr({cat(addr)}), .wdata({cat(wdata)}), .gnt({cat(gnt)}), "
            f".mem_en({name}_en), .mem_we({name}_we), .mem_addr({name}_addr), "
            f".mem_wdata({name}_wdata));")

    # ---- control operators ------------------------------------------------------------
    def _hs(self, name: str, nid: int, i: int) -> str:
        c = self.ch(nid, i)
        return f".{name}_data({c}_d), .{name}_valid({c}_v), .{name}_ready({c}_r)"

    def _dec(self, nid: int, i: int) -> str:
        c = self.ch(nid, i)
        return f".dec_data({c}_d[0]), .dec_valid({c}_v), .dec_ready({c}_r)"

    def _out(self, node: Node) -> str:
        o = self.p(Port(node.id))
        return f".out_data({o}_d), .out_valid({o}_v), .out_ready({o}_r)"

    def _emit_steer(self, node: Node) -> None:
        width = self.w(Port(node.id))
        self.lines.append(f"  rp_steer #(.W({width}), .POL({int(node.fn == 'true')})) "
                          f"sr{node.id} ({self._dec(node.id, 0)}, {self._hs('val', node.id, 1)},"
                          f" {self._out(node)});")

    def _emit_merge(self, node: Node) -> None:
        width = self.w(Port(node.id))
        t, f = self.val(node, 1, width), self.val(node, 2, width)
        self.lines.append(f"  rp_merge #(.W({width})) mg{node.id} ({self._dec(node.id, 0)}, "
                          f".t_data({t}), .t_valid({self.ch(node.id, 1)}_v), "
                          f".t_ready({self.ch(node.id, 1)}_r), .f_data({f}), "
                          f".f_valid({self.ch(node.id, 2)}_v), .f_ready({self.ch(node.id, 2)}_r),"
                          f" {self._out(node)});")

    def _emit_carry(self, node: Node) -> None:
        width = self.w(Port(node.id))
        nid = node.id
        nxt = self.val(node, 2, width)
        if len(node.inputs) > 3:  # ordering tokens travel with 'next'
            jv, jr = self._join(node, [i for i in self.dynamic(node) if i >= 2])
        else:
            jv, jr = f"{self.ch(nid, 2)}_v", f"{self.ch(nid, 2)}_r"
        init = self.val(node, 0, width)
        self.lines.append(f"  rp_carry #(.W({width})) cr{nid} (.clk(clk), .rst(rst), "
                          f".init_data({init}), .init_valid({self.ch(nid, 0)}_v), "
                          f".init_ready({self.ch(nid, 0)}_r), {self._dec(nid, 1)}, "
                          f".next_data({nxt}), .next_valid({jv}), .next_ready({jr}), "
                          f"{self._out(node)});")

    def _emit_invariant(self, node: Node) -> None:
        width = self.w(Port(node.id))
        self.lines.append(f"  rp_invariant #(.W({width}), .ALL({int(node.fn == 'all')})) "
                          f"iv{node.id} (.clk(clk), .rst(rst), {self._dec(node.id, 0)}, "
                          f"{self._hs('val', node.id, 1)}, {self._out(node)});")

    # ---- shared units -----------------------------------------------------------------
    def _emit_shared(self, k: int, group: list[int]) -> None:
        nodes = [self.g.nodes[n] for n in group]
        fn, bits = nodes[0].fn, nodes[0].attrs["bits"]
        valids, readys, a_ops, b_ops = [], [], [], []
        for node in nodes:
            jv, jr = self._join(node)
            valids.append(jv)
            readys.append(jr)
            a_ops.append(self.val(node, 0, bits))
            b_ops.append(self.val(node, 1, bits))
        outs = [self.p(Port(n)) for n in group]

        def cat(items: list[str]) -> str:
            return "{" + ", ".join(reversed(items)) + "}"

        self.lines.append(
            f"  rp_share #(.N({len(group)}), .W({bits}), .LAT({LATENCY[fn]}), "
            f".OP({_MACRO_OP[fn]})) sh{k} (.clk(clk), .rst(rst), .req_valid({cat(valids)}), "
            f".req_ready({cat(readys)}), .a({cat(a_ops)}), .b({cat(b_ops)}), "
            f".out_data({cat([o + '_d' for o in outs])}), "
            f".out_valid({cat([o + '_v' for o in outs])}), "
            f".out_ready({cat([o + '_r' for o in outs])}));")


def generate(circuit: Circuit, buffering: Buffering, groups: list[list[int]],
             portmap: PortMap | None = None) -> tuple[str, Interface]:
    """The top module's Verilog text and its interface (default ports: dual-port BRAMs)."""
    if portmap is None:
        portmap = assign_ports(circuit, MemoryConfig())
    return Generator(circuit, buffering, groups, portmap).run()
