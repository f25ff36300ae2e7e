"""DataFlowDrs next to Drishti (issue 52): CPU seconds to analyse the same Darshan logs.

    python -m venv --system-site-packages /tmp/drishti-venv
    /tmp/drishti-venv/bin/pip install drishti-io
    PYTHONPATH=src python benchmarks/dataflowdrs/drishti_side_by_side.py \
        --drishti /tmp/drishti-venv/bin/drishti [--repeat 3] [LOG ...]

Drishti (``drishti-io``) is never a dependency of this project: it is run as the command given
with ``--drishti`` (default ``$DRISHTI`` or ``drishti`` on PATH); without it only our side is
measured. Logs: every ``.darshan`` file in ``../shared/data/darshan`` plus PyDarshan's own
example ``sample-badost.darshan`` (2,048 ranks, the bad-OST log of the issue) when PyDarshan
is installed, or the logs named on the command line.

Each tool runs as a fresh process, as a user runs it: ``drishti LOG`` (console report) and
``schedlab dataflowdrs analyze LOG`` twice -- with its full report (timeline PNG, Sankey HTML
and, where Kaleido can render, PNG) and with ``--no-sankey`` (timeline PNG, tables). CPU time
is user + system of the process *and every child it waited for* (``os.wait4``: PyDarshan's
reader child, Kaleido's renderer), median of ``--repeat`` runs, so wall-clock noise from
other users of the machine does not enter the ratio. Target (issue 52): ours <= 2x Drishti's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]


def logs_to_measure() -> list[Path]:
    logs = sorted((HERE.parent / "shared" / "data" / "darshan").glob("*.darshan"))
    try:
        import importlib.util

        spec = importlib.util.find_spec("darshan")
        if spec and spec.origin:
            bad = Path(spec.origin).parent / "examples" / "example_logs" / "sample-badost.darshan"
            if bad.is_file():
                logs.append(bad)
    except ImportError:
        pass
    return logs


def cpu_of(cmd: list[str], cwd: Path) -> tuple[float, int]:
    """CPU seconds (user + sys, waited-for descendants included) and exit status."""
    env = dict(os.environ, PYTHONPATH=str(HERE / "src"))
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, proc.returncode


def measure(log: Path, drishti: str | None, repeat: int) -> dict:
    ours = [sys.executable, "-c", "from schedlab.entry import main; main()", "dataflowdrs",
            "analyze", str(log)]
    rows: dict = {"log": log.name}
    with tempfile.TemporaryDirectory(prefix="dfd-vs-drishti-") as tmp:
        cases = {"ours (full report)": ours + ["--out", f"{tmp}/r1"],
                 "ours (--no-sankey)": ours + ["--no-sankey", "--out", f"{tmp}/r2"]}
        if drishti:
            cases["drishti"] = [drishti, str(log)]
        for _ in range(repeat):  # interleaved, so load drifts hit every tool alike
            for name, cmd in cases.items():
                cpu, rc = cpu_of(cmd, Path(tmp))
                rows.setdefault(name, []).append(cpu if rc == 0 else float("nan"))
    for name in list(rows):
        if name != "log":
            values = [v for v in rows[name] if v == v]
            rows[name] = statistics.median(values) if values else None
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="*", type=Path)
    ap.add_argument("--drishti", default=os.environ.get("DRISHTI") or shutil.which("drishti"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    logs = args.logs or logs_to_measure()
    if not logs:
        print("no Darshan logs found")
        return 0
    if not args.drishti:
        print("drishti not found (--drishti or $DRISHTI): measuring our side only")
    print("| log | ours, full report (s CPU) | ours, --no-sankey | Drishti | ratio full / "
          "no-sankey (target <= 2) |")
    print("|---|---|---|---|---|")
    for log in logs:
        r = measure(log, args.drishti, args.repeat)
        full, lean, d = r["ours (full report)"], r["ours (--no-sankey)"], r.get("drishti")
        fmt = lambda v: "failed" if v is None else f"{v:.2f}"  # noqa: E731
        ratio = (f"{full / d:.2f} / {lean / d:.2f}" if d and full and lean else "-")
        print(f"| {r['log'][:40]} | {fmt(full)} | {fmt(lean)} | "
              f"{fmt(d) if args.drishti else 'not run'} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
