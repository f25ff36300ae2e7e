"""Running a command inside a virtual device, and the HTTP client of the control plane.

gPooling (../shared/papers/14-gpooling.md): a job joins a virtual device by being started with the
shim preloaded and pointed at the virtual device's usage region; nothing in the job changes.
:func:`run_in_vdev` does that, watches the region while the job runs and pushes its usage to the
control plane, so the control plane sees usage even when it runs on another host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedlab.core.errors import BadInputError, MissingServiceError, SchedlabError
from schedlab.gpooling import shm
from schedlab.gpooling.native import NativeBuild, shim_environment

DEFAULT_SERVER = "http://127.0.0.1:8470"
#: environment variables the agent never passes on to the job it runs
SECRETS = ("GPOOLING_TOKEN",)


class NotFoundError(BadInputError):
    """The control plane does not know the virtual device (HTTP 404)."""


class ControlPlane:
    """A small client of the control plane's HTTP API; errors become SchedlabErrors.

    ``token`` (else ``$GPOOLING_TOKEN``) is sent as ``Authorization: Bearer``.
    """

    def __init__(self, base_url: str = DEFAULT_SERVER, timeout: float = 10.0,
                 client: Any = None, token: str | None = None) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.token = token or os.environ.get("GPOOLING_TOKEN") or None
        # an existing client (e.g. FastAPI's TestClient) lets tests skip the network
        self._client = client or httpx.Client(base_url=self.base_url, timeout=timeout)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        if self.token:
            kwargs.setdefault("headers", {})["Authorization"] = f"Bearer {self.token}"
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise MissingServiceError(f"no gPooling control plane at {self.base_url}: {exc}",
                                      hint="start one with `schedlab gpooling serve`") from exc
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail")
            except ValueError:
                detail = response.text
            kind = NotFoundError if response.status_code == 404 else BadInputError
            field = "vdev" if response.status_code in (403, 404) else None
            hint = ("pass --token or set GPOOLING_TOKEN" if response.status_code == 401 else None)
            raise kind(f"control plane refused ({response.status_code}): {detail}",
                       field=field, hint=hint)
        return response.json()

    def create(self, memory: int, compute: float, model: str | None = None) -> dict:
        return self._call("POST", "/vdevs", json=dict(memory=memory, compute=compute,
                                                      model=model))

    def get(self, vid: str) -> dict:
        return self._call("GET", f"/vdevs/{vid}")

    def list(self) -> list[dict]:
        return self._call("GET", "/vdevs")

    def resize(self, vid: str, memory: int | None, compute: float | None,
               force: bool = False) -> dict:
        return self._call("PATCH", f"/vdevs/{vid}", json=dict(memory=memory, compute=compute),
                          params=dict(force="true") if force else None)

    def release(self, vid: str, force: bool = False) -> dict:
        return self._call("DELETE", f"/vdevs/{vid}",
                          params=dict(force="true") if force else None)

    def report(self, vid: str, usage: dict[str, float]) -> dict:
        return self._call("POST", f"/vdevs/{vid}/usage", json=dict(usage=usage))

    def stats(self) -> dict:
        return self._call("GET", "/stats")

    def devices(self) -> list[dict]:
        return self._call("GET", "/devices")


@dataclass
class RunOutcome:
    returncode: int
    usage: dict[str, int]
    region: str
    seconds: float
    revoked: bool = False


def _region_for(vdev: dict, scratch: Path) -> Path:
    """The virtual device's usage region if this host can see it, else a local one."""
    region = vdev.get("region")
    if region and Path(region).is_file():
        return Path(region)
    local = scratch / f"{vdev['id']}.shm"
    if not local.is_file():
        shm.create_region(local, int(vdev["memory"]), float(vdev["compute"]), vdev=vdev["id"])
    return local


def run_in_vdev(vdev: dict, command: Sequence[str], native: NativeBuild, *,
                stand_in: bool = False, scratch: Path | None = None,
                report: Callable[[dict[str, int]], Any] | None = None,
                refresh: Callable[[], dict | None] | None = None,
                interval: float = 1.0, stdout: int | None = None,
                grace: float = 10.0) -> RunOutcome:
    """Run ``command`` confined to ``vdev`` (memory quota, compute share); wait for it.

    The limits reach the job as a write-sealed memfd (:class:`~schedlab.gpooling.shm.
    SealedLimits`) that only this agent can change, so not even a root job can raise them.
    Every ``interval`` the agent pushes usage (``report``) and asks for the virtual device
    (``refresh``: its current description, or None once it is gone): a resize is copied into
    the limits; a revoked or vanished device is revoked in the limits (the shim refuses from its
    next call, and says why) and the job's process group gets SIGTERM, then SIGKILL after
    ``grace`` seconds. ``stdout`` redirects the command's output (e.g. fd 2, when our own
    stdout carries JSON). Secrets such as ``GPOOLING_TOKEN`` are not passed on to the job.
    """
    if not command:
        raise BadInputError("give the command to run after --", field="command")
    import tempfile

    region = _region_for(vdev, scratch or Path(tempfile.gettempdir()) / "gpooling")
    limits = shm.SealedLimits(int(vdev["memory"]), float(vdev["compute"]),
                              vdev=str(vdev.get("id", "")))
    env = shim_environment(native, region=region, limits_fd=limits.fd, stand_in=stand_in)
    for name in SECRETS:
        env.pop(name, None)
    env["CUDA_VISIBLE_DEVICES"] = str(vdev.get("index", 0))
    start = time.perf_counter()
    try:
        process = subprocess.Popen(list(command), env=env, stdout=stdout,
                                   pass_fds=(limits.fd,), start_new_session=True)
    except OSError as exc:
        limits.close()
        raise BadInputError(f"cannot start {command[0]!r}: {exc.strerror}",
                            field="command") from exc
    revoked_at: float | None = None
    try:
        while process.poll() is None:
            try:
                process.wait(timeout=interval)
            except subprocess.TimeoutExpired:
                if report is not None:
                    _push(report, region)
                if refresh is not None and revoked_at is None:
                    revoked_at = _follow(refresh, limits, process)
                if revoked_at is not None and time.monotonic() - revoked_at > grace:
                    _signal(process, signal.SIGKILL)
    except KeyboardInterrupt:
        _signal(process, signal.SIGTERM)
        process.wait()
        raise
    finally:
        limits.close()
    shm.reap(region, native.shim)  # a job killed by a signal never ran the shim's destructor
    usage = shm.read_region(region)
    if report is not None:
        _push(report, region)
    return RunOutcome(process.returncode, usage, str(region), time.perf_counter() - start,
                      revoked=revoked_at is not None)


def _signal(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _follow(refresh: Callable[[], dict | None], limits: shm.SealedLimits,
            process: subprocess.Popen) -> float | None:
    """Copy the control plane's view into the sealed limits; tell the job when it is revoked."""
    try:
        current = refresh()
    except NotFoundError:
        current = None
    except SchedlabError:
        return None  # control plane unreachable: keep the limits the job has
    if current is not None and current.get("state", "active") == "active":
        limits.update(int(current["memory"]), float(current["compute"]))
        return None
    limits.update(revoked=True)
    _signal(process, signal.SIGTERM)
    return time.monotonic()


def _push(report: Callable[[dict[str, int]], Any], region: Path) -> None:
    try:
        report(shm.read_region(region))
    except SchedlabError:
        pass  # a control plane that went away must not kill the job it was watching
