"""The golden model: xDSL's interpreter run on the original (structured) kernel.

Every compiled dataflow graph is checked against this (differential testing). xDSL 0.75's
``scf.for`` implementation reads loop bounds as attributes but receives them as runtime
scalars, so we register a corrected ``scf.for``; everything else is xDSL's own code, except
that a trap names its reason and place instead of failing an ``assert``: division by zero and
out-of-bounds accesses raise :class:`KernelTrap` ("division by zero at op arith.divsi (k.c line
7)"), and a loop that runs past ``max_steps`` iterations or ``time_limit`` seconds raises
:class:`StepLimitError` naming that loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import numpy as np
from xdsl.dialects import arith, builtin, memref, scf
from xdsl.dialects.builtin import FloatAttr
from xdsl.interpreter import Interpreter, impl, register_impls
from xdsl.interpreters import arith as i_arith
from xdsl.interpreters import builtin as i_builtin
from xdsl.interpreters import func as i_func
from xdsl.interpreters import memref as i_memref
from xdsl.interpreters import scf as i_scf
from xdsl.interpreters.builtin import scalar_attr
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import TypedPtr

from schedlab.core.errors import BadInputError
from schedlab.redpanda.frontend import Kernel, is_float
from schedlab.redpanda.semantics import bits_f32, f32_bits

#: default bound on loop-body executions of one interpreter run (all loops together)
MAX_STEPS = 2_000_000


class KernelTrap(BadInputError):
    """The kernel traps on these inputs (division by zero, an out-of-bounds access)."""


class StepLimitError(BadInputError):
    """The interpreter ran past its iteration or time budget (a loop that does not end)."""


class _Budget:
    def __init__(self, kernel: Kernel, max_steps: int, time_limit: float | None) -> None:
        self.kernel, self.max_steps, self.time_limit = kernel, max_steps, time_limit
        self.steps, self.start = 0, time.monotonic()

    def tick(self, op) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            self.stop(op, f"the step limit of {self.max_steps:,} loop iterations")
        if (
            self.time_limit is not None
            and self.steps % 1024 == 0
            and (time.monotonic() - self.start > self.time_limit)
        ):
            self.stop(op, f"the {self.time_limit:g} s time limit ({self.steps:,} loop iterations)")

    def stop(self, op, budget: str) -> None:
        raise StepLimitError(
            f"the xDSL interpreter stopped at {budget} "
            f"with {self.kernel.where(op)} still running: the kernel may not terminate on "
            "these inputs (if it does, raise --max-steps / --time-limit)",
            path=self.kernel.path,
            line=self.kernel.op_line(op),
            field=op.name,
        )

    def trap(self, op, what: str) -> None:
        raise KernelTrap(
            f"the kernel traps on these inputs: {what} at {self.kernel.where(op)}",
            path=self.kernel.path,
            line=self.kernel.op_line(op),
            field=op.name,
        )


@register_impls
class _ScfFunctions(i_scf.ScfFunctions):
    budget: _Budget

    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args):
        lb, ub, step, *carried = args
        values = tuple(carried)
        if step.value.data <= 0:
            self.budget.trap(op, f"scf.for step {step.value.data} (must be positive)")
        for i in range(lb.value.data, ub.value.data, step.value.data):
            self.budget.tick(op)
            iv = scalar_attr(i, op.lb.type, interpreter.index_bitwidth)
            values = interpreter.run_ssacfg_region(op.body, (iv, *values), "for_loop")
        return values

    @impl(scf.WhileOp)
    def run_while(self, interpreter: Interpreter, op: scf.WhileOp, args):
        loop_args = args
        while True:
            condition, *forwarded = interpreter.run_ssacfg_region(
                op.before_region, loop_args, "while.before_region"
            )
            if not condition:
                return tuple(forwarded)
            self.budget.tick(op)
            loop_args = interpreter.run_ssacfg_region(
                op.after_region, tuple(forwarded), "while.after_region"
            )


@register_impls
class _ArithFunctions(i_arith.ArithFunctions):
    budget: _Budget

    @impl(arith.DivSIOp)
    def run_divsi(self, interpreter: Interpreter, op: arith.DivSIOp, args):
        if args[1].value.data == 0:
            self.budget.trap(op, "division by zero")
        return super().run_divsi(interpreter, op, args).values

    @impl(arith.RemSIOp)
    def run_remsi(self, interpreter: Interpreter, op: arith.RemSIOp, args):
        if args[1].value.data == 0:
            self.budget.trap(op, "remainder by zero")
        return super().run_remsi(interpreter, op, args).values

    # f32: like xDSL 0.75's addf/subf/mulf we compute in Python double and let FloatAttr round
    # to f32 (exact inputs, so one correctly rounded binary32 operation, as gcc's float
    # arithmetic); xDSL has no divf/negf/sitofp/fptosi. Every NaN result is the canonical
    # positive quiet NaN (IEEE leaves its sign and payload open; see semantics.py), so we
    # define addf/subf/mulf here too.
    @impl(arith.AddfOp)
    def run_addf(self, interpreter: Interpreter, op: arith.AddfOp, args):
        return (_f32(args[0].value.data + args[1].value.data, op),)

    @impl(arith.SubfOp)
    def run_subf(self, interpreter: Interpreter, op: arith.SubfOp, args):
        return (_f32(args[0].value.data - args[1].value.data, op),)

    @impl(arith.MulfOp)
    def run_mulf(self, interpreter: Interpreter, op: arith.MulfOp, args):
        a, b = args[0].value.data, args[1].value.data
        if math.isinf(a) and b == 0.0 or math.isinf(b) and a == 0.0:
            return (_f32(math.nan, op),)
        return (_f32(a * b, op),)

    @impl(arith.DivfOp)
    def run_divf(self, interpreter: Interpreter, op: arith.DivfOp, args):
        a, b = args[0].value.data, args[1].value.data
        if b == 0.0:
            if math.isnan(a) or a == 0.0:
                q = math.nan
            else:
                q = math.copysign(math.inf, a) * math.copysign(1.0, b)
        else:
            q = a / b
        return (_f32(q, op),)

    @impl(arith.NegfOp)
    def run_negf(self, interpreter: Interpreter, op: arith.NegfOp, args):
        return (_f32(-args[0].value.data, op),)

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interpreter: Interpreter, op: arith.SIToFPOp, args):
        return (FloatAttr(float(args[0].value.data), op.result.type),)

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interpreter: Interpreter, op: arith.FPToSIOp, args):
        value = args[0].value.data
        bits = 64 if isinstance(op.result.type, builtin.IndexType) else op.result.type.width.data
        if not math.isfinite(value) or not -(2 ** (bits - 1)) <= math.trunc(value) < 2 ** (
            bits - 1
        ):
            self.budget.trap(op, f"float-to-int conversion of {value!r} (NaN or out of range)")
        return (scalar_attr(math.trunc(value), op.result.type, interpreter.index_bitwidth),)

    @impl(arith.ShRSIOp)
    def run_shrsi(self, interpreter: Interpreter, op: arith.ShRSIOp, args):
        if args[1].value.data < 0:
            self.budget.trap(op, f"shift by a negative amount ({args[1].value.data})")
        return super().run_shrsi(interpreter, op, args).values


@register_impls
class _MemRefFunctions(i_memref.MemRefFunctions):
    budget: _Budget
    names: dict

    def _check(self, op, array: ShapedArray, indices: tuple[int, ...]) -> None:
        if any(not 0 <= i < s for i, s in zip(indices, array.shape, strict=True)):
            name = self.names.get(id(array), "memref")
            shape = "x".join(map(str, array.shape))
            kind = "load" if isinstance(op, memref.LoadOp) else "store"
            self.budget.trap(
                op, f"out-of-bounds {kind} {name}[{', '.join(map(str, indices))}] (shape {shape})"
            )

    @impl(memref.StoreOp)
    def run_store(self, interpreter: Interpreter, op: memref.StoreOp, args):
        _, array, *indices = args
        self._check(op, array, tuple(int(i.value.data) for i in indices))
        return super().run_store(interpreter, op, args).values

    @impl(memref.LoadOp)
    def run_load(self, interpreter: Interpreter, op: memref.LoadOp, args):
        array, *indices = args
        self._check(op, array, tuple(int(i.value.data) for i in indices))
        return super().run_load(interpreter, op, args).values


def _f32(value: float, op) -> FloatAttr:
    """``value`` rounded to the op's f32 result; NaN is the canonical positive quiet NaN."""
    return FloatAttr(math.nan if math.isnan(value) else value, op.result.type)


