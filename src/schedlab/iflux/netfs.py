"""A real network file system to stand for the shared PFS: sshfs served on 127.0.0.1.

Paper: IFlux (../shared/papers/10-iflux.md) measures its speedups against a shared parallel file
system. We have no Lustre; kernel NFS is not loadable in this container (no ``nfs`` in
``/proc/filesystems``), but FUSE is. So the "PFS" here is sshfs: a FUSE client that sends every
open, stat, read and write as SFTP requests over TCP to a private OpenSSH server started on
127.0.0.1 (never another interface) for the run. Every byte and every metadata operation
crosses a network protocol, a server process and the kernel twice, and nothing of it is
modelled. The round trip is loopback's (tens of µs): a data-centre network's would only slow
the PFS further, and this kernel has no ``netem`` qdisc to add one ("Specified qdisc kind is
unknown"), so the speedups measured here are conservative for the network part.

What it is not: a parallel file system (one server, one stream per client, no striping) — so it
is a *faster-metadata, slower-bandwidth* PFS than a loaded Lustre; the report says which ran.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from schedlab.core.errors import MissingServiceError

SSHD = "/usr/sbin/sshd"
MAX_CONNS = 4


def missing() -> str | None:
    """Why a network PFS cannot be served here, or None when it can."""
    for tool in ("sshfs", "ssh-keygen", "ssh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y sshfs openssh-server)"
    if not (shutil.which("sshd") or os.path.exists(SSHD)):
        return "sshd is not installed (apt-get install -y openssh-server)"
    if not os.path.exists("/dev/fuse") or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is absent or not usable by this user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise MissingServiceError(f"{what} failed: {(done.stderr or done.stdout).strip()[:300]}")


def sshfs_version() -> str:
    out = subprocess.run(["sshfs", "--version"], capture_output=True, text=True)
    lines = (out.stdout + out.stderr).splitlines()
    return next((ln.strip() for ln in lines if ln.startswith("SSHFS version")), "sshfs")


@dataclass
class NetworkPFS:
    """A served, mounted network file system: ``mountpoint`` is what jobs see as the PFS."""

    export: Path       # the server's directory (jobs never touch it)
    mountpoint: Path   # the sshfs mount of ``export``
    address: str
    port: int

    def describe(self) -> str:
        return (f"{sshfs_version()} over OpenSSH on {self.address}:{self.port} (loopback, "
                f"{MAX_CONNS} connections)")


def _wait_listening(address: str, port: int, log: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise MissingServiceError("sshd exited: " + log.read_text(errors="replace")[-300:])
        if "Server listening" in (log.read_text(errors="replace") if log.exists() else ""):
            return
        time.sleep(0.05)
    raise MissingServiceError(f"sshd did not listen on {address}:{port} within 10 s")


@contextmanager
def serve(base: Path) -> Iterator[NetworkPFS]:
    """Start a private sshd on 127.0.0.1, mount its export with sshfs at ``base``/pfs; undo
    both on exit (the mount first, so nothing is ever deleted through it)."""
    reason = missing()
    if reason:
        raise MissingServiceError(f"no network PFS: {reason}")
    base = Path(base).resolve()  # sshfs resolves a relative export in the server user's home
    etc = Path(tempfile.mkdtemp(prefix="iflux-sshd-"))
    export, mnt = base / "pfs-export", base / "pfs"
    export.mkdir(parents=True, exist_ok=True)
    mnt.mkdir(parents=True, exist_ok=True)
    proc: subprocess.Popen | None = None
    mounted = False
    try:
        for name in ("host_key", "client_key"):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(etc / name)],
                 "ssh-keygen")
        shutil.copy(etc / "client_key.pub", etc / "authorized_keys")
        address = "127.0.0.1"
        port = _free_port()
        (etc / "sshd_config").write_text(
            f"ListenAddress {address}\nPort {port}\nHostKey {etc / 'host_key'}\n"
            f"AuthorizedKeysFile {etc / 'authorized_keys'}\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin yes\n"
            f"PidFile {etc / 'sshd.pid'}\nSubsystem sftp internal-sftp\n")
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        sshd = shutil.which("sshd") or SSHD
        cmd = [sshd, "-D", "-f", str(etc / "sshd_config"), "-E", str(etc / "sshd.log")]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _wait_listening(address, port, etc / "sshd.log", proc)
        user = os.environ.get("USER") or ("root" if os.geteuid() == 0 else str(os.geteuid()))
        opts = [f"IdentityFile={etc / 'client_key'}", "StrictHostKeyChecking=no",
                "UserKnownHostsFile=/dev/null", "LogLevel=ERROR", "BatchMode=yes"]
        if os.geteuid() == 0:
            opts.append("allow_other")  # jobs run as other users (burst-buffer path: nobody)
        mount = ["sshfs", f"{user}@{address}:{export}", str(mnt), "-p", str(port), "-o"]
        # Debian's sshfs refuses every symlink with '..' or an absolute target by default
        # (contain_symlinks); a PFS keeps users' symlinks as they are. ``max_conns``: several
        # SSH connections, as a PFS client talks to several servers (OpenSSH's sftp-server
        # answers one request at a time). Older sshfs lacks both.
        modern = [*opts, "no_contain_symlinks", f"max_conns={MAX_CONNS}"]
        if subprocess.run([*mount, ",".join(modern)], capture_output=True).returncode != 0:
            _run([*mount, ",".join(opts)], "sshfs mount")
        mounted = True
        yield NetworkPFS(export, mnt, address, port)
    finally:
        if mounted:
            for cmd in (["fusermount", "-u", str(mnt)], ["umount", "-l", str(mnt)]):
                if shutil.which(cmd[0]) and subprocess.run(cmd, capture_output=True
                                                           ).returncode == 0:
                    break
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(etc, ignore_errors=True)
