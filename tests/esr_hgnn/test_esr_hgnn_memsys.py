"""The shared-channel DRAM replay against numbers derived by hand from DRAMsim3's configs, and
placement/contention effects of the unit model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.esr_hgnn.engine import sample_channels
from schedlab.esr_hgnn.grouping import fanout_hop_cost, make_grouper
from schedlab.esr_hgnn.hwmodel import estimate_unit, load_config
from schedlab.esr_hgnn.memsys import DDR4, HBM2, replay_channels
from schedlab.esr_hgnn.policies import make_sampler
from schedlab.esr_hgnn.workloads import generate, metapath_set


def run(traces, timing=HBM2, placement="partitioned", mem=1, mlp=32, interleave=256):
    return replay_channels(
        [np.asarray(t, dtype=np.int64) for t in traces],
        timing,
        placement,
        mem,
        interleave,
        1000,
        mlp,
    )


@pytest.mark.parametrize("t", [HBM2, DDR4])
def test_idle_hit_and_conflict_latencies_follow_the_config(t):
    ns = t.tck_ps / 1000
    closed = (t.rcd + t.cl + t.burst) * ns
    assert run([[0]], t, mlp=1)["seconds"] * 1e9 == pytest.approx(closed)
    # a second read of the open row: CL + burst more (issued when the first completes)
    assert run([[0, 64]], t, mlp=1)["seconds"] * 1e9 == pytest.approx(
        closed + (t.cl + t.burst) * ns
    )
    # another row of the same bank: precharge no earlier than tRAS after the activate
    other_row = t.row_bytes * t.banks
    first_done = closed
    pre = max(first_done, t.ras * ns)
    expect = pre + (t.rp + t.rcd + t.cl + t.burst) * ns
    assert run([[0, other_row]], t, mlp=1)["seconds"] * 1e9 == pytest.approx(expect)


@pytest.mark.parametrize("t", [HBM2, DDR4])
def test_streaming_reaches_peak_and_random_rows_are_faw_bound(t):
    n = 20000
    # within one row the bank paces reads at max(burst, tCCD) clocks
    one_row = t.row_bytes // t.burst_bytes
    row = run([np.arange(one_row) * t.burst_bytes], t, mlp=64)
    closed = (t.rcd + t.cl) * t.tck_ps * 1e-12
    gbs = (one_row - 1) * t.burst_bytes / (row["seconds"] - closed - t.burst * t.tck_ps * 1e-12)
    assert gbs / 1e9 == pytest.approx(t.peak_gbs, rel=0.01)
    # a long stream spans rows in different banks, which overlap: the data bus is the limit
    stream = run([np.arange(n) * t.burst_bytes], t, mlp=64)
    gbs = n * t.burst_bytes / stream["seconds"] / 1e9
    bus = t.burst_bytes / (t.burst * t.tck_ps * 1e-12) / 1e9
    assert t.peak_gbs * 0.99 <= gbs <= bus * 1.001
    # every read a different row, round-robin over banks: 4 activates per tFAW at most
    rows = (np.arange(n) * t.row_bytes) % (t.row_bytes * t.banks * 4096)
    rnd = run([rows], t, mlp=64)
    faw_bound = 4 * t.burst_bytes / (t.faw * t.tck_ps * 1e-12) / 1e9
    gbs = n * t.burst_bytes / rnd["seconds"] / 1e9
    assert 0.8 * faw_bound <= gbs <= faw_bound * 1.001
    assert rnd["row_misses"] == n


def test_contention_slows_shared_channels_and_replication_removes_it():
    rng = np.random.default_rng(0)
    traces = [rng.integers(0, 1 << 26, 5000) * 4 for _ in range(4)]
    alone = run(traces[:1], mem=1)["seconds"]
    shared = run(traces, mem=1)
    assert shared["seconds"] > 2.5 * alone  # four channels queue on one memory channel
    spread = run(traces, mem=4)
    assert spread["seconds"] < 0.5 * shared["seconds"]
    replicated = run(traces, placement="replicated", mem=4)
    assert replicated["copies"] == 4 and spread["copies"] == 1
    solo = max(run([t], mem=1)["seconds"] for t in traces)
    assert replicated["seconds"] == pytest.approx(solo)
    with pytest.raises(BadInputError, match="placement"):
        run(traces, placement="striped")


def test_unit_model_states_placement_and_contends():
    g = generate("dblp", 0.1, 0)
    mps = metapath_set(g, "dblp", "sym6")
    grouping = make_grouper("optimal").group(mps, 4, fanout_hop_cost((10,)))
    batches = sample_channels(g, make_sampler("trie"), grouping, np.arange(128), (10,), 0)
    part = estimate_unit(batches, load_config(channels=4))
    repl = estimate_unit(batches, load_config(channels=4, placement="replicated"))
    one = estimate_unit(batches, load_config(channels=4, memory_channels=1))
    assert part.placement == "partitioned" and part.graph_copies == 1
    assert repl.graph_copies == 4
    assert one.seconds > 1.5 * part.seconds  # four sampling channels on one memory channel
    ddr = estimate_unit(batches, load_config(channels=4, memory="ddr4"))
    assert ddr.seconds > part.seconds * 0.5 and ddr.reads == part.reads
    with pytest.raises(ConfigError, match="memory"):
        load_config(memory="hbm3")


DRAMSIM3 = os.environ.get("DRAMSIM3_DIR", "/tmp/dramsim3")


@pytest.mark.skipif(
    not Path(DRAMSIM3, "build", "dramsim3main").is_file(),
    reason="needs a DRAMsim3 build: set DRAMSIM3_DIR (see esr_hgnn/dramsim3.py)",
)
@pytest.mark.parametrize("memory", ["hbm2", "ddr4"])
def test_replay_agrees_with_dramsim3_on_streams_and_idle_latency(tmp_path, memory):
    """The real DRAMsim3 on the same traces: streaming throughput within 15 %, idle latency
    within 15 % of our row-conflict latency, and the same count of DRAM reads on a trace with
    repeated lines (MSHR merging)."""
    from schedlab.esr_hgnn import dramsim3
    from schedlab.esr_hgnn.memsys import PRESETS

    t = PRESETS[memory]
    config = dramsim3.one_channel_config(DRAMSIM3, memory, tmp_path / "one.ini")
    stream = np.arange(20000, dtype=np.int64) * 64
    ds = dramsim3.run(DRAMSIM3, config, stream, 10000, 0, tmp_path)
    ours = run([stream[: ds["reads_done"]]], t, interleave=t.row_bytes)
    assert ours["seconds"] * 1e12 / t.tck_ps == pytest.approx(10000, rel=0.15)
    sparse = np.random.default_rng(1).integers(0, (256 << 20) // 64, 100) * 64
    idle = dramsim3.run(DRAMSIM3, config, sparse, 100 * 400 + 500, 400, tmp_path)
    assert idle["latency"] == pytest.approx(t.rp + t.rcd + t.cl + t.burst, rel=0.15)
    repeated = np.repeat(np.arange(3000, dtype=np.int64) * 4096, 4)  # each line read 4 times
    ds = dramsim3.run(DRAMSIM3, config, repeated, 40000, 0, tmp_path)
    assert ds["reads_done"] >= repeated.size  # (DRAMsim3 replays the last trace line once more)
    mine = run([repeated], t, interleave=t.row_bytes)
    assert mine["row_hits"] + mine["row_misses"] == pytest.approx(ds["read_cmds"], rel=0.1)
