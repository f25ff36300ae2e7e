"""Usability (issue 35 item 4): the docs' example commands in a fresh working directory with
relative paths, --inputs (.json/.npz), --no-simulate, trap reasons, step/cycle limits, -D."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError
from schedlab.redpanda.api import Limits, compile_file, prepare_inputs
from schedlab.redpanda.backends.dhls.tools import have
from schedlab.redpanda.cfront import c_kernel_from_text
from schedlab.redpanda.cli import app
from schedlab.redpanda.frontend import parse_kernel
from schedlab.redpanda.inputs import load_inputs
from schedlab.redpanda.reference import KernelTrap, StepLimitError, run_reference
from schedlab.redpanda.workloads import c_kernel

runner = CliRunner()
DOCS = (Path(__file__).resolve().parents[2] / "docs/systems/redpanda.md").read_text()
needs_iverilog = pytest.mark.skipif(
    not have("iverilog"), reason="iverilog not installed (apt-get install iverilog)"
)

SPMV_JSON = {
    "rowptr": [0, 3, 5, 5, 9],
    "col": [0, 2, 3, 1, 3, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0],
    "val": list(range(1, 17)),
    "x": [1, -1, 2, -2],
    "y": [0, 0, 0, 0],
}


def _docs_command(command: str) -> list[str]:
    """An example command exactly as the docs print it (the test fails if the docs change)."""
    assert command in DOCS, f"not in docs/systems/redpanda.md any more: {command}"
    words = shlex.split(command)
    assert words[:2] == ["schedlab", "redpanda"]
    return words[2:]


def _run(args: list[str]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


@needs_iverilog
def test_docs_examples_run_with_relative_paths_in_a_fresh_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCHEDLAB_DHLS_SYNTH", "none")  # synthesis is not what this checks
    _run(_docs_command("schedlab redpanda kernels --emit mykernels --size 4"))
    assert Path("mykernels/gemm.mlir").is_file()
    _run(
        _docs_command(
            "schedlab redpanda compile mykernels/gcd.mlir --target cgra --rows 5 --cols 5 "
            "--link-capacity 2"
        )
    )
    assert Path("mykernels/gcd.cgra.json").is_file()  # the configuration, next to the kernel
    result = _run(
        _docs_command("schedlab redpanda compile mykernels/gemm.mlir --target dhls --out gemm_rtl")
    )
    assert Path("gemm_rtl/rp_gemm.v").is_file() and Path("gemm_rtl/tb.v").is_file()
    assert "cycles" in result.stdout
    doc = json.loads(
        _run(
            _docs_command(
                "schedlab redpanda compile mykernels/gemm.mlir --target dhls --flow dynamatic "
                "--no-synth --json"
            )
        ).stdout
    )
    assert doc["metrics"]["matches_interpreter"] is True
    assert Path("mykernels/gemm_dhls/tb.v").is_file()  # the default --out, relative too
    _run(_docs_command("schedlab redpanda kernels --language c --emit ckernels --size 4"))
    assert Path("ckernels/matpower.c").is_file()
    Path("spmv.json").write_text(json.dumps(SPMV_JSON))
    result = _run(
        _docs_command("schedlab redpanda compile ckernels/spmv.c --temporal --inputs spmv.json")
    )
    assert "matches_interpreter" in result.stdout and "True" in result.stdout
    np.savez("spmv.npz", **{k: np.array(v) for k, v in SPMV_JSON.items()})
    _run(
        _docs_command(
            "schedlab redpanda compile ckernels/spmv.c --target dhls --out spmv_rtl "
            "--inputs spmv.npz --no-synth"
        )
    )
    assert Path("spmv_rtl/rp_spmv.v").is_file()


def test_emit_ir_and_c_defines_with_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("sub").mkdir()
    Path("sub/mine.c").write_text(
        "#define N 4\nint kern(int a[N]) {\n  int s = 0;\n  for (int i = 0; i < N; i++)\n"
        "    s += a[i] * a[i];\n  return s;\n}\nint other(int a[N]) { return a[0]; }\n"
    )
    result = _run(
        [
            "compile",
            "sub/mine.c",
            "--function",
            "kern",
            "-D",
            "N=16",
            "--temporal",
            "--no-simulate",
            "--emit-ir",
            "out/ir.mlir",
            "--json",
        ]
    )
    doc = json.loads(result.stdout)
    assert "cycles" not in doc["metrics"] and "--no-simulate" in doc["simulation_note"]
    assert "redpanda.graph" in Path("out/ir.mlir").read_text()
    bad = runner.invoke(app, ["compile", "sub/mine.c", "-D", "N16"])
    assert bad.exit_code == 2 and "NAME=VALUE" in bad.output and "Traceback" not in bad.output
    bad = runner.invoke(app, ["compile", "sub/mine.c"])
    assert bad.exit_code == 2 and "kern, other" in bad.output


def test_inputs_file_values_reach_the_interpreter_and_the_simulator(tmp_path):
    kernel = c_kernel("spmv", 4)
    path = tmp_path / "in.json"
    path.write_text(json.dumps(SPMV_JSON))
    inputs, filled = load_inputs(path, kernel)
    assert filled == []
    _, memory = run_reference(kernel, inputs)
    expect = [
        sum(
            SPMV_JSON["val"][k] * SPMV_JSON["x"][SPMV_JSON["col"][k]]
            for k in range(SPMV_JSON["rowptr"][i], SPMV_JSON["rowptr"][i + 1])
        )
        for i in range(4)
    ]
    assert list(memory["y"]) == expect
    npz = tmp_path / "in.npz"
    np.savez(npz, rowptr=np.array(SPMV_JSON["rowptr"]), col=np.array(SPMV_JSON["col"]))
    inputs, filled = load_inputs(npz, kernel, seed=3)
    assert set(filled) == {"val", "x", "y"} and list(inputs["rowptr"]) == SPMV_JSON["rowptr"]
    kfile = tmp_path / "spmv.c"
    from schedlab.redpanda.workloads import c_kernel_text

    kfile.write_text(c_kernel_text("spmv", 4))
    report = compile_file(kfile, rows=4, cols=4, mode="temporal", inputs=path)
    assert report["metrics"]["matches_interpreter"] is True and report["simulation_note"] == ""


@pytest.mark.parametrize(
    "content, suffix, words",
    [
        ('{"x": [1, 2]}', ".json", "memref x is 4"),
        ('{"zz": 1}', ".json", "not an argument"),
        ('{"x": [1.5, 2, 3, 4]}', ".json", "integers"),
        ('{"x": [1, [2], 3, 4]}', ".json", "integers"),
        ('{"x": [1, 2, 3, 99999999999]}', ".json", "i32 range"),
        ("[1, 2]", ".json", "one object"),
        ('{"x": [1, 2', ".json", "invalid JSON"),
        ("x,y\n1,2", ".csv", ".npz or .json"),
        ("not a zip", ".npz", "cannot read"),
    ],
)
def test_bad_inputs_files_are_one_line_errors(tmp_path, content, suffix, words):
    path = tmp_path / f"in{suffix}"
    path.write_text(content)
    with pytest.raises(BadInputError) as exc:
        load_inputs(path, c_kernel("spmv", 4))
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith(str(path))


DIVZ = """// average of a[lo..hi) per query
void divz(int a[8], int lo[4], int hi[4], int avg[4]) {
  for (int q = 0; q < 4; q++) {
    int s = 0;
    for (int i = lo[q]; i < hi[q]; i++)
      s += a[i];
    avg[q] = s / (hi[q] - lo[q]);
  }
}
"""
SPIN = """void spin(int a[4], int steps[4]) {
  for (int i = 0; i < 4; i++) {
    int v = a[i], n = 0;
    while (v != 1) {
      if (v % 2 == 0) v = v / 2; else v = 3 * v + 1;
      n++;
    }
    steps[i] = n;
  }
}
"""


def test_trap_reasons_name_the_op_and_line(tmp_path):
    kernel = c_kernel_from_text(DIVZ, tmp_path / "divz.c")
    base = dict(a=list(range(8)), avg=[0] * 4)
    with pytest.raises(KernelTrap) as exc:
        run_reference(kernel, dict(base, lo=[0, 2, 4, 6], hi=[2, 4, 4, 8]))
    assert "division by zero at op arith.divsi (divz.c line 7)" in str(exc.value)
    with pytest.raises(KernelTrap) as exc:
        run_reference(kernel, dict(base, lo=[0, 2, 3, 6], hi=[2, 4, 9, 8]))
    assert "out-of-bounds load a[8] (shape 8)" in str(exc.value) and "line 6" in str(exc.value)
    path = tmp_path / "divz.c"
    path.write_text(DIVZ)
    (tmp_path / "in.json").write_text('{"lo": [0, 2, 4, 6], "hi": [2, 4, 4, 8]}')
    result = runner.invoke(
        app, ["compile", str(path), "--temporal", "--inputs", str(tmp_path / "in.json")]
    )
    assert result.exit_code == 0, result.output
    assert "division by zero at op arith.divsi (divz.c line 7)" in result.output
    assert "random inputs are not valid" not in result.output
    mlir = parse_kernel(
        "func.func @d(%a: i32, %b: i32) -> i32 {\n  %c = arith.constant 1 : i32\n"
        "  %q = arith.divsi %a, %b : i32\n  %r = arith.remsi %q, %c : i32\n"
        "  func.return %r : i32\n}\n",
        "d.mlir",
    )
    with pytest.raises(KernelTrap, match=r"division by zero at op arith.divsi \(d.mlir line 3\)"):
        run_reference(mlir, dict(a=4, b=0))


def test_non_terminating_loop_is_named_not_blamed_on_inputs(tmp_path):
    kernel = c_kernel_from_text(SPIN, tmp_path / "spin.c")
    with pytest.raises(StepLimitError) as exc:
        run_reference(kernel, dict(a=[6, 7, 0, 3], steps=[0] * 4), max_steps=200)
    assert "scf.while (spin.c line 4)" in str(exc.value) and "200 loop iterations" in str(exc.value)
    assert "may not terminate" in str(exc.value)
    path = tmp_path / "spin.c"
    path.write_text(SPIN)
    inputs = tmp_path / "ok.json"
    inputs.write_text('{"a": [6, 7, 9, 3]}')
    report = compile_file(
        path, rows=4, cols=4, mode="temporal", inputs=inputs, limits=Limits(max_cycles=200)
    )
    assert "cycles" not in report["metrics"]
    assert "cycle limit (200 cycles)" in report["simulation_note"]
    assert "interpreter finished" in report["simulation_note"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": [6, 7, 0, 3]}')
    report = compile_file(
        path, rows=4, cols=4, mode="temporal", inputs=bad, limits=Limits(max_steps=300)
    )
    assert "scf.while (spin.c line 4) still running" in report["simulation_note"]
    report = compile_file(path, rows=4, cols=4, mode="temporal", inputs=inputs)
    assert report["metrics"]["matches_interpreter"] is True


def test_prepare_inputs_from_a_mapping_and_its_errors():
    kernel = c_kernel("gcd", 4)
    data, origin = prepare_inputs(kernel, {"a": [4, 6, 8, 9]}, seed=1)
    assert list(data["a"]) == [4, 6, 8, 9] and "seeded random: b, g" in origin
    with pytest.raises(BadInputError, match="field 'n'"):
        prepare_inputs(kernel, {"n": 3})


def test_affine_forms_we_do_not_lower_are_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    text = (
        "func.func @f(%a: memref<4xi32>) {\n  affine.for %i = 0 to 4 {\n"
        "    affine.if affine_set<(d0) : (d0 - 2 >= 0)>(%i) {\n"
        "      %c = arith.constant 1 : i32\n      affine.store %c, %a[%i] : memref<4xi32>\n"
        "    }\n  }\n  func.return\n}\n"
    )
    with pytest.raises(BadInputError) as exc:
        parse_kernel(text, "aff.mlir")
    assert "mlir-opt" in str(exc.value) and "\n" not in str(exc.value)
