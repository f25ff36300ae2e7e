"""Front end: MLIR text (func/scf/arith/memref) parsed and verified with xDSL.

RedPanda (../shared/papers/08-redpanda.md) starts from structured MLIR. We keep the structured
``scf`` form as the input of CFG-to-dataflow conversion because every ``scf.for``/``scf.while``
/``scf.if`` is a single-entry single-exit region: exactly the shape that carry/steer/merge
lowering needs. Malformed text raises :class:`BadInputError` carrying xDSL's diagnostic with
line and column, never a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects import affine, arith, builtin, func, memref, scf
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

from schedlab.core.errors import BadInputError

#: the arith operations the dataflow PEs implement, by MLIR name -> RedPanda ALU function
ALU_OPS: dict[str, str] = {
    "arith.addi": "add",
    "arith.subi": "sub",
    "arith.muli": "mul",
    "arith.divsi": "div",
    "arith.remsi": "rem",
    "arith.andi": "and",
    "arith.ori": "or",
    "arith.xori": "xor",
    "arith.shli": "shl",
    "arith.shrsi": "shr",
    "arith.index_cast": "cast",
    # f32 (values travel as IEEE bit patterns; see semantics.py)
    "arith.addf": "addf",
    "arith.subf": "subf",
    "arith.mulf": "mulf",
    "arith.divf": "divf",
    "arith.negf": "negf",
    "arith.sitofp": "sitofp",
    "arith.fptosi": "fptosi",
}
CMP_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
#: MLIR ops that compute on floating point (the DHLS back end has integer datapaths only)
FLOAT_OPS = frozenset(
    {
        "arith.addf",
        "arith.subf",
        "arith.mulf",
        "arith.divf",
        "arith.negf",
        "arith.sitofp",
        "arith.fptosi",
        "arith.cmpf",
    }
)
SUPPORTED = frozenset(
    {
        *ALU_OPS,
        "arith.cmpi",
        "arith.cmpf",
        "arith.select",
        "arith.constant",
        "scf.for",
        "scf.while",
        "scf.if",
        "scf.yield",
        "scf.condition",
        "memref.load",
        "memref.store",
        "func.func",
        "func.return",
        "builtin.module",
    }
)


@dataclass
class Kernel:
    """A parsed, verified kernel: the xDSL module and its one function."""

    name: str
    module: builtin.ModuleOp
    func: func.FuncOp
    source: str
    path: str = "<string>"
    #: C kernels: MLIR line (1-based index - 1) -> the C line it was generated from
    line_map: list[int] | None = None
    language: str = "mlir"

    def op_line(self, op: Operation) -> int | None:
        """Source line of ``op``: the k-th op of its name in walk order is the k-th in the text.

        (xDSL keeps no locations on parsed ops; custom-format MLIR prints ops in walk order.)
        For a C kernel the MLIR line is mapped back to the C line it came from.
        """
        same = [o for o in self.func.walk() if o.name == op.name]
        try:
            k = next(i for i, o in enumerate(same) if o is op)
        except StopIteration:
            return None
        pattern = re.compile(r"(?<![\w.])" + re.escape(op.name) + r"(?![\w.])")
        hits = [
            n
            for n, line in enumerate(self.source.splitlines(), start=1)
            for _ in pattern.finditer(line.split("//", 1)[0])
        ]
        if k >= len(hits):
            return None
        line = hits[k]
        if self.line_map is not None:
            return self.line_map[line - 1] if line - 1 < len(self.line_map) else None
        return line

    def where(self, op: Operation) -> str:
        """'op arith.divsi (file.c line 12)' for messages."""
        line = self.op_line(op)
        at = f" ({Path(self.path).name} line {line})" if line else ""
        return f"op {op.name}{at}"

    def memrefs(self) -> dict[str, tuple[int, ...]]:
        """Memref arguments by name, with their static shapes."""
        out = {}
        for name, arg in zip(self.arg_names(), self.func.body.block.args, strict=True):
            if isinstance(arg.type, builtin.MemRefType):
                out[name] = tuple(int(d) for d in arg.type.get_shape())
        return out

    def scalars(self) -> list[str]:
        return [
            n
            for n, a in zip(self.arg_names(), self.func.body.block.args, strict=True)
            if not isinstance(a.type, builtin.MemRefType)
        ]

    def arg_names(self) -> list[str]:
        return [a.name_hint or f"arg{i}" for i, a in enumerate(self.func.body.block.args)]


@lru_cache(maxsize=1)
def context() -> Context:
    ctx = Context()
    for dialect in (arith.Arith, scf.Scf, memref.MemRef, func.Func, builtin.Builtin, affine.Affine):
        ctx.load_dialect(dialect)
    return ctx


def _location(message: str) -> tuple[int | None, str]:
    match = re.search(r":(\d+):(\d+)", message)
    return (int(match.group(1)), f"column {match.group(2)}") if match else (None, "")


def parse_kernel(text: str, path: str | Path = "<string>", name: str | None = None) -> Kernel:
    """Parse and verify MLIR text; the module must hold exactly one supported func.func."""
    path = str(path)
    try:
        module = Parser(context(), text, path).parse_module()
    except ParseError as exc:
        line, col = _location(str(exc).splitlines()[0])
        if re.search(r"\baffine\.\w+", exc.msg):
            # an affine form xDSL cannot even parse (affine.if, ...): upstream MLIR, if present
            lowered = _mlir_opt_lower_affine(text, path, exc.msg.rstrip("."), line)
            return parse_kernel(lowered, path, name)
        hint = ""
        if not path.endswith(".mlir") and re.search(r"\b(void|int)\s+\w+\s*\(", text):
            hint = " (this looks like C: name the file .c)"
        msg = " ".join(exc.msg.split())
        raise BadInputError(f"{col}: {msg}{hint}", path=path, line=line, field="mlir") from None
    except Exception as exc:  # noqa: BLE001 - any parser crash on bad text is a user error
        raise BadInputError(
            f"cannot parse MLIR: {type(exc).__name__}: {exc}", path=path, field="mlir"
        ) from None
    try:
        module.verify()
    except (VerifyException, DiagnosticException, ValueError, TypeError, AttributeError) as exc:
        raise BadInputError(
            f"MLIR does not verify: {str(exc).splitlines()[0]}", path=path, field="mlir"
        ) from None
    if any(op.name.startswith("affine.") for op in module.walk()):
        module, text = _lower_affine(module, text, path)
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if len(funcs) != 1:
        raise BadInputError(
            f"expected exactly one func.func, found {len(funcs)}", path=path, field="func.func"
        )
    _check_supported(funcs[0], text, path)
    return Kernel(name or funcs[0].sym_name.data, module, funcs[0], text, path)


def _mlir_opt_lower_affine(text: str, path: str, why: str, line: int | None = None) -> str:
    """``mlir-opt --lower-affine`` on ``text`` (generic form out), or a one-line error."""
    import shutil
    import subprocess

    tool = shutil.which("mlir-opt")
    if tool is None:
        raise BadInputError(
            f"{why}; affine forms other than affine.for/load/store/apply/yield need "
            "mlir-opt --lower-affine (mlir-opt is not on PATH)",
            path=path,
            line=line,
            field="affine",
        )
    try:
        proc = subprocess.run(
            [tool, "--lower-affine", "--mlir-print-op-generic"],
            input=text,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInputError(
            f"mlir-opt --lower-affine failed: {exc}", path=path, field="affine"
        ) from None
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise BadInputError(f"mlir-opt --lower-affine failed: {first}", path=path, field="affine")
    return proc.stdout


def _lower_affine(module: builtin.ModuleOp, text: str, path: str):
    """affine.for/load/store/apply -> scf/memref/arith (:mod:`.affine_lowering`); other affine
    forms through ``mlir-opt --lower-affine`` when that tool is on PATH, else a clear error."""
    from schedlab.redpanda.affine_lowering import lower_affine

    try:
        lower_affine(module)
        module.verify()
    except Exception as exc:  # noqa: BLE001 - fall back to upstream MLIR, else a clear error
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        text = _mlir_opt_lower_affine(text, path, f"cannot lower {detail}")
        try:
            module = Parser(context(), text, path).parse_module()
        except Exception as exc2:  # noqa: BLE001
            raise BadInputError(
                f"cannot parse mlir-opt's output: {exc2}".splitlines()[0], path=path, field="affine"
            ) from None
    return module, str(module)


def _line_of(op: Operation, text: str) -> int | None:
    """Best-effort source line of ``op`` (xDSL keeps no locations on parsed ops)."""
    needle = op.name
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def _check_supported(fn: func.FuncOp, text: str, path: str) -> None:
    for op in fn.walk():
        if op.name not in SUPPORTED:
            raise BadInputError(
                f"operation '{op.name}' is not supported by the RedPanda "
                f"front end (supported: scf, arith integer and f32 ops, memref "
                f"load/store)",
                path=path,
                line=_line_of(op, text),
                field=op.name,
            )
        for result in op.results:
            if not _value_type(result.type):
                raise BadInputError(
                    f"'{op.name}' produces {result.type}; only integer, index and "
                    f"f32 values are supported",
                    path=path,
                    line=_line_of(op, text),
                    field=op.name,
                )
    for arg in fn.body.block.args:
        if isinstance(arg.type, builtin.MemRefType):
            if any(int(d) < 0 for d in arg.type.get_shape()):
                raise BadInputError("memrefs need static shapes", path=path, field="memref")
            if not _value_type(arg.type.element_type):
                raise BadInputError(
                    f"memref element type {arg.type.element_type} is not supported "
                    "(integer, index or f32)",
                    path=path,
                    field="func.func",
                )
        elif not _value_type(arg.type):
            raise BadInputError(
                f"argument type {arg.type} is not supported", path=path, field="func.func"
            )


def _value_type(t) -> bool:
    return isinstance(t, builtin.IntegerType | builtin.IndexType | builtin.Float32Type)


def is_float(type_attr) -> bool:
    """Whether a value (or memref element) of this type is an f32 bit pattern."""
    if isinstance(type_attr, builtin.MemRefType):
        type_attr = type_attr.element_type
    return isinstance(type_attr, builtin.Float32Type)


def float_args(kernel: Kernel) -> set[str]:
    """Names of the f32 arguments (scalars and memrefs of f32) of ``kernel``."""
    return {
        n
        for n, a in zip(kernel.arg_names(), kernel.func.body.block.args, strict=True)
        if is_float(a.type)
    }


def first_float_op(kernel: Kernel) -> Operation | None:
    """The first floating-point operation of ``kernel`` (walk order), if any."""
    return next((op for op in kernel.func.walk() if op.name in FLOAT_OPS), None)


def bit_width(type_attr) -> int:
    """Bit width of an integer/index/f32 type (index is 64 bits, as in xDSL's interpreter)."""
    if isinstance(type_attr, builtin.IndexType):
        return 64
    if isinstance(type_attr, builtin.Float32Type):
        return 32
    return type_attr.width.data


def cleanup(kernel: Kernel) -> Kernel:
    """xDSL's own canonicalize, CSE and loop-invariant code motion on a copy of the kernel.

    The lowering works on the cleaned copy while the reference interpreter keeps running the
    original, so the differential tests also cover these upstream passes.
    """
    from xdsl.transforms.canonicalize import CanonicalizePass
    from xdsl.transforms.common_subexpression_elimination import (
        CommonSubexpressionElimination,
    )
    from xdsl.transforms.loop_invariant_code_motion import LoopInvariantCodeMotionPass

    module = kernel.module.clone()
    for xdsl_pass in (
        CanonicalizePass(),
        CommonSubexpressionElimination(),
        LoopInvariantCodeMotionPass(),
    ):
        xdsl_pass.apply(context(), module)
    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    _check_supported(fn, kernel.source, kernel.path)
    return Kernel(
        kernel.name, module, fn, kernel.source, kernel.path, kernel.line_map, kernel.language
    )
