"""Building the data plane (the LD_PRELOAD shim) and its CPU stand-ins, and launching under it.

gPooling (../shared/papers/14-gpooling.md) enforces quotas by driver-level interception. The C
sources ship inside the package (``csrc/``); :func:`build` compiles them with the system C
compiler into a per-user cache keyed by the sources' hash, so an edited shim is rebuilt and an
unchanged one is reused. Three artefacts come out:

- ``libgpooling_shim.so``: the shim itself (what ``LD_PRELOAD`` loads in production);
- ``stub/libcuda.so.1``: a *stand-in* driver exporting the same symbols (no GPU needed);
- ``stub/libnvidia-ml.so.1``: a *stand-in* NVML (device count, handle, memory info);
- ``gpooling_probe``: a driver-API client behaving like the CUDA runtime, for tests/benchmarks.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from schedlab.core.errors import MissingServiceError, SchedlabError

CSRC = Path(__file__).with_name("csrc")
_SOURCES = ("gpooling_shared.h", "gpooling_cuda.h", "gpooling_shim.c", "fake_libcuda.c",
            "fake_nvml.c", "gpooling_probe.c")
_CFLAGS = ["-O2", "-Wall", "-Wextra", "-fPIC"]


@dataclass(frozen=True)
class NativeBuild:
    """Paths of the compiled artefacts."""

    root: Path

    @property
    def shim(self) -> Path:
        return self.root / "libgpooling_shim.so"

    @property
    def stub_dir(self) -> Path:
        return self.root / "stub"

    @property
    def stub(self) -> Path:
        return self.stub_dir / "libcuda.so.1"

    @property
    def stub_nvml(self) -> Path:
        return self.stub_dir / "libnvidia-ml.so.1"

    @property
    def probe(self) -> Path:
        return self.root / "gpooling_probe"


def cache_root() -> Path:
    """Where builds go: $GPOOLING_BUILD_DIR, else $XDG_CACHE_HOME/schedlab/gpooling."""
    explicit = os.environ.get("GPOOLING_BUILD_DIR")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "schedlab" / "gpooling"


def _digest() -> str:
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update((CSRC / name).read_bytes())
    h.update(" ".join(_CFLAGS).encode())
    return h.hexdigest()[:16]


def _compile(args: list[str]) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SchedlabError(f"compiling the gPooling shim failed:\n{done.stderr.strip()}",
                            hint="the C sources are in " + str(CSRC))


def build(force: bool = False, compiler: str | None = None,
          root: str | Path | None = None) -> NativeBuild:
    """Compile shim, stand-in driver and probe (cached by source hash); returns their paths."""
    target = NativeBuild(Path(root or cache_root()) / _digest())
    if not force and all(p.is_file() for p in (target.shim, target.stub, target.stub_nvml,
                                             target.probe)):
        return target
    cc = compiler or os.environ.get("CC") or "gcc"
    if shutil.which(cc) is None:
        raise MissingServiceError(f"no C compiler '{cc}' to build the gPooling shim",
                                  hint="apt-get install gcc, or set CC")
    target.root.parent.mkdir(parents=True, exist_ok=True)
    staging = NativeBuild(Path(tempfile.mkdtemp(prefix=".build-", dir=target.root.parent)))
    staging.stub_dir.mkdir()
    so = ["-shared", "-fvisibility=hidden"]
    _compile([cc, *_CFLAGS, *so, "-o", str(staging.shim), str(CSRC / "gpooling_shim.c"),
              "-ldl", "-lpthread"])
    # -Bsymbolic: the stand-in's own internal calls must not go through the shim
    _compile([cc, *_CFLAGS, *so, "-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic", "-o",
              str(staging.stub), str(CSRC / "fake_libcuda.c"), "-lpthread"])
    _compile([cc, *_CFLAGS, *so, "-Wl,-soname,libnvidia-ml.so.1", "-o", str(staging.stub_nvml),
              str(CSRC / "fake_nvml.c")])
    _compile([cc, *_CFLAGS, "-o", str(staging.probe), str(CSRC / "gpooling_probe.c"), "-ldl"])
    if target.root.exists():  # another process finished first, or --force: replace it
        shutil.rmtree(target.root, ignore_errors=True)
    try:
        os.replace(staging.root, target.root)
    except OSError:  # lost a race with a concurrent build of the same sources
        shutil.rmtree(staging.root, ignore_errors=True)
    return target


def shim_environment(
    native: NativeBuild,
    *,
    region: Path | None = None,
    limits_fd: int | None = None,
    memory_limit: int | None = None,
    share: float | None = None,
    real_libcuda: str | Path | None = None,
    stand_in: bool = False,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment that runs a command inside a virtual device.

    ``region`` is a usage region (its limits file beside it, ``<region>.limits``, unless
    ``limits_fd`` names a sealed memfd from :class:`~schedlab.gpooling.shm.SealedLimits`, which
    the caller must pass on with ``pass_fds``). ``stand_in`` puts the stand-in driver and NVML
    first on the library path (CPU-only machines); else the real ``libcuda.so.1`` (or
    ``real_libcuda``) is what the shim forwards to.
    """
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{native.shim}:{preload}" if preload else str(native.shim)
    for stale in ("GPOOLING_SHM", "GPOOLING_LIMITS", "GPOOLING_LIMITS_FD",
                  "GPOOLING_LIMITS_SEALED"):
        env.pop(stale, None)
    if region is not None:
        env["GPOOLING_SHM"] = str(region)
        if limits_fd is None:
            env["GPOOLING_LIMITS"] = f"{region}.limits"
    if limits_fd is not None:  # sealed: inherited, or reopened read-only by children that
        env["GPOOLING_LIMITS_FD"] = str(int(limits_fd))  # lost it to close_fds
        env["GPOOLING_LIMITS"] = f"/proc/{os.getpid()}/fd/{int(limits_fd)}"
        env["GPOOLING_LIMITS_SEALED"] = "1"
    if memory_limit is not None:
        env["GPOOLING_MEMORY_LIMIT"] = str(int(memory_limit))
    if share is not None:
        env["GPOOLING_COMPUTE_SHARE"] = repr(float(share))
    if stand_in:
        paths = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = f"{native.stub_dir}:{paths}" if paths else str(native.stub_dir)
        env["GPOOLING_REAL_LIBCUDA"] = str(native.stub)
        env["GPOOLING_REAL_LIBNVML"] = str(native.stub_nvml)
    elif real_libcuda is not None:
        env["GPOOLING_REAL_LIBCUDA"] = str(real_libcuda)
    return env


def run_probe(native: NativeBuild, operations: list[str], env: dict[str, str] | None = None,
              *, gpa: bool = False, timeout: float = 60.0,
              pass_fds: tuple[int, ...] = ()) -> list[dict]:
    """Run the probe against the stand-in driver (with ``env``'s shim, if any); its JSON lines.

    Without ``env`` the probe talks to the stand-in directly: the no-interception baseline.
    """
    if env is None:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(native.stub_dir)
        env.pop("LD_PRELOAD", None)
    args = [str(native.probe), *(["--gpa"] if gpa else []), *operations]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, pass_fds=pass_fds)
    if done.returncode != 0:
        raise SchedlabError(f"probe exited {done.returncode}: {done.stderr.strip()[:300]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
