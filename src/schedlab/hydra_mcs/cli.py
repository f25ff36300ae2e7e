"""``schedlab hydra-mcs``: solve a pair of graph files, calibrate RC (Hydra-MCS, McSplit)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console

app = typer.Typer(
    help="Hydra-MCS: exact maximum common induced subgraph (McSplit + RC).", no_args_is_help=True
)


@app.command("solve")
@handle_errors
def solve_cmd(
    a: Path = typer.Argument(None, help="First graph file (omit with --pairs)."),
    b: Path = typer.Argument(None, help="Second graph file (omit with --pairs)."),
    pairs: Path = typer.Option(
        None,
        "--pairs",
        help="Batch: a list file (two paths a line, text or CSV) or a "
        "directory of X.A<k>/X.B<k> pairs; one result line each.",
    ),
    fmt: str = typer.Option("auto", "--format", help="auto, arg, lad, dimacs or edges."),
    labels: str = typer.Option("none", "--labels", help="none, vertex or all (vertex+edge)."),
    connected: bool = typer.Option(False, "--connected", help="Common connected subgraph."),
    directed: bool = typer.Option(False, "--directed", help="Read the graphs as directed."),
    threads: int = typer.Option(1, "--threads", min=1, help="Search threads."),
    policy: str = typer.Option(
        None, "--policy", help="mcsplit, naive-parallel, hydra-cpu, hydra-gpu or gap-cpu."
    ),
    heuristic: str = typer.Option("min_max", "--heuristic", help="min_max or min_product."),
    branching: str = typer.Option(
        "mcsplit",
        "--branching",
        help="mcsplit (McSplit's order, its node counts), rl "
        "(McSplit+RL's learned scores) or dal (McSplitDAL's "
        "value function); rl/dal: one thread.",
    ),
    big_first: bool = typer.Option(False, "--big-first", help="McSplit's big-first variant."),
    gpu: bool = typer.Option(False, "--gpu", help="Offload RC-band subproblems to CUDA."),
    gpu_kernel: str = typer.Option(
        "auto",
        "--gpu-kernel",
        help="block (a warp per subproblem, shared memory), thread "
        "(a thread per subproblem) or auto.",
    ),
    timeout: float = typer.Option(
        None, "--timeout", help="Seconds (per pair with --pairs); best so far on expiry."
    ),
    prove: Path = typer.Option(
        None,
        "--prove",
        help="Write a certificate of optimality (the search tree) to "
        "this file; check it with `check-proof`. One thread.",
    ),
    no_mapping: bool = typer.Option(
        False, "--no-mapping", help="Leave the mapping out of the output."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print JSON (with --pairs: one JSON object a line)."
    ),
) -> None:
    """Solve one pair (or a batch with --pairs); prints size, mapping, nodes, time and whether
    it is proven optimal."""
    from schedlab.hydra_mcs.fastcli import rich_writers, run_solve

    params = dict(
        a=a,
        b=b,
        pairs=pairs,
        fmt=fmt,
        labels=labels,
        connected=connected,
        directed=directed,
        threads=threads,
        policy=policy,
        heuristic=heuristic,
        big_first=big_first,
        gpu=gpu,
        gpu_kernel=gpu_kernel,
        timeout=timeout,
        no_mapping=no_mapping,
        json_out=json_out,
        branching=branching,
        prove=prove,
    )

    say, error, note, _ = rich_writers(out_console, err_console)
    code = run_solve(params, say=say, error=error, note=note)
    if code:
        raise typer.Exit(code)


@app.command("check-proof")
@handle_errors
def check_proof_cmd(
    a: Path = typer.Argument(..., help="First graph file (as given to solve)."),
    b: Path = typer.Argument(..., help="Second graph file."),
    proof_file: Path = typer.Argument(..., help="The certificate `solve --prove` wrote."),
    fmt: str = typer.Option("auto", "--format", help="auto, arg, lad, dimacs or edges."),
    labels: str = typer.Option("none", "--labels", help="none, vertex or all (vertex+edge)."),
    directed: bool = typer.Option(False, "--directed", help="Read the graphs as directed."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check a certificate independently of the search: the mapping is valid and every node
    of the logged search tree is closed by a bound <= its size. Exit 1 when it fails."""
    from schedlab.hydra_mcs.api import LABELS
    from schedlab.hydra_mcs.proof import ProofError, check
    from schedlab.hydra_mcs.readers import read_graph

    if labels not in LABELS:
        from schedlab.core.errors import UnknownNameError

        raise UnknownNameError("labels", labels, LABELS)
    vertex, edge = labels in ("vertex", "all"), labels == "all"
    g0 = read_graph(a, fmt, directed=directed, vertex_labels=vertex, edge_labels=edge)
    g1 = read_graph(b, fmt, directed=directed, vertex_labels=vertex, edge_labels=edge)
    try:
        row = check(proof_file, g0, g1)
    except ProofError as exc:
        if json_out:
            emit_json(dict(valid=False, error=str(exc)))
        err_console.print(
            f"[red]not proven:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(1) from None
    if json_out:
        emit_json(dict(valid=True, **row))
        return
    # the certificate says which problem it solved; a --connected one bounds only connected
    # common subgraphs, so the line says so
    what = "connected common subgraph" if row["connected"] else "common induced subgraph"
    out_console.print(
        f"proven: size {row['size']} is the maximum {what} ({row['nodes']} search "
        f"nodes checked, {row['records']} records)"
    )


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
    out_console.print(
        f"Spearman rho (RC vs exact subtree nodes): {stats['rc']:.3f} over "
        f"{int(stats['rows'])} subtrees; gap alone {stats['gap_only']:.3f}, "
        f"sum |L||R| {stats['sum_prod']:.3f}"
    )


@app.command("policies")
@handle_errors
def policies_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the work policies (the method and its baselines)."""
    from schedlab.hydra_mcs.policies import POLICIES

    rows = [
        dict(name=k, doc=(v.__doc__ or "").strip().splitlines()[0]) for k, v in POLICIES.items()
    ]
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out_console.print(f"{row['name']:16} {row['doc']}")
