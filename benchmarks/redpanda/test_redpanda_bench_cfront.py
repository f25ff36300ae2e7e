"""Speed of the C front end and of the checked reference interpreter (issue 35).

Run with ``pytest benchmarks/redpanda/test_redpanda_bench_cfront.py``. Peers in the same run:
parsing the MLIR twin of the same kernel (what the C front end adds on top), and xDSL's own
interpreter functions without our trap/step checks (what naming a trap costs).
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.interpreter import Interpreter
from xdsl.interpreters import arith as i_arith
from xdsl.interpreters import builtin as i_builtin
from xdsl.interpreters import func as i_func
from xdsl.interpreters import memref as i_memref
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import TypedPtr

from schedlab.redpanda.cfront import c_kernel_from_text
from schedlab.redpanda.frontend import parse_kernel
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.workloads import c_kernel, c_kernel_text, kernel_text, random_inputs


def test_bench_c_front_end_mm2(benchmark):
    text = c_kernel_text("mm2", 8)
    kernel = benchmark(c_kernel_from_text, text, "mm2.c")
    assert kernel.name == "mm2"


def test_bench_mlir_parse_mm2_peer(benchmark):
    text = kernel_text("mm2", 8)
    kernel = benchmark(parse_kernel, text, "mm2.mlir")
    assert kernel.name == "mm2"


@pytest.fixture(scope="module")
def gemm():
    kernel = c_kernel("gemm", 6)
    return kernel, random_inputs(kernel, 0)


def test_bench_checked_reference_gemm(benchmark, gemm):
    kernel, inputs = gemm
    _, memory = benchmark(run_reference, kernel, inputs)
    assert memory["C"].shape == (6, 6)


def test_bench_unchecked_xdsl_gemm_peer(benchmark, gemm):
    """xDSL's own functions, but its scf.for cannot run our runtime-bound loops: we time the
    checked scf.for with unchecked arith/memref (the per-access bounds/trap checks' cost)."""
    kernel, inputs = gemm
    from schedlab.redpanda import reference

    def run():
        interp = Interpreter(kernel.module)
        scf_f = reference._ScfFunctions()
        scf_f.budget = reference._Budget(kernel, reference.MAX_STEPS, None)
        for functions in (
            i_arith.ArithFunctions(),
            scf_f,
            i_memref.MemRefFunctions(),
            i_func.FuncFunctions(),
            i_builtin.BuiltinFunctions(),
        ):
            interp.register_implementations(functions)
        args = [
            ShapedArray(
                TypedPtr.new_int32(np.asarray(inputs[n]).ravel().tolist()),
                list(kernel.memrefs()[n]),
            )
            for n in kernel.arg_names()
        ]
        return interp.call_op(kernel.func.sym_name.data, tuple(args))

    assert benchmark(run) == ()
