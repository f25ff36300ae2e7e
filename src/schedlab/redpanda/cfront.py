"""C front end: the C subset of dataflow-CGRA and Dynamatic benchmark suites -> scf/memref MLIR.

RedPanda (../shared/papers/08-redpanda.md) compiles kernels written in C. We parse C with
**pycparser** and emit the structured MLIR (``func``/``scf``/``arith``/``memref``) that
:mod:`schedlab.redpanda.frontend` already verifies and lowers, so C and MLIR kernels share one
middle end, one reference interpreter and both back ends.

Supported: one function over array parameters with constant dimensions (``int A[N][N]``,
``float x[N]``) and ``int``/``float`` scalars, returning ``void``, ``int`` or ``float``; local
``int``/``float`` scalars; ``float`` arithmetic ``+ - * /``, comparisons and conversions
(C's usual arithmetic conversions: ``int op float`` is computed in float, assignment converts;
casts ``(int)``/``(float)``), computed as IEEE binary32 (``arith.addf`` ...; floating constants
need the ``f`` suffix, ``0.5f``: an unsuffixed ``0.5`` is a ``double`` in C and would make gcc
compute that expression in double); ``for`` (canonical
``for (int i = a; i < b; i += c)`` loops become ``scf.for``, every other loop ``scf.while``),
``while``, ``do``/``while``, ``if``/``else``, ``?:``, short-circuit ``&&``/``||`` (an
``scf.if`` when the right side reads memory or divides), indirect subscripts, ``+ - * / % & |
^ << >> ~ !``, comparisons, ``=``/``op=``/``++``/``--`` on scalars and array elements,
``break``/``continue`` (carried flags; later statements guarded); calls of the file's
other functions (inlined);
``#define`` (object- and function-like, as the C preprocessor expands them),
``#include``/``#pragma`` ignored. Everything else
(``double``, pointers, recursion, early ``return``, ``switch``, local arrays ...) is a
:class:`BadInputError` naming the file, line and construct. Scalars become SSA values
threaded through ``iter_args``/``scf.if`` results (every loop- or branch-assigned variable
that lives outside the construct).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pycparser import c_ast, c_parser

from schedlab.core.errors import BadInputError

#: C spellings accepted as the 32-bit signed integer type
INT_TYPES = ({"int"}, {"signed", "int"}, {"signed"}, {"int32_t"}, {"_Bool"}, {"bool"})
_PRELUDE = "typedef int int32_t; typedef int bool; "
_MAX_EXPANSION = 20_000  # characters of one line after #define substitution
_ARITH = {
    "+": "addi",
    "-": "subi",
    "*": "muli",
    "/": "divsi",
    "%": "remsi",
    "&": "andi",
    "|": "ori",
    "^": "xori",
    "<<": "shli",
    ">>": "shrsi",
}
_CMP = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
#: C's float comparisons: ordered, except != (true when either side is NaN)
_FCMP = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}
_FARITH = {"+": "addf", "-": "subf", "*": "mulf", "/": "divf"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_INDEX_OPS = {"+", "-", "*"}


class CFrontError(BadInputError):
    """A C construct outside the supported subset, or malformed C."""


@dataclass
class Val:
    name: str  # SSA name, e.g. "%12" or "%A"
    ty: str  # "i32", "i1", "index" or "f32"


@dataclass
class Var:
    val: Val
    readonly: bool = False  # a canonical loop's induction variable
    ctype: str = "i32"  # the declared type: "i32" or "f32"


@dataclass
class Translation:
    """The MLIR text of a C kernel and, per MLIR line (1-based), the C line it came from."""

    name: str
    mlir: str
    line_map: list[int] = field(default_factory=list)


def _preprocess(text: str, path: str, defines: Mapping[str, int | str] | None) -> str:
    """Strip comments, record ``#define``s, substitute them; line numbers are preserved."""

    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    text = re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)
    if "/*" in text:
        raise CFrontError(
            "unterminated /* comment",
            path=path,
            line=text[: text.index("/*")].count("\n") + 1,
            field="comment",
        )
    macros: dict[str, str] = {}
    functions: dict[str, tuple[list[str], str]] = {}
    lines = text.split("\n")
    for index in range(len(lines)):  # join backslash-continued lines (blank lines keep numbers)
        while lines[index].rstrip().endswith("\\") and index + 1 < len(lines):
            j = index + 1
            while j < len(lines) and lines[j] == "" and j > index + 1:
                j += 1
            lines[index] = lines[index].rstrip()[:-1] + " " + lines[j]
            lines[j] = ""
            if j == index + 1:
                pass
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped.startswith("#"):
            continue
        directive = re.match(r"#\s*(\w*)\s*(.*)", stripped)
        word, rest = directive.group(1), directive.group(2).strip()
        if word == "define":
            m = re.match(r"([A-Za-z_]\w*)(\(([^()]*)\))?\s*(.*)", rest)
            if m is None:
                raise CFrontError("malformed #define", path=path, line=number, field="#define")
            if m.group(2):
                params = [p.strip() for p in m.group(3).split(",")] if m.group(3).strip() else []
                if not all(p.isidentifier() for p in params):
                    raise CFrontError(
                        f"macro '{m.group(1)}': parameters must be names (no ...)",
                        path=path,
                        line=number,
                        field="#define",
                    )
                functions[m.group(1)] = (params, m.group(4))
            else:
                macros[m.group(1)] = m.group(4)
        elif word not in ("include", "pragma"):
            raise CFrontError(
                f"preprocessor directive #{word} is not supported (only "
                "#define, #include, #pragma)",
                path=path,
                line=number,
                field=f"#{word}",
            )
        lines[number - 1] = ""
    for key, value in (defines or {}).items():
        macros[str(key)] = str(value)
        functions.pop(str(key), None)
    if not macros and not functions:
        return "\n".join(lines)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\b") if macros else None
    out = []
    for number, line in enumerate(lines, start=1):
        for _ in range(16):
            new = pattern.sub(lambda m: f" {macros[m.group(1)]} ", line) if pattern else line
            new = _expand_calls(new, functions, path, number)
            if new == line:
                break
            line = new
            if len(line) > _MAX_EXPANSION:
                raise CFrontError(
                    f"#define expansion longer than {_MAX_EXPANSION:,} characters",
                    path=path,
                    line=number,
                    field="#define",
                )
        else:
            raise CFrontError("recursive #define", path=path, line=number, field="#define")
        out.append(line)
    return "\n".join(out)


