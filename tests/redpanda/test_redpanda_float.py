"""Float (IEEE binary32) kernels end to end: C front end, xDSL reference, token simulator and the
CGRA configuration simulator, each bit for bit against gcc (float, -O0, -ffp-contract=off) on
the same C file and inputs; the DHLS back end refuses them in one line."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.arch import load_arch
from schedlab.redpanda.backends.cgra import compile_config
from schedlab.redpanda.backends.config_sim import run_config
from schedlab.redpanda.cfront import c_kernel_from_text
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.dhls import compile_dhls, get_dhls_flow
from schedlab.redpanda.frontend import float_args, parse_kernel
from schedlab.redpanda.inputs import f32_values, load_inputs
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.reference import KernelTrap, run_reference
from schedlab.redpanda.semantics import evaluate, f32_bits
from schedlab.redpanda.simulator import simulate
from schedlab.redpanda.workloads import (
    FLOAT_C_KERNELS,
    c_kernel,
    c_kernel_text,
    random_inputs,
)

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not on PATH")

# special values: signed zeros, division by zero (inf), NaN through comparisons, rounding of
# int -> float, float -> int truncation, decimal constants rounded once to binary32
SPECIAL = """
#define N 8
float special(float a[N], float b[N], float y[N], int q[N], int big[N]) {
  float s = 0.0f;
  for (int i = 0; i < N; i++) {
    float d = a[i] / b[i];
    float e = -d * 0.1f + (float)big[i];
    int ordered = (d == d) && (e == e);
    int lt = a[i] < b[i], ne = a[i] != b[i], ge = a[i] >= b[i];
    y[i] = (lt ? e : -e) - 3.3f;
    if (ordered && e < 1e9f && e > -1e9f)
      q[i] = (int)e + lt * 4 + ne * 2 + ge;
    else
      q[i] = -1 - ne;
    if (ordered) s += e;
    float m = a[i] * 1000.0f;
    big[i] = (m == m && m < 1e9f && m > -1e9f) ? (int)m / 7 : -9;
  }
  return s;
}
"""
SPECIAL_A = [1.5, -0.0, 3.0, float("nan"), 1e30, -7.25, 0.0, 2.0**-130]
SPECIAL_B = [0.0, 0.0, -0.0, 1.0, 1e-30, 3.0, 5.0, 3.0]
SPECIAL_BIG = [16777217, -16777219, 123456789, 7, -5, 2**31 - 1, 0, 1]


def _bits_of(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.int32).astype(np.int64)


def _gcc(tmp_path, source: str, kernel, inputs: dict) -> tuple[list[int], dict]:
    """Compile ``source`` with gcc (float, -O0, -ffp-contract=off) and run it on ``inputs``
    (f32 as bit patterns); returns (results, memory) as bit patterns, like the simulators."""
    floats = {
        n
        for n, a in zip(kernel.arg_names(), kernel.func.body.block.args, strict=True)
        if "f32" in str(a.type)
    }
    shapes, lines, args = kernel.memrefs(), [], []
    for name in kernel.arg_names():
        ctype = "float" if name in floats else "int"
        if name in shapes:
            flat = np.asarray(inputs[name], dtype=np.int64).ravel()
            words = ", ".join(f"0x{int(v) & 0xFFFFFFFF:08x}u" for v in flat)
            dims = "".join(f"[{d}]" for d in shapes[name])
            lines.append(f"static unsigned int {name}_w[] = {{{words}}};")
            lines.append(f"static {ctype} {name}_v{dims};")
            args.append(f"{name}_v")
        else:
            lines.append(f"static unsigned int {name}_w = 0x{int(inputs[name]) & 0xFFFFFFFF:08x}u;")
            lines.append(f"static {ctype} {name}_v;")
            args.append(f"{name}_v")
    body = [f"memcpy(&{n}_v, &{n}_w, sizeof {n}_v);" for n in kernel.arg_names()]
    ret = kernel.func.function_type.outputs.data
    call = f"{kernel.func.sym_name.data}({', '.join(args)})"
    if ret:
        rtype = "float" if "f32" in str(ret[0]) else "int"
        body.append(f"{rtype} r = {call}; unsigned int rw; memcpy(&rw, &r, 4);")
        body.append('printf("%d\\n", (int)rw);')
    else:
        body.append(f'{call}; printf("\\n");')
    for name in shapes:
        body.append(
            f"for (unsigned k = 0; k < sizeof {name}_v / 4; k++) {{ unsigned int w; "
            f'memcpy(&w, (char *)&{name}_v + 4 * k, 4); printf("%d ", (int)w); }}'
            ' printf("\\n");'
        )
    harness = "\n".join(
        ["#include <stdio.h>", "#include <string.h>", source, *lines, "int main(void) {"]
        + body
        + ["return 0; }"]
    )
    src, exe = tmp_path / f"{kernel.name}.c", tmp_path / kernel.name
    src.write_text(harness)
    subprocess.run(
        [GCC, "-O0", "-ffp-contract=off", "-fwrapv", "-o", str(exe), str(src)],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rows = out.split("\n")
    results = [int(rows[0])] if ret else []
    memory = {
        name: np.array([int(w) for w in rows[1 + i].split()], dtype=np.int64).reshape(shape)
        for i, (name, shape) in enumerate(shapes.items())
    }
    return results, memory


def _same(results, memory, ref_results, ref_memory, nan_of=None) -> bool:
    """Bit for bit; against gcc (``nan_of``: the kernel) any NaN equals any NaN in f32 data:
    IEEE 754 leaves a NaN result's sign and payload open (x86 makes 0/0 negative, schedlab
    canonical positive; see semantics.py)."""
    floats = float_args(nan_of) if nan_of is not None else set()
    ret_float = nan_of is not None and "f32" in str(nan_of.func.function_type.outputs)

    def equal(a, b, is_float) -> bool:
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        if a.shape != b.shape:
            return False
        same = a == b
        if is_float:
            same |= np.isnan(f32_values(a)) & np.isnan(f32_values(b))
        return bool(np.all(same))

    return equal(results, ref_results, ret_float) and all(
        equal(memory[n], ref_memory[n], n in floats) for n in ref_memory
    )


@needs_gcc
@pytest.mark.parametrize("name", FLOAT_C_KERNELS)
def test_float_kernels_equal_gcc_bit_for_bit_on_every_path(tmp_path, name):
    kernel = c_kernel(name, 4)
    inputs = random_inputs(kernel, 3)
    gcc_results, gcc_memory = _gcc(tmp_path, c_kernel_text(name, 4), kernel, inputs)
    ref_results, ref_memory = run_reference(kernel, inputs)
    assert _same(ref_results, ref_memory, gcc_results, gcc_memory, kernel)
    for flow in ("redpanda", "baseline"):
        graph = middle_end(kernel, get_flow(flow), "spatial")
        run = simulate(graph, inputs)
        assert _same(run.results, run.memory, ref_results, ref_memory), flow
    graph = middle_end(kernel, get_flow("redpanda"), "temporal")
    _, config = compile_config(graph, load_arch("mesh4x4"), "temporal")
    run = run_config(config, inputs)
    assert _same(run.results, run.memory, ref_results, ref_memory)
    # the data really are floats: some result or memory word is not an integer value
    values = np.concatenate([np.ravel(f32_values(m)) for m in gcc_memory.values()] or [[]])
    if gcc_results and not np.any(values % 1):
        values = np.array([f32_values(gcc_results[0])])
    assert np.any(values % 1)


@needs_gcc
def test_special_values_equal_gcc_bit_for_bit(tmp_path):
    kernel = c_kernel_from_text(SPECIAL, "special.c")
    inputs = dict(
        a=_bits_of(SPECIAL_A),
        b=_bits_of(SPECIAL_B),
        y=np.zeros(8, dtype=np.int64),
        q=np.zeros(8, dtype=np.int64),
        big=np.array(SPECIAL_BIG, dtype=np.int64),
    )
    gcc_results, gcc_memory = _gcc(tmp_path, SPECIAL, kernel, inputs)
    ref = run_reference(kernel, inputs)
    assert _same(*ref, gcc_results, gcc_memory, kernel)
    for mode in ("spatial", "temporal"):  # simulators: bit for bit, NaNs included
        run = simulate(middle_end(kernel, get_flow("redpanda"), mode), inputs)
        assert _same(run.results, run.memory, *ref), mode
    _, config = compile_config(
        middle_end(kernel, get_flow("redpanda"), "temporal"), load_arch("mesh4x4"), "temporal"
    )
    run = run_config(config, inputs)
    assert _same(run.results, run.memory, *ref)
    y = f32_values(gcc_memory["y"])
    assert np.isinf(y).any() and np.isnan(y).any()  # the special values were exercised


MLIR = """
func.func @k(%a: memref<4xf32>, %s: f32, %n: i32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %z = arith.constant 0.5 : f32
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %z) -> (f32) {
    %x = memref.load %a[%i] : memref<4xf32>
    %m = arith.mulf %x, %s : f32
    %d = arith.divf %m, %acc : f32
    %t = arith.addf %acc, %d : f32
    %ng = arith.negf %t : f32
    %c = arith.cmpf olt, %ng, %z : f32
    %sel = arith.select %c, %t, %ng : f32
    %ii = arith.sitofp %n : i32 to f32
    %q = arith.subf %sel, %ii : f32
    %qi = arith.fptosi %q : f32 to i32
    %qf = arith.sitofp %qi : i32 to f32
    memref.store %qf, %a[%i] : memref<4xf32>
    scf.yield %q : f32
  }
  func.return %r : f32
}
"""


def test_mlir_f32_ops_match_a_float32_model_and_the_simulator():
    kernel = parse_kernel(MLIR, "k.mlir")
    a0 = np.array([1.5, -2.25, 3.1, 0.7], dtype=np.float32)
    s, n = np.float32(1.3), 2
    inputs = dict(a=_bits_of(a0), s=f32_bits(float(s)), n=n)
    # the same loop in numpy float32, op by op
    acc, a = np.float32(0.5), a0.copy()
    for i in range(4):
        t = acc + (a[i] * s) / acc
        sel = t if -t < np.float32(0.5) else -t
        q = sel - np.float32(n)
        a[i] = np.float32(int(q))
        acc = q
    results, memory = run_reference(kernel, inputs)
    assert results == [f32_bits(float(acc))] and np.array_equal(memory["a"], _bits_of(a))
    for flow in ("redpanda", "dynamatic"):
        run = simulate(middle_end(kernel, get_flow(flow), "spatial"), inputs)
        assert _same(run.results, run.memory, results, memory)


def test_fptosi_of_nan_traps_in_the_reference_with_its_line():
    src = "int f(float a[2]) {\n  int s = 0;\n  s = (int)(a[0] / a[1]);\n  return s;\n}"
    kernel = c_kernel_from_text(src, "t.c")
    with pytest.raises(KernelTrap, match=r"NaN or out of range.*t\.c line 3"):
        run_reference(kernel, dict(a=_bits_of([0.0, 0.0])))
    assert evaluate("fptosi", [f32_bits(float("nan"))], 32, 32) == 0  # hardware: 0


def test_dhls_refuses_float_kernels_in_one_line():
    kernel = c_kernel("fir_float", 4)
    with pytest.raises(BadInputError) as err:
        compile_dhls(kernel, get_dhls_flow("redpanda"))
    message = str(err.value)
    assert "integer datapaths only: arith.mulf at fir_float.c line 10" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("src", "line", "words"),
    [
        ("float f(float a[2]) {\n  return a[0] * 0.5;\n}", 2, "double in C; write 0.5f"),
        ("void f(double a[2]) { }", 1, "binary32"),
        ("void f(float a[2], int b[2]) {\n  b[0] = b[1] % a[0];\n}", 2, "operator %"),
        ("void f(float a[2]) {\n  float i = 1.0f;\n  a[i] = 0;\n}", 3, "integers, not float"),
        ("int f(float a[2]) {\n  return ~a[0];\n}", 2, "operator ~"),
    ],
)
def test_unsupported_float_c_is_a_line_numbered_error(src, line, words):
    with pytest.raises(BadInputError, match=words) as err:
        c_kernel_from_text(src, "bad.c")
    assert err.value.line == line and "\n" not in str(err.value)


def test_float_inputs_from_json_and_their_errors(tmp_path):
    kernel = c_kernel("gemm_float", 2)
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"A": [[0.1, 2], [3, -4.5]], "alpha": 1.5, "beta": -1}))
    inputs, filled = load_inputs(path, kernel)
    assert set(filled) == {"B", "C"}
    assert np.array_equal(inputs["A"], _bits_of([[0.1, 2], [3, -4.5]]))
    assert inputs["alpha"] == f32_bits(1.5) and f32_values(inputs["beta"]) == -1.0
    for data, words in (({"A": "x"}, "numbers"), ({"alpha": 1e39}, "outside the float")):
        path.write_text(json.dumps(data))
        with pytest.raises(BadInputError, match=words) as err:
            load_inputs(path, kernel)
        assert "in.json" in str(err.value) and "\n" not in str(err.value)


# --- differential: random float C kernels (usual arithmetic conversions) vs gcc -----------
_FLEAVES = ["x", "s", "a[(i + 3) & 7]", "0.25f", "1.5f", "3.3f", "(-0.1f)", "(float)k"]
_ILEAVES = ["k", "t", "i", "(int)x", "(int)a[(i + 1) & 7]", "3", "-2"]


@st.composite
def _fexpr(draw, depth=0):
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_FLEAVES))
    kind = draw(st.integers(0, 5))
    sub = lambda: _fexpr(depth + 1)  # noqa: E731
    if kind <= 2:
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        return f"({draw(sub())} {op} {draw(sub())})"
    if kind == 3:
        return f"(-({draw(sub())}))"
    if kind == 4:
        return f"({draw(_fcond(depth + 1))} ? {draw(sub())} : {draw(sub())})"
    return f"({draw(sub())} {draw(st.sampled_from(['+', '*']))} {draw(_iexpr())})"


@st.composite
def _iexpr(draw, depth=0):
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(_ILEAVES))
    op = draw(st.sampled_from(["+", "-", "*"]))
    return f"({draw(_iexpr(depth + 1))} {op} {draw(_iexpr(depth + 1))})"


@st.composite
def _fcond(draw, depth=0):
    op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    return f"({draw(_fexpr(depth + 1))} {op} {draw(_fexpr(depth + 1))})"


@st.composite
def _float_program(draw):
    stmts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            stmts.append(f"s {draw(st.sampled_from(['=', '+=', '-=', '*=']))} {draw(_fexpr())};")
        elif kind == 1:
            stmts.append(f"y[i] = {draw(_fexpr())};")
        elif kind == 2:
            stmts.append(f"if {draw(_fcond())} s = {draw(_fexpr())}; else y[i] = {draw(_fexpr())};")
        else:
            stmts.append(f"t += {draw(_iexpr())};")
    body = "\n    ".join(stmts)
    return f"""
float f(float a[8], int b[8], float y[8]) {{
  float s = 0.0f;
  int t = 0;
  for (int i = 0; i < 8; i++) {{
    float x = a[i];
    int k = b[i];
    {body}
  }}
  return s + t;
}}
"""


@needs_gcc
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: a failure prints its program
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(source=_float_program())
def test_random_float_c_kernels_equal_gcc(tmp_path, source):
    kernel = c_kernel_from_text(source, "r.c")
    rng = np.random.default_rng(len(source))
    inputs = dict(
        a=_bits_of(rng.uniform(-4, 4, 8)),
        b=rng.integers(-8, 8, 8),
        y=_bits_of(rng.uniform(-1, 1, 8)),
    )
    ref = run_reference(kernel, inputs)
    assert _same(*ref, *_gcc(tmp_path, source, kernel, inputs), kernel), source
    run = simulate(middle_end(kernel, get_flow("redpanda"), "spatial"), inputs)
    assert _same(run.results, run.memory, *ref), source
