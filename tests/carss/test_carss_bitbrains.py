"""Bitbrains VM traces: the reader's errors, a Hypothesis fuzz, and COSCO's BWGD2 workload."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.carss.bitbrains import (
    IPS_PER_MHZ,
    RAM_DIVISOR,
    bitbrains_dir,
    bitbrains_workload,
    cosco_eligible,
    parse_vm_trace,
    read_vm_trace,
    read_vm_traces,
    sampler_for,
    seeded_vm_traces,
)
from schedlab.carss.engine import run
from schedlab.carss.hosts import COSCO_FLEET, make_hosts
from schedlab.carss.schedulers import make_scheduler
from schedlab.core.errors import BadInputError, SchedlabError


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; more threads only contend
    yield
    torch.set_num_threads(threads)


HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\t"
    "CPU usage [%];\tMemory capacity provisioned [KB];\tMemory usage [KB];\t"
    "Disk read throughput [KB/s];\tDisk write throughput [KB/s];\t"
    "Network received throughput [KB/s];\tNetwork transmitted throughput [KB/s]"
)


def _row(t: int, usage: float = 1000.0, memory: float = 4e5) -> str:
    return f"{t};\t2;\t2926.0;\t{usage};\t34.1;\t4194304.0;\t{memory};\t0.0;\t6.8;\t0.1;\t1.0"


def _write(tmp_path: Path, lines: list[str], name: str = "7.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reads_plain_and_gzip_files(tmp_path: Path) -> None:
    lines = [HEADER] + [_row(1377986608 + 300 * i, 500.0 + i) for i in range(12)]
    plain = read_vm_trace(_write(tmp_path, lines))
    packed = tmp_path / "8.csv.gz"
    packed.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    zipped = read_vm_trace(packed)
    assert len(plain) == len(zipped) == 12
    np.testing.assert_allclose(plain.mips, (500.0 + np.arange(12)) * IPS_PER_MHZ)
    assert zipped.name == "8" and plain.cores[0] == 2


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        ([], ":1: "),
        (["Timestamp [ms];CPU cores"], "field 'CPU capacity provisioned [MHZ]'"),
        ([HEADER], ":2: "),
        ([HEADER, _row(1), "1;2;3"], ":3: has 3 fields"),
        ([HEADER, _row(1), _row(2).replace("1000.0", "lots")], ":3: field 'CPU usage [MHZ]'"),
        ([HEADER, _row(1), _row(2, memory=float("nan"))], ":3: field 'Memory usage [KB]'"),
        ([HEADER, _row(1), _row(2, usage=-5.0)], "must be a finite number >= 0"),
        ([HEADER, _row(10), _row(5)], ":3: field 'Timestamp [ms]'"),
    ],
)
def test_bad_files_get_one_line_errors(tmp_path: Path, lines: list[str], where: str) -> None:
    path = _write(tmp_path, lines)
    with pytest.raises(BadInputError) as info:
        read_vm_trace(path)
    message = str(info.value)
    assert where in message and "\n" not in message and str(path) in message


def test_unreadable_and_corrupt_inputs(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot read"):
        read_vm_trace(tmp_path / "absent.csv")
    broken = tmp_path / "9.csv.gz"
    broken.write_bytes(gzip.compress(b"x" * 100)[:20])
    with pytest.raises(BadInputError, match="gzip"):
        read_vm_trace(broken)
    with pytest.raises(BadInputError, match="no .csv"):
        read_vm_traces(_empty_dir(tmp_path))
    with pytest.raises(BadInputError, match="not a directory"):
        read_vm_traces(tmp_path / "absent-dir")


def _empty_dir(tmp_path: Path) -> Path:
    path = tmp_path / "empty"
    path.mkdir()
    return path


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from(list("0123456789.;\t e-naAx\n")), max_size=60), max_size=6
    )
)
def test_fuzz_never_raises_anything_but_a_located_error(rows: list[str]) -> None:
    """Arbitrary bodies under a valid header: a trace, or one BadInputError with a line."""
    try:
        trace = parse_vm_trace([HEADER, *"\n".join(rows).splitlines()], "fuzz.csv")
    except BadInputError as exc:
        assert exc.line is not None and "\n" not in str(exc)
    else:
        assert len(trace) >= 1 and np.isfinite(trace.usage_mhz).all()
        assert (np.diff(trace.time_s) >= 0).all()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.floats(0, 1e5), st.floats(0, 1e8)),
        min_size=1,
        max_size=30,
    )
)
def test_fuzz_valid_rows_round_trip(rows: list[tuple[int, float, float]]) -> None:
    rows = sorted(rows)
    trace = parse_vm_trace([HEADER, *[_row(t, u, m) for t, u, m in rows]])
    np.testing.assert_allclose(trace.usage_mhz, [u for _, u, _ in rows])
    np.testing.assert_allclose(trace.memory_kb, [m for _, _, m in rows])


needs_data = pytest.mark.skipif(
    bitbrains_dir() is None, reason="../shared/data/bitbrains is absent"
)


@needs_data
def test_real_traces_and_cosco_filter() -> None:
    """The shared set: 36 VMs, 32 pass COSCO's BWGD2 filter (its MANIFEST says so)."""
    traces = read_vm_traces(bitbrains_dir())
    manifest = (bitbrains_dir() / "MANIFEST.tsv").read_text().splitlines()[1:]
    expected = {
        line.split("\t")[0].split(".")[0]: line.split("\t")[-1] == "yes" for line in manifest
    }
    assert len(traces) == len(expected) == 36
    for trace in traces:
        assert cosco_eligible(trace) == expected[trace.name], trace.name
    rows = {line.split("\t")[0].split(".")[0]: int(line.split("\t")[5]) for line in manifest}
    assert all(len(t) == rows[t.name] for t in traces)


