"""Running a command inside a virtual device, and the HTTP client of the control plane.

gPooling (../shared/papers/14-gpooling.md): a job joins a virtual device by being started with the
shim preloaded and pointed at the virtual device's usage region; nothing in the job changes.
:func:`run_in_vdev` does that, watches the region while the job runs and pushes its usage to the
control plane, so the control plane sees usage even when it runs on another host.
"""

from __future__ import annotations

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


class ControlPlane:
    """A small client of the control plane's HTTP API; errors become SchedlabErrors."""

    def __init__(self, base_url: str = DEFAULT_SERVER, timeout: float = 10.0,
                 client: Any = None) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        # an existing client (e.g. FastAPI's TestClient) lets tests skip the network
        self._client = client or httpx.Client(base_url=self.base_url, timeout=timeout)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

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
            field = "vdev" if response.status_code == 404 else None
            raise BadInputError(f"control plane refused ({response.status_code}): {detail}",
                                field=field)
        return response.json()

    def create(self, memory: int, compute: float, model: str | None = None) -> dict:
        return self._call("POST", "/vdevs", json=dict(memory=memory, compute=compute,
                                                      model=model))

    def get(self, vid: str) -> dict:
        return self._call("GET", f"/vdevs/{vid}")

    def list(self) -> list[dict]:
        return self._call("GET", "/vdevs")

    def resize(self, vid: str, memory: int | None, compute: float | None) -> dict:
        return self._call("PATCH", f"/vdevs/{vid}", json=dict(memory=memory, compute=compute))

    def release(self, vid: str) -> dict:
        return self._call("DELETE", f"/vdevs/{vid}")

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


def _region_for(vdev: dict, scratch: Path) -> Path:
    """The virtual device's region if this host can see it, else a local one with its quota."""
    region = vdev.get("region")
    if region and Path(region).is_file():
        return Path(region)
    local = scratch / f"{vdev['id']}.shm"
    if not local.is_file():
        shm.create_region(local, int(vdev["memory"]), float(vdev["compute"]))
    return local


def run_in_vdev(vdev: dict, command: Sequence[str], native: NativeBuild, *,
                stand_in: bool = False, scratch: Path | None = None,
                report: Callable[[dict[str, int]], Any] | None = None,
                interval: float = 1.0, stdout: int | None = None) -> RunOutcome:
    """Run ``command`` confined to ``vdev`` (memory quota, compute share); wait for it.

    ``stdout`` redirects the command's output (e.g. fd 2, when our own stdout carries JSON).
    """
    if not command:
        raise BadInputError("give the command to run after --", field="command")
    import tempfile

    region = _region_for(vdev, scratch or Path(tempfile.gettempdir()) / "gpooling")
    env = shim_environment(native, region=region, stand_in=stand_in)
    env["CUDA_VISIBLE_DEVICES"] = str(vdev.get("index", 0))
    start = time.perf_counter()
    try:
        process = subprocess.Popen(list(command), env=env, stdout=stdout)
    except OSError as exc:
        raise BadInputError(f"cannot start {command[0]!r}: {exc.strerror}",
                            field="command") from exc
    try:
        while process.poll() is None:
            try:
                process.wait(timeout=interval)
            except subprocess.TimeoutExpired:
                if report is not None:
                    _push(report, region)
    except KeyboardInterrupt:
        process.terminate()
        process.wait()
        raise
    shm.reap(region, native.shim)  # a job killed by a signal never ran the shim's destructor
    usage = shm.read_region(region)
    if report is not None:
        _push(report, region)
    return RunOutcome(process.returncode, usage, str(region), time.perf_counter() - start)


def _push(report: Callable[[dict[str, int]], Any], region: Path) -> None:
    try:
        report(shm.read_region(region))
    except SchedlabError:
        pass  # a control plane that went away must not kill the job it was watching
