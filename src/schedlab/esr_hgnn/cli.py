"""``schedlab esr-hgnn``: sample, group, model the unit, run HAN inference, benchmark on a GPU.

Paper: ESR-HGNN (../shared/papers/05-esr_hgnn.md). Every command is one library call; torch is
imported inside the commands that need it so ``schedlab --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, handle_errors, out_console
from schedlab.core.errors import BadInputError, ConfigError

app = typer.Typer(help="ESR-HGNN: redundancy-aware metapath sampling for HGNN inference.",
                  no_args_is_help=True)

GRAPH = typer.Option(None, "--graph", help="Directory with nodes.txt and <S>-<D>.edges files.")
SCHEMA = typer.Option(None, "--schema", help="Generate a dblp, acm or imdb-like graph instead.")
SCALE = typer.Option(1.0, "--scale", help="Size of the generated graph (x dataset counts).")
METAPATHS = typer.Option(None, "--metapaths",
                         help="Comma-separated metapaths (APA,APCPA) or a set: han, sym4, sym6.")
FANOUTS = typer.Option("10", "--fanouts", help="Neighbours per hop, comma-separated; later hops 1.")
BATCH = typer.Option(256, "--batch", min=1, help="Seeds per mini-batch.")
BATCHES = typer.Option(3, "--batches", min=1, help="Mini-batches to measure.")
SEED = typer.Option(0, "--seed", help="Random seed.")
JSON = typer.Option(False, "--json", help="Print one JSON document.")


def _graph_and_metapaths(graph_dir: Path | None, schema_name: str | None, scale: float,
                         metapaths: str | None, seed: int):
    """Load or generate the graph and resolve the metapath list (names of sets allowed)."""
    from schedlab.esr_hgnn.graph import parse_metapaths, read_graph_dir
    from schedlab.esr_hgnn.workloads import generate, metapath_set

    if graph_dir is not None and schema_name is not None:
        raise ConfigError("give --graph or --schema, not both", field="graph")
    if graph_dir is not None:
        graph = read_graph_dir(graph_dir)
        if not metapaths:
            raise ConfigError("--metapaths is required with --graph", field="metapaths")
    else:
        schema_name = schema_name or "dblp"
        graph = generate(schema_name, scale, seed)
    if metapaths in ("han", "sym4", "sym6", None):
        if schema_name is None:
            raise ConfigError(f"the set '{metapaths}' needs --schema", field="metapaths")
        metapaths = ",".join(metapath_set(graph, schema_name, metapaths or "han"))
    return graph, parse_metapaths(metapaths, graph)


def _seed_batches(graph, mps, batch: int, batches: int, seed: int, fanouts: tuple[int, ...]):
    """Seed batches of the metapaths' start type; refuse a batch or fan-outs too large up front."""
    from schedlab.esr_hgnn.policies import check_frontier
    from schedlab.esr_hgnn.workloads import seed_batches

    seeds = seed_batches(graph, mps[0][0], batch, batches, seed)
    check_frontier([len(mp) - 1 for mp in mps], batch, fanouts)
    return seeds


def _fanouts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise BadInputError(f"fanouts {text!r} must be comma-separated integers",
                            field="fanouts") from None
    if not values or min(values) < 1:
        raise BadInputError("fanouts must be positive integers", field="fanouts")
    return values


def _print_rows(rows: list[dict], title: str) -> None:
    from rich.table import Table

    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = Table(*columns, title=title)
    for row in rows:
        values = [row.get(c, "") for c in columns]
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in values))
    out_console.print(table)


@app.command()
@handle_errors
def generate(schema_name: str = typer.Option("dblp", "--schema"), scale: float = SCALE,
             seed: int = SEED, out: Path = typer.Option(..., "--out", help="Directory to write."),
             json_out: bool = JSON) -> None:
    """Write a seeded DBLP/ACM/IMDB-like graph in the edge-list format --graph reads."""
    from schedlab.esr_hgnn.graph import write_graph_dir
    from schedlab.esr_hgnn.workloads import generate as make

    graph = make(schema_name, scale, seed)
    write_graph_dir(graph, out)
    summary = dict(out=str(out), **graph.summary())
    if json_out:
        emit_json(summary)
    else:
        out_console.print(summary)


