"""Every system's GPU check behind one entry point, for ``benchmarks/gpu/run_all.sh``.

    python benchmarks/gpu/checks.py list
    python benchmarks/gpu/checks.py run NAME --out DIR [--budget S] [--dry-run]
    python benchmarks/gpu/checks.py summary --out DIR [--dry-run]

``run`` starts the system's own GPU entry point (a script or module the system ships) as a
child process group with its own time limit, reads the figures it prints or writes, and writes
``DIR/NAME.json``: status (``ok``, ``failed``, ``timeout``, ``skipped``), seconds, figures,
where the figures land in the docs. ``--dry-run`` runs the same plumbing on a CPU: each entry
point in a mode that validates its imports and arguments (``--help`` with every flag the real
run passes, a syntax check, or the CPU path at a tiny scale), and the JSON says ``dry-run``.
A check that cannot run (no CUDA, a package the GPU machine lacks) is ``skipped`` with the
reason, never a traceback. Why one runner: a GPU session is short, so the checks must all be
prepared, bounded and collected in one go.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


@dataclass(frozen=True)
class Outcome:
    """What one child process did: its exit status, output, and whether the limit hit it."""

    rc: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


def run_child(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> Outcome:
    """Run ``cmd`` in its own process group; on timeout the whole group is killed (a script's
    grandchildren included) and the output written so far is kept."""
    full_env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}"
                f"{os.environ.get('PYTHONPATH', '')}", **(env or {})}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    return Outcome(proc.returncode, out or "", err or "", timed_out,
                   time.perf_counter() - start)


def last_json(text: str) -> dict | list | None:
    """The last JSON document a script printed (one per line, or one indented at the end)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i][:1] in "{[":
            try:
                return json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    return None


