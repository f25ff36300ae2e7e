"""C front end (pycparser -> scf/memref MLIR): the C suite equals the MLIR suite, kernels of our
own against independent NumPy models, line-numbered errors, affine input, and a parser fuzz."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.cgra import CGRA
from schedlab.redpanda.cfront import c_kernel_from_text, translate
from schedlab.redpanda.compiler import evaluate
from schedlab.redpanda.frontend import parse_kernel
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.workloads import (
    C_KERNELS,
    KERNELS,
    c_kernel,
    c_kernel_text,
    load_suite_kernel,
    random_inputs,
)


def _same(a, b) -> bool:
    return (
        a[0] == b[0]
        and set(a[1]) == set(b[1])
        and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])
    )


@pytest.mark.parametrize("name", KERNELS)
def test_c_kernel_equals_its_mlir_twin_in_the_interpreter(name):
    ck, mk = c_kernel(name, 4), load_suite_kernel(name, 4)
    assert ck.arg_names() == mk.arg_names() and ck.memrefs() == mk.memrefs()
    for seed in (0, 3):
        assert _same(
            run_reference(ck, random_inputs(ck, seed)), run_reference(mk, random_inputs(mk, seed))
        )


@pytest.mark.parametrize(
    "name", ["spmv", "isort", "bsearch", "gcd", "matpower", "gsumif", "condstore", "jacobi1d"]
)
def test_c_kernel_on_the_token_simulator_matches_the_interpreter(name):
    kernel = c_kernel(name, 4)
    inputs = random_inputs(kernel, 1)
    ev = evaluate(
        kernel, get_flow("redpanda"), inputs, CGRA(rows=4, cols=4, contexts=16), "temporal"
    )
    assert ev.correct and ev.sim.cycles > 0


def test_every_shipped_c_kernel_loads_at_two_sizes():
    for name in C_KERNELS:
        for size in (2, 5):
            kernel = c_kernel(name, size)
            assert kernel.name == name and kernel.language == "c"
            assert f"#define N {size}" in c_kernel_text(name, size)


def test_dynamatic_kernels_against_numpy_models():
    k = c_kernel("matpower", 4)
    inp = random_inputs(k, 2)
    x = np.array(inp["x"]).copy()
    for r in range(1, 4):
        for i in range(16):
            x[r][inp["row"][i]] += inp["a"][i] * x[r - 1][inp["col"][i]]
    assert np.array_equal(run_reference(k, inp)[1]["x"], x)
    k = c_kernel("gsum", 4)
    inp = random_inputs(k, 2)
    expect = sum(
        ((((((d + 3) * d + 2) * d + 1) * d + 5) * d + 4) * d + 7) for d in inp["a"] if d >= 0
    )
    assert run_reference(k, inp)[0] == [int(expect)]


# --- kernels the suite does not have (an outside reviewer's kind), vs NumPy -------------------
TRANSPOSED_SPMV = """
#define N 4
#define NNZ 16
/* y = A^T x with A in CSR: data-dependent inner bound, scatter y[col[k]] += */
void spmvt(int rowptr[N + 1], int col[NNZ], int val[NNZ], int x[N], int y[N]) {
  for (int i = 0; i < N; i++) {
    int xi = x[i];
    for (int k = rowptr[i]; k < rowptr[i + 1]; k++)
      y[col[k]] += val[k] * xi;
  }
}
"""
CARRIED = """
int carried(int a[12], int b[12]) {
  int neg = 0;
  b[0] = a[0];
  for (int i = 1; i < 12; i++) {
    if (a[i] > b[i - 1]) {
      b[i] = a[i] - b[i - 1];
    } else {
      b[i] = b[i - 1] + 1;
      neg = neg + 1;
    }
  }
  return neg;
}
"""
WAR = """
void war(int a[10], int idx[10], int out[10]) {
  for (int i = 0; i < 10; i++) {
    out[i] = a[i];          /* read a[i] ... */
    a[idx[i]] = i * 3 - 7;  /* ... then an indirect write may overwrite a later a[j] */
  }
}
"""


def _own_inputs(seed):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 5, size=4)
    rowptr = np.concatenate([[0], np.cumsum(counts)])
    return dict(
        rowptr=rowptr,
        col=rng.integers(0, 4, size=16),
        val=rng.integers(-5, 6, 16),
        x=rng.integers(-5, 6, 4),
        y=rng.integers(-5, 6, 4),
    ), rng


@pytest.mark.parametrize("seed", [0, 1])
def test_kernels_of_our_own_against_numpy_and_the_simulator(seed):
    inp, rng = _own_inputs(seed)
    k = c_kernel_from_text(TRANSPOSED_SPMV, "spmvt.c")
    y = inp["y"].copy()
    for i in range(4):
        for kk in range(inp["rowptr"][i], inp["rowptr"][i + 1]):
            y[inp["col"][kk]] += inp["val"][kk] * inp["x"][i]
    ref = run_reference(k, inp)
    assert np.array_equal(ref[1]["y"], y)
    for mode, arch in (("spatial", CGRA(rows=6, cols=6)), ("temporal", CGRA(rows=4, cols=4))):
        assert evaluate(k, get_flow("redpanda"), inp, arch, mode).correct

    a = rng.integers(-6, 7, 12)
    k = c_kernel_from_text(CARRIED, "carried.c")
    b, neg = np.zeros(12, dtype=np.int64), 0
    b[0] = a[0]
    for i in range(1, 12):
        if a[i] > b[i - 1]:
            b[i] = a[i] - b[i - 1]
        else:
            b[i], neg = b[i - 1] + 1, neg + 1
    inputs = dict(a=a, b=np.zeros(12, dtype=np.int64))
    ref = run_reference(k, inputs)
    assert ref[0] == [neg] and np.array_equal(ref[1]["b"], b)
    assert evaluate(k, get_flow("redpanda"), inputs, CGRA(rows=4, cols=4), "temporal").correct

    k = c_kernel_from_text(WAR, "war.c")
    a, idx = rng.integers(-9, 10, 10), rng.integers(0, 10, 10)
    aa, out = a.copy(), np.zeros(10, dtype=np.int64)
    for i in range(10):
        out[i] = aa[i]
        aa[idx[i]] = i * 3 - 7
    inputs = dict(a=a, idx=idx, out=np.zeros(10, dtype=np.int64))
    ref = run_reference(k, inputs)
    assert np.array_equal(ref[1]["a"], aa) and np.array_equal(ref[1]["out"], out)
    for flow in ("redpanda", "baseline"):
        assert evaluate(k, get_flow(flow), inputs, CGRA(rows=4, cols=4), "temporal").correct


BREAKS = """
int f(int a[8], int b[8]) {
  int found = -1, s = 0;
  for (int i = 0; i < 8; i++) {
    if (a[i] < 0) continue;
    s += a[i];
    if (a[i] == 5) { found = i; break; }
    b[i] = s;
  }
  int j = 0;
  while (1) {
    j++;
    if (j >= 3) break;
  }
  do { j += 10; if (j > 20) break; } while (j < 100);
  return found * 1000 + s * 10 + j;
}
"""


def test_break_and_continue_become_carried_flags():
    kernel = c_kernel_from_text(BREAKS, "b.c")

    def model(a):
        b, found, s, j = [0] * 8, -1, 0, 0
        for i in range(8):
            if a[i] < 0:
                continue
            s += a[i]
            if a[i] == 5:
                found = i
                break
            b[i] = s
        j = 3
        while True:
            j += 10
            if j > 20 or not j < 100:
                break
        return found * 1000 + s * 10 + j, b

    for a in ([1, -2, 3, 5, 7, 5, 1, 1], [1, 2, 3, 4, 6, 7, 8, 9], [-1] * 8):
        inputs = dict(a=np.array(a), b=np.zeros(8, dtype=np.int64))
        result, memory = run_reference(kernel, inputs)
        assert (result[0], list(memory["b"])) == model(a)
    assert evaluate(kernel, get_flow("redpanda"), inputs, CGRA(rows=4, cols=4), "temporal").correct


CALLS = """
#define N 6
int clamp(int v, int lo, int hi) { if (v < lo) v = lo; if (v > hi) v = hi; return v; }
int dot(int u[N], int w[N], int n) { int s = 0; for (int i = 0; i < n; i++) s += u[i] * w[i];
  return s; }