@app.command()
@handle_errors
def sample(graph_dir: Path = GRAPH, schema_name: str = SCHEMA, scale: float = SCALE,
           metapaths: str = METAPATHS, sampler: str = typer.Option("trie", "--sampler"),
           fanouts: str = FANOUTS, batch: int = BATCH, batches: int = BATCHES, seed: int = SEED,
           out: Path = typer.Option(None, "--out", help="Write the samples (.parquet/.csv)."),
           json_out: bool = JSON) -> None:
    """Sample metapath neighbours of seed batches; report reads and time per batch."""
    import numpy as np
    import polars as pl

    from schedlab.core.io import write_frame
    from schedlab.esr_hgnn.engine import measure_sampler
    from schedlab.esr_hgnn.policies import make_sampler

    chosen = make_sampler(sampler)
    graph, mps = _graph_and_metapaths(graph_dir, schema_name, scale, metapaths, seed)
    fan = _fanouts(fanouts)
    seeds = _seed_batches(graph, mps, batch, batches, seed, fan)
    m = measure_sampler(graph, chosen, mps, seeds, fan, seed)
    report = dict(sampler=sampler, metapaths=mps, fanouts=list(fan), batch=batch,
                  reads_per_batch=m.reads, hops_per_batch=m.hops,
                  seconds_per_batch=m.seconds, kind="measured (CPU, Numba)")
    if out is not None:
        first = chosen.sample(graph, mps, seeds[0], fan, np.random.default_rng(seed))
        frames = [pl.DataFrame({"metapath": mp,
                                "seed": np.repeat(first.seeds, e.shape[1]),
                                "neighbour": e.ravel()}) for mp, e in first.endpoints.items()]
        write_frame(pl.concat(frames), out)
        report["out"] = str(out)
    if json_out:
        emit_json(report)
    else:
        _print_rows([{k: v for k, v in report.items() if k != "metapaths"}],
                    f"{sampler} sampling of {','.join(mps)}")


@app.command()
@handle_errors
def group(metapaths: str = typer.Option(..., "--metapaths", help="Comma-separated metapaths."),
          channels: int = typer.Option(4, "--channels", min=1), fanouts: str = FANOUTS,
          grouper: str = typer.Option(None, "--grouper", help="One grouper (default: all)."),
          seed: int = SEED, json_out: bool = JSON) -> None:
    """Assign metapaths to hardware channels; show expected reads per seed of each grouping."""
    from schedlab.esr_hgnn.grouping import GROUPERS, fanout_hop_cost, make_grouper, total_cost

    mps = [m.strip().upper() for m in metapaths.split(",") if m.strip()]
    cost = fanout_hop_cost(_fanouts(fanouts))
    rows = []
    for name in [grouper] if grouper else list(GROUPERS):
        grouping = make_grouper(name).group(mps, channels, cost, seed)
        rows.append(dict(grouper=name, expected_reads_per_seed=total_cost(grouping, cost),
                         grouping=" | ".join(",".join(g) for g in grouping if g)))
    if json_out:
        emit_json(rows)
    else:
        _print_rows(rows, f"{len(mps)} metapaths on {channels} channels")


@app.command()
@handle_errors
def model(graph_dir: Path = GRAPH, schema_name: str = SCHEMA, scale: float = SCALE,
          metapaths: str = METAPATHS, channels: int = typer.Option(None, "--channels", min=1),
          grouper: str = typer.Option("optimal", "--grouper"), fanouts: str = FANOUTS,
          batch: int = BATCH, batches: int = BATCHES, seed: int = SEED,
          config: Path = typer.Option(None, "--config", help="JSON file of unit parameters."),
          json_out: bool = JSON) -> None:
    """Model the multi-channel unit vs measured CPU and modelled GPU sampling (time, energy)."""
    from schedlab.esr_hgnn.grouping import make_grouper
    from schedlab.esr_hgnn.hwmodel import load_config
    from schedlab.esr_hgnn.study import hardware_comparison

    make_grouper(grouper)  # fail on a bad name before any work
    cfg = load_config(config, channels=channels)
    graph, mps = _graph_and_metapaths(graph_dir, schema_name, scale, metapaths, seed)
    seeds = _seed_batches(graph, mps, batch, batches, seed, _fanouts(fanouts))
    rows = hardware_comparison(graph, mps, seeds, _fanouts(fanouts), cfg,
                               sorted({"round-robin", grouper}), seed)
    if json_out:
        emit_json(dict(config=cfg.model_dump(), rows=rows))
    else:
        _print_rows([{k: v for k, v in r.items() if k != "grouping"} for r in rows],
                    f"{cfg.channels}-channel unit, {','.join(mps)}")


@app.command()
@handle_errors
def params(json_out: bool = JSON) -> None:
    """The hardware model's parameters, defaults and sources."""
    from schedlab.esr_hgnn.hwmodel import SOURCES, HardwareConfig

    defaults = HardwareConfig().model_dump()
    rows = [dict(parameter=k, default=v, source=SOURCES.get(k, "")) for k, v in defaults.items()]
    if json_out:
        emit_json(rows)
    else:
        _print_rows(rows, "ESR-HGNN unit parameters")


