"""The golden model: xDSL's interpreter run on the original (structured) kernel.

Every compiled dataflow graph is checked against this (differential testing). xDSL 0.75's
``scf.for`` implementation reads loop bounds as attributes but receives them as runtime
scalars, so we register a corrected ``scf.for``; everything else is xDSL's own code.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from xdsl.dialects import builtin, scf
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
from schedlab.redpanda.frontend import Kernel


@register_impls
class _ScfFunctions(i_scf.ScfFunctions):
    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args):
        lb, ub, step, *carried = args
        values = tuple(carried)
        for i in range(lb.value.data, ub.value.data, step.value.data):
            iv = scalar_attr(i, op.lb.type, interpreter.index_bitwidth)
            values = interpreter.run_ssacfg_region(op.body, (iv, *values), "for_loop")
        return values


def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if bits > 1 and value >> (bits - 1) else value


def run_reference(kernel: Kernel, inputs: Mapping[str, object]) -> tuple[list[int], dict]:
    """Interpret ``kernel``; returns (results, final memory by memref name as int64 arrays)."""
    interp = Interpreter(kernel.module)
    for functions in (i_arith.ArithFunctions(), _ScfFunctions(), i_memref.MemRefFunctions(),
                      i_func.FuncFunctions(), i_builtin.BuiltinFunctions()):
        interp.register_implementations(functions)
    call_args, arrays = [], {}
    for name, arg in zip(kernel.arg_names(), kernel.func.body.block.args, strict=True):
        if name not in inputs:
            raise BadInputError(f"missing input '{name}'", field=name)
        if isinstance(arg.type, builtin.MemRefType):
            data = np.asarray(inputs[name], dtype=np.int64).ravel().tolist()
            width = arg.type.element_type.width.data
            ptr = TypedPtr.new_int32(data) if width == 32 else TypedPtr.new_int64(data)
            arrays[name] = ShapedArray(ptr, list(arg.type.get_shape()))
            call_args.append(arrays[name])
        else:
            call_args.append(scalar_attr(int(inputs[name]), arg.type, 64))
    results = interp.call_op(kernel.func.sym_name.data, tuple(call_args))
    out = []
    for value, rtype in zip(results, kernel.func.function_type.outputs, strict=True):
        bits = 64 if isinstance(rtype, builtin.IndexType) else rtype.width.data
        out.append(_wrap(int(value.value.data), bits))
    memory = {n: np.array(a.data, dtype=np.int64).reshape(a.shape) for n, a in arrays.items()}
    return out, memory