def _expand_calls(
    line: str, functions: dict[str, tuple[list[str], str]], path: str, number: int
) -> str:
    """One pass of function-like macro calls ``NAME(args)`` on one line."""
    if not functions:
        return line
    call = re.compile(r"\b(" + "|".join(map(re.escape, functions)) + r")\s*\(")
    out, pos = [], 0
    while (m := call.search(line, pos)) is not None:
        depth, i, args, start = 1, m.end(), [], m.end()
        while i < len(line) and depth:
            ch = line[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 1:
                args.append(line[start:i])
                start = i + 1
            i += 1
        if depth:
            raise CFrontError(
                f"call of macro '{m.group(1)}' must fit on one line",
                path=path,
                line=number,
                field="#define",
            )
        args.append(line[start : i - 1])
        params, body = functions[m.group(1)]
        if params == [] and args == [""]:
            args = []
        if len(args) != len(params):
            raise CFrontError(
                f"macro '{m.group(1)}' takes {len(params)} argument(s), got {len(args)}",
                path=path,
                line=number,
                field="#define",
            )
        values = dict(zip(params, (a.strip() for a in args), strict=True))
        if values:
            body = re.sub(
                r"\b(" + "|".join(map(re.escape, values)) + r")\b",
                lambda p, v=values: f" {v[p.group(1)]} ",
                body,
            )
        out.append(line[pos : m.start()] + f" {body} ")
        pos = i
    out.append(line[pos:])
    return "".join(out)


def parse_c(text: str, path: str = "<string>") -> c_ast.FileAST:
    """pycparser on preprocessed text; errors become one-line :class:`CFrontError`s."""
    parser = c_parser.CParser()
    try:
        return parser.parse(_PRELUDE + text, path)
    except c_parser.ParseError as exc:
        message = str(exc)
        m = re.match(r".*?:(\d+):(\d+): (.*)", message)
        if m:
            line, detail = int(m.group(1)), f"column {m.group(2)}: {m.group(3)}"
        else:
            tok = None
            try:
                tok = parser._peek()  # noqa: SLF001 - where the parser stopped
            except Exception:  # noqa: BLE001
                tok = None
            line = tok.lineno if tok is not None else text.count("\n") + 1
            detail = message.split(": ", 1)[-1]
        raise CFrontError(f"C syntax error: {detail}", path=path, line=line, field="c") from None
    except RecursionError:
        raise CFrontError("C input nests too deeply", path=path, field="c") from None
    except Exception as exc:  # noqa: BLE001 - any pycparser crash on bad text is a user error
        raise CFrontError(
            f"cannot parse C: {type(exc).__name__}: {exc}", path=path, field="c"
        ) from None


def _line(node: c_ast.Node | None) -> int | None:
    coord = getattr(node, "coord", None)
    return getattr(coord, "line", None) if coord is not None else None


def _walk(node: c_ast.Node):
    yield node
    for _, child in node.children():
        yield from _walk(child)


def _lvalue_name(node: c_ast.Node) -> str | None:
    return node.name if isinstance(node, c_ast.ID) else None


def _array_base(node: c_ast.Node) -> str | None:
    while isinstance(node, c_ast.ArrayRef):
        node = node.name
    return node.name if isinstance(node, c_ast.ID) else None


def assigned_names(node: c_ast.Node | None) -> set[str]:
    """Scalar names written anywhere inside ``node``."""
    out: set[str] = set()
    if node is None:
        return out
    for n in _walk(node):
        if isinstance(n, c_ast.Assignment) and _lvalue_name(n.lvalue):
            out.add(n.lvalue.name)
        elif (
            isinstance(n, c_ast.UnaryOp)
            and n.op in ("++", "p++", "--", "p--")
            and _lvalue_name(n.expr)
        ):
            out.add(n.expr.name)
    return out


def stored_arrays(node: c_ast.Node | None) -> set[str]:
    out: set[str] = set()
    if node is None:
        return out
    for n in _walk(node):
        target = None
        if isinstance(n, c_ast.Assignment):
            target = n.lvalue
        elif isinstance(n, c_ast.UnaryOp) and n.op in ("++", "p++", "--", "p--"):
            target = n.expr
        if isinstance(target, c_ast.ArrayRef):
            out.add(_array_base(target))
    return out


def _reads_memory(node: c_ast.Node) -> bool:
    return any(isinstance(n, c_ast.ArrayRef) for n in _walk(node))


def _pure(node: c_ast.Node) -> bool:
    """No memory reads, no division, no casts (a float-to-int cast traps on NaN), no side
    effects: safe to evaluate eagerly."""
    for n in _walk(node):
        if isinstance(n, c_ast.ArrayRef | c_ast.FuncCall | c_ast.Assignment | c_ast.Cast):
            return False
        if isinstance(n, c_ast.BinaryOp) and n.op in ("/", "%"):
            return False
        if isinstance(n, c_ast.UnaryOp) and n.op in ("++", "p++", "--", "p--"):
            return False
    return True


class _Translator:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[tuple[int, str, int]] = []  # (indent, text, C line)
        self.indent = 1
        self.counter = 0
        self.scopes: list[dict[str, Var]] = [{}]
        self.arrays: dict[str, tuple[int, ...]] = {}  # visible array names -> dims
        self.alias: dict[str, str] = {}  # visible name -> kernel memref
        self.memrefs: dict[str, tuple[int, ...]] = {}  # kernel memrefs -> dims
        self.elem: dict[str, str] = {}  # kernel memrefs -> element type ("i32" or "f32")
        self.functions: dict[str, c_ast.FuncDef] = {}
        self.call_stack: list[str] = []
        self.cline = 0

    # ---- helpers --------------------------------------------------------------------------
    def error(self, message: str, node: c_ast.Node | None = None, field: str = "c"):
        line = _line(node) or self.cline or None
        raise CFrontError(message, path=self.path, line=line, field=field)

    def emit(self, text: str) -> None:
        self.lines.append((self.indent, text, self.cline))

    def fresh(self) -> str:
        self.counter += 1
        return f"%{self.counter}"

    def op(self, text: str, ty: str) -> Val:
        name = self.fresh()
        self.emit(f"{name} = {text}")
        return Val(name, ty)

    def const(self, value: int | float, ty: str = "i32") -> Val:
        if ty == "i1":
            return self.op(f"arith.constant {'true' if value else 'false'}", "i1")
        if ty == "f32":  # repr of the f32 value as a double: exact, parses back to it
            return self.op(f"arith.constant {float(np.float32(value))!r} : f32", "f32")
        return self.op(f"arith.constant {value} : {ty}", ty)

    def lookup(self, name: str, node: c_ast.Node) -> Var:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.arrays:
            self.error(f"array '{name}' used as a scalar (subscript it)", node, name)
        self.error(f"undeclared identifier '{name}'", node, name)
        raise AssertionError  # unreachable

    def visible(self, name: str) -> bool:
        return any(name in s for s in self.scopes)

    def bind(self, name: str, val: Val) -> None:
        for scope in reversed(self.scopes):
            if name in scope:
                scope[name].val = self.convert(val, scope[name].ctype)
                return
        raise AssertionError(name)

    def ctype(self, name: str) -> str:
        return self.lookup(name, None).ctype

    # ---- conversions ------------------------------------------------------------------------
    def to_i32(self, v: Val) -> Val:
        if v.ty == "i32":
            return v
        if v.ty == "f32":  # C truncates toward zero
            return self.op(f"arith.fptosi {v.name} : f32 to i32", "i32")
        if v.ty == "index":
            return self.op(f"arith.index_cast {v.name} : index to i32", "i32")
        one, zero = self.const(1), self.const(0)
        return self.op(f"arith.select {v.name}, {one.name}, {zero.name} : i32", "i32")

    def to_f32(self, v: Val) -> Val:
        if v.ty == "f32":
            return v
        v = self.to_i32(v)
        return self.op(f"arith.sitofp {v.name} : i32 to f32", "f32")

    def to_index(self, v: Val) -> Val:
        if v.ty == "index":
            return v
        if v.ty == "f32":
            self.error("array subscripts and loop bounds must be integers, not float")
        v = self.to_i32(v)
        return self.op(f"arith.index_cast {v.name} : i32 to index", "index")

    def to_bool(self, v: Val) -> Val:
        if v.ty == "i1":
            return v
        zero = self.const(0, v.ty)
        if v.ty == "f32":
            return self.op(f"arith.cmpf une, {v.name}, {zero.name} : f32", "i1")
        return self.op(f"arith.cmpi ne, {v.name}, {zero.name} : {v.ty}", "i1")

    def convert(self, v: Val, ty: str) -> Val:
        return {"i32": self.to_i32, "index": self.to_index, "i1": self.to_bool, "f32": self.to_f32}[
            ty
        ](v)

    def value_of(self, v: Val) -> Val:
        """C's integer promotion: bool/index values become int; float stays float."""
        return v if v.ty == "f32" else self.to_i32(v)

    # ---- types --------------------------------------------------------------------------
    def check_int_type(self, type_node: c_ast.Node, what: str, allow_float: bool = True) -> str:
        """The MLIR type of a C scalar type ("i32" or "f32"), or a line-numbered error."""
        node = type_node
        if isinstance(node, c_ast.PtrDecl):
            self.error(
                f"{what}: pointers are not supported (declare arrays with constant "
                "dimensions, e.g. int a[N])",
                node,
                "type",
            )
        if not isinstance(node, c_ast.TypeDecl) or not isinstance(node.type, c_ast.IdentifierType):
            self.error(f"{what}: unsupported type", node, "type")
        names = set(node.type.names)
        if names == {"float"} and allow_float:
            return "f32"
        if names & {"float", "double"}:
            why = (
                "RedPanda's floating point is IEEE binary32: declare it float"
                if allow_float
                else "it must be an integer here"
            )
            self.error(
                f"{what}: type '{' '.join(node.type.names)}' is not supported ({why})",
                node,
                "type",
            )
        if names not in INT_TYPES:
            self.error(
                f"{what}: type '{' '.join(node.type.names)}' is not supported (only "
                "32-bit signed int and float)",
                node,
                "type",
            )
        return "i32"

    def const_eval(self, node: c_ast.Node) -> int:
        if isinstance(node, c_ast.Constant) and node.type in ("int", "long", "unsigned int"):
            return self.int_literal(node)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
            v = self.const_eval(node.expr)
            return -v if node.op == "-" else v
        if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-", "*", "/", "%", "<<"):
            a, b = self.const_eval(node.left), self.const_eval(node.right)
            if node.op in ("/", "%") and b == 0:
                self.error("division by zero in a constant expression", node, "dimension")
            return {
                "+": a + b,
                "-": a - b,
                "*": a * b,
                "/": int(a / b) if b else 0,
                "%": a - int(a / b) * b if b else 0,
                "<<": a << b if b >= 0 else 0,
            }[node.op]
        self.error(
            "array dimension must be an integer constant expression (use #define)",
            node,
            "dimension",
        )
        raise AssertionError

    def int_literal(self, node: c_ast.Constant) -> int:
        text = node.value.lower().rstrip("ul")
        try:
            if node.type == "char":
                body = node.value[1:-1]
                escapes = {"\\n": 10, "\\t": 9, "\\0": 0, "\\\\": 92, "\\'": 39}
                return escapes[body] if body in escapes else ord(body)
            value = int(text, 0) if not re.fullmatch(r"0[0-7]+", text) else int(text, 8)
        except (ValueError, KeyError, TypeError):
            self.error(f"unsupported constant {node.value}", node, "constant")
        if not -(2**31) <= value < 2**32:
            self.error(f"constant {node.value} does not fit in 32 bits", node, "constant")
        return value - 2**32 if value >= 2**31 else value

    # ---- function -------------------------------------------------------------------------
    def function(self, fdef: c_ast.FuncDef) -> str:
        decl = fdef.decl
        ftype = decl.type
        self.cline = _line(decl) or 0
        ret = ftype.type
        ret_names = (
            set(ret.type.names)
            if isinstance(ret, c_ast.TypeDecl) and isinstance(ret.type, c_ast.IdentifierType)
            else set()
        )
        if ret_names == {"void"}:
            ret_ty = None
        else:
            ret_ty = self.check_int_type(ret, f"return type of '{decl.name}'")
        params = []
        for param in ftype.args.params if ftype.args else []:
            if isinstance(param, c_ast.EllipsisParam):
                self.error("variadic functions are not supported", param, "parameter")
            if isinstance(param, c_ast.Typename):
                if isinstance(param.type, c_ast.TypeDecl) and getattr(
                    param.type.type, "names", None
                ) == ["void"]:
                    continue
                self.error("parameters need names", param, "parameter")
            params.append(self.parameter(param))
        sig = ", ".join(params)
        result = f" -> {ret_ty}" if ret_ty else ""
        header = f"func.func @{decl.name}({sig}){result} {{"
        items = list(fdef.body.block_items or [])
        final = None
        if items and isinstance(items[-1], c_ast.Return):
            final = items.pop()
        self.block(items)
        if final is not None:
            self.cline = _line(final) or self.cline
            if ret_ty is None and final.expr is not None:
                self.error("a void function returns a value", final, "return")
            if ret_ty is not None:
                if final.expr is None:
                    self.error("missing return value", final, "return")
                value = self.converted(final.expr, ret_ty)
                self.emit(f"func.return {value.name} : {ret_ty}")
            else:
                self.emit("func.return")
        else:
            if ret_ty is not None:
                self.error(
                    f"function '{decl.name}' must end with 'return <value>;'", fdef, "return"
                )
            self.emit("func.return")
        body = [header] + ["  " * ind + text for ind, text, _ in self.lines] + ["}"]
        self.line_map = (
            [self.cline_of_header]
            + [c for _, _, c in self.lines]
            + [self.lines[-1][2] if self.lines else 0]
        )
        return "\n".join(body) + "\n"

    def parameter(self, param: c_ast.Decl) -> str:
        name = param.name
        if name is None:
            self.error("parameters need names", param, "parameter")
        self.cline_of_header = _line(param) or self.cline
        node, dims = param.type, []
        while isinstance(node, c_ast.ArrayDecl):
            if node.dim is None:
                self.error(
                    f"array parameter '{name}' needs every dimension (e.g. int {name}"
                    "[N]); schedlab compiles fixed-size memories",
                    node,
                    name,
                )
            dims.append(self.const_eval(node.dim))
            node = node.type
        ty = self.check_int_type(node, f"parameter '{name}'")
        if self.visible(name) or name in self.arrays:
            self.error(f"duplicate parameter '{name}'", param, name)
        if dims:
            if any(d <= 0 for d in dims):
                self.error(f"array parameter '{name}' has a non-positive dimension", param, name)
            self.arrays[name] = self.memrefs[name] = tuple(dims)
            self.elem[name] = ty
            return f"%{name}: memref<{'x'.join(map(str, dims))}x{ty}>"
        self.scopes[0][name] = Var(Val(f"%{name}", ty), ctype=ty)
        return f"%{name}: {ty}"

    # ---- statements -----------------------------------------------------------------------
    def block(self, items: list[c_ast.Node]) -> None:
        for item in items:
            self.statement(item)

    def statement(self, node: c_ast.Node | None) -> None:
        if node is None or isinstance(node, c_ast.EmptyStatement):
            return
        self.cline = _line(node) or self.cline
        if isinstance(node, c_ast.Compound):
            self.scopes.append({})
            self.block(list(node.block_items or []))
            self.scopes.pop()
        elif isinstance(node, c_ast.Decl):
            self.declaration(node)
        elif isinstance(node, c_ast.DeclList):
            for d in node.decls:
                self.declaration(d)
        elif isinstance(node, c_ast.Assignment):
            self.assignment(node)
        elif isinstance(node, c_ast.UnaryOp) and node.op in ("++", "p++", "--", "p--"):
            op = "+=" if "+" in node.op else "-="
            self.assignment(c_ast.Assignment(op, node.expr, c_ast.Constant("int", "1"), node.coord))
        elif isinstance(node, c_ast.If):
            self.if_statement(node)
        elif isinstance(node, c_ast.For | c_ast.While | c_ast.DoWhile) and any(_jumps(node.stmt)):
            self.loop_with_jumps(node)
        elif isinstance(node, c_ast.For):
            self.for_statement(node)
        elif isinstance(node, c_ast.While):
            self.while_loop(None, node.cond, node.stmt, None, node, do_while=False)
        elif isinstance(node, c_ast.DoWhile):
            self.while_loop(None, node.cond, node.stmt, None, node, do_while=True)
        elif isinstance(node, c_ast.Return):
            self.error(
                "'return' is only supported as the last statement of the function", node, "return"
            )
        elif isinstance(node, c_ast.Break | c_ast.Continue):
            word = "break" if isinstance(node, c_ast.Break) else "continue"
            self.error(f"'{word}' outside a loop (or in a switch) is not supported", node, word)
        elif isinstance(node, c_ast.FuncCall):
            self.inline(node, need_value=False)
        elif isinstance(node, c_ast.Switch | c_ast.Goto | c_ast.Label | c_ast.Case | c_ast.Default):
            self.error(
                f"'{type(node).__name__.lower()}' is not supported (use if/else)",
                node,
                type(node).__name__.lower(),
            )
        elif isinstance(node, c_ast.Typedef | c_ast.Pragma):
            return
        elif isinstance(
            node,
            c_ast.ExprList
            | c_ast.BinaryOp
            | c_ast.ID
            | c_ast.Constant
            | c_ast.ArrayRef
            | c_ast.TernaryOp
            | c_ast.Cast
            | c_ast.UnaryOp,
        ):
            if not _pure(node):
                self.error(
                    "expression statement with effects other than assignment is not supported",
                    node,
                    "statement",
                )
        else:
            self.error(f"'{type(node).__name__}' statement is not supported", node, "statement")

    def declaration(self, node: c_ast.Decl) -> None:
        if isinstance(node.type, c_ast.ArrayDecl):
            self.error(
                f"local array '{node.name}' is not supported: pass it as a parameter",
                node,
                node.name,
            )
        if isinstance(node.type, c_ast.FuncDecl):
            self.error(
                f"nested function declaration '{node.name}' is not supported", node, node.name
            )
        if isinstance(node.type, c_ast.Struct | c_ast.Enum | c_ast.Union) or (
            isinstance(node.type, c_ast.TypeDecl)
            and not isinstance(node.type.type, c_ast.IdentifierType)
        ):
            self.error("struct/union/enum declarations are not supported", node, "type")
        ty = self.check_int_type(node.type, f"variable '{node.name}'")
        if isinstance(node.init, c_ast.InitList):
            self.error(f"initialiser list for scalar '{node.name}'", node, node.name)
        if node.init is not None:
            value = self.converted(node.init, ty)
        else:
            value = self.const(0, ty)
        if node.name in self.scopes[-1]:
            self.error(f"redeclaration of '{node.name}'", node, node.name)
        self.scopes[-1][node.name] = Var(value, ctype=ty)

    def assignment(self, node: c_ast.Assignment) -> None:
        target = node.lvalue
        binop = node.op[:-1] if node.op != "=" else None
        if binop is not None and binop not in _ARITH:
            self.error(f"assignment operator {node.op} is not supported", node, node.op)
        if isinstance(target, c_ast.ID):
            var = self.lookup(target.name, target)
            if var.readonly:
                self.error(
                    f"loop variable '{target.name}' is assigned inside its loop", node, target.name
                )
            if binop is not None:
                value = self.arith(binop, var.val, self.expr(node.rvalue), node)
            else:
                value = self.converted(node.rvalue, var.ctype)
            self.bind(target.name, value)
        elif isinstance(target, c_ast.ArrayRef):
            base, subs = self.subscripts(target)
            elem = self.elem[base]
            if binop is None:
                value = self.converted(node.rvalue, elem)
            else:
                old = self.op(f"memref.load %{base}[{subs}] : {self.mtype(base)}", elem)
                value = self.arith(binop, old, self.expr(node.rvalue), node)
                value = self.convert(value, elem)
            self.emit(f"memref.store {value.name}, %{base}[{subs}] : {self.mtype(base)}")
        else:
            self.error("only scalars and array elements can be assigned", node, "lvalue")

    def mtype(self, name: str) -> str:
        return f"memref<{'x'.join(map(str, self.memrefs[name]))}x{self.elem[name]}>"

    def subscripts(self, node: c_ast.ArrayRef) -> tuple[str, str]:
        subs = []
        while isinstance(node, c_ast.ArrayRef):
            subs.append(node.subscript)
            node = node.name
        if not isinstance(node, c_ast.ID):
            self.error("only named arrays can be subscripted", node, "subscript")
        name = node.name
        if name not in self.arrays or self.visible(name):
            self.error(f"'{name}' is not an array parameter", node, name)
        subs.reverse()
        if len(subs) != len(self.arrays[name]):
            self.error(
                f"array '{name}' has {len(self.arrays[name])} dimension(s), "
                f"subscripted with {len(subs)}",
                node,
                name,
            )
        values = [self.index_expr(s).name for s in subs]
        return self.alias.get(name, name), ", ".join(values)

    # ---- control flow ---------------------------------------------------------------------
    def carried(self, *nodes: c_ast.Node | None) -> list[str]:
        names: set[str] = set()
        for n in nodes:
            names |= assigned_names(n)
        out = []
        for name in sorted(names):
            if self.visible(name):
                var = self.lookup(name, None)
                if not var.readonly:
                    out.append(name)
        return out

    def current(self, names: list[str]) -> list[Val]:
        return [self.lookup(n, None).val for n in names]

    def if_statement(self, node: c_ast.If) -> None:
        cond = self.to_bool(self.expr(node.cond))
        names = self.carried(node.iftrue, node.iffalse)
        saved = self.current(names)
        tys = [self.ctype(n) for n in names]
        types = ", ".join(tys)
        res = self.fresh() if names else None
        head = f"{res}:{len(names)} = " if len(names) > 1 else (f"{res} = " if names else "")
        self.emit(f"{head}scf.if {cond.name}{' -> (' + types + ')' if names else ''} {{")
        for branch, closing in ((node.iftrue, "} else {"), (node.iffalse, "}")):
            self.indent += 1
            self.scopes.append({})
            self.statement(branch)
            self.scopes.pop()
            vals = self.current(names)
            if names:
                self.emit(f"scf.yield {', '.join(v.name for v in vals)} : {types}")
            else:
                self.emit("scf.yield")
            self.indent -= 1
            for n, v in zip(names, saved, strict=True):
                self.bind(n, v)
            self.cline = _line(node) or self.cline
            self.emit(closing)
        self.rebind_results(names, res, tys)

    def rebind_results(
        self, names: list[str], res: str | None, types: list[str] | None = None
    ) -> None:
        for i, n in enumerate(names):
            ty = types[i] if types else self.ctype(n)
            self.bind(n, Val(res if len(names) == 1 else f"{res}#{i}", ty))

    def for_statement(self, node: c_ast.For) -> None:
        canon = self.canonical(node)
        if canon is None:
            self.scopes.append({})
            self.statement(node.init)
            self.while_loop(None, node.cond, node.stmt, node.next, node, do_while=False)
            self.scopes.pop()
            return
        iv_name, lb_node, ub_node, inclusive, step = canon
        lb = self.index_expr(lb_node)
        ub = self.index_expr(ub_node)
        if inclusive:
            one = self.const(1, "index")
            ub = self.op(f"arith.addi {ub.name}, {one.name} : index", "index")
        st = self.const(step, "index")
        names = self.carried(node.stmt)
        inits = self.current(names)
        iv = self.fresh()
        args = [self.fresh() for _ in names]
        res = self.fresh() if names else None
        tys = [self.ctype(n) for n in names]
        types = ", ".join(tys)
        head = f"{res}:{len(names)} = " if len(names) > 1 else (f"{res} = " if names else "")
        pairs = ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits, strict=True))
        iters = f" iter_args({pairs}) -> ({types})" if names else ""
        self.emit(f"{head}scf.for {iv} = {lb.name} to {ub.name} step {st.name}{iters} {{")
        self.indent += 1
        for n, a, t in zip(names, args, tys, strict=True):
            self.bind(n, Val(a, t))
        self.scopes.append({iv_name: Var(Val(iv, "index"), readonly=True)})
        self.scopes.append({})
        self.statement(node.stmt)
        self.scopes.pop()
        self.scopes.pop()
        vals = self.current(names)
        self.emit(
            f"scf.yield {', '.join(v.name for v in vals)} : {types}" if names else "scf.yield"
        )
        self.indent -= 1
        self.cline = _line(node) or self.cline
        self.emit("}")
        self.rebind_results(names, res, tys)

    def canonical(self, node: c_ast.For):
        """(iv, lower, upper, inclusive, step) when the loop is a counted ``scf.for``."""
        init, cond, nxt = node.init, node.cond, node.next
        if not isinstance(init, c_ast.DeclList) or len(init.decls) != 1:
            return None
        decl = init.decls[0]
        if decl.init is None or not isinstance(decl.type, c_ast.TypeDecl):
            return None
        iv = decl.name
        if not isinstance(cond, c_ast.BinaryOp) or cond.op not in ("<", "<=", ">", ">="):
            return None
        op, left, right = cond.op, cond.left, cond.right
        if (
            isinstance(right, c_ast.ID)
            and right.name == iv
            and not (isinstance(left, c_ast.ID) and left.name == iv)
        ):
            op, left, right = _FLIP[op], right, left
        if not (isinstance(left, c_ast.ID) and left.name == iv) or op not in ("<", "<="):
            return None
        step = _increment(nxt, iv)
        if step is None or step <= 0:
            return None
        body_writes = assigned_names(node.stmt)
        if iv in body_writes:
            return None
        bound_reads = {n.name for n in _walk(right) if isinstance(n, c_ast.ID)}
        if iv in bound_reads or bound_reads & body_writes:
            return None
        if any(isinstance(n, c_ast.FuncCall | c_ast.Assignment) for n in _walk(right)):
            return None
        stored = stored_arrays(node.stmt)
        if any(isinstance(n, c_ast.FuncCall) for n in _walk(node.stmt)) and _reads_memory(right):
            return None  # an inlined callee may store to the arrays the bound reads
        if {_array_base(n) for n in _walk(right) if isinstance(n, c_ast.ArrayRef)} & stored:
            return None
        if not _pure(right) and _reads_memory(right) is False:
            return None
        if self.check_int_type(decl.type, f"variable '{iv}'") != "i32":
            return None
        return iv, decl.init, right, op == "<=", step

    def loop_with_jumps(self, node: c_ast.For | c_ast.While | c_ast.DoWhile) -> None:
        """``break``/``continue`` as carried flags: the loop tests ``!break``, and every
        statement after one that may jump runs under ``if (!(break || continue))``."""
        import copy

        self.jump_counter = getattr(self, "jump_counter", 0) + 1
        has_break, has_continue = _jumps(node.stmt)
        brk = f"break.{self.jump_counter}" if has_break else None
        cont = f"continue.{self.jump_counter}" if has_continue else None
        coord = node.coord
        body = _replace_jumps(copy.deepcopy(node.stmt), brk, cont, coord)
        flags = [f for f in (brk, cont) if f]
        body = c_ast.Compound(_guard(list(_items(body)), flags, coord), coord)
        if cont:
            reset = c_ast.Assignment("=", c_ast.ID(cont, coord), c_ast.Constant("int", "0"), coord)
            body = c_ast.Compound([reset, *body.block_items], coord)
        cond = node.cond
        if brk:
            not_brk = c_ast.UnaryOp("!", c_ast.ID(brk, coord), coord)
            cond = not_brk if cond is None else c_ast.BinaryOp("&&", not_brk, cond, coord)
        self.scopes.append({f: Var(self.const(0)) for f in flags})
        if isinstance(node, c_ast.For):
            self.statement(node.init)
            self.while_loop(None, cond, body, node.next, node, do_while=False)
        else:
            self.while_loop(None, cond, body, None, node, do_while=isinstance(node, c_ast.DoWhile))
        self.scopes.pop()

    def while_loop(
        self,
        _init,
        cond: c_ast.Node | None,
        body: c_ast.Node | None,
        nxt: c_ast.Node | None,
        node: c_ast.Node,
        do_while: bool,
    ) -> None:
        if cond is not None and (assigned_names(cond) or stored_arrays(cond)):
            self.error("assignments inside a loop condition are not supported", cond, "condition")
        names = self.carried(body, nxt)
        simple = cond is not None and _pure(cond) and not do_while and names
        types = [self.ctype(n) for n in names] + ([] if simple else ["i1"])
        tlist = ", ".join(types)
        if simple:
            inits = self.current(names)
        else:
            go = (
                self.to_bool(self.expr(cond))
                if cond is not None and not do_while
                else self.const(1, "i1")
            )
            inits = [*self.current(names), go]
        args = [self.fresh() for _ in types]
        res = self.fresh()
        head = f"{res}:{len(types)} = " if len(types) > 1 else f"{res} = "
        pairs = ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits, strict=True))
        self.emit(f"{head}scf.while ({pairs}) : ({tlist}) -> ({tlist}) {{")
        self.indent += 1
        saved = self.current(names)
        for n, a, t in zip(names, args, types, strict=False):
            self.bind(n, Val(a, t))
        if simple:
            c = self.to_bool(self.expr(cond))
        else:
            c = Val(args[-1], "i1")
        self.emit(f"scf.condition({c.name}) {', '.join(args)} : {tlist}")
        self.indent -= 1
        self.emit("} do {")
        self.indent += 1
        bargs = [self.fresh() for _ in types]
        decls = ", ".join(f"{a}: {t}" for a, t in zip(bargs, types, strict=True))
        self.emit(f"^bb0({decls}):")
        for n, a, t in zip(names, bargs, types, strict=False):
            self.bind(n, Val(a, t))
        self.scopes.append({})
        self.statement(body)
        self.scopes.pop()
        if nxt is not None:
            self.scopes.append({})
            self.statement(
                nxt if not isinstance(nxt, c_ast.ExprList) else c_ast.Compound(nxt.exprs, nxt.coord)
            )
            self.scopes.pop()
        vals = self.current(names)
        if not simple:
            cv = self.to_bool(self.expr(cond)) if cond is not None else self.const(1, "i1")
            vals.append(cv)
        self.emit(f"scf.yield {', '.join(v.name for v in vals)} : {tlist}")
        self.indent -= 1
        self.cline = _line(node) or self.cline
        self.emit("}")
        for n, v in zip(names, saved, strict=True):
            self.bind(n, v)
        for i, n in enumerate(names):
            self.bind(n, Val(f"{res}#{i}" if len(types) > 1 else res, types[i]))

    # ---- expressions ----------------------------------------------------------------------
    def arith(self, op: str, a: Val, b: Val, node: c_ast.Node, ty: str | None = None) -> Val:
        """``a op b`` in ``ty``; by default C's usual arithmetic conversions (float wins)."""
        if ty is None:
            ty = "f32" if "f32" in (a.ty, b.ty) else "i32"
        if ty == "f32":
            if op not in _FARITH:
                self.error(f"operator {op} needs integer operands, not float", node, op)
            a, b = self.to_f32(a), self.to_f32(b)
            return self.op(f"arith.{_FARITH[op]} {a.name}, {b.name} : f32", "f32")
        a, b = self.convert(a, ty), self.convert(b, ty)
        return self.op(f"arith.{_ARITH[op]} {a.name}, {b.name} : {ty}", ty)

    def compare(self, op: str, a: Val, b: Val) -> Val:
        if "f32" in (a.ty, b.ty):
            a, b = self.to_f32(a), self.to_f32(b)
            return self.op(f"arith.cmpf {_FCMP[op]}, {a.name}, {b.name} : f32", "i1")
        a, b = self.to_i32(a), self.to_i32(b)
        return self.op(f"arith.cmpi {_CMP[op]}, {a.name}, {b.name} : i32", "i1")

    def index_expr(self, node: c_ast.Node) -> Val:
        """An expression computed in ``index`` (subscripts, loop bounds) where it is affine."""
        if isinstance(node, c_ast.Constant) and node.type in ("int", "char"):
            return self.const(self.int_literal(node), "index")
        if isinstance(node, c_ast.ID):
            return self.to_index(self.lookup(node.name, node).val)
        if isinstance(node, c_ast.BinaryOp) and node.op in _INDEX_OPS:
            a, b = self.index_expr(node.left), self.index_expr(node.right)
            return self.arith(node.op, a, b, node, "index")
        return self.to_index(self.expr(node))

    def expr(self, node: c_ast.Node) -> Val:
        self.cline = _line(node) or self.cline
        if isinstance(node, c_ast.Constant):
            if node.type in ("float", "double"):
                return self.float_literal(node)
            if node.type == "string":
                self.error("string literals are not supported", node, "constant")
            return self.const(self.int_literal(node))
        if isinstance(node, c_ast.ID):
            if node.name in ("true", "false") and not self.visible(node.name):
                return self.const(int(node.name == "true"))
            return self.lookup(node.name, node).val
        if isinstance(node, c_ast.ArrayRef):
            base, subs = self.subscripts(node)
            elem = self.elem[base]
            return self.op(f"memref.load %{base}[{subs}] : {self.mtype(base)}", elem)
        if isinstance(node, c_ast.BinaryOp):
            if node.op in _ARITH:
                a = self.value_of(self.expr(node.left))
                b = self.value_of(self.expr(node.right))
                return self.arith(node.op, a, b, node)
            if node.op in _CMP:
                a = self.value_of(self.expr(node.left))
                b = self.value_of(self.expr(node.right))
                return self.compare(node.op, a, b)
            if node.op in ("&&", "||"):
                return self.logical(node)
            self.error(f"operator {node.op} is not supported", node, node.op)
        if isinstance(node, c_ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, c_ast.TernaryOp):
            return self.ternary(node)
        if isinstance(node, c_ast.Cast):
            ty = self.check_int_type(node.to_type.type, "cast")
            return self.converted(node.expr, ty)
        if isinstance(node, c_ast.FuncCall):
            return self.inline(node, need_value=True)
        if isinstance(node, c_ast.Assignment):
            self.error(
                "assignment inside an expression is not supported (make it a statement)",
                node,
                "assignment",
            )
        self.error(f"'{type(node).__name__}' expressions are not supported", node, "expression")
        raise AssertionError

    def inline(self, node: c_ast.FuncCall, need_value: bool) -> Val | None:
        """A call of another function of the file, inlined: scalars by value, arrays by name."""
        name = _call_name(node)
        callee = self.functions.get(name)
        if callee is None:
            self.error(
                f"call of '{name}', which is not defined in this file (only functions "
                "of the same file are inlined)",
                node,
                "call",
            )
        if name in self.call_stack or len(self.call_stack) > 16:
            self.error(f"recursive call of '{name}' cannot be inlined", node, "call")
        ftype = callee.decl.type
        params = [
            p
            for p in (ftype.args.params if ftype.args else [])
            if not (
                isinstance(p, c_ast.Typename)
                and getattr(getattr(p.type, "type", None), "names", None) == ["void"]
            )
        ]
        args = list(node.args.exprs) if node.args is not None else []
        if len(args) != len(params):
            self.error(
                f"'{name}' takes {len(params)} argument(s), the call gives {len(args)}",
                node,
                "call",
            )
        ret = ftype.type
        void = isinstance(ret, c_ast.TypeDecl) and getattr(ret.type, "names", None) == ["void"]
        if need_value and void:
            self.error(f"'{name}' returns void; its value is used", node, "call")
        ret_ty = "i32" if void else self.check_int_type(ret, f"return type of '{name}'")
        scope: dict[str, Var] = {}
        arrays: dict[str, tuple[int, ...]] = {}
        alias: dict[str, str] = {}
        for param, arg in zip(params, args, strict=True):
            if not isinstance(param, c_ast.Decl) or param.name is None:
                self.error(f"parameters of '{name}' need names", param, "parameter")
            tnode, dims = param.type, []
            while isinstance(tnode, c_ast.ArrayDecl):
                dims.append(None if tnode.dim is None else self.const_eval(tnode.dim))
                tnode = tnode.type
            pty = self.check_int_type(tnode, f"parameter '{param.name}' of '{name}'")
            if dims:
                base = arg.name if isinstance(arg, c_ast.ID) else None
                if base is None or base not in self.arrays or self.visible(base):
                    self.error(
                        f"argument {param.name} of '{name}' must be an array name", arg, "call"
                    )
                real = self.alias.get(base, base)
                shape = self.memrefs[real]
                if self.elem[real] != pty:
                    self.error(
                        f"'{base}' has {self.elem[real]} elements, parameter {param.name} of "
                        f"'{name}' {pty}",
                        arg,
                        "call",
                    )
                if len(dims) != len(shape) or any(
                    d not in (None, s) for d, s in zip(dims, shape, strict=True)
                ):
                    self.error(
                        f"'{base}' ({'x'.join(map(str, shape))}) does not match "
                        f"parameter {param.name} of '{name}'",
                        arg,
                        "call",
                    )
                arrays[param.name] = shape
                alias[param.name] = real
            else:
                scope[param.name] = Var(self.converted(arg, pty), ctype=pty)
        items = list(callee.body.block_items or [])
        final = items.pop() if items and isinstance(items[-1], c_ast.Return) else None
        if not void and (final is None or final.expr is None):
            self.error(f"'{name}' must end with 'return <value>;' to be inlined", callee, "return")
        saved = (self.scopes, self.arrays, self.alias, self.cline)
        self.scopes, self.arrays, self.alias = [scope], arrays, alias
        self.call_stack.append(name)
        try:
            self.block(items)
            value = None
            if final is not None and final.expr is not None:
                if void:
                    self.error(f"void function '{name}' returns a value", final, "return")
                value = self.converted(final.expr, ret_ty)
        finally:
            self.call_stack.pop()
            self.scopes, self.arrays, self.alias, self.cline = saved
        return value

    def unary(self, node: c_ast.UnaryOp) -> Val:
        op = node.op
        if op in ("++", "p++", "--", "p--"):
            self.error(
                f"'{op.lstrip('p')}' inside an expression is not supported (make it a statement)",
                node,
                op.lstrip("p"),
            )
        if op in ("&", "*"):
            self.error(f"pointer operator '{op}' is not supported", node, op)
        if op == "sizeof":
            self.error("sizeof is not supported", node, op)
        v = self.expr(node.expr)
        if op == "+":
            return self.value_of(v)
        if op == "-" and v.ty == "f32":
            return self.op(f"arith.negf {v.name} : f32", "f32")
        if op == "-":
            zero = self.const(0)
            return self.arith("-", zero, self.to_i32(v), node)
        if op == "~" and v.ty == "f32":
            self.error("operator ~ needs an integer operand, not float", node, op)
        if op == "~":
            m1 = self.const(-1)
            return self.arith("^", self.to_i32(v), m1, node)
        if op == "!":
            b = self.to_bool(v)
            true = self.const(1, "i1")
            return self.op(f"arith.xori {b.name}, {true.name} : i1", "i1")
        self.error(f"unary operator {op} is not supported", node, op)
        raise AssertionError

    def logical(self, node: c_ast.BinaryOp) -> Val:
        a = self.to_bool(self.expr(node.left))
        if _pure(node.right):
            b = self.to_bool(self.expr(node.right))
            fn = "andi" if node.op == "&&" else "ori"
            return self.op(f"arith.{fn} {a.name}, {b.name} : i1", "i1")
        # short circuit: the right side may read memory out of bounds or divide by zero
        res = self.fresh()
        self.emit(f"{res} = scf.if {a.name} -> (i1) {{")
        for evaluate in (node.op == "&&", node.op != "&&"):
            self.indent += 1
            if evaluate:
                v = self.to_bool(self.expr(node.right))
            else:
                v = self.const(int(node.op == "||"), "i1")
            self.emit(f"scf.yield {v.name} : i1")
            self.indent -= 1
            self.emit("} else {" if evaluate == (node.op == "&&") else "}")
        return Val(res, "i1")

    def ternary(self, node: c_ast.TernaryOp) -> Val:
        c = self.to_bool(self.expr(node.cond))
        sides = (self.expr_type(node.iftrue), self.expr_type(node.iffalse))
        ty = "f32" if "f32" in sides else "i32"
        if _pure(node.iftrue) and _pure(node.iffalse):
            a = self.convert(self.expr(node.iftrue), ty)
            b = self.convert(self.expr(node.iffalse), ty)
            return self.op(f"arith.select {c.name}, {a.name}, {b.name} : {ty}", ty)
        res = self.fresh()
        self.emit(f"{res} = scf.if {c.name} -> ({ty}) {{")
        for branch, closing in ((node.iftrue, "} else {"), (node.iffalse, "}")):
            self.indent += 1
            v = self.convert(self.expr(branch), ty)
            self.emit(f"scf.yield {v.name} : {ty}")
            self.indent -= 1
            self.emit(closing)
        return Val(res, ty)

    def expr_type(self, node: c_ast.Node) -> str:
        """The C type ("i32" or "f32") of an expression, without emitting anything."""
        if isinstance(node, c_ast.Constant):
            return "f32" if node.type in ("float", "double") else "i32"
        if isinstance(node, c_ast.ID):
            if not self.visible(node.name):
                return "i32"
            return self.lookup(node.name, node).ctype
        if isinstance(node, c_ast.ArrayRef):
            base = node
            while isinstance(base, c_ast.ArrayRef):
                base = base.name
            if isinstance(base, c_ast.ID) and base.name in self.arrays:
                return self.elem.get(self.alias.get(base.name, base.name), "i32")
            return "i32"
        if isinstance(node, c_ast.BinaryOp):
            if node.op in _ARITH:
                types = (self.expr_type(node.left), self.expr_type(node.right))
                return "f32" if "f32" in types else "i32"
            return "i32"
        if isinstance(node, c_ast.UnaryOp):
            return self.expr_type(node.expr) if node.op in ("-", "+") else "i32"
        if isinstance(node, c_ast.TernaryOp):
            types = (self.expr_type(node.iftrue), self.expr_type(node.iffalse))
            return "f32" if "f32" in types else "i32"
        if isinstance(node, c_ast.Cast):
            names = getattr(getattr(node.to_type.type, "type", None), "names", [])
            return "f32" if names == ["float"] else "i32"
        if isinstance(node, c_ast.FuncCall):
            callee = self.functions.get(_call_name(node))
            ret = callee.decl.type.type if callee is not None else None
            names = getattr(getattr(ret, "type", None), "names", [])
            return "f32" if names == ["float"] else "i32"
        return "i32"

    def converted(self, node: c_ast.Node, ty: str) -> Val:
        """``node``'s value converted to ``ty``, as C's assignment/cast/return converts it.

        A double constant converted to float (``float s = 0.0;``, ``(float)0.64``) is that
        constant rounded to double and then to float, exactly as C does; nowhere else is a
        double allowed (it would make C compute the surrounding expression in double).
        """
        value = _double_literal(node)
        if ty == "f32" and value is not None:
            return self.const(value, "f32")
        return self.convert(self.expr(node), ty)

    def float_literal(self, node: c_ast.Constant) -> Val:
        text = node.value
        if not text.lower().endswith("f"):
            self.error(
                f"floating constant {text} is a double in C; write {text}f (RedPanda computes "
                "in float, IEEE binary32, and a double constant would make C compute that "
                "expression in double)",
                node,
                "constant",
            )
        try:
            value = _decimal_to_f32(text[:-1])
        except (ValueError, ZeroDivisionError):
            self.error(f"unsupported floating constant {text}", node, "constant")
        if not np.isfinite(value):
            self.error(f"floating constant {text} overflows float", node, "constant")
        return self.const(float(value), "f32")


