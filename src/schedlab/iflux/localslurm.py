"""A throw-away, single-node Slurm (slurmctld + slurmd + munged) on 127.0.0.1 in a temp dir.

Used by the Slurm integration test and by ``schedlab iflux slurm-demo`` to show IFlux's
Prolog/Epilog hooks inside a real scheduler (Debian's ``slurm-wlm`` 22.05 and ``munge``). It
writes its own munge key and ``slurm.conf`` in the given directory, uses free ports, and
:meth:`LocalSlurm.stop` kills exactly the daemons it started (by pid), so nothing is left running.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from schedlab.core.errors import MissingServiceError

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sacct")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES[:5] if shutil.which(b) is None
            and not Path(f"/usr/sbin/{b}").exists()]


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SLURM_CONF = """\
ClusterName=iflux
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/slurmd
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
{hooks}
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class LocalSlurm:
    """Start with :meth:`start`, submit with :meth:`sbatch`, always :meth:`stop` (or use with)."""

    def __init__(self, directory: str | Path, prolog: str | None = None,
                 epilog: str | None = None,
                 burst_buffer: tuple[str | Path, str | Path] | None = None) -> None:
        """``burst_buffer=(site.json, spool)`` configures ``BurstBufferType=burst_buffer/lua``
        with IFlux's ``burst_buffer.lua`` (:func:`burst_buffer.install`) beside slurm.conf."""
        self.dir = Path(directory)
        self.prolog, self.epilog = prolog, epilog
        self.burst_buffer = burst_buffer
        self.procs: list[subprocess.Popen] = []
        self.conf = self.dir / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        self.dir.chmod(0o755)  # jobs of ordinary users read slurm.conf and the munge socket
        for sub in ("state", "slurmd"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        hooks = "\n".join(line for line in (
            f"Prolog={self.prolog}" if self.prolog else "",
            f"Epilog={self.epilog}" if self.epilog else "",
            "PrologFlags=Alloc" if self.prolog else "") if line)
        if self.burst_buffer is not None:
            from schedlab.iflux.burst_buffer import burst_buffer_conf, install

            install(self.dir, *self.burst_buffer)
            (self.dir / "burst_buffer.conf").write_text(burst_buffer_conf())
            hooks += ("\nBurstBufferType=burst_buffer/lua\nDebugFlags=BurstBuffer"
                      "\nJobSubmitPlugins=lua")
        self.conf.write_text(SLURM_CONF.format(
            host=self.host, dir=self.dir, ctld_port=_free_port(), slurmd_port=_free_port(),
            hooks=hooks, cpus=os.cpu_count() or 1))

    def _spawn(self, argv: list[str], name: str) -> None:
        log = open(self.dir / f"{name}.out", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))

    def start(self, timeout: float = 30.0) -> LocalSlurm:
        missing = missing_binaries()
        if missing:
            raise MissingServiceError(f"Slurm/munge binaries missing: {', '.join(missing)}",
                                      hint="apt-get install -y slurm-wlm munge")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        d = self.dir
        self._spawn([_which("munged"), "-F", "--force", f"--socket={d}/munge.sock",
                     f"--key-file={d}/munge.key", f"--pid-file={d}/munged.pid",
                     f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"], "munged")
        self._wait(lambda: (d / "munge.sock").exists(), timeout, "munged socket")
        self._spawn([_which("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._spawn([_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.host], "slurmd")
        self._wait(self._node_idle, timeout, "an idle Slurm node")
        return self

    def _node_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                             text=True)
        return out.returncode == 0 and out.stdout.strip().startswith("idle")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        logs = "; ".join(f"{p.name}: {p.read_text(errors='replace')[-400:]}"
                         for p in sorted(self.dir.glob("*.log")) if p.stat().st_size)
        self.stop()
        raise MissingServiceError(f"local Slurm did not come up ({what}); {logs}")

    def sbatch(self, argv: list[str]) -> str:
        out = subprocess.run(["sbatch", "--parsable", *argv], env=self.env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise MissingServiceError(f"sbatch failed: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def wait_job(self, job_id: str, timeout: float = 60.0) -> str:
        """Block until the job has left the queue; returns its last state."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            out = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=self.env,
                                 capture_output=True, text=True)
            fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
            state = fields.get("JobState", "GONE" if out.returncode else "")
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "GONE"):
                if self._epilog_done():
                    return state
            time.sleep(0.3)
        raise MissingServiceError(f"job {job_id} did not finish in {timeout:.0f} s "
                                  f"(last state {state or 'unknown'})")

    def _epilog_done(self) -> bool:
        """The node is idle again only after the Epilog has returned."""
        return self._node_idle()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