def json_lines(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def cuda_reason() -> str:
    """"" when a CUDA device is visible to PyTorch, else why not (one line)."""
    probe = run_child([PY, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() "
                       "else 3)"], 60)
    if probe.rc == 0:
        return ""
    return "no CUDA device visible to PyTorch" if probe.rc == 3 else (
        f"PyTorch does not import: {probe.stderr.strip().splitlines()[-1:]}")


def has_module(name: str) -> bool:
    return run_child([PY, "-c", f"import {name}"], 60).rc == 0


def help_accepts(cmd: list[str], flags: list[str]) -> dict:
    """Dry-run check of an argparse/Typer entry point: ``--help`` exits 0 and lists every flag
    the real run passes."""
    done = run_child([*cmd, "--help"], 120)
    missing = [f for f in flags if f not in done.stdout]
    if done.rc != 0 or missing:
        raise CheckError(f"{' '.join(cmd)} --help: exit {done.rc}, flags missing {missing}; "
                         f"{done.stderr.strip()[-300:]}")
    return dict(entry=" ".join(cmd), flags_validated=flags)


class CheckError(Exception):
    """A check that ran and failed: the message is the JSON's ``reason``."""


class Skip(Exception):
    """A check that cannot run on this machine: the message says why."""


def _finish(out: Outcome, what: str) -> None:
    if out.timed_out:
        raise TimeoutError(f"{what} passed its time limit after {out.seconds:.0f} s")
    if out.rc != 0:
        tail = (out.stderr.strip() or out.stdout.strip())[-400:]
        raise CheckError(f"{what} exited {out.rc}: {tail}")


def _printed_json(cmd: list[str], budget: float) -> dict:
    """Run an entry point that prints its figures as a JSON object (last on stdout)."""
    out = run_child(cmd, budget)
    _finish(out, " ".join(cmd[1:2]))
    figures = last_json(out.stdout)
    if not isinstance(figures, dict):
        raise CheckError(f"{cmd[1]} printed no JSON object")
    return figures


# --- the checks ---------------------------------------------------------------------------

def hydra_mcs(budget: float, dry: bool, work: Path) -> dict:
    script = ["bash", "benchmarks/hydra_mcs/gpu_check.sh"]
    if dry:
        syntax = run_child(["bash", "-n", script[1]], 30)
        _finish(syntax, "bash -n")
        probe = run_child([PY, "-c", "from schedlab.hydra_mcs import solve, check_mapping; "
                           "from schedlab.hydra_mcs.gpu import cuda_available; "
                           "import inspect; p = inspect.signature(solve).parameters; "
                           "assert {'gpu', 'gpu_kernel', 'threads'} <= set(p), p; "
                           "print(cuda_available())"], 120)
        _finish(probe, "hydra_mcs imports")
        return dict(entry=" ".join(script), syntax="ok", cuda_here=probe.stdout.strip())
    out = run_child(script, budget)
    rows = json_lines(out.stdout)
    if not rows and (out.timed_out or out.rc):
        _finish(out, "gpu_check.sh")
    runs = [r for r in rows if "policy" in r]

    def wall(policy: str, kernel: str = "-") -> float:
        return sum(r["wall_s"] for r in runs if r["policy"] == policy and r["kernel"] == kernel)

    figures: dict = dict(cuda=rows[0].get("cuda") if rows else None, runs=runs,
                         all_valid=all(r["valid"] for r in runs),
                         partial=out.timed_out)
    cpu = wall("hydra-cpu")
    for kernel in ("block", "thread"):
        gpu_runs = [r for r in runs if r["policy"] == "hydra-gpu" and r["kernel"] == kernel]
        done = {r["instance"] for r in gpu_runs}
        cpu_same = sum(r["wall_s"] for r in runs if r["policy"] == "hydra-cpu"
                       and r["instance"] in done)
        if gpu_runs and wall("hydra-gpu", kernel) > 0:
            figures[f"offload_speedup_{kernel}"] = cpu_same / wall("hydra-gpu", kernel)
    figures["hydra_cpu_wall_s"] = cpu
    if not figures["all_valid"]:
        raise CheckError("a mapping did not verify")
    return figures


def esr_hgnn(budget: float, dry: bool, work: Path) -> dict:
    # dry run: the same command on the CPU at a tiny scale (the graph has 81 author seeds)
    device, scale, batch = ("cpu", "0.02", "64") if dry else ("cuda", "1.0", "256")
    if not dry and (why := cuda_reason()):
        raise Skip(why)
    cmd = [PY, "-m", "schedlab.cli", "esr-hgnn", "gpu-bench", "--schema", "dblp", "--scale",
           scale, "--batch", batch, "--batches", "3", "--device", device, "--json"]
    out = run_child(cmd, budget)
    _finish(out, "esr-hgnn gpu-bench")
    rows = last_json(out.stdout)
    if not isinstance(rows, list) or not rows:
        raise CheckError("gpu-bench printed no rows")
    seconds = {r["sampler"]: r.get("seconds_per_batch", r.get("seconds")) for r in rows}
    figures: dict = dict(device=device, scale=float(scale), rows=rows)
    if seconds.get("naive") and seconds.get("trie"):
        figures["trie_speedup_over_naive"] = seconds["naive"] / seconds["trie"]
    return figures


def couchsurfer(budget: float, dry: bool, work: Path) -> dict:
    cmd = [PY, "benchmarks/couchsurfer/gpu_check.py", "--out", str(work / "pairs.csv"),
           "--steps", "200", "--device", "cuda", "--mps"]
    if dry:
        return help_accepts(cmd[:2], ["--out", "--steps", "--device", "--mps"])
    if why := cuda_reason():
        raise Skip(why)
    return dict(_printed_json(cmd, budget), simulator_assumes_priority_residual=0.35)


def faircache_vllm(budget: float, dry: bool, work: Path) -> dict:
    script = "benchmarks/faircache/vllm_gpu_check.py"
    model = os.environ.get("SCHEDLAB_GPU_MODEL", "")
    if dry:
        compiled = run_child([PY, "-m", "py_compile", script], 60)
        _finish(compiled, "py_compile")
        probe = run_child([PY, "-c", "import schedlab.faircache.vllm as v; "
                           "print(v.__name__)"], 120)
        _finish(probe, "schedlab.faircache.vllm import")
        return dict(entry=script, compiled="ok", model_set=bool(model),
                    vllm_installed=has_module("vllm"))
    if why := cuda_reason():
        raise Skip(why)
    if not has_module("vllm"):
        raise Skip("vLLM is not installed (pip install vllm)")
    if not model:
        raise Skip("no model: set SCHEDLAB_GPU_MODEL to a local Hugging Face model directory")
    out = run_child([PY, script, model], budget)
    _finish(out, "vllm_gpu_check.py")
    found = re.findall(r"^(\S+): (\w+): (\d+) tokens, mean finishing position ([\d.]+)$",
                       out.stdout, flags=re.M)
    if not found:
        raise CheckError("no per-tenant lines printed")
    figures = {f"{'fcfs' if s == 'fcfs' else 'faircache'}.{t}.mean_position": float(p)
               for s, t, _, p in found}
    figures.update({f"{'fcfs' if s == 'fcfs' else 'faircache'}.{t}.tokens": int(n)
                    for s, t, n, _ in found})
    return dict(model=model, **figures)


def _writes_json(head: list[str], args: list[str], budget: float, dry: bool, work: Path,
                 needs: dict[str, str] | None = None) -> dict:
    """A check whose entry point takes ``--out FILE`` and writes its figures there as JSON;
    ``needs``: module -> install line, each a skip (not a failure) where it is missing."""
    target = work / "result.json"
    flags = [a for a in args if a.startswith("--")] + ["--out"]
    if dry:
        return dict(help_accepts(head, flags),
                    **{f"{m}_installed": has_module(m) for m in needs or {}})
    if why := cuda_reason():
        raise Skip(why)
    for module, install in (needs or {}).items():
        if not has_module(module):
            raise Skip(f"{module} is not installed ({install})")
    out = run_child([*head, *args, "--out", str(target)], budget)
    _finish(out, " ".join(head[1:]))
    return json.loads(target.read_text())


def synergyscale(budget: float, dry: bool, work: Path) -> dict:
    return _writes_json([PY, "-m", "schedlab.synergyscale.gpu_check"],
                        ["--budget", "2GiB", "--steps", "4"], budget, dry, work)


def hip_dfpt(budget: float, dry: bool, work: Path) -> dict:
    return _writes_json([PY, "benchmarks/hip_dfpt/gpu_check.py"],
                        ["--molecule", "benzene", "--basis", "6-31g"], budget, dry, work,
                        needs={"cupy": "pip install cupy-cuda12x"})


def gpooling(budget: float, dry: bool, work: Path) -> dict:
    return _writes_json([PY, "-m", "schedlab.gpooling.gpu_check"], ["--seconds", "8"], budget,
                        dry, work)


def edge_llm(budget: float, dry: bool, work: Path) -> dict:
    cmd = [PY, "benchmarks/gpu/edge_llm_registers.py", "--out", str(work / "trace.json")]
    if dry:
        cmd.append("--dry-run")
    elif why := cuda_reason():
        raise Skip(why)
    return _printed_json(cmd, budget)


@dataclass(frozen=True)
class Check:
    name: str
    system: str
    budget_s: int
    docs: str
    run: Callable[[float, bool, Path], dict]


#: name -> check; budgets add up to 640 s, so with run_all.sh's margin of 8 s per check the
#: whole run stays under 12 minutes
CHECKS = {c.name: c for c in (
    Check("hydra_mcs", "hydra_mcs", 120, "docs/gpu.md#hydra_mcs", hydra_mcs),
    Check("esr_hgnn", "esr_hgnn", 45, "docs/gpu.md#esr_hgnn", esr_hgnn),
    Check("couchsurfer", "couchsurfer", 100, "docs/gpu.md#couchsurfer",
          couchsurfer),
    Check("faircache_vllm", "faircache", 90, "docs/gpu.md#faircache",
          faircache_vllm),
    Check("synergyscale", "synergyscale", 100, "docs/gpu.md#synergyscale",
          synergyscale),
    Check("hip_dfpt", "hip_dfpt", 75, "docs/gpu.md#hip_dfpt", hip_dfpt),
    Check("gpooling", "gpooling", 75, "docs/gpu.md#gpooling", gpooling),
    Check("edge_llm", "edge_llm", 35, "docs/gpu.md#edge_llm", edge_llm),
)}


def write_json(path: Path, document: dict) -> None:
    """Atomic: a temporary sibling, then rename (a killed run never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(document, f, indent=1, default=str)
        f.write("\n")
    os.replace(f.name, path)


def run_check(name: str, out_dir: Path, budget: float | None, dry: bool) -> dict:
    check = CHECKS[name]
    limit = float(budget if budget is not None else check.budget_s)
    start = time.perf_counter()
    document = dict(check=name, system=check.system, mode="dry-run" if dry else "gpu",
                    budget_s=limit, docs=check.docs)
    with tempfile.TemporaryDirectory(prefix=f"gpu-{name}-") as work:
        try:
            document.update(status="ok", figures=check.run(limit, dry, Path(work)))
        except Skip as exc:
            document.update(status="skipped", reason=str(exc))
        except TimeoutError as exc:
            document.update(status="timeout", reason=str(exc))
        except (CheckError, OSError, ValueError, KeyError) as exc:
            document.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
    document["seconds"] = round(time.perf_counter() - start, 2)
    write_json(out_dir / f"{name}.json", document)
    return document


def summarise(out_dir: Path, dry: bool, only: list[str] | None = None) -> dict:
    """summary.json: one entry per check (a missing file: killed by run_all.sh's limit)."""
    entries = []
    for name, check in CHECKS.items():
        if only and name not in only:
            continue
        path = out_dir / f"{name}.json"
        if not path.is_file():
            entries.append(dict(check=name, system=check.system, status="timeout",
                                reason="no result: killed by run_all.sh's outer time limit",
                                docs=check.docs))
            continue
        doc = json.loads(path.read_text())
        entries.append({k: doc.get(k) for k in ("check", "system", "status", "seconds",
                                                 "reason", "docs", "mode") if k in doc})
    gpu = ""
    if shutil.which("nvidia-smi"):
        probe = run_child(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], 30)
        gpu = probe.stdout.strip()
    summary = dict(mode="dry-run" if dry else "gpu", gpu=gpu or None, checks=entries,
                   counts={s: sum(e["status"] == s for e in entries)
                           for s in ("ok", "failed", "timeout", "skipped")},
                   seconds=round(sum(e.get("seconds") or 0 for e in entries), 1))
    write_json(out_dir / "summary.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="name, budget (s) and docs section of each check")
    one = sub.add_parser("run", help="run one check and write OUT/NAME.json")
    one.add_argument("name", choices=list(CHECKS))
    one.add_argument("--out", type=Path, required=True)
    one.add_argument("--budget", type=float, default=None)
    one.add_argument("--dry-run", action="store_true")
    total = sub.add_parser("summary", help="write OUT/summary.json")
    total.add_argument("--out", type=Path, required=True)
    total.add_argument("--dry-run", action="store_true")
    total.add_argument("--only", default="", help="comma-separated checks (default: all)")
    args = parser.parse_args(argv)
    if args.command == "list":
        for check in CHECKS.values():
            print(f"{check.name} {check.budget_s} {check.docs}")
        return 0
    if args.command == "run":
        doc = run_check(args.name, args.out, args.budget, args.dry_run)
        print(f"{args.name}: {doc['status']} in {doc['seconds']} s"
              + (f" ({doc['reason']})" if doc.get("reason") else ""), flush=True)
        return 0 if doc["status"] in ("ok", "skipped") else 1
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}; valid: {', '.join(CHECKS)}")
    summary = summarise(args.out, args.dry_run, only)
    print(json.dumps(summary["counts"]) + f" in {summary['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
