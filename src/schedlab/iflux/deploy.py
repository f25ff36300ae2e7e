"""Deploying an allocation with a job, transparently: tier directories, stage-in, a private mount
namespace, cache daemons, flush-out and teardown.

Paper: IFlux (../shared/papers/10-iflux.md) "enables workloads to use the allocated hardware and
deployed software transparently". Here the job's declared paths are bind-mounted, inside a mount
namespace of its own (``unshare --mount --propagation private``), onto directories of the tier
IFlux picked; nothing outside the job sees the mounts and they vanish with it. An ordinary user
gets the same through a user namespace (``unshare --map-root-user --mount``) where the kernel
allows unprivileged user namespaces. Data lives in the tier directory in the host namespace,
so stage-in and flush-out run outside the job and a crash of the job (or of the flush) never
takes the data with it: a tier directory is deleted only after everything in it is durable on
the PFS. Where mount namespaces are not allowed (not root, and no unprivileged user namespaces)
the job still runs, with ``IFLUX_MOUNTS`` in its environment and ``transparent: false`` in the
report.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.core.io import write_text
from schedlab.iflux.intents import Mode, Usage
from schedlab.iflux.policies import Allocation
from schedlab.iflux.rules import Soft, Tier, soft_list
from schedlab.iflux.storage import SITE_ENV, Client, Site
from schedlab.iflux.transfer import (
    TransferStats,
    flush_tree,
    load_state,
    save_state,
    snapshot,
    stage_tree,
)

PREFETCH_STREAMS = 8


@dataclass
class Mount:
    """One declared path, the tier directory behind it, and how to move its data."""

    path: str
    tier: str
    tier_dir: str
    soft: int
    source: str
    flush: bool

    @property
    def state(self) -> Path:
        return Path(self.tier_dir + ".flushed.json")


@dataclass
class Plan:
    """Everything needed to deploy, enter and tear down one job; JSON so hooks can share it."""

    job_id: str
    site_path: str
    mounts: list[Mount]
    mapper: str = "iflux"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        raw = json.loads(text)
        return cls(raw["job_id"], raw["site_path"], [Mount(**m) for m in raw["mounts"]],
                   raw.get("mapper", "iflux"))

    @property
    def site(self) -> Site:
        return Site.from_json(Path(self.site_path).read_text(encoding="utf-8"))


def build_plan(allocation: Allocation, site_path: str | Path, job_id: str) -> Plan:
    """Give each accelerated placement a directory in its tier (PFS placements need none)."""
    site = Site.from_json(Path(site_path).read_text(encoding="utf-8"))
    mounts = []
    for i, p in enumerate(allocation.placements):
        if p.tier is Tier.PFS:
            continue
        if str(p.tier) not in site.roots:
            raise BadInputError(f"the site has no root for tier {p.tier}", path=site_path,
                                field=f"roots.{p.tier}")
        tier_dir = Path(site.roots[str(p.tier)]) / job_id / f"{i}-{Path(p.intent.path).name}"
        keep = p.intent.usage is not Usage.TEMPORARY and p.intent.mode is not Mode.READ_ONLY
        mounts.append(Mount(p.intent.path, str(p.tier), str(tier_dir), p.soft,
                            p.intent.source or p.intent.path,
                            bool(p.soft & Soft.STAGE_OUT) or keep))
    return Plan(job_id, str(site_path), mounts, allocation.mapper)


def prepare_pfs(allocation: Allocation) -> None:
    """Placements left on the PFS: the declared path shows the source data (a symlink) or is
    an ordinary directory, exactly as the job would see it without IFlux."""
    for p in allocation.placements:
        if p.tier is not Tier.PFS:
            continue
        path = Path(p.intent.path)
        if p.intent.source and p.intent.source != p.intent.path and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(p.intent.source, target_is_directory=True)
        else:
            path.mkdir(parents=True, exist_ok=True)


def prepare(plan: Plan, client: Client) -> TransferStats:
    """Create tier directories and declared paths; stage inputs in (parallel if prefetching).

    Every input's source is checked first, so a missing dataset is reported before anything
    is created.
    """
    for i, m in enumerate(plan.mounts):
        if m.soft & Soft.STAGE_IN and not Path(m.source).is_dir():
            raise BadInputError(f"input {m.source} does not exist (or is not a directory)",
                                field=f"mounts[{i}].source")
        if m.soft & Soft.STAGE_IN and not os.access(m.source, os.R_OK | os.X_OK):
            raise BadInputError(f"input {m.source}: Permission denied (this user cannot read "
                                "it)", field=f"mounts[{i}].source")
    stats = TransferStats()
    for m in plan.mounts:
        Path(m.tier_dir).mkdir(parents=True, exist_ok=True)
        Path(m.path).mkdir(parents=True, exist_ok=True)
        if m.soft & Soft.STAGE_IN:
            streams = PREFETCH_STREAMS if m.soft & Soft.PREFETCH else 1
            stats.add(stage_tree(client, Path(m.source), Path(m.tier_dir), streams))
        if m.flush:
            save_state(m.state, snapshot(Path(m.tier_dir)))  # staged files need no flush back
    return stats


def start_daemons(plan: Plan, env: dict[str, str]) -> list[subprocess.Popen]:
    """One write-back daemon per mount that asked for one."""
    procs = []
    for m in plan.mounts:
        if m.flush and m.soft & Soft.WRITE_BACK:
            cmd = [sys.executable, "-m", "schedlab.iflux.daemon", "writeback", m.tier_dir,
                   m.path, str(m.state)]
            if m.soft & Soft.COMPRESS:
                cmd.append("--compress")
            procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
    return procs


def stop_daemons(procs: list[subprocess.Popen], timeout: float = 30.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: how a private mount namespace is entered: as root (or with CAP_SYS_ADMIN) directly; as an
#: ordinary user inside a new user namespace that maps the user to root (``unshare -r``), where
#: bind mounts of the user's own directories are allowed. The job then runs as uid 0 of that
#: namespace, which is the user outside it: files it writes are the user's.
NAMESPACE_PREFIXES = (
    ("unshare", "--mount", "--propagation", "private"),
    ("unshare", "--map-root-user", "--mount", "--propagation", "private"),
)


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` command line that gives this process a private mount namespace in which
    a bind mount works (the first of :data:`NAMESPACE_PREFIXES` that does), or None."""
    if shutil.which("unshare") is None:
        return None
    import tempfile

    with tempfile.TemporaryDirectory(prefix="iflux-ns-probe-") as tmp:
        src, dst = Path(tmp, "a"), Path(tmp, "b")
        src.mkdir()
        dst.mkdir()
        for prefix in NAMESPACE_PREFIXES:
            probe = subprocess.run([*prefix, "--", "mount", "--bind", str(src), str(dst)],
                                   capture_output=True)
            if probe.returncode == 0:
                return prefix
    return None


