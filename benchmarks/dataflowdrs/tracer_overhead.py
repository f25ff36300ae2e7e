"""strace vs dftracer (issue 52): overhead and what each saw, on the same workflows.

    PYTHONPATH=src python benchmarks/dataflowdrs/tracer_overhead.py [--repeat 3]

Three workflows, each run untraced, under ``strace`` and under ``dftracer-stdio`` (the
default of ``trace -- CMD`` where the dftracer wheel is installed), interleaved ``--repeat``
times; the table gives the median CPU seconds of the whole process tree (user + system,
``RUSAGE_CHILDREN``), the overhead over untraced, and how many bytes of the workflow's data
each tracer attributed to a task (completeness):

* ``multiprocessing``: tests/dataflowdrs/data/dftracer_multiprocess/app.py without its
  dftracer annotations (a parent that writes and reads 4 shards itself, then 2 spawned workers
  that hash 2 shards each, then a reduce);
* ``python-4k``: one Python process reading 16 MiB in 4 KiB calls;
* ``storm``: Python creating, stat'ing and reading 1,000 small files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from schedlab.dataflowdrs.openworld import _layout
from schedlab.dataflowdrs.runner import run_command
from schedlab.dataflowdrs.tracer import dftracer_installed, make_tracer
from schedlab.dataflowdrs.traces import read_trace

APP = textwrap.dedent('''
    import hashlib, multiprocessing as mp, os, sys
    D = sys.argv[1]
    def work(i):
        h = hashlib.sha256()
        for s in range(i, 4, 2):
            with open(f"{D}/shard{s}.bin", "rb") as f:
                while b := f.read(65536):
                    h.update(b)
        open(f"{D}/out{i}.txt", "w").write(h.hexdigest())
    if __name__ == "__main__":
        for s in range(4):
            open(f"{D}/shard{s}.bin", "wb").write(os.urandom(1 << 19))
        for s in range(4):
            with open(f"{D}/shard{s}.bin", "rb") as f:
                while f.read(4096):
                    pass
        ps = [mp.get_context("spawn").Process(target=work, args=(i,)) for i in range(2)]
        [p.start() for p in ps]
        [p.join() for p in ps]
        open(f"{D}/sum.txt", "w").write("".join(open(f"{D}/out{i}.txt").read() for i in (0, 1)))
''')
READ4K = ("import os,sys\nd=sys.argv[1]\nopen(d+'/big','wb').write(os.urandom(16<<20))\n"
          "f=open(d+'/big','rb',buffering=0)\nwhile f.read(4096):\n    pass\n")
STORM = ("import os,sys\nd=sys.argv[1]+'/s'\nos.makedirs(d,exist_ok=True)\n"
         "for i in range(1000):\n    open(f'{d}/{i}','w').write('x'*100)\n"
         "for i in range(1000):\n    os.stat(f'{d}/{i}')\n"
         "for i in range(1000):\n    open(f'{d}/{i}').read()\n")
WORKFLOWS = {"multiprocessing": APP, "python-4k": READ4K, "storm": STORM}


def run(script: str, tracer: str, root: Path) -> tuple[float, int]:
    work = Path(tempfile.mkdtemp(dir=root)).resolve()
    (work / "app.py").write_text(script)
    data = work / "data"
    data.mkdir()
    out = work / "trace"
    record = run_command([sys.executable, "app.py", str(data)], make_tracer(tracer), out,
                         _layout(data, out), name="app", cwd=work, quiet=True)
    seen = 0
    if tracer != "untraced":
        trace = read_trace(out)
        seen = int(trace.ops["bytes"].sum() or 0)
    return record.cpu, seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    tracers = ["untraced", "strace"] + (["dftracer-stdio"] if dftracer_installed() else [])
    if len(tracers) == 2:
        print("dftracer is not installed here: strace only")
    print(f"tracer `auto` picks: {make_tracer('auto').name}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("| workflow | untraced CPU (s) | strace CPU (overhead) | dftracer-stdio CPU "
          "(overhead) | bytes seen: strace / dftracer |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="dfd-tracers-") as tmp:
        for name, script in WORKFLOWS.items():
            cpu: dict[str, list[float]] = {t: [] for t in tracers}
            seen: dict[str, int] = {}
            for _ in range(args.repeat):
                for t in tracers:
                    c, s = run(script, t, Path(tmp))
                    cpu[t].append(c)
                    seen[t] = s
            med = {t: statistics.median(v) for t, v in cpu.items()}
            base = med["untraced"]
            cells = [f"{med[t]:.2f} ({med[t] / base - 1:+.0%})" if t in med else "not run"
                     for t in ("strace", "dftracer-stdio")]
            print(f"| {name} | {base:.2f} | {cells[0]} | {cells[1]} | "
                  f"{seen.get('strace', 0) / 2**20:.1f} / "
                  f"{seen.get('dftracer-stdio', 0) / 2**20:.1f} MiB |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
