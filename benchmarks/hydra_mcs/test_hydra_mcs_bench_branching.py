"""Branching rules side by side: McSplit's order vs McSplit+RL vs McSplitDAL (issue 27 item 2).

One ``schedlab hydra-mcs solve --pairs`` process per (flag set, ``--branching``), on the
instances of ``test_hydra_mcs_bench_batch.py`` (the real ARG pairs of ../shared/data/mcs and
the seeded G(n,p) pairs, plain / ``--connected`` / vertex-labelled). Per pair: size, search
nodes, CPU seconds inside the batch (``cpu_s``), whether it finished within ``--timeout``.
Sizes must agree between the rules (asserted where all finished). Run as a script for the
table in docs/systems/hydra_mcs.md::

    python benchmarks/hydra_mcs/test_hydra_mcs_bench_branching.py [all|gnp|arg] [timeout_s]

or under pytest-benchmark (rows in ``extra_info``). No timed assertions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hydra_mcs_bench_batch import OUR_FLAGS, _schedlab, instances  # noqa: E402

RULES = ("mcsplit", "rl", "dal")


def run_rule(rule: str, kind: str, pairs, folder: Path, timeout: float) -> dict[str, dict]:
    listing = folder / f"pairs-{kind}.txt"
    listing.write_text("".join(f"{a} {b}\n" for _, a, b in pairs))
    cmd = [
        *_schedlab(),
        "hydra-mcs",
        "solve",
        "--pairs",
        str(listing),
        "--json",
        "--no-mapping",
        "--branching",
        rule,
        "--timeout",
        str(timeout),
        *OUR_FLAGS[kind],
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return {name: row for (name, _, _), row in zip(pairs, rows, strict=True)}


def compare(folder: Path, which: str = "all", timeout: float = 120.0) -> list[dict]:
    out = []
    for kind, pairs in instances(folder, which).items():
        by_rule = {rule: run_rule(rule, kind, pairs, folder, timeout) for rule in RULES}
        for name, _, _ in pairs:
            row = dict(kind=kind, pair=name)
            for rule in RULES:
                r = by_rule[rule][name]
                row[rule] = dict(
                    size=r["size"], nodes=r["nodes"], cpu_s=r["cpu_s"], optimal=r["optimal"]
                )
            out.append(row)
    return out


def test_bench_branching(benchmark, tmp_path):
    rows = benchmark.pedantic(lambda: compare(tmp_path, "arg", 60.0), rounds=1, iterations=1)
    for row in rows:
        finished = [row[r] for r in RULES if row[r]["optimal"]]
        assert len({r["size"] for r in finished}) <= 1, row
    benchmark.extra_info["rows"] = rows


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
    with tempfile.TemporaryDirectory() as tmp:
        rows = compare(Path(tmp), which, timeout)
    print(
        f"{'kind':9} {'pair':16} "
        + " ".join(f"{r + ' nodes':>16} {'cpu_s':>7}" for r in RULES)
        + "  size"
    )
    totals = {r: [0, 0.0] for r in RULES}
    for row in rows:
        cells = []
        for r in RULES:
            x = row[r]
            mark = "" if x["optimal"] else "*"
            cells.append(f"{x['nodes']:>15,}{mark or ' '} {x['cpu_s']:>7.2f}")
            totals[r][0] += x["nodes"]
            totals[r][1] += x["cpu_s"]
        sizes = {row[r]["size"] for r in RULES if row[r]["optimal"]}
        print(
            f"{row['kind']:9} {row['pair']:16} "
            + " ".join(cells)
            + f"  {'/'.join(map(str, sorted(sizes)))}{'' if len(sizes) == 1 else ' DIFFER'}"
        )
    print(f"{'total':26} " + " ".join(f"{t[0]:>15,}  {t[1]:>7.2f}" for t in totals.values()))
    print("(* = stopped at the timeout, not proven optimal)")


if __name__ == "__main__":
    main()
