"""Chips smaller than the model stream weights per layer group, with write and endurance cost."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedlab.core.errors import ConfigError
from schedlab.harp import ArchConfig, build_workload, evaluate
from schedlab.harp.cli import app
from schedlab.harp.costs import tiling
from schedlab.harp.reprogram import one_copy_crossbars, partition, stream, write_cost

#: PUMA node: 138 tiles x 8 cores x 2 MVMUs x 8 crossbars of 128x128 (Ankit et al. 2019)
PUMA = {"max_crossbars": 17_664, "memory": {"crossbars_per_tile": 128}}
#: ISAAC chip: 168 tiles x 12 IMAs x 8 crossbars of 128x128 (Shafiee et al. 2016)
ISAAC = {"max_crossbars": 16_128, "memory": {"crossbars_per_tile": 96}}


def arch(base: dict, **reprogram) -> ArchConfig:
    return ArchConfig.model_validate({**base, "reprogram": reprogram})


@pytest.mark.parametrize("chip", [PUMA, ISAAC])
@pytest.mark.parametrize("model", ["bert-base", "gpt2-medium"])
def test_small_chips_run_models_they_cannot_hold(chip: dict, model: str) -> None:
    work, spec = build_workload(model, 32), arch(chip)
    assert one_copy_crossbars(work, spec) > spec.max_crossbars
    report = evaluate(work, spec, "area", "harp")
    assert report.groups > 1 and report.streaming in ("sequential", "double-buffered")
    assert report.write_us > 0 and report.energy_breakdown["write"] > 0
    assert report.lifetime_inferences == pytest.approx(1e6 / report.writes_per_cell)
    resident = evaluate(work, ArchConfig(), "area", "harp")
    assert report.latency_us > resident.latency_us  # writes are never free


def test_partition_fits_covers_and_cuts_at_layers() -> None:
    work, spec = build_workload("bert-base", 16), arch(PUMA)
    for capacity in (17_664, 8_832, 1_000):
        groups = partition(work, spec, capacity)
        assert groups[0][0] == 0 and groups[-1][1] == len(work.ops)
        assert all(a[1] == b[0] for a, b in zip(groups, groups[1:], strict=False))
        for lo, hi in groups:
            assert sum(tiling(op, spec).crossbars for op in work.ops[lo:hi]
                       if op.kind == "static") <= capacity
        if capacity >= 1_728:  # a BERT-base layer needs 1,728 crossbars: cut between layers
            assert all(work.ops[lo].name.endswith(".q") for lo, _ in groups)


def test_sequential_latency_is_writes_plus_compute() -> None:
    work, spec = build_workload("bert-base", 16), arch(PUMA, overlap="sequential")
    run = stream(work, spec, "area", "harp", "estimate")
    assert run.mode == "sequential" and len(run.groups) == 2
    assert run.latency_ns == pytest.approx(sum(g.write_ns + g.compute_ns for g in run.groups))
    tiles = math.ceil(17_664 / 128)
    for g in run.groups:  # PUMA xbar_wr_lat: 351 us / 32 = 10.97 us per crossbar
        assert g.write_ns >= math.ceil(g.crossbars / tiles) * 351_000 / 32
    ns, pj = write_cost(1000, 0, spec)
    assert ns == math.ceil(1000 / tiles) * 351_000 / 32
    assert pj == pytest.approx(1000 * 351_000 / 32 * 676 / 328)  # PUMA xbar_wr_pow


def test_double_buffering_overlaps_writes_with_compute() -> None:
    work = build_workload("gpt2-medium", 32)
    seq = stream(work, arch(PUMA, overlap="sequential"), "area", "harp", "estimate")
    dbl = stream(work, arch(PUMA, overlap="double-buffered"), "area", "harp", "estimate")
    writes = [g.write_ns for g in dbl.groups]
    assert dbl.latency_ns == pytest.approx(sum(
        max(g.compute_ns, writes[(i + 1) % len(writes)]) for i, g in enumerate(dbl.groups)))
    auto = stream(work, arch(PUMA), "area", "harp", "estimate")
    assert auto.latency_ns == min(seq.latency_ns, dbl.latency_ns)
    # a group is written into the idle half of the chip: half the tiles write in parallel
    half_tiles = math.ceil(17_664 // 2 / 128)
    for g in dbl.groups:
        assert g.write_ns >= math.ceil(g.crossbars / half_tiles) * 351_000 / 32


def test_batching_amortises_writes_and_endurance() -> None:
    work = build_workload("bert-base", 16)
    one = evaluate(work, arch(PUMA, inferences_per_load=1), "area", "harp")
    eight = evaluate(work, arch(PUMA, inferences_per_load=8), "area", "harp")
    assert eight.latency_us < one.latency_us
    assert eight.writes_per_cell == pytest.approx(one.writes_per_cell / 8)
    assert eight.lifetime_inferences == pytest.approx(8 * one.lifetime_inferences)


def test_op_too_large_even_with_reprogramming() -> None:
    spec = arch({"max_crossbars": 1_000})  # BERT-base's FFN weight needs 576, x2 = 1,152
    with pytest.raises(ConfigError, match="ffn1 needs 576 crossbars") as info:
        evaluate(build_workload("bert-base", 16), spec.model_copy(
            update={"max_crossbars": 500}), "area", "harp")
    assert info.value.field == "max_crossbars"
    assert "than the 500 a layer group" in str(info.value)  # the whole chip, not its half
    assert evaluate(build_workload("bert-base", 16), spec, "area", "harp").streaming == \
        "sequential"  # half a chip (500) cannot hold the FFN, the whole chip can


def test_reprogramming_off_keeps_the_clear_error() -> None:
    with pytest.raises(ConfigError, match="needs .* crossbars"):
        evaluate(build_workload("bert-base", 16), arch(PUMA, enabled=False), "area", "harp")


def test_cli_json_on_a_puma_sized_chip(tmp_path: Path) -> None:
    path = tmp_path / "puma.json"
    path.write_text(json.dumps(PUMA))
    result = CliRunner().invoke(app, ["estimate", "--model", "bert-base", "--arch", str(path),
                                      "--tokens", "32", "--strategy", "area", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["groups"] > 1 and report["lifetime_inferences"] > 0


def test_json_stays_one_document_when_the_solver_prints(monkeypatch) -> None:
    from schedlab.harp import mapping

    original = mapping.SOLVERS["ilp"]

    def noisy(prob, strategy):
        print("Running HiGHS 1.x: noise a solver may print")
        return original(prob, strategy)

    monkeypatch.setitem(mapping.SOLVERS, "ilp", noisy)
    result = CliRunner().invoke(app, ["estimate", "--model", "bert-base", "--tokens", "16",
                                      "--solver", "ilp", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == "bert-base"


def test_cli_compare_streams_every_scheduler(tmp_path: Path) -> None:
    path = tmp_path / "puma.json"
    path.write_text(json.dumps(PUMA))
    result = CliRunner().invoke(app, ["compare", "--model", "bert-base", "--arch", str(path),
                                      "--tokens", "16", "--strategy", "area", "--method",
                                      "estimate", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["scheduler"] for r in rows} >= {"harp", "non-pipelined", "single-vector"}
    assert all(r["groups"] > 1 for r in rows)
    assert min(r["harp_speedup"] for r in rows) == 1.0