_LOOPS = (c_ast.For, c_ast.While, c_ast.DoWhile)


def _double_literal(node: c_ast.Node) -> float | None:
    """The value of an unsuffixed floating constant (C: a double), possibly negated."""
    sign = 1.0
    while isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
        sign = -sign if node.op == "-" else sign
        node = node.expr
    if isinstance(node, c_ast.Constant) and node.type == "double":
        text = node.value.lower()
        if text.endswith("l"):
            return None
        try:
            return sign * (float.fromhex(text) if "x" in text else float(text))
        except ValueError:
            return None
    return None


def _decimal_to_f32(text: str) -> np.float32:
    """A C float constant (``0.7`` of ``0.7f``) correctly rounded to binary32 (nearest, ties
    to even) from its exact decimal value, as gcc does (no double rounding via double)."""
    from fractions import Fraction

    if "x" in text.lower():
        return np.float32(float.fromhex(text))
    exact = Fraction(text)
    guess = np.float32(float(exact))
    if not np.isfinite(guess):
        return guess
    best = guess
    for cand in (np.nextafter(guess, np.float32(-np.inf)), np.nextafter(guess, np.float32(np.inf))):
        if not np.isfinite(cand):
            continue
        d_best, d_cand = abs(Fraction(float(best)) - exact), abs(Fraction(float(cand)) - exact)
        even = int(np.array(cand).view(np.int32)) % 2 == 0
        if d_cand < d_best or (d_cand == d_best and even):
            best = cand
    return best