@needs_data
def test_bwgd2_tasks_follow_their_trace() -> None:
    """Work = demand over 1.2 x SLA samples; demand in the cluster is the trace row."""
    traces = read_vm_traces(bitbrains_dir())
    workload = bitbrains_workload(np.array([6, 0, 3]), traces, 300.0, seed=3)
    table, lengths = workload.traces
    batch = workload.batches[0]
    assert len(batch) == 6 and len(workload.batches[1]) == 0
    samples = (1.2 * batch.deadline / 300.0).astype(int)
    for k in range(6):
        row = table[batch.trace[k]]
        assert batch.work[k] == pytest.approx(row[: samples[k]].sum() * 300.0)
    assert (batch.cap >= table[batch.trace].max(axis=1) - 1e-9).all()
    eligible = [t for t in traces if cosco_eligible(t)]
    peak_ram = max(float(t.memory_kb.max()) / RAM_DIVISOR for t in eligible)
    assert (batch.ram <= peak_ram + 1e-9).all()
    from schedlab.carss.simulator import Cluster

    cluster = Cluster(make_hosts(4, COSCO_FLEET), 300.0, traces=workload.traces)
    cluster.admit(batch.copy())
    np.testing.assert_allclose(cluster.demand(), table[batch.trace, 0])
    cluster.interval = 2  # two intervals later the demand is the third sample
    np.testing.assert_allclose(cluster.demand(), table[batch.trace, 2])
    frozen = cluster.copy(freeze=True)
    frozen.interval = 5  # a co-simulator copy keeps the demand it could observe
    np.testing.assert_allclose(frozen.demand(), table[batch.trace, 2])
    sampler = sampler_for(workload, traces)
    extra = sampler(4, 0.0, 100, np.random.default_rng(0))
    assert len(extra) == 4 and (extra.trace < table.shape[0]).all()


@needs_data
def test_cosco_schedulers_run_on_bitbrains() -> None:
    """Every COSCO baseline completes a short Bitbrains run and conserves tasks."""
    traces = read_vm_traces(bitbrains_dir())
    workload = bitbrains_workload(np.array([2, 1, 2, 1]), traces, 300.0, seed=1)
    sampler = sampler_for(workload, traces)
    fleet = make_hosts(5, COSCO_FLEET)
    for name in ("gobi", "gobi2", "a3c", "ga", "hgp", "pond", "lr-mmt", "mad-mmt", "iqr-mmt"):
        policy = make_scheduler(name, seed=0, task_source=sampler, offline=15)
        for attribute, small in (("steps", 10), ("epochs", 20), ("generations", 5)):
            if hasattr(policy, attribute):
                setattr(policy, attribute, small)
        summary = run(policy, workload, fleet, np.ones(20), seed=0, drain=30).summary
        assert summary["completed"] + summary["unfinished"] == summary["arrived"] == 6, name
        assert summary["completed"] == 6, name


def test_cli_style_error_is_a_schedlab_error(tmp_path: Path) -> None:
    path = _write(tmp_path, ["not a header"])
    with pytest.raises(SchedlabError, match="missing column"):
        read_vm_trace(path)


# --- host sleep/wake, forecast-driven actions, COSCO's optimisers --------------------------


def _one_task_cluster(hosts: int = 3):
    from schedlab.carss.simulator import Cluster
    from schedlab.carss.workloads import make_tasks

    cluster = Cluster(make_hosts(hosts, COSCO_FLEET), 300.0)
    cluster.admit(make_tasks(1, 0.0, 0, np.random.default_rng(0)))
    return cluster