@app.command()
@handle_errors
def infer(graph_dir: Path = GRAPH, schema_name: str = SCHEMA, scale: float = SCALE,
          metapaths: str = METAPATHS, fanouts: str = FANOUTS, batch: int = BATCH,
          batches: int = BATCHES, seed: int = SEED, json_out: bool = JSON) -> None:
    """End-to-end HAN mini-batch inference time with naive, trie and modelled-unit sampling."""
    from schedlab.esr_hgnn.hwmodel import load_config
    from schedlab.esr_hgnn.study import end_to_end

    graph, mps = _graph_and_metapaths(graph_dir, schema_name, scale, metapaths, seed)
    seeds = _seed_batches(graph, mps, batch, batches, seed, _fanouts(fanouts))
    rows = end_to_end(graph, mps, seeds, _fanouts(fanouts), load_config(), seed)
    if json_out:
        emit_json(rows)
    else:
        _print_rows(rows, f"HAN inference, {','.join(mps)}")


@app.command("gpu-bench")
@handle_errors
def gpu_bench(graph_dir: Path = GRAPH, schema_name: str = SCHEMA, scale: float = SCALE,
              metapaths: str = METAPATHS, fanouts: str = FANOUTS, batch: int = BATCH,
              batches: int = BATCHES, seed: int = SEED,
              device: str = typer.Option("cuda", "--device", help="cuda, cuda:1 or cpu."),
              json_out: bool = JSON) -> None:
    """Measure naive and trie sampling as tensor ops on a device (the GPU measurement)."""
    import torch

    from schedlab.core.errors import MissingServiceError
    from schedlab.esr_hgnn.torch_sampler import benchmark

    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}; valid: cpu, cuda, cuda:N",
                          field="device") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise MissingServiceError("no CUDA device here; the experiments model the GPU instead",
                                  field="device", hint="run with --device cpu to check the path")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"no device {device!r}; this machine has "
                          f"{torch.cuda.device_count()} CUDA device(s)", field="device")
    if parsed.type not in ("cpu", "cuda"):
        raise ConfigError(f"unsupported device {device!r}; valid: cpu, cuda, cuda:N",
                          field="device")
    graph, mps = _graph_and_metapaths(graph_dir, schema_name, scale, metapaths, seed)
    seeds = _seed_batches(graph, mps, batch, batches, seed, _fanouts(fanouts))
    rows = benchmark(graph, mps, seeds, _fanouts(fanouts), device)
    if not any(r["sampler"].startswith("pyg") for r in rows):
        from schedlab.core.clitools import err_console

        err_console.print("note: no PyG row: torch_geometric is not installed "
                          "(pip install 'schedlab\\[pyg]')", highlight=False)
    if json_out:
        emit_json(rows)
    else:
        _print_rows(rows, f"tensor-op sampling on {device}")


@app.command("han-pyg")
@handle_errors
def han_pyg(scale: float = typer.Option(0.25, "--scale", help="DBLP counts x scale."),
            epochs: int = typer.Option(10, "--epochs", min=1),
            fanout: int = typer.Option(10, "--fanout", min=1, help="Walks per seed, metapath."),
            batch: int = typer.Option(128, "--batch", min=1),
            seeds: int = typer.Option(1, "--seeds", min=1, help="Graphs/trainings (seeds 0..)."),
            methods: str = typer.Option("trie,naive,pyg-walk,pyg-full,features", "--methods"),
            json_out: bool = JSON) -> None:
    """Train PyG's HANConv on a labelled DBLP-shaped graph with our and PyG's sampling."""
    from schedlab.esr_hgnn.han_pyg import METHODS, compare_training

    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    for m in chosen:
        if m not in METHODS:
            raise BadInputError(f"unknown method {m!r}; valid: {', '.join(METHODS)}",
                                field="methods")
    rows = []
    for seed in range(seeds):
        for row in compare_training(scale, epochs, fanout, batch, seed, chosen):
            rows.append(dict(seed=seed, **row))
    if json_out:
        emit_json(rows)
    else:
        _print_rows(rows, f"HANConv test accuracy, DBLP-shaped x{scale}")


@app.command()
@handle_errors
def dataset(path: Path = typer.Argument(..., help="HGB or MAGNN dataset directory."),
            fmt: str = typer.Option(..., "--format", help="hgb (node.dat/link.dat/...) or "
                                    "magnn (adjM.npz/node_types.npy/...)."),
            names: str = typer.Option(None, "--names", help="Node type names, comma-separated "
                                      "in type-id order (default: type_0, ... or MAGNN's)."),
            name: str = typer.Option(None, "--dataset", help="MAGNN: dblp, imdb or acm names."),
            json_out: bool = JSON) -> None:
    """Read an HGB or MAGNN preprocessed DBLP/ACM/IMDB directory; print what it holds."""
    from schedlab.esr_hgnn.hgb import read_hgb
    from schedlab.esr_hgnn.magnn import read_magnn

    listed = [n.strip() for n in names.split(",")] if names else None
    if fmt == "hgb":
        data = read_hgb(path, listed)
    elif fmt == "magnn":
        data = read_magnn(path, name, listed)
    else:
        raise BadInputError(f"unknown format {fmt!r}; valid: hgb, magnn", field="format")
    summary = data.summary()
    if json_out:
        emit_json(summary)
    else:
        out_console.print(summary)
