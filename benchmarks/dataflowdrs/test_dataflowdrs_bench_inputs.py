"""Speed of the real-input readers: Darshan logs (PyDarshan in a child process), a large
strace trace and a metadata-storm trace through the whole diagnosis. No target in the issue;
these say how long a user waits for ``analyze`` on their own logs."""

from __future__ import annotations

import shutil
import sys

import pytest

from schedlab.core.data import data_dir
from schedlab.dataflowdrs import read_trace
from schedlab.dataflowdrs.engine import diagnose

LOGS = data_dir() / "darshan"


@pytest.mark.parametrize("log", ["dxt.darshan", "example.darshan", "sample-goodost.darshan"])
def test_dataflowdrs_bench_read_darshan(benchmark, log):
    pytest.importorskip("darshan", reason="PyDarshan is not installed")
    if not (LOGS / log).is_file():
        pytest.skip(f"{LOGS / log} not found")
    trace = benchmark.pedantic(read_trace, args=(LOGS / log,), rounds=3, iterations=1)
    benchmark.extra_info.update(ops=trace.ops.height, records=trace.profile.height)


@pytest.fixture(scope="module")
def storm(tmp_path_factory):
    if shutil.which("strace") is None:
        pytest.skip("strace not installed")
    root = tmp_path_factory.mktemp("storm")
    (root / "s.py").write_text("import os\nos.makedirs('d', exist_ok=True)\n"
                               "for i in range(5000):\n    open(f'd/{i}', 'w').write('x')\n"
                               "for i in range(5000):\n    os.stat(f'd/{i}')\n")
    from schedlab.dataflowdrs.openworld import _layout
    from schedlab.dataflowdrs.runner import run_command
    from schedlab.dataflowdrs.tracer import make_tracer

    out = root / "tr"
    run_command([sys.executable, "s.py"], make_tracer("strace"), out, _layout(root, out),
                cwd=root)
    return out


def test_dataflowdrs_bench_read_strace_storm(benchmark, storm):
    trace = benchmark.pedantic(read_trace, args=(storm,), rounds=3, iterations=1)
    benchmark.extra_info.update(events=trace.ops.height)


def test_dataflowdrs_bench_diagnose_strace_storm(benchmark, storm):
    d = benchmark.pedantic(diagnose, args=(storm,), rounds=3, iterations=1)
    assert d.ranked[0].kind == "metadata"
