"""The CLI (errors, --json) and the experiments' machinery on tiny scales."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from schedlab.core.io import write_text
from schedlab.iflux import deploy
from schedlab.iflux.cli import app
from schedlab.iflux.experiment import _io_claims, mapping_throughput, run_case, with_speedups
from schedlab.iflux.storage import Site
from schedlab.iflux.workloads import cases, intent_stream

runner = CliRunner()
SPEC = {"version": 1, "attributes": {"system": {"intents": [
    {"path": "/pfs/ckpt", "usage": "output", "pattern": "checkpoint", "size": "100GiB"}]}}}


def test_map_json_and_capacity_error(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    ok = runner.invoke(app, ["map", str(path), "--json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.stdout)
    assert doc["placements"][0]["tier"] == "shared-bb"  # too big for the 64 GiB NVMe
    full = runner.invoke(app, ["map", str(path), "--capacity", "nvme=1GiB",
                               "--capacity", "shared-bb=1GiB"])
    assert full.exit_code == 2 and "capacity cannot be met" in full.output
    bad = runner.invoke(app, ["map", str(path), "--capacity", "floppy=1GiB"])
    assert bad.exit_code == 2 and "--capacity" in bad.output


def test_bench_rejects_a_negative_seed() -> None:
    result = runner.invoke(app, ["bench", "--intents", "10", "--seed", "-1"])
    assert result.exit_code == 2
    assert "field 'seed': seed must be >= 0" in result.output and "Traceback" not in result.output


def test_run_needs_a_site_and_reports(tmp_path: Path) -> None:
    intents = tmp_path / "i.json"
    intents.write_text(json.dumps([{"path": str(tmp_path / "o"), "usage": "temporary"}]))
    missing = runner.invoke(app, ["run", "--intents", str(intents), "--", "true"],
                            env={"IFLUX_SITE": ""})
    assert missing.exit_code == 2 and "site" in missing.output
    made = runner.invoke(app, ["site", str(tmp_path / "s"), "--ram", str(tmp_path / "r"),
                              "--json"])
    assert made.exit_code == 0
    site = json.loads(made.stdout)["site"]
    result = runner.invoke(app, ["run", "--intents", str(intents), "--site", site, "--json",
                                 "--", "true"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True


def test_frob_and_hooks_commands(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(SPEC))
    out = runner.invoke(app, ["frob", str(path), "--json"])
    assert out.exit_code == 0 and "iflux" in json.loads(out.stdout)["attributes"]["system"]
    made = json.loads(runner.invoke(app, ["site", str(tmp_path / "s"), "--ram",
                                          str(tmp_path / "r"), "--json"]).stdout)
    hooks = runner.invoke(app, ["hooks", str(tmp_path / "h"), "--site", made["site"],
                                "--spool", str(tmp_path / "spool"), "--json"])
    assert hooks.exit_code == 0
    assert Path(json.loads(hooks.stdout)["prolog"]).stat().st_mode & 0o111


def test_mapping_experiment_correctness_claim_holds() -> None:
    result = mapping_throughput(intents=20_000, parsed=300, seed=1)
    required = [c for c in result.claims if c.required]
    assert required and all(c.holds for c in required)
    assert result.frame.height == 4


def test_intent_stream_is_valid_and_seeded() -> None:
    from schedlab.iflux.intents import intent_from_dict

    a, b = intent_stream(200, 5), intent_stream(200, 5)
    assert a == b
    for raw in a:
        intent_from_dict(raw, {})


def _row(case: str, mapper: str, io: float, **kw) -> dict:
    base = dict(case=case, mapper=mapper, io_s=io, to_solution_s=io, job_wall_s=1.0,
                end_to_end_s=io, decide_s=1e-4, pfs_files=3, pfs_bytes=10, returncode=0,
                kept=0)
    return {**base, **kw}


def test_io_claims_fail_when_output_is_lost_or_slower() -> None:
    rows = [_row(c, "pfs", 2.0) for c in ("a", "genomes")]
    rows += [_row("a", "iflux", 4.0), _row("genomes", "iflux", 0.5, pfs_files=2)]
    claims = {c.statement.split(" (")[0]: c for c in _io_claims(pl.DataFrame(rows), 0.0)}
    lost = next(c for k, c in claims.items() if k.startswith("Every job's output"))
    assert lost.measured == 1 and not lost.holds
    faster = next(c for k, c in claims.items() if k.startswith("Workload classes faster"))
    assert faster.measured == 1 and not faster.holds


def test_headline_speedups_are_end_to_end_not_io_time() -> None:
    """A job whose I/O is 10x faster but whose stage-out makes it slower end to end fails
    the headline claims; the I/O-time figure is reported beside them, labelled."""
    rows = [_row(c, "pfs", 2.0) for c in ("ior", "genomes")]
    rows += [_row(c, "iflux", 0.2, end_to_end_s=3.0) for c in ("ior", "genomes")]
    frame = pl.DataFrame(rows)
    claims = _io_claims(frame, 0.001)
    by = {c.statement.split(" (")[0]: c for c in claims}
    assert by["Largest end-to-end speedup on a specific pattern"].measured < 1
    assert by["Workload classes faster end to end"].measured == 0
    assert not by["Full-workflow end-to-end speedup, 1000-Genomes-like"].holds
    assert by["Largest speedup of the job's own I/O time"].measured == pytest.approx(10)
    speedups = with_speedups(frame, 0.001).filter(pl.col("mapper") == "iflux")
    assert speedups["speedup_io"].to_list() == pytest.approx([10, 10])
    assert speedups["speedup_e2e"].to_list() == pytest.approx([2 / 3, 2 / 3])
    assert speedups["runtime_overhead_pct"].to_list() == pytest.approx([0.1, 0.1])


@pytest.mark.skipif(not deploy.namespaces_available(), reason="needs mount namespaces (root)")
def test_one_case_runs_for_real_with_and_without_iflux(tmp_path: Path) -> None:
    site = Site.under(tmp_path / "site", ram_base=tmp_path / "ram")
    write_text(tmp_path / "site.json", site.to_json())
    scale = dict(ior_bytes=1 << 20, random_bytes=1 << 20, random_ops=50, md_files=40,
                 ckpt_bytes=1 << 20, dlio_samples=8, dlio_sample_bytes=4096, dlio_epochs=1,
                 genome_chunks=2, chromosomes=3, compute=0.0)
    case = next(c for c in cases(scale, Path(site.roots["pfs"]) / "inputs")
                if c.name == "mdstorm")
    rows = [run_case(case, m, tmp_path, tmp_path / "site.json") for m in ("pfs", "iflux")]
    assert [r["returncode"] for r in rows] == [0, 0]
    assert rows[0]["pfs_files"] == rows[1]["pfs_files"] == 40
    assert rows[0]["pfs_bytes"] == rows[1]["pfs_bytes"] == 40 * 4096
    assert rows[1]["tier"] == "ramdisk" and rows[0]["tier"] == "pfs"
