"""Workload generator shape, Alibaba trace reader (round trip, fuzzing), and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.couchsurfer import WorkloadSpec, generate, read_trace, write_trace
from schedlab.couchsurfer.cli import app
from schedlab.couchsurfer.workloads import RUNGS, termination_work

HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
          "deletion_time,scheduled_time")
GOOD = "pod-1,12000,16384,1,460,,BE,Running,100,700,160"


def test_generator_is_seeded_and_hits_the_load() -> None:
    spec = WorkloadSpec(jobs=3_000, gpus=64, load=0.8)
    a, b = generate(spec, 5), generate(spec, 5)
    assert [(j.arrival, j.work) for j in a] == [(j.arrival, j.work) for j in b]
    assert [j.work for j in a] != [j.work for j in generate(spec, 6)]
    horizon = max(j.arrival for j in a)
    det = sum(j.work * j.n_gpus for j in a if j.kind == "det")
    assert det / (horizon * 64) == pytest.approx(0.8, rel=0.02)
    assert all(j.work <= j.estimate for j in a)
    assert sum(j.kind == "exp" for j in a) / len(a) == pytest.approx(0.6, abs=0.04)


def test_successive_halving_stops_two_thirds_at_the_first_rung() -> None:
    rng = np.random.default_rng(0)
    work = termination_work(rng, np.ones(60_000), eta=3.0)
    assert np.mean(work == RUNGS[0]) == pytest.approx(2 / 3, abs=0.01)
    assert np.mean(work == 1.0) == pytest.approx(1 / 27, abs=0.005)


def test_trace_round_trip(tmp_path: Path) -> None:
    jobs = generate(WorkloadSpec(jobs=200, gpus=16), 1)
    path = write_trace(jobs, tmp_path / "trace.csv")
    back = read_trace(path)
    assert len(back) == len(jobs)
    for a, b in zip(jobs, back, strict=True):
        assert (a.kind, a.n_gpus) == (b.kind, b.n_gpus)
        assert b.work == pytest.approx(a.work, abs=2e-3)
        assert b.estimate == pytest.approx(a.estimate, abs=2e-3)
        assert b.util == pytest.approx(a.util, abs=1e-6)
        assert b.mem == pytest.approx(a.mem, abs=1e-6)


def test_reader_maps_pods_to_jobs(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("\n".join([HEADER, GOOD, "pod-2,1000,10,0,0,,LS,Running,0,9,0",
                               "pod-3,1000,10,2,1000,,LS,Pending,5,905,",
                               "pod-4,1000,10,2,1000,,LS,Running,5,905,5"]) + "\n")
    jobs = read_trace(path)
    # CPU-only pod-2 and never-scheduled pod-3 are skipped
    assert [(j.kind, j.n_gpus, j.work, j.arrival) for j in jobs] == [
        ("exp", 1, 540.0, 100.0), ("det", 2, 900.0, 5.0)]
    # gpu_milli is the request, not utilisation; the estimate is not the run time
    assert jobs[0].share == pytest.approx(0.46) and jobs[1].share == 1.0
    assert all(j.estimate != j.work for j in jobs)


@pytest.mark.parametrize(("line", "field"), [
    ("pod,12000,16384,one,460,,BE,Running,100,700,160", "num_gpu"),
    ("pod,12000,16384,1.5,460,,BE,Running,100,700,160", "num_gpu"),
    ("pod,12000,16384,1,4600,,BE,Running,100,700,160", "gpu_milli"),
    ("pod,12000,16384,1,460,,BE,Running,-3,700,160", "creation_time"),
    ("pod,12000,16384,1,460,,BE,Running,100,50,160", "deletion_time"),
    ("pod,12000,,1,460,,BE,Running,100,700,160", "memory_mib"),
    ("pod,12000,16384,1,460,,BE,Running,100,inf,160", "deletion_time"),
    ("pod,12000,16384,1,460", None),
])
def test_malformed_records_name_file_line_field(tmp_path: Path, line: str,
                                                 field: str | None) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"{HEADER}\n{GOOD}\n{line}\n")
    with pytest.raises(BadInputError) as info:
        read_trace(path)
    assert info.value.line == 3 and info.value.path == path
    assert info.value.field == field


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such file"):
        read_trace(tmp_path / "missing.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(BadInputError, match="empty"):
        read_trace(tmp_path / "empty.csv")
    (tmp_path / "hdr.csv").write_text("name,num_gpu\nx,1\n")
    with pytest.raises(BadInputError) as info:
        read_trace(tmp_path / "hdr.csv")
    assert info.value.line == 1 and info.value.field == "cpu_milli"
    (tmp_path / "bin.csv").write_bytes(HEADER.encode() + b"\n\xff\xfe\x00\n")
    with pytest.raises(BadInputError):
        read_trace(tmp_path / "bin.csv")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
                        max_size=60), max_size=5))
def test_fuzzed_traces_raise_only_bad_input(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    try:
        jobs = read_trace(path)
    except BadInputError as exc:
        assert exc.path == path
        # a per-record problem names its line; only a whole-file one ("no GPU pods") has none
        assert exc.line is not None or "no GPU pods" in exc.message
    else:
        assert all(j.work > 0 for j in jobs)


def test_generator_spec_is_validated() -> None:
    for bad in (dict(jobs=0), dict(exp_share=2), dict(load=0), dict(eta=1)):
        with pytest.raises(ConfigError):
            WorkloadSpec(**bad)


def test_real_alibaba_trace(shared_data: Path) -> None:
    jobs = read_trace(shared_data / "alibaba" / "gpu2023_pod_list_default.csv")
    assert len(jobs) > 5_000
    assert {j.kind for j in jobs} == {"det", "exp"}
    assert max(j.n_gpus for j in jobs) == 8


runner = CliRunner()


def test_cli_simulate_json_and_out(tmp_path: Path) -> None:
    out = tmp_path / "jobs.parquet"
    result = runner.invoke(app, ["simulate", "--seed", "1", "--n-jobs", "200",
                                 "--gpus", "16", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["scheduler"] == "couchsurfer" and doc["finished"] == 200
    assert out.is_file()


def test_cli_generate_then_replay(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    assert runner.invoke(app, ["generate", str(trace), "--n-jobs", "100",
                               "--gpus", "16"]).exit_code == 0
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--gpus",
                                 "16", "--scheduler", "gandiva", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == 100


def test_cli_errors_are_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{HEADER}\npod,1,1,x,1,,BE,R,1,2,1\n")
    result = runner.invoke(app, ["simulate", "--trace", str(bad)])
    assert result.exit_code == 2
    assert "bad.csv:2" in result.output and "num_gpu" in result.output
    both = runner.invoke(app, ["simulate", "--trace", str(bad), "--seed", "1"])
    assert both.exit_code == 2 and "exactly one" in both.output
    unknown = runner.invoke(app, ["simulate", "--seed", "1", "-s", "slurm"])
    assert unknown.exit_code == 2 and "couchsurfer" in unknown.output


def test_cli_place_and_compare() -> None:
    result = runner.invoke(app, ["place", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ilp"]["value"] >= doc["threshold"]["value"] - 1e-9
    result = runner.invoke(app, ["compare", "--seed", "0", "--n-jobs", "150",
                                 "--gpus", "16", "--jobs", "1", "--json"])
    assert result.exit_code == 0, result.output
    from schedlab.couchsurfer import SCHEDULERS

    assert len(json.loads(result.stdout)) == len(SCHEDULERS)


def test_trace_without_gpu_pods_is_a_clear_error(tmp_path: Path) -> None:
    # regression: a trace whose pods are all CPU-only used to crash in summarize (TypeError)
    trace = tmp_path / "cpu_only.csv"
    trace.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,"
                     "deletion_time,scheduled_time\nj,1,1,0,500,LS,0,100,0\n")
    with pytest.raises(BadInputError, match="no GPU pods") as info:
        read_trace(trace)
    assert info.value.path == trace
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--gpus", "8"])
    assert result.exit_code == 2 and "no GPU pods" in result.output


@pytest.mark.parametrize("device", ["nope", "cpu:0", "cuda:x"])
def test_gpucheck_unknown_device_is_named(device: str) -> None:
    # regression: an unknown --device used to end in torch's RuntimeError traceback
    result = runner.invoke(app, ["gpucheck", "--device", device, "--steps", "1"])
    assert result.exit_code == 2, result.output
    assert "unknown device" in result.output and "Traceback" not in result.output