def _jumps(node: c_ast.Node | None) -> tuple[bool, bool]:
    """(has break, has continue) belonging to the loop whose body is ``node``."""
    found = [False, False]

    def visit(n):
        if n is None or isinstance(n, _LOOPS):
            return
        if isinstance(n, c_ast.Break):
            found[0] = True
        elif isinstance(n, c_ast.Continue):
            found[1] = True
        if isinstance(n, c_ast.Switch):
            return
        for _, child in n.children():
            visit(child)

    visit(node)
    return found[0], found[1]


def _replace_jumps(node, brk, cont, coord):
    """``break;`` -> ``brk = 1;``, ``continue;`` -> ``cont = 1;`` (not inside inner loops)."""

    def flag(name):
        return c_ast.Assignment("=", c_ast.ID(name, coord), c_ast.Constant("int", "1"), coord)

    if isinstance(node, c_ast.Break):
        return flag(brk)
    if isinstance(node, c_ast.Continue):
        return flag(cont)
    if node is None or isinstance(node, _LOOPS):
        return node
    if isinstance(node, c_ast.Compound):
        node.block_items = [_replace_jumps(i, brk, cont, coord) for i in node.block_items or []]
    elif isinstance(node, c_ast.If):
        node.iftrue = _replace_jumps(node.iftrue, brk, cont, coord)
        node.iffalse = _replace_jumps(node.iffalse, brk, cont, coord)
    return node


