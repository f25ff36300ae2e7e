"""Trace readers: Alibaba pod + node lists, Philly, Helios (files built in their layouts),
the runtime predictor, and bad input as one-line errors naming file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.couchsurfer import simulate
from schedlab.couchsurfer.alibaba import compress, load_alibaba, select_cluster
from schedlab.couchsurfer.helios import read_helios
from schedlab.couchsurfer.philly import read_philly
from schedlab.couchsurfer.predict import estimates
from schedlab.traces.alibaba_gpu2023 import Node

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time")
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def _alibaba(tmp_path: Path) -> tuple[Path, Path]:
    pods = tmp_path / "pods.csv"
    pods.write_text("\n".join([
        POD_HEADER,
        "p0,8000,16384,1,1000,,LS,Running,0,5000,10",        # whole GPU, deterministic
        "p1,4000,8192,1,300,,BE,Succeeded,20,800,25",        # fractional, exploratory
        "p2,4000,8192,1,600,,BE,Failed,30,900,30",           # fractional, exploratory
        "p3,4000,8192,1,1000,,LS,Pending,40,1000,",          # never scheduled: dropped
        "p4,4000,8192,0,0,,LS,Running,50,1000,50",           # CPU only: dropped
        "p5,32000,65536,8,1000,,LS,Running,60,9000,70",      # 8-GPU gang
        "p6,32000,65536,4,1000,,LS,Running,60,9000,70",      # 4-GPU gang
    ]) + "\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("\n".join([NODE_HEADER, "n0,96000,393216,8,G2", "n1,64000,262144,2,T4",
                                "n2,64000,262144,2,T4"]) + "\n")
    return pods, nodes


def test_alibaba_pods_and_nodes_become_jobs_and_a_heterogeneous_cluster(tmp_path: Path) -> None:
    pods, nodes = _alibaba(tmp_path)
    got = load_alibaba(pods, nodes, sample=1.0)
    assert got.cluster.node_gpus == (8, 2, 2)
    assert got.cluster.node_memory == (32.0, 16.0, 16.0)
    assert got.dropped == {"never_scheduled": 1, "cpu_only": 1}
    jobs = {j.n_gpus * 10 + round(10 * j.share): j for j in got.jobs}
    assert sorted(j.share for j in got.jobs) == [0.3, 0.6, 1.0, 1.0, 1.0]
    assert [j.kind for j in got.jobs] == ["det", "exp", "exp", "det", "det"]
    assert [j.work for j in got.jobs] == [4990.0, 775.0, 870.0, 8930.0, 8930.0]
    assert jobs[80 + 10].n_gpus == 8
    # no job's estimate is its true run time (a predictor, not an oracle)
    assert all(j.estimate != j.work for j in got.jobs)
    # every scheduler runs the heterogeneous cluster to the end
    for name in ("couchsurfer", "backfill", "gandiva", "lucid", "antman", "tiresias"):
        report = simulate(got.jobs, name, cluster=got.cluster)
        assert report.summary["finished"] == len(got.jobs), name


def test_a_narrow_cluster_drops_and_counts_pods_wider_than_any_node(tmp_path: Path) -> None:
    pods, nodes = _alibaba(tmp_path)
    nodes.write_text("\n".join([NODE_HEADER, "n1,64000,262144,2,T4",
                                "n2,64000,262144,4,V100M32"]) + "\n")
    got = load_alibaba(pods, nodes, sample=1.0)
    assert got.dropped["too_wide_for_cluster"] == 1
    assert max(j.n_gpus for j in got.jobs) == 4


def test_fractional_jobs_share_one_gpu() -> None:
    from schedlab.couchsurfer import Job, Simulator, make_scheduler

    jobs = [Job(0, "det", 0.0, 1, 100.0, 100.0, 0.5, 4.0, share=0.5),
            Job(1, "det", 0.0, 1, 100.0, 100.0, 0.5, 4.0, share=0.5),
            Job(2, "det", 0.0, 1, 100.0, 100.0, 0.5, 4.0, share=0.6)]
    sim = Simulator(jobs, make_scheduler("fifo"), nodes=1, gpus_per_node=1)
    sim.run(until=0.0)
    # 0.5 + 0.5 fit one GPU; 0.6 waits
    assert jobs[0].running and jobs[1].running and not jobs[2].running
    sim.run()
    assert jobs[2].start >= min(jobs[0].finish, jobs[1].finish) - 1e-9


def test_select_cluster_keeps_the_node_mix() -> None:
    nodes = ([Node(f"g{i}", 1, 1, 8, "G2") for i in range(60)]
             + [Node(f"t{i}", 1, 1, 2, "T4") for i in range(60)])
    spec = select_cluster(nodes, 100, seed=3)
    assert 100 <= spec.gpus < 108
    by = {m: sum(g for g, mm in zip(spec.node_gpus, spec.models, strict=True) if mm == m)
          for m in ("G2", "T4")}
    assert by["G2"] / spec.gpus == pytest.approx(480 / 600, abs=0.1)
    assert select_cluster(nodes, 100, seed=3) == spec


def test_compress_hits_the_offered_load() -> None:
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, 1e6, 400))
    work = rng.exponential(3600, 400)
    demand = np.ones(400)
    out = compress(arrival, work, demand, gpus=8, load=0.8)
    window = out.max() - out.min()
    assert (np.minimum(work, window) * demand).sum() / (8 * window) == pytest.approx(0.8, 1e-6)
    assert (np.diff(out) >= 0).all()


def test_history_predictor_is_causal() -> None:
    # job 2 arrives before job 1 finishes: only job 0's run time may inform it
    arrival, runtime = [0.0, 10.0, 120.0, 500.0], [100.0, 1000.0, 50.0, 70.0]
    est = estimates(arrival, runtime, ["u"] * 4, min_history=1, prior=7.0)
    assert est[0] == 7.0 and est[1] == 7.0
    assert est[2] == 100.0
    assert est[3] == 100.0 and est[3] != runtime[3]
    with pytest.raises(BadInputError, match="predictor"):
        estimates(arrival, runtime, ["u"] * 4, predictor="magic")


def _philly(tmp_path: Path, jobs: list[dict]) -> Path:
    path = tmp_path / "cluster_job_log"
    path.write_text("[\n" + ",\n".join(json.dumps(j) for j in jobs) + "\n]\n")
    return path


def _pj(jobid: str, status: str, sub: str, start: str | None, end: str | None, gpus: int,
        user: str = "u1") -> dict:
    attempts = [] if start is None else [{"start_time": start, "end_time": end, "detail": [
        {"ip": "m1", "gpus": [f"gpu{k}" for k in range(gpus)]}]}]
    return {"status": status, "vc": "vc1", "jobid": jobid, "attempts": attempts,
            "submitted_time": sub, "user": user}


def test_philly_layout(tmp_path: Path) -> None:
    path = _philly(tmp_path, [
        _pj("a1", "Pass", "2017-10-03 00:00:00", "2017-10-03 00:00:10", "2017-10-03 02:00:10", 8),
        _pj("a2", "Killed", "2017-10-03 00:01:00", "2017-10-03 00:01:05", "2017-10-03 00:11:05",
            1),
        _pj("a3", "Failed", "2017-10-03 00:02:00", None, None, 2),
        _pj("a4", "Pass", "2017-10-03 00:03:00", "2017-10-03 00:03:00", "2017-10-03 00:04:00",
            16),
    ])
    got = read_philly(path, gpus=16)
    assert got.dropped == {"never_started": 1, "too_wide_for_cluster": 1}
    assert [(j.kind, j.n_gpus, j.work, j.arrival) for j in got.jobs] == [
        ("det", 8, 7200.0, 0.0), ("exp", 1, 600.0, 60.0)]
    assert simulate(got.jobs, "couchsurfer", cluster=got.cluster).summary["finished"] == 2


@pytest.mark.parametrize(("text", "line", "field"), [
    ('[\n{"status": "Pass", "attempts": [], "submitted_time": "yesterday"}\n]',
     2, "submitted_time"),
    ('[\n{"status": "Pass", "attempts": [], "submitted_time": "2017-10-03 00:00:00"},\n'
     '{"status": "Pass", "submitted_time": "2017-10-03 00:00:00"}\n]', 3, "attempts"),
    ('[\n{"status": "Pass", "attempts": [{"start_time": "2017-10-03 01:00:00", '
     '"end_time": "2017-10-03 00:00:00", "detail": []}], "submitted_time": '
     '"2017-10-03 00:00:00"}\n]', 2, "attempts[0].end_time"),
    ('[\n{"status": "Pass",, }\n]', 2, None),
])
def test_philly_bad_records_name_line_and_field(tmp_path: Path, text: str, line: int,
                                                field: str | None) -> None:
    path = tmp_path / "cluster_job_log"
    path.write_text(text)
    with pytest.raises(BadInputError) as info:
        read_philly(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and f":{line}" in message
    if field:
        assert field in message


HELIOS_HEADER = ("job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,"
                 "start_time,end_time,duration,queue")


def test_helios_layout(tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text("\n".join([
        HELIOS_HEADER,
        "1,u1,vc1,j1,4,16,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:30,"
        "2020-04-01 03:00:30,10800,30",
        "2,u1,vc1,j2,1,4,1,CANCELLED,2020-04-01 00:10:00,2020-04-01 00:10:00,"
        "2020-04-01 00:20:00,600,0",
        "3,u2,vc1,j3,0,4,1,COMPLETED,2020-04-01 00:11:00,2020-04-01 00:11:00,"
        "2020-04-01 00:21:00,600,0",
        "4,u2,vc1,j4,2,4,1,FAILED,2020-04-01 00:12:00,,,0,0",
    ]) + "\n")
    got = read_helios(path, gpus=8)
    assert got.dropped == {"cpu_only": 1, "never_started": 1}
    assert [(j.kind, j.n_gpus, j.work, j.arrival) for j in got.jobs] == [
        ("det", 4, 10800.0, 0.0), ("exp", 1, 600.0, 600.0)]


@pytest.mark.parametrize(("row", "field"), [
    ("1,u,v,j,four,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,"
     "2020-04-01 00:01:00,60,0", "gpu_num"),
    ("1,u,v,j,1,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:02:00,"
     "2020-04-01 00:01:00,60,0", "end_time"),
    ("1,u,v,j,1,1,1,COMPLETED,2020-13-01 00:00:00,2020-04-01 00:00:00,"
     "2020-04-01 00:01:00,60,0", "submit_time"),
    ("1,u,v,j,1", None),
])
def test_helios_bad_rows_name_line_and_field(tmp_path: Path, row: str, field: str | None) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS_HEADER + "\n" + row + "\n")
    with pytest.raises(BadInputError) as info:
        read_helios(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and ":2" in message
    if field:
        assert field in message


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\r\x00"),
                        max_size=80), max_size=5))
def test_fuzzed_helios_and_philly_files_raise_only_bad_input(tmp_path: Path,
                                                             lines: list[str]) -> None:
    for name, reader, head in (("h.csv", read_helios, HELIOS_HEADER + "\n"),
                               ("p.json", read_philly, "")):
        path = tmp_path / name
        path.write_text(head + "\n".join(lines), encoding="utf-8")
        try:
            reader(path)
        except BadInputError as exc:
            assert "\n" not in str(exc)


def test_real_alibaba_trace_with_its_node_list(shared_data: Path) -> None:
    base = shared_data / "alibaba"
    got = load_alibaba(base / "gpu2023_pod_list_default.csv",
                       base / "gpu2023_node_list_gpu_node.csv", sample=1.0)
    assert got.cluster.gpus == 6212 and got.cluster.nodes == 1213
    assert got.dropped["never_scheduled"] > 800
    assert got.counts["fractional"] > 2000
    assert {j.kind for j in got.jobs} == {"det", "exp"}


def test_reproduce_falls_back_to_seeded_data(monkeypatch: pytest.MonkeyPatch) -> None:
    import schedlab.couchsurfer.interference as inter
    import schedlab.traces.alibaba_gpu2023 as ali
    from schedlab.couchsurfer.experiment import real_trace

    monkeypatch.setattr(ali, "shared_trace", lambda: None)
    monkeypatch.setattr(inter, "shared_measurements", lambda: None)
    monkeypatch.setitem(__import__("schedlab.couchsurfer.experiment",
                                   fromlist=["TRACE_JOBS"]).TRACE_JOBS, 32, 150)
    result = real_trace(scales=(32,), seed=0)
    assert "seeded generator" in result.ran_with and "no Lucid data" in result.ran_with
    from schedlab.couchsurfer.policies import SCHEDULERS

    assert result.frame.height == len(SCHEDULERS) and result.claims
    from schedlab.couchsurfer.experiment import fusion_guard, interference_fit

    guard = fusion_guard(gpus=32, seed=1)
    assert "seeded generator" in guard.ran_with and guard.frame.height == 5
    fit = interference_fit(seeds_split=1, seed=0)
    assert "stand-in" in fit.ran_with and all(c.measured == c.measured for c in fit.claims)


def test_cli_replays_alibaba_with_its_node_list_and_philly(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedlab.couchsurfer.cli import app

    runner = CliRunner()
    pods, nodes = _alibaba(tmp_path)
    result = runner.invoke(app, ["simulate", "--trace", str(pods), "--nodes", str(nodes),
                                 "--gpus", "12", "--sample", "5", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["finished"] == 5 and doc["trace"]["dropped"]["never_scheduled"] == 1
    philly = _philly(tmp_path, [_pj("a", "Pass", "2017-10-03 00:00:00", "2017-10-03 00:00:10",
                                    "2017-10-03 01:00:10", 2)])
    result = runner.invoke(app, ["simulate", "--format", "philly", "--trace", str(philly),
                                 "--gpus", "8", "--json", "-s", "lucid"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["finished"] == 1


@pytest.mark.parametrize(("extra", "needle"), [
    (["--format", "slurm"], "format"),
    (["--colocation", "/nonexistent/colocation"], "/nonexistent/colocation"),
    (["--predictor", "magic"], "predictor"),
])
def test_cli_bad_trace_options_are_one_line(tmp_path: Path, extra: list[str],
                                            needle: str) -> None:
    from typer.testing import CliRunner

    from schedlab.couchsurfer.cli import app

    pods, nodes = _alibaba(tmp_path)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(pods), "--nodes", str(nodes),
                                      "--gpus", "12", *extra])
    assert result.exit_code != 0
    assert needle in result.output and "Traceback" not in result.output


def test_cli_refuses_options_it_would_ignore(tmp_path: Path) -> None:
    """A bad --predictor on a plain pod list, and Alibaba-only options on Philly or the
    generator, used to be accepted silently."""
    from typer.testing import CliRunner

    from schedlab.couchsurfer.cli import app

    runner = CliRunner()
    pods, nodes = _alibaba(tmp_path)
    philly = _philly(tmp_path, [_pj("a", "Pass", "2017-10-03 00:00:00", "2017-10-03 00:00:10",
                                    "2017-10-03 01:00:10", 2)])
    for args, needle in ((["--trace", str(pods), "--predictor", "magic"], "predictor"),
                         (["--trace", str(philly), "--format", "philly", "--nodes", str(nodes)],
                          "field 'nodes'"),
                         (["--seed", "1", "--trace-load", "0.5"], "field 'trace-load'")):
        result = runner.invoke(app, ["simulate", *args])
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output and "Traceback" not in result.output
