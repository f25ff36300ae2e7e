"""Trace readers (Alibaba pod list, node list), generators, sizes and inventories.

Every reader is fuzzed: malformed input raises BadInputError naming the file, line and field,
never a raw parser exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, SchedlabError, UnknownNameError
from schedlab.gpooling.devices import (
    GIB,
    StaticBackend,
    parse_nvidia_smi,
    parse_rocm_smi,
    parse_size,
    read_node_list,
)
from schedlab.gpooling.workloads import (
    heterogeneous_cluster,
    read_pod_trace,
    synthetic_trace,
    write_pod_trace,
)

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time," \
         "deletion_time,scheduled_time\n"


def _write(tmp_path: Path, text: str, name: str = "pods.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_pod_trace_reads_alibaba_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "p0,1000,100,1,460,,LS,Running,100,400,150\n"
                  "p1,1000,100,0,0,,BE,Running,120,300,\n"
                  "p2,1000,100,2,1000,V100M32,LS,Running,130,330,\n")
    jobs = read_pod_trace(path, memory_per_gpu=10 * GIB)
    assert len(jobs) == 2  # the CPU-only pod is skipped
    first, gang = jobs
    assert (first.arrival, first.duration) == (0.0, 250.0)  # deletion - scheduled
    assert first.request.milli == 460 and first.request.memory == 460 * 10 * GIB // 1000
    assert gang.request.count == 2 and gang.request.model == "V100M32"
    assert gang.duration == 200.0  # not yet scheduled: from creation


@pytest.mark.parametrize(("row", "field", "line"), [
    ("p,1,1,1,0,,LS,R,0,10,0", "gpu_milli", 2),
    ("p,1,1,1,1200,,LS,R,0,10,0", "gpu_milli", 2),
    ("p,1,1,-1,100,,LS,R,0,10,0", "num_gpu", 2),
    ("p,1,1,1,100,,LS,R,0,10,20", "deletion_time", 2),
    ("p,1,1,1,abc,,LS,R,0,10,0", "gpu_milli", 2),
    ("p,1,1,1,100,,LS,R,0,10,soon", "scheduled_time", 2),
])
def test_pod_trace_errors_name_file_line_field(tmp_path: Path, row: str, field: str,
                                               line: int) -> None:
    path = _write(tmp_path, HEADER + row + "\n")
    with pytest.raises(BadInputError) as info:
        read_pod_trace(path)
    assert info.value.field == field and info.value.line == line and info.value.path == path


def test_pod_trace_missing_column_and_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="missing column"):
        read_pod_trace(_write(tmp_path, "name,num_gpu\np,1\n"))
    with pytest.raises(BadInputError, match="no such file"):
        read_pod_trace(tmp_path / "absent.csv")


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300))
def test_pod_trace_fuzz_never_leaks_raw_errors(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_bytes(HEADER.encode() + body)
    try:
        read_pod_trace(path)
    except BadInputError as exc:
        assert exc.path == path


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.text("abc0123456789-.", max_size=6),
                               st.text("0123456789-x", max_size=3),
                               st.sampled_from(["T4", "A10", "H100", "Q9", ""])), max_size=5))
def test_node_list_fuzz(tmp_path: Path, rows) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                    + "".join(f"{sn},1,1,{gpu},{model}\n" for sn, gpu, model in rows))
    try:
        devices = read_node_list(path)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert all(d.spec.memory > 0 for d in devices)


def test_node_list_reads_models(tmp_path: Path) -> None:
    path = _write(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,P100\nn1,1,1,1,A10\n",
                  "nodes.csv")
    devices = read_node_list(path)
    assert [d.id for d in devices] == ["n0/gpu0", "n0/gpu1", "n1/gpu0"]
    assert devices[2].spec.memory == 24 * GIB


@given(st.integers(0, 2**50))
def test_parse_size_round_trips_bytes(n: int) -> None:
    assert parse_size(str(n)) == n
    assert parse_size(f"{n}B") == n


def test_parse_size_units_and_errors() -> None:
    assert parse_size("10GiB") == 10 * GIB
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1.5G") == 1_500_000_000
    for bad in ("ten", "-1GiB", "1 parsec", ""):
        with pytest.raises(BadInputError):
            parse_size(bad)


@given(st.text(max_size=30))
def test_static_inventory_fuzz(text: str) -> None:
    try:
        devices = StaticBackend(text).discover()
    except (BadInputError, UnknownNameError):
        return
    assert devices


def test_vendor_tool_output_parsers() -> None:
    nvidia = parse_nvidia_smi("0, Tesla T4, 15360\n1, NVIDIA A100-SXM4-80GB, 81920\n"
                              "2, Tesla V100-SXM2-32GB, 32768\n", "h")
    assert [d.model for d in nvidia] == ["T4", "A100", "V100M32"]
    assert nvidia[1].spec.memory == 81920 << 20
    with pytest.raises(BadInputError, match="memory.total"):
        parse_nvidia_smi("0, Tesla T4, lots\n")
    amd = parse_rocm_smi("device,VRAM Total Memory (B),Card series\ncard0,34342961152,"
                         "AMD Instinct MI100\n")
    assert amd[0].model == "MI100" and amd[0].spec.vendor == "amd"
    with pytest.raises(BadInputError):
        parse_rocm_smi("device,other\ncard0,1\n")


def test_generator_is_seeded_and_shaped() -> None:
    pool = heterogeneous_cluster(20)
    a, b = synthetic_trace(400, pool, seed=7), synthetic_trace(400, pool, seed=7)
    assert a == b and a != synthetic_trace(400, pool, seed=8)
    whole = sum(j.request.milli == 1000 for j in a) / len(a)
    assert 0.35 < whole < 0.6
    largest = max(d.spec.memory for d in pool)
    assert all(0 < j.request.memory <= largest for j in a)
    assert all(a[i].arrival <= a[i + 1].arrival for i in range(len(a) - 1))


def test_written_trace_reads_back(tmp_path: Path) -> None:
    pool = heterogeneous_cluster(10)
    jobs = synthetic_trace(50, pool, seed=2)
    path = write_pod_trace(jobs, tmp_path / "t.csv")
    back = read_pod_trace(path)
    assert [j.request for j in back] == [j.request for j in jobs]
    assert [j.duration for j in back] == pytest.approx([j.duration for j in jobs], abs=0.01)


def test_generator_refuses_nonsense() -> None:
    with pytest.raises(SchedlabError):
        synthetic_trace(0, heterogeneous_cluster(4), seed=0)


def test_real_alibaba_trace_replays(shared_data: Path) -> None:
    pods = shared_data / "alibaba" / "gpu2023_pod_list_default.csv"
    nodes = shared_data / "alibaba" / "gpu2023_node_list_gpu_node.csv"
    if not pods.is_file():
        pytest.skip("Alibaba pod list not present")
    jobs = read_pod_trace(pods, limit=300)
    assert len(jobs) == 300 and all(0 < j.request.milli <= 1000 for j in jobs)
    assert len(read_node_list(nodes, limit=64)) == 64


@pytest.mark.parametrize("load", [float("nan"), float("inf"), 0.0, -1.0])
def test_synthetic_trace_rejects_bad_load(load: float) -> None:
    with pytest.raises(BadInputError) as info:
        synthetic_trace(10, heterogeneous_cluster(4), 0, load=load)
    assert info.value.field == "load"


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(time_scale=0.0), "time-scale"), (dict(time_scale=-1.0), "time-scale"),
    (dict(time_scale=float("nan")), "time-scale"), (dict(limit=0), "limit"),
    (dict(memory_per_gpu=0), "memory-per-gpu"),
])
def test_read_pod_trace_rejects_bad_options(tmp_path: Path, kwargs: dict, field: str) -> None:
    path = write_pod_trace(synthetic_trace(5, heterogeneous_cluster(4), 0), tmp_path / "t.csv")
    with pytest.raises(BadInputError) as info:
        read_pod_trace(path, **kwargs)
    assert info.value.field == field