def _items(node) -> list:
    if node is None:
        return []
    return list(node.block_items or []) if isinstance(node, c_ast.Compound) else [node]


def _sets(node, flags) -> bool:
    return any(
        isinstance(n, c_ast.Assignment)
        and isinstance(n.lvalue, c_ast.ID)
        and n.lvalue.name in flags
        for n in _walk(node)
    )


def _guard(items: list, flags: list[str], coord) -> list:
    """Statements after one that may set a jump flag run only while no flag is set."""
    out = []
    for index, item in enumerate(items):
        if isinstance(item, c_ast.Compound):
            item = c_ast.Compound(_guard(_items(item), flags, coord), item.coord)
        elif isinstance(item, c_ast.If):
            item = c_ast.If(
                item.cond,
                _guard_one(item.iftrue, flags, coord),
                _guard_one(item.iffalse, flags, coord),
                item.coord,
            )
        out.append(item)
        rest = items[index + 1 :]
        if rest and _sets(item, flags):
            jumped = c_ast.ID(flags[0], coord)
            for f in flags[1:]:
                jumped = c_ast.BinaryOp("||", jumped, c_ast.ID(f, coord), coord)
            out.append(
                c_ast.If(
                    c_ast.UnaryOp("!", jumped, coord),
                    c_ast.Compound(_guard(rest, flags, coord), coord),
                    None,
                    coord,
                )
            )
            break
    return out