def test_sleeping_hosts_save_power_and_wake_with_latency() -> None:
    from schedlab.carss.simulator import SLEEP_FRACTION, WAKE_S, Decision

    awake, asleep = _one_task_cluster(), _one_task_cluster()
    awake.apply_decision(Decision(np.array([0])))
    e_awake = awake.step().energy_j
    asleep.apply_decision(Decision(np.array([0]), sleep=np.array([True, True, True])))
    assert asleep.asleep.tolist() == [False, True, True]  # an occupied host stays awake
    e_asleep = asleep.step().energy_j
    idle = asleep.hosts.power_table[1:, 0].sum() * 300.0
    assert e_awake - e_asleep == pytest.approx(idle * (1 - SLEEP_FRACTION))
    # a task placed on a sleeping host wakes it and starts WAKE_S later than on an awake one
    late, early = _one_task_cluster(), _one_task_cluster()
    late.set_sleep(np.array([True, True, True]))
    late.apply(np.array([1]))
    early.apply(np.array([1]))
    assert not late.asleep[1] and late.waking[1] == WAKE_S
    done_late = late.step().completed
    done_early = early.step().completed
    left_late = late.tasks.work - late.tasks.done if len(late.tasks) else np.zeros(1)
    left_early = early.tasks.work - early.tasks.done if len(early.tasks) else np.zeros(1)
    assert done_late <= done_early and left_late.sum() >= left_early.sum()


def test_bad_sleep_mask_is_a_located_error() -> None:
    cluster = _one_task_cluster()
    with pytest.raises(BadInputError, match="sleep"):
        cluster.set_sleep(np.array([True]))


def test_forecast_actions_are_valid_decisions() -> None:
    from schedlab.carss.policies import candidate_decisions, pack_and_sleep
    from schedlab.carss.workloads import make_tasks

    cluster = _one_task_cluster(6)
    cluster.admit(make_tasks(4, 0.0, 1, np.random.default_rng(1)))
    cands = candidate_decisions(cluster, np.random.default_rng(0), 1, actions=True)
    sleeping = [c for c in cands if getattr(c, "sleep", None) is not None]
    assert sleeping and len(cands) > 10
    for c in cands:
        twin = cluster.copy()
        twin.apply_decision(c)
        assert np.all(twin.ram_used() <= twin.hosts.ram + 1e-6)
    decision = pack_and_sleep(cluster)
    twin = cluster.copy()
    twin.apply_decision(decision)
    used = np.unique(twin.tasks.host[twin.tasks.host >= 0])
    assert twin.asleep.sum() == cluster.hosts.n - used.size  # every empty host sleeps


def test_gobi_optimiser_lowers_its_surrogate_cost() -> None:
    """COSCO's opt(): the rounded allocation it returns scores no worse on the surrogate."""
    import torch as t

    from schedlab.carss.cosco import GOBI
    from schedlab.carss.workloads import make_tasks

    cluster = _one_task_cluster(4)
    cluster.admit(make_tasks(5, 0.0, 1, np.random.default_rng(2)))
    gobi = GOBI(seed=0, offline=30, epochs=50)
    gobi._train_offline(cluster)
    idx = gobi._slot_index(cluster)
    start = gobi._current(cluster, idx, np.random.default_rng(0))
    best = gobi._optimise(cluster, idx, start)
    with t.no_grad():
        before = float(gobi.cost(t.tensor(gobi._encode(cluster, idx, start))))
        after = float(gobi.cost(t.tensor(gobi._encode(cluster, idx, best))))
    assert after <= before + 1e-6
    assert 1 <= gobi.iterations[-1] <= 200


def test_loess_extrapolates_a_line_and_mmt_picks_the_smallest() -> None:
    from schedlab.carss.cosco import LRMMT, _loess_next

    assert _loess_next(np.arange(10.0) * 3 + 1) == pytest.approx(3 * 11 + 1)
    cluster = _one_task_cluster(3)
    from schedlab.carss.workloads import make_tasks

    cluster.admit(make_tasks(3, 0.0, 1, np.random.default_rng(3)))
    cluster.tasks.host[:] = 0
    cluster.tasks.cpu[:] = 3000.0  # host 0 (4029 MIPS) is far above 70 %
    cluster.tasks.amp[:] = 0.0
    policy = LRMMT()
    placement = policy.decide(cluster, np.random.default_rng(0))
    smallest = int(np.argmin(cluster.tasks.ram))
    moved = np.flatnonzero(placement >= 0)
    assert moved.tolist() in ([smallest], [])  # random placement may land on its own host
    assert len(policy.history) == 1


def test_cosco_setting_without_shared_data_uses_named_seeded_stand_ins(tmp_path, monkeypatch):
    """Without ../shared/data the COSCO experiment still runs, on seeded traces it names."""
    from schedlab.carss.experiment import cosco_setting

    monkeypatch.setenv("SCHEDLAB_DATA", str(tmp_path))
    assert bitbrains_dir() is None
    workload, fleet, history, sampler, where = cosco_setting(4, 6, 60, seed=0)
    assert "bitbrains/ absent" in where and "alibaba/ absent" in where
    assert not where.startswith("real data")
    assert workload.traces is not None and len(workload.batches) == 6 and history.size == 60
    traces = seeded_vm_traces(0)
    assert seeded_vm_traces(0)[3].usage_mhz.tolist() == traces[3].usage_mhz.tolist()
    assert sum(cosco_eligible(t) for t in traces) >= len(traces) // 2
    summary = run(make_scheduler("least-loaded"), workload, fleet, history, drain=30).summary
    assert summary["completed"] + summary["unfinished"] == summary["arrived"]
