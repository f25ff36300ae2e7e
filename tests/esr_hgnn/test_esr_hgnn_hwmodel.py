"""The DRAM replay and the unit model: behaviour that must hold whatever the parameters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.esr_hgnn.engine import sample_channels
from schedlab.esr_hgnn.grouping import fanout_hop_cost, make_grouper
from schedlab.esr_hgnn.hwmodel import (
    SOURCES,
    HardwareConfig,
    estimate_unit,
    gpu_seconds,
    load_config,
)
from schedlab.esr_hgnn.kernels import replay_dram
from schedlab.esr_hgnn.policies import SampleBatch, make_sampler
from schedlab.esr_hgnn.workloads import generate, metapath_set

TIMING = dict(row_bytes=1024, n_banks=16, t_cl=14, t_rcd=14, t_rp=14, t_burst=2, t_ccd=2)


def replay(addresses, mlp=32):
    return replay_dram(np.asarray(addresses, dtype=np.int64), TIMING["row_bytes"],
                       TIMING["n_banks"], TIMING["t_cl"], TIMING["t_rcd"], TIMING["t_rp"],
                       TIMING["t_burst"], TIMING["t_ccd"], mlp)


def test_sequential_reads_hit_the_row_buffer():
    cycles, hits, misses = replay(np.arange(0, 1024 * 4, 32))
    assert misses == 4 and hits == 128 - 4


def test_random_reads_miss_and_cost_more():
    rng = np.random.default_rng(0)
    random = rng.integers(0, 1 << 30, 128) // 32 * 32
    seq_cycles, _, _ = replay(np.arange(0, 128 * 32, 32))
    rnd_cycles, hits, _ = replay(random)
    assert hits < 5 and rnd_cycles > seq_cycles


def test_one_outstanding_read_is_latency_bound():
    conflicts = [i * 1024 * 16 for i in range(50)]  # same bank, new row each time
    cycles, hits, misses = replay(conflicts, mlp=1)
    assert hits == 0
    assert cycles >= 49 * (14 * 3 + 2)


def test_more_parallelism_is_never_slower():
    addresses = np.random.default_rng(1).integers(0, 1 << 28, 2000) // 32 * 32
    times = [replay(addresses, mlp)[0] for mlp in (1, 4, 16, 64)]
    assert times == sorted(times, reverse=True)


def test_every_parameter_has_a_source():
    assert set(SOURCES) == set(HardwareConfig.model_fields)


def test_config_file_errors_name_file_and_field(tmp_path):
    bad = tmp_path / "hw.json"
    bad.write_text('{"channels": 0}')
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert info.value.field == "channels" and info.value.path == bad
    bad.write_text('{"chanels": 4}')
    with pytest.raises(ConfigError, match="chanels|Extra"):
        load_config(bad)
    bad.write_text("{oops")
    with pytest.raises(BadInputError, match="JSON") as info:
        load_config(bad)
    assert info.value.line == 1
    bad.write_text("[1, 2]")
    with pytest.raises(BadInputError, match="object"):
        load_config(bad)
    with pytest.raises(BadInputError, match="no such file"):
        load_config(tmp_path / "missing.json")
    good = tmp_path / "ok.json"
    good.write_text(json.dumps({"channels": 2, "mlp": 8}))
    assert load_config(good, channels=6).channels == 6


def _unit(grouper: str, channels: int, cfg: HardwareConfig):
    g = generate("dblp", 0.1, 0)
    mps = metapath_set(g, "dblp", "sym6")
    grouping = make_grouper(grouper).group(mps, channels, fanout_hop_cost((10,)))
    batches = sample_channels(g, make_sampler("trie"), grouping, np.arange(64), (10,), 0)
    return estimate_unit(batches, cfg)


def test_unit_estimate_is_consistent():
    cfg = load_config(channels=4)
    est = _unit("optimal", 4, cfg)
    assert est.reads == est.row_hits + est.row_misses + est.merged_reads
    assert est.seconds == max(est.channel_seconds) > 0
    assert est.energy_j > 0


def test_grouping_reduces_unit_reads():
    cfg = load_config(channels=4)
    assert _unit("optimal", 4, cfg).reads < _unit("round-robin", 4, cfg).reads


def test_tiny_trie_buffer_spills_and_slows_down():
    big = _unit("optimal", 4, load_config(channels=4, trie_buffer_kib=1024))
    small = _unit("optimal", 4, load_config(channels=4, trie_buffer_kib=0.5))
    assert big.spill_bytes == 0 and small.spill_bytes > 0
    assert small.seconds > big.seconds


def test_unit_needs_a_trace_and_enough_channels():
    cfg = load_config(channels=1)
    untraced = SampleBatch(np.arange(2), {}, reads=3, hops=1, frontier_entries=[2], trace=None)
    with pytest.raises(BadInputError, match="trace"):
        estimate_unit([untraced], cfg)
    traced = SampleBatch(np.arange(2), {}, reads=0, trace=np.empty(0, dtype=np.int64))
    with pytest.raises(ConfigError, match="channels"):
        estimate_unit([traced, traced], cfg)


def test_gpu_model_grows_with_work():
    cfg = HardwareConfig()
    assert gpu_seconds(1e6, 10, cfg) > gpu_seconds(1e5, 10, cfg) > gpu_seconds(1e5, 1, cfg)


def test_cpu_cost_model_counts_cache_levels_and_ignores_load():
    """The load-independent CPU baseline: a warm small working set hits L2, reads scattered
    over 256 MiB go to DRAM when cold, and a cyclic set of ways + 1 lines in one L2 set always
    misses L2 (LRU)."""
    import numpy as np

    from schedlab.esr_hgnn.hwmodel import cpu_model_seconds, load_config
    from schedlab.esr_hgnn.kernels import cache_levels

    small = np.arange(0, 4096, 8, dtype=np.int64) // 64
    assert cache_levels(small, 64, 8, 512, 16, True) == (small.size, 0, 0)
    scattered = np.random.default_rng(0).integers(0, 1 << 28, 20_000) // 64
    l2, l3, dram = cache_levels(scattered, 2048, 8, 32768, 16, False)  # cold
    assert dram > 0.99 * scattered.size and l2 + l3 + dram == scattered.size
    assert cache_levels(scattered, 2048, 8, 32768, 16, True)[2] == 0  # 20k lines fit in L3
    cyclic = np.tile(np.arange(9, dtype=np.int64) * 64, 50)  # 9 lines, set 0 of 64, 8 ways
    l2, l3, dram = cache_levels(cyclic, 64, 8, 4096, 16, True)
    assert l2 == 0 and l3 == cyclic.size
    cfg = load_config()
    fast = cpu_model_seconds(np.arange(0, 4096, 8), 1, cfg)
    slow = cpu_model_seconds(np.random.default_rng(0).integers(0, 1 << 28, 512), 1, cfg,
                             warm=False)
    assert fast == cpu_model_seconds(np.arange(0, 4096, 8), 1, cfg)  # a function of the trace
    assert slow > fast and slow >= 512 * cfg.cpu_dram_ns * 0.8 / cfg.cpu_mlp * 1e-9