def _guard_one(node, flags, coord):
    if node is None:
        return None
    return c_ast.Compound(_guard(_items(node), flags, coord), getattr(node, "coord", coord))


def _call_name(node: c_ast.FuncCall) -> str:
    return node.name.name if isinstance(node.name, c_ast.ID) else "?"


def _increment(node: c_ast.Node | None, iv: str) -> int | None:
    """The constant step of ``i++``, ``++i``, ``i += c`` or ``i = i + c``; else None."""
    if isinstance(node, c_ast.UnaryOp) and isinstance(node.expr, c_ast.ID) and node.expr.name == iv:
        return {"++": 1, "p++": 1, "--": -1, "p--": -1}.get(node.op)
    if (
        isinstance(node, c_ast.Assignment)
        and isinstance(node.lvalue, c_ast.ID)
        and node.lvalue.name == iv
    ):
        value = node.rvalue
        if node.op in ("+=", "-=") and isinstance(value, c_ast.Constant) and value.type == "int":
            try:
                step = int(value.value.lower().rstrip("ul"), 0)
            except ValueError:
                return None
            return step if node.op == "+=" else -step
        if (
            node.op == "="
            and isinstance(value, c_ast.BinaryOp)
            and value.op == "+"
            and isinstance(value.left, c_ast.ID)
            and value.left.name == iv
            and isinstance(value.right, c_ast.Constant)
            and value.right.type == "int"
        ):
            try:
                return int(value.right.value.lower().rstrip("ul"), 0)
            except ValueError:
                return None
    return None