def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if bits > 1 and value >> (bits - 1) else value


def run_reference(
    kernel: Kernel,
    inputs: Mapping[str, object],
    max_steps: int = MAX_STEPS,
    time_limit: float | None = None,
) -> tuple[list[int], dict]:
    """Interpret ``kernel``; returns (results, final memory by memref name as int64 arrays).

    f32 values (inputs, results, memory) are IEEE bit patterns as signed 32-bit integers, the
    form every RedPanda simulator uses (:mod:`.semantics`).

    Raises :class:`KernelTrap` (division by zero, out-of-bounds access: op and line named) or
    :class:`StepLimitError` (more than ``max_steps`` loop iterations or ``time_limit`` s).
    """
    interp = Interpreter(kernel.module)
    budget = _Budget(kernel, max_steps, time_limit)
    scf_f, arith_f, mem_f = _ScfFunctions(), _ArithFunctions(), _MemRefFunctions()
    scf_f.budget = arith_f.budget = mem_f.budget = budget
    mem_f.names = {}
    for functions in (arith_f, scf_f, mem_f, i_func.FuncFunctions(), i_builtin.BuiltinFunctions()):
        interp.register_implementations(functions)
    call_args, arrays = [], {}
    for name, arg in zip(kernel.arg_names(), kernel.func.body.block.args, strict=True):
        if name not in inputs:
            raise BadInputError(f"missing input '{name}'", field=name)
        if isinstance(arg.type, builtin.MemRefType) and is_float(arg.type):
            data = np.asarray(inputs[name], dtype=np.int64).ravel()
            floats = (data & 0xFFFFFFFF).astype(np.uint32).view(np.float32).tolist()
            arrays[name] = ShapedArray(TypedPtr.new_float32(floats), list(arg.type.get_shape()))
            mem_f.names[id(arrays[name])] = name
            call_args.append(arrays[name])
        elif isinstance(arg.type, builtin.MemRefType):
            data = np.asarray(inputs[name], dtype=np.int64).ravel().tolist()
            width = arg.type.element_type.width.data
            ptr = TypedPtr.new_int32(data) if width == 32 else TypedPtr.new_int64(data)
            arrays[name] = ShapedArray(ptr, list(arg.type.get_shape()))
            mem_f.names[id(arrays[name])] = name
            call_args.append(arrays[name])
        elif is_float(arg.type):
            call_args.append(FloatAttr(float(bits_f32(int(inputs[name]))), arg.type))
        else:
            call_args.append(scalar_attr(int(inputs[name]), arg.type, 64))
    results = interp.call_op(kernel.func.sym_name.data, tuple(call_args))
    out = []
    for value, rtype in zip(results, kernel.func.function_type.outputs, strict=True):
        if is_float(rtype):
            out.append(f32_bits(value.value.data))
            continue
        bits = 64 if isinstance(rtype, builtin.IndexType) else rtype.width.data
        out.append(_wrap(int(value.value.data), bits))
    memory = {}
    for n, a in arrays.items():
        if isinstance(a.data_ptr.xtype, builtin.Float32Type):
            bits = np.array(a.data, dtype=np.float32).view(np.int32)
            memory[n] = bits.astype(np.int64).reshape(a.shape)
        else:
            memory[n] = np.array(a.data, dtype=np.int64).reshape(a.shape)
    return out, memory
