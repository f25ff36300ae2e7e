"""Darshan logs through PyDarshan: real logs feed the DFL, corrupt logs are one clear line.

Needs PyDarshan (``pip install darshan``) and the example logs in ../shared/data/darshan;
each test skips, with the reason, when either is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.data import data_dir
from schedlab.core.errors import BadInputError
from schedlab.dataflowdrs import read_trace
from schedlab.dataflowdrs.engine import diagnose

pytest.importorskip("darshan", reason="PyDarshan is not installed (pip install darshan)")
LOGS = data_dir() / "darshan"
if not (LOGS / "ior_hdf5_example.darshan").is_file():
    pytest.skip(f"example Darshan logs not found under {LOGS}", allow_module_level=True)


def test_posix_mpiio_hdf5_and_dxt_records_feed_the_dfl():
    trace = read_trace(LOGS / "ior_hdf5_example.darshan", strict=True)
    assert trace.meta["source"] == "darshan" and trace.meta["nprocs"] == 4
    assert {"POSIX", "MPI-IO", "H5F", "H5D"} <= set(trace.profile["module"])
    # its one STDIO record is <STDOUT>: a runtime stream, set aside (issue 52)
    assert trace.meta["runtime_files"]["examples"] == ["<STDOUT>"]
    assert set(trace.meta["dxt"]) == {"DXT_POSIX", "DXT_MPIIO"}
    posix = trace.profile.filter(pl.col("module") == "POSIX")
    # DXT segments are the ops; their bytes add up to the POSIX counters (no layer twice)
    data = trace.ops.filter(pl.col("op").is_in(["read", "write"])
                            & pl.col("path").is_in(posix["path"].to_list()))
    assert data["bytes"].sum() == posix["bytes_read"].sum() + posix["bytes_written"].sum()
    assert data["offset"].null_count() == 0  # DXT gives every offset
    d = diagnose(LOGS / "ior_hdf5_example.darshan")
    assert d.analysis.dfl.graph.number_of_nodes() > 0 and d.ranked
    assert all(b.evidence for b in d.ranked)


def test_counter_only_log_becomes_calls_per_record():
    trace = read_trace(LOGS / "sample-goodost.darshan")
    writes = trace.ops.filter(pl.col("op") == "write")
    posix = trace.profile.filter(pl.col("module") == "POSIX")
    assert writes["calls"].sum() >= posix["writes"].sum() > 0
    assert trace.tasks.height == 48  # one task per rank
    assert writes["bytes"].sum() >= 48 * 2**30  # IOR wrote 48 GiB


def test_stdio_only_log_is_read():
    trace = read_trace(LOGS / "noposix.darshan")
    assert set(trace.profile["module"]) == {"STDIO"}
    assert trace.ops.filter(pl.col("op") == "read")["bytes"].sum() > 1e9


def test_folder_of_logs_is_one_workflow_of_jobs(tmp_path):
    for name in ("ior_hdf5_example.darshan", "sample-goodost.darshan"):
        shutil.copy(LOGS / name, tmp_path / name)
    trace = read_trace(tmp_path)
    assert trace.tasks.height == 4 + 1 + 48 or trace.tasks.height >= 52
    assert trace.tasks["pid"].n_unique() == trace.tasks.height  # no clash between logs


def test_drishti_baseline_fires_its_published_rules():
    d = diagnose(LOGS / "noposix.darshan", "drishti")
    assert d.ranked[0].kind == "stdio" and "S01" in d.ranked[0].evidence
    # what drishti-io 0.8 itself reports as HIGH on these logs (P08; P08 P19; P08 P06 P16 P19)
    expect = {"example.darshan": ["misaligned-io"],
              "ior_hdf5_example.darshan": ["misaligned-io", "shared-file"],
              "sample-goodost.darshan": [],
              "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan":
                  ["misaligned-io", "small-io", "shared-file"]}
    for log, kinds in expect.items():
        assert [b.kind for b in diagnose(LOGS / log, "drishti").ranked] == kinds, log


def test_log_cut_after_its_first_modules_keeps_them_and_names_the_rest(tmp_path):
    data = (LOGS / "ior_hdf5_example.darshan").read_bytes()
    bad = tmp_path / "cut.darshan"
    bad.write_bytes(data[:2000])
    trace = read_trace(bad)
    assert "POSIX" in set(trace.profile["module"])  # the modules before the cut survive
    [issue] = trace.issues
    assert issue.path == str(bad) and "STDIO" in issue.field and "kept" in issue.message
    with pytest.raises(BadInputError):
        read_trace(tmp_path / "missing.darshan")


@pytest.mark.parametrize("cut", [0, 100, 900])
def test_truncated_log_is_one_line_naming_the_file(tmp_path, cut):
    data = (LOGS / "ior_hdf5_example.darshan").read_bytes()
    bad = tmp_path / "cut.darshan"
    bad.write_bytes(data[:cut])
    with pytest.raises(BadInputError) as info:
        read_trace(bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_one_bad_log_in_a_folder_is_reported_and_the_rest_read(tmp_path):
    shutil.copy(LOGS / "sample-goodost.darshan", tmp_path / "good.darshan")
    (tmp_path / "bad.darshan").write_bytes(b"not a log")
    trace = read_trace(tmp_path)
    assert trace.tasks.height == 48
    assert [Path(i.path).name for i in trace.issues] == ["bad.darshan"]
    with pytest.raises(BadInputError, match="bad.darshan"):
        read_trace(tmp_path, strict=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3966), st.integers(0, 255)), min_size=1, max_size=6))
def test_fuzzed_log_parses_or_is_one_clear_error(tmp_path, flips):
    data = bytearray((LOGS / "ior_hdf5_example.darshan").read_bytes())
    for where, value in flips:
        data[where % len(data)] = value
    path = tmp_path / "fuzz.darshan"
    path.write_bytes(bytes(data))
    try:
        trace = read_trace(path)
    except BadInputError as exc:  # libdarshan-util may even crash: still one clear line
        assert str(path) in str(exc) and "\n" not in str(exc)
    else:
        assert (trace.ops["bytes"] >= 0).all() and (trace.ops["dur"] >= 0).all()


def test_cli_analyze_a_log_writes_its_report_in_the_cwd(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from schedlab.dataflowdrs.cli import app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(LOGS / "sample-goodost.darshan"),
                                      "--no-sankey", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tasks"] == 48 and (tmp_path / "sample-goodost-report" / "report.md").is_file()
    bad = CliRunner().invoke(app, ["analyze", str(tmp_path / "nope.darshan")])
    assert bad.exit_code == 2 and "nope.darshan" in bad.output


def test_a_slow_lustre_ost_is_found_from_the_log_and_a_healthy_one_is_not():
    from dataclasses import replace

    from schedlab.dataflowdrs.diagnosis import analyse
    from schedlab.dataflowdrs.engine import diagnose_analysis

    trace = read_trace(LOGS / "sample-goodost.darshan")
    assert (trace.profile["osts"] != "").sum() >= 48  # LUSTRE module: each file's OSTs
    healthy = diagnose_analysis(analyse(trace)).ranked
    assert "slow-storage-target" not in {b.kind for b in healthy}  # 0.64x median at worst
    # the same log with OST 7 made 10x slower: its ranks' files take 10x as long
    slow = trace.profile.with_columns(
        [pl.when(pl.col("osts") == "7").then(pl.col(c) * 10).otherwise(pl.col(c)).alias(c)
         for c in ("write_time", "read_time")])
    ranked = diagnose_analysis(analyse(replace(trace, profile=slow))).ranked
    top = ranked[0]
    assert (top.kind, top.target) == ("slow-storage-target", "OST 7"), ranked[:3]
    assert "MB/s" in top.evidence and top.saving > 1.0


def test_report_says_how_io_bound_the_job_was():
    idle = diagnose(LOGS / "noposix.darshan").summary()["io"]
    busy = diagnose(LOGS / "sample-goodost.darshan").summary()["io"]
    assert idle["scope"] == "slowest rank" and idle["io_share"] < 0.01  # 39,213 s job
    assert busy["io_share"] > 0.5  # IOR: writing is what it does


def test_drishti_report_labels_its_order_score_not_seconds(tmp_path):
    from typer.testing import CliRunner

    from schedlab.dataflowdrs.cli import app

    result = CliRunner().invoke(app, ["analyze", str(LOGS / "example.darshan"), "--no-sankey",
                                      "--diagnoser", "drishti", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "order score" in result.output and "saving (s)" not in result.output
    assert "| order score |" in (tmp_path / "r" / "report.md").read_text()