def translate(
    text: str,
    path: str | Path = "<string>",
    function: str | None = None,
    defines: Mapping[str, int | str] | None = None,
) -> Translation:
    """C source -> the MLIR text of its kernel function (and the MLIR-to-C line map)."""
    path = str(path)
    pre = _preprocess(text, path, defines)
    ast = parse_c(pre, path)
    _shift_lines(ast)
    funcs = [n for n in ast.ext if isinstance(n, c_ast.FuncDef)]
    if function is not None:
        chosen = [f for f in funcs if f.decl.name == function]
        if not chosen:
            raise CFrontError(
                f"no function '{function}' (found: "
                f"{', '.join(f.decl.name for f in funcs) or 'none'})",
                path=path,
                field="function",
            )
    else:
        stem = Path(path).stem
        called = {
            _call_name(n) for f in funcs for n in _walk(f.body) if isinstance(n, c_ast.FuncCall)
        }
        roots = [f for f in funcs if f.decl.name not in called]
        chosen = roots if len(roots) == 1 else [f for f in funcs if f.decl.name == stem]
        if len(chosen) != 1:
            names = ", ".join(f.decl.name for f in funcs) or "none"
            raise CFrontError(
                f"expected one kernel function (one that no other calls, or one named '{stem}'; "
                f"else --function), found: {names}",
                path=path,
                field="function",
            )
    for ext in ast.ext:
        if isinstance(ext, c_ast.Decl) and not isinstance(ext.type, c_ast.FuncDecl):
            raise CFrontError(
                f"global variable '{ext.name}' is not supported: pass it as a parameter",
                path=path,
                line=_line(ext),
                field=ext.name,
            )
    tr = _Translator(path)
    tr.functions = {f.decl.name: f for f in funcs if f is not chosen[0]}
    tr.cline_of_header = _line(chosen[0]) or 1
    try:
        mlir = tr.function(chosen[0])
    except RecursionError:
        raise CFrontError(
            "C expression nests too deeply", path=path, line=tr.cline or None, field="c"
        ) from None
    return Translation(chosen[0].decl.name, mlir, tr.line_map)


def _shift_lines(ast: c_ast.Node) -> None:
    """Undo the typedef prelude's effect on line numbers (it shares line 1: nothing to do)."""
    return None


def load_c_kernel(
    path: str | Path,
    function: str | None = None,
    defines: Mapping[str, int | str] | None = None,
    name: str | None = None,
):
    """Read a C file and return the :class:`~schedlab.redpanda.frontend.Kernel` it defines."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read kernel: {exc}", path=path) from None
    return c_kernel_from_text(text, path, function, defines, name)


def c_kernel_from_text(
    text: str,
    path: str | Path = "<string>",
    function: str | None = None,
    defines: Mapping[str, int | str] | None = None,
    name: str | None = None,
):
    from schedlab.redpanda.frontend import parse_kernel

    tr = translate(text, path, function, defines)
    kernel = parse_kernel(tr.mlir, path, name=name or tr.name)
    kernel.line_map = tr.line_map
    kernel.language = "c"
    return kernel
