"""``schedlab hydra-mcs``: solve a pair of graph files, calibrate RC (Hydra-MCS, McSplit)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.markup import escape

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console

app = typer.Typer(help="Hydra-MCS: exact maximum common induced subgraph (McSplit + RC).",
                  no_args_is_help=True)


@app.command("solve")
@handle_errors
def solve_cmd(
    a: Path = typer.Argument(None, help="First graph file (omit with --pairs)."),
    b: Path = typer.Argument(None, help="Second graph file (omit with --pairs)."),
    pairs: Path = typer.Option(None, "--pairs",
                               help="Batch: a list file (two paths a line, text or CSV) or a "
                                    "directory of X.A<k>/X.B<k> pairs; one result line each."),
    fmt: str = typer.Option("auto", "--format", help="auto, arg, lad, dimacs or edges."),
    labels: str = typer.Option("none", "--labels", help="none, vertex or all (vertex+edge)."),
    connected: bool = typer.Option(False, "--connected", help="Common connected subgraph."),
    directed: bool = typer.Option(False, "--directed", help="Read the graphs as directed."),
    threads: int = typer.Option(1, "--threads", min=1, help="Search threads."),
    policy: str = typer.Option(None, "--policy",
                               help="mcsplit, naive-parallel, hydra-cpu, hydra-gpu or gap-cpu."),
    heuristic: str = typer.Option("min_max", "--heuristic", help="min_max or min_product."),
    big_first: bool = typer.Option(False, "--big-first", help="McSplit's big-first variant."),
    gpu: bool = typer.Option(False, "--gpu", help="Offload RC-band subproblems to CUDA."),
    gpu_kernel: str = typer.Option("auto", "--gpu-kernel",
                                   help="block (a warp per subproblem, shared memory), thread "
                                        "(a thread per subproblem) or auto."),
    timeout: float = typer.Option(None, "--timeout",
                                  help="Seconds (per pair with --pairs); best so far on expiry."),
    no_mapping: bool = typer.Option(False, "--no-mapping",
                                    help="Leave the mapping out of the output."),
    json_out: bool = typer.Option(False, "--json",
                                  help="Print JSON (with --pairs: one JSON object a line)."),
) -> None:
    """Solve one pair (or a batch with --pairs); prints size, mapping, nodes, time and whether
    it is proven optimal."""
    if "numpy" not in sys.modules:
        # the search uses no BLAS: OpenBLAS's pool of spinning threads, started when NumPy is
        # imported, cost ~0.05 s of CPU per call (of ~0.27 s on a 20-vertex pair)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from schedlab.core.errors import ConfigError
    from schedlab.hydra_mcs.api import solve_files

    chosen = policy or ("hydra-gpu" if gpu else "mcsplit" if threads == 1 else "hydra-cpu")
    kwargs = dict(fmt=fmt, labels=labels, directed=directed, connected=connected,
                  threads=threads, policy=chosen, heuristic=heuristic, big_first=big_first,
                  gpu=gpu, gpu_kernel=gpu_kernel, timeout=timeout)
    if pairs is not None:
        if a is not None or b is not None:
            raise ConfigError("give either two graph files or --pairs, not both", field="pairs")
        raise typer.Exit(_batch(pairs, kwargs, json_out, not no_mapping))
    if a is None or b is None:
        raise ConfigError("two graph files are needed (or --pairs FILE|DIR)",
                          field="b" if a is not None else "a")
    result = solve_files(a, b, **kwargs)
    if json_out:
        doc = result.as_dict()
        if no_mapping:
            doc.pop("mapping")
        emit_json(doc)
        return
    out_console.print(f"size {result.size}  nodes {result.nodes}  time {result.seconds:.3f}s  "
                      f"{'optimal' if result.optimal else 'NOT proven optimal (stopped)'}")
    if not no_mapping:
        out_console.print(" ".join(f"({v} -> {w})" for v, w in sorted(result.mapping.items())))


def _batch(pairs: Path, kwargs: dict, json_out: bool, with_mapping: bool) -> int:
    """Solve every pair of a list/directory, one output line each as it finishes; exit code."""
    import json
    import sys

    from schedlab.hydra_mcs.api import check_options, solve_files
    from schedlab.hydra_mcs.batch import read_pairs, run_pairs

    check_options(**kwargs)  # a bad flag is one error before any pair runs
    specs = read_pairs(pairs)
    failed = 0
    out = sys.stdout
    if not json_out:
        out.write(f"{'pattern':>24} {'target':>24} {'size':>5} {'nodes':>13} {'cpu_s':>9} "
                  f"status\n")
        out.flush()
    stop = [False]
    done = 0
    for row in run_pairs(specs, lambda p, t: solve_files(p, t, **kwargs).as_dict(), stop):
        done += 1
        if row.error is not None:
            failed += 1
            err_console.print(f"[red]error:[/red] {escape(row.error)}", highlight=False,
                              soft_wrap=True)
        if json_out:
            out.write(json.dumps(row.as_dict(with_mapping)) + "\n")
        else:
            r = row.result or {}
            status = ("error" if row.error else "optimal" if r.get("optimal") else "stopped")
            out.write(f"{row.spec.pattern.name:>24} {row.spec.target.name:>24} "
                      f"{r.get('size', '-'):>5} {r.get('nodes', '-'):>13} {row.cpu_s:>9.3f} "
                      f"{status}\n")
            if with_mapping and r.get("mapping"):
                out.write("    " + " ".join(f"({v} -> {w})" for v, w in r["mapping"].items())
                          + "\n")
        out.flush()
    if failed:
        err_console.print(f"{failed} of {len(specs)} pairs failed", highlight=False)
    if stop[0]:
        err_console.print(f"[yellow]interrupted: {done} of {len(specs)} pairs written (the last "
                          f"one not proven optimal if its search was cut)[/yellow]",
                          highlight=False)
        return 130
    return 1 if failed else 0


@app.command("build")
@handle_errors
def build_cmd(
    force: bool = typer.Option(False, "--force", help="Rebuild even if already built."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Compile the search kernel ahead of time (numba.pycc) into the per-user cache.

    ``solve`` builds it on first use anyway; this does it up front (and retries a failed build).
    With it, a ``solve`` process never imports Numba.
    """
    from schedlab.hydra_mcs import aot

    target = aot.module_path()
    fresh = force or not target.is_file()
    if fresh:
        err_console.print("compiling the kernel with numba.pycc (about 10 s) ...")
    path = aot.build(force=force)
    row = dict(module=str(path), key=aot.cache_key(), built=fresh, cache=str(aot.cache_dir()))
    if json_out:
        emit_json(row)
        return
    out_console.print(f"{'built' if fresh else 'already built'}: {path}")