def namespaces_available() -> bool:
    """True when this process may create a private mount namespace and bind-mount in it."""
    return namespace_prefix() is not None


def wrap_command(plan: Plan, command: list[str], prefix: tuple[str, ...] | None = None,
                 uid: int | None = None, gid: int | None = None) -> tuple[list[str], bool]:
    """The command that runs ``command`` with the plan's bind mounts; (argv, transparent).

    In a user namespace (an ordinary user) the mounts are made as the namespace's root, then
    a nested user namespace maps that root back to the user's own uid/gid, so the job sees
    itself as the user (``id -u``) and not as root.
    """
    if prefix is None and plan.mounts and namespaces_available():
        prefix = namespace_prefix() or NAMESPACE_PREFIXES[0]
    if not plan.mounts or prefix is None:
        return list(command), not plan.mounts
    script = "".join('mount --bind "$1" "$2" || exit 97; shift 2; ' for _ in plan.mounts)
    pairs = [arg for m in plan.mounts for arg in (m.tier_dir, m.path)]
    uid = os.getuid() if uid is None else uid
    gid = os.getgid() if gid is None else gid
    back: list[str] = []
    if "--map-root-user" in prefix and uid != 0:
        back = ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--"]
    return ([*prefix, "--", "/bin/sh", "-c", script + 'exec "$@"', "iflux-ns", *pairs,
             *back, *command], True)


