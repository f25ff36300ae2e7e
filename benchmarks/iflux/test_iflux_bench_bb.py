"""IFlux's per-job overhead on the scheduler's path, as Slurm pays it: fresh processes.

Run with ``pytest benchmarks/iflux/test_iflux_bench_bb.py``. Target (issue 31): the per-job
decision in the Prolog/plugin < 50 ms wall *including process start* (paper: 0.02% scheduler
overhead). ``burst_buffer.lua`` runs ``bbfast.py`` once per ``slurm_bb_setup``; since issue 53
``slurm_bb_job_process`` checks in Lua (``test_iflux_bench_submit.py``) and runs ``bbfast.py``
only for intents without a pool request, as ``schedlab iflux sbatch`` does; the old Prolog ran
the full package.
On a real local Slurm, slurmctld's own ``_slurm_rpc_submit_batch_job ... usec=`` log line gives
the submission RPC time with and without IFlux's ``#BB_LUA`` job.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from schedlab.core.io import write_text
from schedlab.iflux import burst_buffer as bb
from schedlab.iflux.localslurm import LocalSlurm, missing_binaries
from schedlab.iflux.storage import Site

FAST = Path(bb.__file__).with_name("bbfast.py")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture(scope="module")
def installed():
    base = Path(tempfile.mkdtemp(prefix="iflux-bbbench-"))
    base.chmod(0o755)
    site = Site.under(base / "site", ram_base=base / "ram")
    write_text(base / "site.json", site.to_json())
    bb.install(base, base / "site.json", base / "spool")
    pfs = site.roots["pfs"]
    lines = []
    for i in range(8):  # an 8-intent job: inputs, checkpoints, scratch
        kind = ("usage=input mode=read-only pattern=small-random size=1MiB",
                "usage=output pattern=checkpoint size=4MiB",
                "usage=temporary pattern=metadata-heavy size=1MiB")[i % 3]
        lines.append(f"#IFLUX path={pfs}/d{i} {kind}")
    script = base / "job.sh"
    script.write_text("#!/bin/bash\n#BB_LUA pool=nvme capacity=64M\n" + "\n".join(lines)
                      + "\ntrue\n")
    env = {**os.environ, "PYTHONPATH": str(Path(bb.__file__).resolve().parents[2])}
    yield base, script, env
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(base / "ram", ignore_errors=True)


def _ms(benchmark) -> float:
    return benchmark.stats.stats.median * 1e3 if benchmark.stats else float("nan")


def test_iflux_bench_bb_job_process_fresh_process(benchmark, installed):
    """slurm_bb_job_process: interpreter start + parse + validate + pool check, 8 intents."""
    base, script, env = installed
    cmd = [sys.executable, "-S", str(FAST), "--spool", str(base / "spool"), "job_process",
           str(script)]

    def once():
        assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0

    benchmark.pedantic(once, rounds=30, warmup_rounds=2)
    benchmark.extra_info.update(wall_ms=_ms(benchmark), target_ms=50)


def test_iflux_bench_bb_setup_fresh_process(benchmark, installed):
    """slurm_bb_setup: interpreter start + decide (table) + tier dirs + plan/env files."""
    base, script, env = installed
    ids = iter(range(1000, 10**6))

    def once():
        cmd = [sys.executable, "-S", str(FAST), "--spool", str(base / "spool"), "setup",
               str(next(ids)), "0", "0", "nvme", str(64 << 20), str(script)]
        assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0

    benchmark.pedantic(once, rounds=20, warmup_rounds=1)
    benchmark.extra_info.update(wall_ms=_ms(benchmark), target_ms=50)


def test_iflux_bench_old_prolog_decision_fresh_process(benchmark, installed):
    """What the Prolog paid before: the full package (Pydantic, NumPy, rule compile, Numba)."""
    _, script, env = installed
    cmd = [sys.executable, "-c", "from schedlab.iflux.engine import decide; "
           f"decide({str(script)!r})"]

    def once():
        assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0

    benchmark.pedantic(once, rounds=3, warmup_rounds=0)
    benchmark.extra_info.update(wall_ms=_ms(benchmark))


@pytest.mark.skipif(bool(missing_binaries()) or os.geteuid() != 0
                    or shutil.which("setpriv") is None,
                    reason="needs slurm-wlm + munge, root (slurmd) and setpriv")
def test_iflux_bench_bb_slurm_submit_rpc(benchmark, installed):
    """slurmctld's submission RPC (usec in its log) for held jobs, with and without IFlux."""
    base, script, env = installed
    cluster = LocalSlurm(base / "slurm", burst_buffer=(base / "site.json", base / "spool"))
    plain = base / "plain.sh"
    plain.write_text("#!/bin/bash\ntrue\n")
    bb_only = base / "bb-only.sh"  # a burst-buffer job without intents: Lua skips the helper
    bb_only.write_text("#!/bin/bash\n#BB_LUA pool=nvme capacity=1M\ntrue\n")
    for path in (plain, bb_only, script):
        path.chmod(0o644)
    cluster.start()
    try:
        ids: dict[str, list[str]] = {"plain": [], "bb_only": [], "iflux": []}

        def submit(kind: str, path: Path) -> None:
            out = subprocess.run([*NOBODY, "sbatch", "--parsable", "--hold", "-o", "/dev/null",
                                  str(path)], env=cluster.env, capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            ids[kind].append(out.stdout.strip())

        for _ in range(10):
            submit("plain", plain)
            submit("bb_only", bb_only)
        benchmark.pedantic(submit, args=("iflux", script), rounds=10, warmup_rounds=0)
        wanted = {int(j) for kind in ids for j in ids[kind]}
        deadline = time.monotonic() + 60  # slurmctld's log lags a loaded machine: poll it
        while True:
            log = (cluster.dir / "slurmctld.log").read_text(errors="replace")
            usec = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
                r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*usec=(\d+)", log)}
            if wanted <= set(usec) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert wanted <= set(usec), f"no submit RPC line for jobs {sorted(wanted - set(usec))}"
        for kind in ids:
            values = [usec[int(j)] for j in ids[kind] if int(j) in usec]
            benchmark.extra_info[f"{kind}_rpc_ms"] = statistics.median(values) / 1e3
        benchmark.extra_info["added_ms"] = (benchmark.extra_info["iflux_rpc_ms"]
                                            - benchmark.extra_info["plain_rpc_ms"])
    finally:
        cluster.stop()
