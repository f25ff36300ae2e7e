"""Submit latency inside slurmctld, by Slurm's own timers: IFlux vs a do-nothing plugin vs none.

Run with ``pytest benchmarks/iflux/test_iflux_bench_submit.py -s``. Issue 53 target: <= 5 ms
median per submission inside slurmctld (the IFlux submit check now runs in Lua, in slurmctld's
own Lua state: no process per submission). Three private Slurms (Debian's 22.05) on 127.0.0.1:

* ``none``: no BurstBufferType, no JobSubmitPlugins;
* ``noop``: ``burst_buffer/lua`` + ``job_submit/lua`` whose functions only return SUCCESS (the
  pools come from the same pools.json): what Slurm's Lua plugins cost by themselves;
* ``iflux``: IFlux's generated ``burst_buffer.lua`` and ``job_submit.lua``.

Each gets plain scripts and (except ``none``, which refuses burst-buffer requests) an 8-intent
IFlux script with ``#BB_LUA pool=nvme capacity=64M``, submitted ``--hold`` as ``nobody``. The
figures are slurmctld's ``_slurm_rpc_submit_batch_job ... usec=`` log lines (median) and
``sdiag``'s REQUEST_SUBMIT_BATCH_JOB average (reset before each kind of script). The log line
times the RPC after slurmctld has its job write lock (job_allocate, where
``slurm_bb_job_process`` runs); sdiag's average covers the whole RPC, job_submit filters and
authentication included.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from schedlab.core.io import write_text
from schedlab.iflux.localslurm import LocalSlurm, missing_binaries
from schedlab.iflux.storage import Site

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ROUNDS = int(os.environ.get("IFLUX_SUBMIT_ROUNDS", "25"))
NOOP_BB = """function slurm_bb_job_process(job_script) return slurm.SUCCESS end
function slurm_bb_pools()
   local f = io.open(SPOOL .. "/pools.json", "r")
   local s = f:read("*a")
   f:close()
   return slurm.SUCCESS, s
end
function slurm_bb_setup(...) return slurm.SUCCESS end
function slurm_bb_data_in(...) return slurm.SUCCESS end
function slurm_bb_real_size(...) return slurm.SUCCESS end
function slurm_bb_paths(...) return slurm.SUCCESS end
function slurm_bb_pre_run(...) return slurm.SUCCESS end
function slurm_bb_post_run(...) return slurm.SUCCESS end
function slurm_bb_data_out(...) return slurm.SUCCESS end
function slurm_bb_job_teardown(...) return slurm.SUCCESS end
function slurm_bb_get_status(...) return slurm.SUCCESS, "" end
"""
NOOP_SUBMIT = """function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
"""


class NoopSlurm(LocalSlurm):
    """IFlux's install (pools.json, slurm.conf lines), then both Lua scripts replaced by no-ops."""

    def _write_config(self) -> None:
        super()._write_config()
        spool = Path(self.burst_buffer[1]).resolve()
        (self.dir / "burst_buffer.lua").write_text(f'local SPOOL = "{spool}"\n' + NOOP_BB)
        (self.dir / "job_submit.lua").write_text(NOOP_SUBMIT)


def _rpc_usec(cluster: LocalSlurm, ids: list[str]) -> dict[int, int]:
    wanted = {int(j) for j in ids}
    deadline = time.monotonic() + 60  # slurmctld's log lags a loaded machine
    while True:
        log = (cluster.dir / "slurmctld.log").read_text(errors="replace")
        usec = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
            r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*usec=(\d+)", log)}
        if wanted <= set(usec) or time.monotonic() > deadline:
            return usec
        time.sleep(0.2)


def _sdiag_submit(cluster: LocalSlurm) -> dict[str, float]:
    out = subprocess.run(["sdiag"], env=cluster.env, capture_output=True, text=True).stdout
    m = re.search(r"REQUEST_SUBMIT_BATCH_JOB\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+"
                  r"total_time:(\d+)", out)
    return dict(count=int(m.group(1)), ave_ms=int(m.group(2)) / 1e3) if m else {}