def job_env(plan: Plan, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env[SITE_ENV] = plan.site_path
    env["IFLUX_JOB_ID"] = plan.job_id
    env["IFLUX_MOUNTS"] = json.dumps({m.path: m.tier_dir for m in plan.mounts})
    return env


def finish(plan: Plan, client: Client, copier=None) -> tuple[TransferStats, list[str]]:
    """Final flush of every mount, then remove tier directories that are fully durable.

    Returns the flush stats and the tier directories kept because something failed to flush.
    """
    stats, kept = TransferStats(), []
    for m in plan.mounts:
        tier_dir = Path(m.tier_dir)
        if m.flush and tier_dir.is_dir():
            extra = {"copier": copier} if copier is not None else {}
            part, done = flush_tree(client, tier_dir, Path(m.path), done=load_state(m.state),
                                    compress=bool(m.soft & Soft.COMPRESS),
                                    aggregate=bool(m.soft & Soft.AGGREGATE), **extra)
            save_state(m.state, done)
            stats.add(part)
            if part.failed:
                kept.append(m.tier_dir)
                continue
        shutil.rmtree(tier_dir, ignore_errors=True)
        m.state.unlink(missing_ok=True)
    for root in {Path(m.tier_dir).parent for m in plan.mounts}:
        if root.is_dir() and not any(root.iterdir()):
            try:
                root.rmdir()
            except PermissionError:  # the job's user may not write the tier root; its
                pass                 # caller (the burst-buffer teardown, as root) removes it
    return stats, kept


@dataclass
class RunReport:
    """What happened to one job run under IFlux, with the phase times the paper reports."""

    job_id: str
    returncode: int
    transparent: bool
    placements: list[dict]
    decide_s: float = 0.0
    stage_in_s: float = 0.0
    job_s: float = 0.0
    flush_s: float = 0.0
    stage_in: dict = field(default_factory=dict)
    flush: dict = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return self.stage_in_s + self.job_s + self.flush_s

    def to_dict(self) -> dict:
        return {**asdict(self), "total_s": self.total_s, "ok": self.returncode == 0
                and not self.kept}


def execute(plan: Plan, command: list[str], allocation: Allocation, decide_s: float = 0.0,
            env: dict[str, str] | None = None, stdout=None, copier=None) -> RunReport:
    """Deploy ``plan``, run ``command`` in it, flush and tear down; always flushes, even when
    the job fails, so partial output survives."""
    client = Client(plan.site)
    t0 = time.perf_counter()
    prepare_pfs(allocation)
    staged = prepare(plan, client)
    t1 = time.perf_counter()
    full_env = job_env(plan, env)
    daemons = start_daemons(plan, full_env)
    argv, transparent = wrap_command(plan, command)
    try:
        rc = subprocess.run(argv, env=full_env, stdout=stdout, stdin=subprocess.DEVNULL).returncode
    except FileNotFoundError as exc:
        rc = 127
        print(f"iflux: cannot run {command[0]!r}: {exc}", file=sys.stderr)
    finally:
        t2 = time.perf_counter()
        stop_daemons(daemons)
        flushed, kept = finish(plan, client, copier)
    t3 = time.perf_counter()
    return RunReport(plan.job_id, rc, transparent, [p.to_dict() for p in allocation.placements],
                     decide_s, t1 - t0, t2 - t1, t3 - t2, staged.to_dict(), flushed.to_dict(),
                     kept)


def write_report(report: RunReport, path: str | Path) -> None:
    write_text(path, json.dumps(report.to_dict(), indent=2, default=str))


__all__ = ["Mount", "Plan", "RunReport", "build_plan", "execute", "finish", "prepare",
           "soft_list", "wrap_command"]