@app.command("calibrate")
@handle_errors
def calibrate_cmd(
    a: Path = typer.Argument(..., help="First graph file."),
    b: Path = typer.Argument(..., help="Second graph file."),
    fmt: str = typer.Option("auto", "--format", help="auto, arg, lad, dimacs or edges."),
    depth: int = typer.Option(4, "--depth", min=1, help="Trace subtrees this near the root."),
    out: Path = typer.Option(None, "--out", help="Write the trace (.csv or .parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run the sequential search once and rank-correlate RC with exact subtree node counts."""
    import numpy as np

    from schedlab.core.io import write_frame
    from schedlab.hydra_mcs.graph import induced, mcsplit_order, to_bitsets
    from schedlab.hydra_mcs.rc import calibrate, trace_frame
    from schedlab.hydra_mcs.readers import read_graph
    from schedlab.hydra_mcs.state import Searcher

    g0, g1 = read_graph(a, fmt), read_graph(b, fmt)
    o0, o1 = mcsplit_order(g0, g1)
    s0 = induced(g0, o0)
    s = Searcher(to_bitsets(s0, induced(g1, o1)), s0.n, trace_rows=20000, trace_depth=depth)
    s.load_root()
    err_console.print("searching ...")
    s.run(np.zeros(4, np.int64), 1 << 62)
    frame = trace_frame(s.trace)
    if out is not None:
        write_frame(frame, out)
    stats = calibrate(frame)
    if json_out:
        emit_json(stats)
        return
    out_console.print(f"Spearman rho (RC vs exact subtree nodes): {stats['rc']:.3f} over "
                      f"{int(stats['rows'])} subtrees; gap alone {stats['gap_only']:.3f}, "
                      f"sum |L||R| {stats['sum_prod']:.3f}")


@app.command("policies")
@handle_errors
def policies_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the work policies (the method and its baselines)."""
    from schedlab.hydra_mcs.policies import POLICIES

    rows = [dict(name=k, doc=(v.__doc__ or "").strip().splitlines()[0])
            for k, v in POLICIES.items()]
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out_console.print(f"{row['name']:16} {row['doc']}")