void bump(int h[N], int k) { h[clamp(k, 0, N - 1)] += 1; }
int kern(int a[N], int b[N], int h[N]) {
  int t = 0;
  for (int i = 0; i < N; i++) { bump(h, a[i]); t += clamp(a[i] * b[i], -10, 10); }
  return t + dot(a, b, N);
}
"""


MACROS = """#define N 8
#define M 4+1
#define NEG -1
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a,b) ((a) < (b) ? \\
   (a) : (b))
#define SQ(x) x * x
int f(int a[N]) {
  int m = a[0], lo = a[0], s = 0;
  for (int i = 1; i < N; i++) { m = MAX(m, a[i]); lo = MIN(lo, MAX(a[i], -3)); s += SQ(a[i] + 1); }
  return m * 10000 + lo * 100 + s + 2 * M - NEG;
}
"""


def test_macros_expand_as_the_c_preprocessor_does():
    kernel = c_kernel_from_text(MACROS, "m.c")  # 69717: gcc on the same text and inputs
    assert run_reference(kernel, dict(a=np.array([3, -5, 7, 2, -9, 4, 0, 1])))[0] == [69717]
    assert kernel.op_line(next(o for o in kernel.func.walk() if o.name == "scf.for")) == 10
    for src, words in (
        ("#define F(x) x\nint f(int a[2]) { return F(a[0], 1); }", "takes 1 argument"),
        ("#define F(x) x\nint f(int a[2]) { return F(a[0]\n); }", "one line"),
    ):
        with pytest.raises(BadInputError, match=words):
            c_kernel_from_text(src, "c.c")


def test_helper_functions_are_inlined():
    kernel = c_kernel_from_text(CALLS, "calls.c")  # kern: the one function nobody calls
    assert kernel.name == "kern" and set(kernel.memrefs()) == {"a", "b", "h"}
    rng = np.random.default_rng(4)
    a, b = rng.integers(-8, 8, 6), rng.integers(-8, 8, 6)
    inputs = dict(a=a, b=b, h=np.zeros(6, dtype=np.int64))
    h, t = np.zeros(6, dtype=np.int64), 0
    for i in range(6):
        h[min(max(a[i], 0), 5)] += 1
        t += min(max(a[i] * b[i], -10), 10)
    result, memory = run_reference(kernel, inputs)
    assert result == [t + int(a @ b)] and np.array_equal(memory["h"], h)
    assert evaluate(kernel, get_flow("redpanda"), inputs, CGRA(rows=4, cols=4), "temporal").correct
    for src, words in (
        ("int g(int x) { return g(x); }\nint f(int a[2]) { return g(a[0]); }", "recursive"),
        ("int g(int x[3]) { return x[0]; }\nint f(int a[2]) { return g(a); }", "does not match"),
        ("int g(int x) { return x; }\nint f(int a[2]) { return g(a[0], 1); }", "argument"),
        ("void g(int x) { x = 1; }\nint f(int a[2]) { return g(a[0]); }", "returns void"),
    ):
        with pytest.raises(BadInputError, match=words):
            c_kernel_from_text(src, "c.c")


def test_c_semantics_short_circuit_ternary_and_loops():
    src = """
    int f(int a[8], int n) {
      int s = 0, i = 0, j = 7;
      while (i < 8 && a[i] != 0) i++;        /* a[8] must not be read when i == 8 */
      do { s += j; j -= 2; } while (j > 0);
      for (int k = 0; k <= n; k += 2) s += (k > 3 ? a[k % 8] : -k) << 1;
      for (i = 7; i >= 0; i--) s ^= ~a[i] | (a[i] / 3) % 5;
      if (!(s > 0) || a[0] == 1) s = s * -1; else if (s > 100) s = 100;
      return s + i;
    }"""
    k = c_kernel_from_text(src, "f.c")

    def model(a, n):
        s, i, j = 0, 0, 7
        while i < 8 and a[i] != 0:
            i += 1
        while True:
            s += j
            j -= 2
            if not j > 0:
                break
        for kk in range(0, n + 1, 2):
            s += (a[kk % 8] if kk > 3 else -kk) << 1
        for i in range(7, -1, -1):
            q = int(a[i] / 3)
            s ^= ~a[i] | (q - int(q / 5) * 5)
        i = -1  # C leaves the counter one past the last iteration
        if not (s > 0) or a[0] == 1:
            s = -s
        elif s > 100:
            s = 100
        return s + i

    rng = np.random.default_rng(5)
    for _ in range(4):
        a = rng.integers(-4, 5, 8)
        n = int(rng.integers(0, 9))
        assert run_reference(k, dict(a=a, n=n))[0] == [model(list(a), n)]
    ev = evaluate(k, get_flow("redpanda"), dict(a=a, n=n), CGRA(rows=4, cols=4), "temporal")
    assert ev.correct


@pytest.mark.parametrize(
    "src, line, words",
    [
        ("void f(double a[4]) { }", 1, "binary32"),
        ("void f(int a[4]) {\n  a[0] = 2.5;\n}", 2, "double in C"),
        ("void f(int *a) { }", 1, "pointers"),
        ("void f(int a[4]) {\n\n  g(a);\n}", 3, "not defined in this file"),
        ("void f(int a[4]) {\n  if (a[0])\n    break;\n}", 3, "break"),
        ("void f(int a[4]) {\n  a[0] = ;\n}", 2, "syntax"),
        ("void f(int a[4]) {\n  int t[4];\n}", 2, "local array"),
        ("void f(int a[4]) {\n  a[0] = q;\n}", 2, "undeclared"),
        ("void f(int a[4]) {\n  switch (a[0]) { default: a[1] = 0; }\n}", 2, "switch"),
        ("void f(long a[4]) { }", 1, "32-bit"),
        ("#if 1\nvoid f(int a[4]) { }\n#endif", 1, "#if"),
        ("#define F(x, ...) x\nvoid f(int a[4]) { }", 1, "parameters must be names"),
        ("void f(int a[4]) {\n  int i = 0;\n  a[i++] = 1;\n}", 3, "statement"),
    ],
)
def test_unsupported_c_is_a_line_numbered_one_line_error(src, line, words):
    with pytest.raises(BadInputError) as exc:
        c_kernel_from_text(src, "k.c")
    assert exc.value.line == line and str(exc.value).startswith(f"k.c:{line}:")
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_defines_override_sizes_and_translation_maps_lines():
    tr = translate(
        "#define N 3\nvoid f(int a[N]) {\n  a[1] = a[0] / 2;\n}", "f.c", defines={"N": 6}
    )
    assert "memref<6xi32>" in tr.mlir
    kernel = parse_kernel(tr.mlir, "f.c")
    kernel.line_map = tr.line_map
    div = next(op for op in kernel.func.walk() if op.name == "arith.divsi")
    assert kernel.op_line(div) == 3


AFFINE = """
func.func @aff(%a: memref<8xi32>, %b: memref<8xi32>) {
  affine.for %i = 1 to 7 {
    %l = affine.load %a[%i - 1] : memref<8xi32>
    %r = affine.load %a[%i + 1] : memref<8xi32>
    %s = arith.addi %l, %r : i32
    affine.store %s, %b[%i] : memref<8xi32>
  }
  func.return
}
"""


def test_affine_input_is_lowered_to_scf():
    kernel = parse_kernel(AFFINE, "aff.mlir")
    assert not any(op.name.startswith("affine.") for op in kernel.func.walk())
    a = np.arange(8) * 3 - 5
    _, mem = run_reference(kernel, dict(a=a, b=np.zeros(8, dtype=np.int64)))
    assert list(mem["b"][1:7]) == [int(a[i - 1] + a[i + 1]) for i in range(1, 7)]
    inputs = dict(a=a, b=np.zeros(8, dtype=np.int64))
    assert evaluate(kernel, get_flow("redpanda"), inputs, CGRA(rows=4, cols=4), "temporal").correct


_GEMM = c_kernel_text("gemm", 3)
_TOKENS = [
    "for",
    "(",
    ")",
    "{",
    "}",
    ";",
    "int",
    "float",
    "a[i]",
    "=",
    "+=",
    "if",
    "else",
    "while",
    "&&",
    "?",
    ":",
    "/",
    "0",
    "N",
    "#define",
    "\n",
    "i++",
    "return",
    "*",
    "[",
]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(max_size=120),
        st.lists(st.sampled_from(_TOKENS), max_size=40).map(" ".join),
        st.tuples(
            st.integers(0, len(_GEMM)),
            st.integers(0, 40),
            st.text(st.sampled_from("{}()[];+-*/=<>!&|?:#\n iNk0x."), max_size=6),
        ).map(lambda t: _GEMM[: t[0]] + t[2] + _GEMM[t[0] + t[1] :]),
    )
)
def test_fuzzed_c_gives_a_kernel_or_a_one_line_error(text):
    try:
        kernel = c_kernel_from_text(text, "fuzz.c")
    except BadInputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.c")
    else:
        assert kernel.func is not None


# --- differential: random C kernels of the supported subset vs gcc -fwrapv ------------------
GCC = shutil.which("gcc")
VARS = ["x", "y", "z"]


@st.composite
def _expr(draw, depth=0, loop_vars=()):
    names = VARS + list(loop_vars)
    leaves = [
        st.sampled_from(names),
        st.integers(-9, 9).map(lambda v: f"({v})"),
        st.sampled_from(["a[{}]", "b[{}]"]).flatmap(
            lambda t: st.sampled_from(names).map(lambda n: t.format(f"({n}) & 7"))
        ),
    ]
    if depth >= 3:
        return draw(st.one_of(*leaves))
    sub = lambda: _expr(depth + 1, loop_vars)  # noqa: E731
    kind = draw(st.integers(0, 9))
    if kind <= 2:
        return draw(st.one_of(*leaves))
    if kind <= 5:
        op = draw(
            st.sampled_from(
                ["+", "-", "*", "&", "|", "^", "<", "<=", ">", ">=", "==", "!=", "&&", "||"]
            )
        )
        return f"({draw(sub())} {op} {draw(sub())})"
    if kind == 6:
        op = draw(st.sampled_from(["/", "%"]))
        return f"({draw(sub())} {op} ((({draw(sub())}) & 7) + 1))"
    if kind == 7:
        op = draw(st.sampled_from(["<<", ">>"]))
        return f"({draw(sub())} {op} (({draw(sub())}) & 7))"
    if kind == 8:
        return f"({draw(sub())} ? {draw(sub())} : {draw(sub())})"
    op = draw(st.sampled_from(["-", "~", "!"]))
    return f"({op}{draw(sub())})"


@st.composite
def _stmts(draw, depth=0, loop_vars=(), n=None, in_loop=False):
    out = []
    count = draw(st.integers(1, 3)) if n is None else n
    for _ in range(count):
        kind = draw(st.integers(0, 11 if depth < 2 else 4))
        e = lambda: draw(_expr(0, loop_vars))  # noqa: E731
        if kind >= 10 and in_loop:
            out.append(f"if ({e()}) {'break' if kind == 10 else 'continue'};")
        elif kind <= 2 or kind >= 10:
            v = draw(st.sampled_from(VARS))
            op = draw(st.sampled_from(["=", "+=", "-=", "*=", "^=", "|=", "&="]))
            out.append(f"{v} {op} {e()};")
        elif kind <= 4:
            arr = draw(st.sampled_from(["a", "b"]))
            op = draw(st.sampled_from(["=", "+=", "^="]))
            out.append(f"{arr}[({e()}) & 7] {op} {e()};")
        elif kind <= 6:
            body = draw(_stmts(depth + 1, loop_vars, in_loop=in_loop))
            if draw(st.booleans()):
                other = draw(_stmts(depth + 1, loop_vars, in_loop=in_loop))
                out.append(f"if ({e()}) {{ {body} }} else {{ {other} }}")
            else:
                out.append(f"if ({e()}) {{ {body} }}")
        elif kind <= 8:
            iv = f"i{depth}"
            bound = draw(st.sampled_from(["3", "n & 3", "x & 3", "a[0] & 3"]))
            body = draw(_stmts(depth + 1, (*loop_vars, iv), in_loop=True))
            out.append(f"for (int {iv} = 0; {iv} < ({bound}); {iv}++) {{ {body} }}")
        else:
            c = f"c{depth}"
            body = draw(_stmts(depth + 1, loop_vars, in_loop=True))
            cond = e()
            out.append(f"{{ int {c} = 0; while ({c} < 3 && {cond}) {{ {c}++; {body} }} }}")
    return " ".join(out)


@st.composite
def _program(draw):
    body = draw(_stmts(0, (), draw(st.integers(2, 5))))
    init = [draw(st.integers(-5, 5)) for _ in VARS]
    return (
        "int f(int a[8], int b[8], int n) {\n"
        f"  int x = {init[0]}, y = {init[1]}, z = {init[2]};\n  {body}\n"
        "  return x + 3 * y - 7 * z;\n}\n"
    )


MAIN = """
#include <stdio.h>
int main(void) {
  int a[8] = {%s}, b[8] = {%s};
  int r = f(a, b, %d);
  printf("%%d", r);
  for (int i = 0; i < 8; i++) printf(" %%d", a[i]);
  for (int i = 0; i < 8; i++) printf(" %%d", b[i]);
  printf("\\n");
  return 0;
}
"""


@pytest.mark.skipif(GCC is None, reason="gcc not installed (the C reference)")
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    _program(),
    st.lists(st.integers(-20, 20), min_size=8, max_size=8),
    st.lists(st.integers(-20, 20), min_size=8, max_size=8),
    st.integers(-5, 9),
)
def test_random_c_kernels_match_gcc(tmp_path_factory, src, a, b, n):
    """Generated kernels (loops, branches, short circuits, ?:, /, %, shifts, indirect stores):
    the xDSL interpreter on our MLIR equals gcc -fwrapv on the C (fuzzed offline: 200 programs;
    150 also through the token simulator under the redpanda and baseline flows)."""
    work = tmp_path_factory.mktemp("gcc")
    source = work / "k.c"
    source.write_text(src + MAIN % (", ".join(map(str, a)), ", ".join(map(str, b)), n))
    subprocess.run([GCC, "-O0", "-fwrapv", "-w", "-o", str(work / "k"), str(source)], check=True)
    run = subprocess.run([str(work / "k")], check=True, capture_output=True, text=True, timeout=20)
    expect = [int(v) for v in run.stdout.split()]
    kernel = c_kernel_from_text(src, "f.c")
    results, memory = run_reference(kernel, dict(a=np.array(a), b=np.array(b), n=n))
    assert [results[0], *memory["a"].tolist(), *memory["b"].tolist()] == expect


def _c_array(value) -> str:
    value = np.asarray(value)
    if value.ndim == 1:
        return "{" + ", ".join(str(int(v)) for v in value) + "}"
    return "{" + ", ".join(_c_array(row) for row in value) + "}"


@pytest.mark.skipif(GCC is None, reason="gcc not installed (the C reference)")
def test_every_shipped_c_kernel_matches_gcc(tmp_path):
    """The shipped C suite is plain C: gcc -fwrapv on the same file and seeded inputs gives
    the results and final memory our front end + xDSL interpreter give."""
    for name in C_KERNELS:
        kernel = c_kernel(name, 4)
        inputs = random_inputs(kernel, 2)
        results, memory = run_reference(kernel, inputs)
        decls, args = [], []
        for arg in kernel.arg_names():
            if arg in kernel.memrefs():
                dims = "".join(f"[{d}]" for d in kernel.memrefs()[arg])
                decls.append(f"  static int v_{arg}{dims} = {_c_array(inputs[arg])};")
            else:
                decls.append(f"  int v_{arg} = {int(inputs[arg])};")
            args.append(f"v_{arg}")
        call = f"{name}({', '.join(args)})"
        ret = f'printf("%d\\n", {call});' if results else f'{call}; printf("\\n");'
        dumps = [
            f'for (int i = 0; i < {int(np.prod(s))}; i++) printf("%d ", '
            f'((int *)v_{a})[i]); printf("\\n");'
            for a, s in kernel.memrefs().items()
        ]
        main = "\n#include <stdio.h>\nint main(void) {\n" + "\n".join(decls) + "\n  " + ret
        main += "\n  " + "\n  ".join(dumps) + "\n  return 0;\n}\n"
        text = c_kernel_text(name, 4).replace("void bsearch(", "void bsearch_k(")
        if name == "bsearch":
            main = main.replace("bsearch(", "bsearch_k(")
        source = tmp_path / f"{name}.c"
        source.write_text(text + main)
        subprocess.run(
            [GCC, "-O0", "-fwrapv", "-w", "-o", str(tmp_path / name), str(source)], check=True
        )
        lines = subprocess.run(
            [str(tmp_path / name)], check=True, capture_output=True, text=True, timeout=20
        ).stdout.split("\n")
        assert [int(v) for v in lines[0].split()] == results, name
        for line, arr in zip(lines[1:], kernel.memrefs(), strict=False):
            assert [int(v) for v in line.split()] == memory[arr].ravel().tolist(), (name, arr)