def _measure(kind: str, base: Path, scripts: dict[str, Path]) -> dict:
    site = Site.under(base / f"site-{kind}", ram_base=base / f"ram-{kind}")
    write_text(base / f"site-{kind}.json", site.to_json())
    bb = None if kind == "none" else (base / f"site-{kind}.json", base / f"spool-{kind}",
                                      {"ramdisk": 64 << 20, "nvme": 1 << 30})
    cls = NoopSlurm if kind == "noop" else LocalSlurm
    cluster = cls(base / f"slurm-{kind}", burst_buffer=bb)
    cluster.start()
    try:
        ids: dict[str, list[str]] = {name: [] for name in scripts}
        sdiag = {}
        for name, path in scripts.items():  # one kind at a time: sdiag averages per kind
            if kind == "none" and name != "plain":
                continue
            subprocess.run(["sdiag", "--reset"], env=cluster.env, capture_output=True)
            for _ in range(ROUNDS):
                out = subprocess.run([*NOBODY, "sbatch", "--parsable", "--hold", "-o",
                                      "/dev/null", str(path)], env=cluster.env,
                                     capture_output=True, text=True)
                assert out.returncode == 0, f"{kind}/{name}: {out.stderr}"
                ids[name].append(out.stdout.strip())
            sdiag[name] = _sdiag_submit(cluster)
        usec = _rpc_usec(cluster, [j for v in ids.values() for j in v])
        result = {}
        for name, v in ids.items():
            if v:
                values = sorted(usec[int(j)] / 1e3 for j in v)
                result[name] = dict(median_ms=statistics.median(values),
                                    p90_ms=values[int(0.9 * (len(values) - 1))],
                                    sdiag_ave_ms=sdiag[name].get("ave_ms"))
        return result
    finally:
        cluster.stop()
        shutil.rmtree(base / f"ram-{kind}", ignore_errors=True)


@pytest.mark.skipif(bool(missing_binaries()) or os.geteuid() != 0
                    or shutil.which("setpriv") is None,
                    reason="needs slurm-wlm + munge, root (slurmd) and setpriv")
def test_iflux_bench_submit_latency_in_slurmctld(benchmark):
    base = Path(tempfile.mkdtemp(prefix="iflux-submit-bench-"))
    base.chmod(0o755)
    try:
        plain = base / "plain.sh"
        plain.write_text("#!/bin/bash\ntrue\n")
        lines = []
        for i in range(8):  # inputs, checkpoints, scratch
            what = ("usage=input mode=read-only pattern=small-random size=1MiB",
                    "usage=output pattern=checkpoint size=4MiB",
                    "usage=temporary pattern=metadata-heavy size=1MiB")[i % 3]
            lines.append(f"#IFLUX path=/scratch/p/d{i} {what}")
        intents = base / "iflux.sh"
        intents.write_text("#!/bin/bash\n#BB_LUA pool=nvme capacity=64M\n" + "\n".join(lines)
                           + "\ntrue\n")
        for path in (plain, intents):
            path.chmod(0o644)
        scripts = {"plain": plain, "iflux_job": intents}
        figures = {}

        def run_all() -> None:
            for kind in ("none", "noop", "iflux"):
                figures[kind] = _measure(kind, base, scripts)

        benchmark.pedantic(run_all, rounds=1, warmup_rounds=0)
        figures["target_ms"] = 5.0
        figures["iflux_added_vs_noop_ms"] = (figures["iflux"]["iflux_job"]["median_ms"]
                                             - figures["noop"]["iflux_job"]["median_ms"])
        figures["iflux_added_vs_no_plugin_ms"] = (figures["iflux"]["iflux_job"]["median_ms"]
                                                  - figures["none"]["plain"]["median_ms"])
        benchmark.extra_info.update(figures)
        print(json.dumps(figures, indent=1))
    finally:
        shutil.rmtree(base, ignore_errors=True)
