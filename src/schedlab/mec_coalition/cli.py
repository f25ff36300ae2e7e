"""``schedlab mec-coalition``: solve a market, compare every method, compute the SPoA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console, progress_bar
from schedlab.core.errors import ConfigError
from schedlab.core.io import write_frame, write_text

app = typer.Typer(help="Collaborative large-model caching and offloading with coalitions.",
                  no_args_is_help=True, add_completion=False)


def _market(topology: Path | None, users: Path | None, seed: int, cloudlets: int, models: int,
            n_users: int, tasks: int, reach: int, coord_cost: float = 0.0, zoo: str = "llm",
            families: str | None = None, requests: Path | None = None):
    from schedlab.mec_coalition.model import Economy
    from schedlab.mec_coalition.workloads import (
        LLM_FAMILIES,
        from_files,
        make_zoo,
        synthetic,
        with_demand,
        with_glue_zoo,
    )

    if zoo not in ("llm", "glue"):
        raise ConfigError(f"unknown zoo {zoo!r}; valid: llm, glue", field="zoo")
    if zoo == "glue" and families:
        raise ConfigError("--families picks the llm zoo's architectures; the glue zoo is "
                          "RoBERTa-base and DeBERTa-XXL", field="families")
    economy = Economy(reach=reach, coord_cost=coord_cost)
    if topology is not None:
        inst = from_files(topology, users, models, seed, tasks, max_users=n_users or None,
                          economy=economy)
    elif users is not None:
        raise ConfigError("--users needs --topology (the sites the users belong to)",
                          field="users")
    else:
        inst = synthetic(cloudlets, models, n_users, seed, tasks, economy)
    if families:
        from dataclasses import replace

        from schedlab.mec_coalition.model import Instance
        names = tuple(f.strip() for f in families.split(",") if f.strip()) or LLM_FAMILIES
        inst = Instance(make_zoo(models, tasks, seed, names), inst.cloudlets,
                        replace(inst.users), inst.economy)
    if zoo == "glue":
        return with_glue_zoo(inst, seed, requests)[0]
    return with_demand(inst, requests) if requests is not None else inst


_TOPOLOGY = typer.Option(None, "--topology", help="Sites CSV (EUA format: LATITUDE, LONGITUDE;"
                         " optional storage_gb, compute_tflops, ...).")
_USERS = typer.Option(None, "--users", help="Users CSV (Latitude, Longitude; optional task, "
                      "rate, ...). Default: seeded users over the sites' area.")


@app.command()
@handle_errors
def solve(
    topology: Path = _TOPOLOGY,
    users: Path = _USERS,
    seed: int = typer.Option(0, "--seed", help="Seed for generated parts of the market."),
    method: str = typer.Option("coalition", "--method", help="coalition, ilp, rounding, "
                               "non-cooperative, no-sharing, lfu, trimcaching or "
                               "trimcaching-native."),
    cloudlets: int = typer.Option(30, "--cloudlets", min=1, help="Sites (seeded market)."),
    models: int = typer.Option(20, "--models", min=1, help="Models in the zoo."),
    n_users: int = typer.Option(200, "--n-users", min=0, help="Users (0 with --users: all)."),
    tasks: int = typer.Option(10, "--tasks", min=1, help="Inference tasks."),
    reach: int = typer.Option(6, "--reach", min=1, help="Cloudlets a user can be served by."),
    coord_cost: float = typer.Option(0.0, "--coord-cost", min=0.0, help="Coordination cost per "
                                     "member pair per second (a sweep parameter; default 0)."),
    time_limit: float = typer.Option(60.0, "--time-limit", min=0.001,
                                     help="HiGHS time limit in seconds (--method ilp)."),
    require_optimal: bool = typer.Option(False, "--require-optimal", help="With --method ilp: "
                                         "exit 2 unless HiGHS proved the optimum."),
    zoo: str = typer.Option("llm", "--zoo", help="llm: Llama-2/3 + Qwen2 block sizes from "
                            "their configs (accuracies modelled); glue: RoBERTa-base and "
                            "DeBERTa-XXL FT/LoRA with published GLUE accuracies."),
    families: str = typer.Option(None, "--families", help="llm zoo families: comma-separated "
                                 "presets (llama-2-7b, qwen2-7b, ...) or config.json paths."),
    requests: Path = typer.Option(None, "--requests", help="Alibaba GenAI request trace CSV: "
                                  "users' tasks, rates and service-time SCV from it."),
    queueing: bool = typer.Option(False, "--queueing", help="Add M/G/c queueing delay at "
                                  "cloudlets when evaluating the plan."),
    out: Path = typer.Option(None, "--out", help="Write the plan as JSON here."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Plan caching, offloading and coalitions for one market and print the metrics."""
    from schedlab.core.errors import SchedlabError
    from schedlab.mec_coalition import engine
    from schedlab.mec_coalition.policies import get_policy

    policy = get_policy(method)
    if hasattr(policy, "time_limit"):
        policy.time_limit = time_limit
    inst = _market(topology, users, seed, cloudlets, models, n_users, tasks, reach, coord_cost,
                   zoo, families, requests)
    plan = policy.plan(inst, seed)
    solver = plan.info.get("solver")
    if solver is not None and not solver["proven_optimal"]:
        line = (f"HiGHS did not prove optimality: status {solver['status']!r}, MIP gap "
                f"{solver['mip_gap']:.3g}, time limit {solver['time_limit_s']:g} s; "
                f"{_kept(plan.info)}; the plan is feasible, not the optimum")
        if require_optimal:
            raise SchedlabError(line, field="require_optimal")
        err_console.print(f"warning: {line}")
    metrics = engine.evaluate(inst, plan, seed=seed, queueing=queueing)
    document = _plan_document(inst, plan, method, metrics)
    if out is not None:
        write_text(out, json.dumps(document, indent=2, default=float) + "\n")
    if json_out:
        emit_json(document)
        return
    table = Table("coalition", "cloudlets", "cached models (cloudlet: models)")
    for k, members in enumerate(document["coalitions"]):
        cached = "; ".join(f"{n}: {','.join(map(str, document['cache'][str(n)]))}"
                           for n in members if document["cache"][str(n)])
        table.add_row(str(k), ",".join(map(str, members)), cached or "-")
    out_console.print(table)
    metrics_table = Table("metric", "value", title=f"{method} on {inst.cloudlets.n} cloudlets, "
                          f"{inst.zoo.n_models} models, {inst.users.n} users")
    for key, value in metrics.items():
        metrics_table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    out_console.print(metrics_table)
    if solver is not None:
        out_console.print(
            f"HiGHS: status {solver['status']}, proven optimal {solver['proven_optimal']}, "
            f"MIP gap {solver['mip_gap']:.3g}, dual bound {solver['dual_bound']:.6g}, "
            f"time limit {solver['time_limit_s']:g} s, {solver['seconds']:.1f} s, "
            f"{solver['variables']:,} variables; plan from {plan.info['plan_source']}")


def _kept(info: dict[str, Any]) -> str:
    """Which plan ``--method ilp`` kept, and how far it is from the best known upper bound."""
    if info.get("plan_source") == "rounding":
        highs = info.get("highs_objective", float("nan"))
        why = "HiGHS found none" if highs != highs else f"HiGHS's incumbent {highs:.6g}"
        what = (f"kept the randomized algorithm's plan (objective "
                f"{info['rounding_objective']:.6g}; {why})")
    else:
        what = "kept HiGHS's incumbent"
    if "gap_to_bound" in info:
        what += f", {100 * info['gap_to_bound']:.2f}% below the upper bound"
    return what


def _plan_document(inst, plan, method: str, metrics: dict[str, Any]) -> dict[str, Any]:
    choice = plan.placement.choice
    cand = inst.cand
    route = {str(u): (None if t < 0 else dict(cloudlet=int(cand.node[t]), model=int(cand.model[t])))
             for u, t in enumerate(choice.tolist())}
    return dict(
        method=method,
        coalitions=[sorted(s) for s in plan.coalitions],
        cache={str(n): [int(m) for m in plan.placement.cached[n].nonzero()[0]]
               for n in range(inst.cloudlets.n)},
        routing=route,
        metrics=metrics,
        info={k: v for k, v in plan.info.items() if k != "welfare_trace"},
    )


def compare_job(args: tuple[dict[str, Any], int, list[str], bool]) -> list[dict[str, Any]]:
    """One seed of ``compare`` (module-level so process pools and Ray can pickle it)."""
    from schedlab.mec_coalition.experiment import compare

    market, seed, names, queueing = args
    inst = _market(seed=seed, **market)
    frame = compare(inst, seed, names, queueing=queueing)
    return [dict(seed=seed, **row) for row in frame.to_dicts()]


@app.command()
@handle_errors
def compare(
    topology: Path = _TOPOLOGY,
    users: Path = _USERS,
    cloudlets: int = typer.Option(30, "--cloudlets", min=1),
    models: int = typer.Option(20, "--models", min=1),
    n_users: int = typer.Option(200, "--n-users", min=0),
    tasks: int = typer.Option(10, "--tasks", min=1, help="Inference tasks."),
    reach: int = typer.Option(6, "--reach", min=1, help="Cloudlets a user can be served by."),
    zoo: str = typer.Option("llm", "--zoo", help="llm or glue (see solve --help)."),
    families: str = typer.Option(None, "--families", help="llm zoo families (presets or "
                                 "config.json paths)."),
    requests: Path = typer.Option(None, "--requests", help="Alibaba GenAI request trace CSV."),
    queueing: bool = typer.Option(False, "--queueing", help="Add M/G/c queueing delay."),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds 0..N-1."),
    methods: str = typer.Option("coalition,rounding,non-cooperative,no-sharing,lfu,trimcaching",
                                "--methods", help="Comma-separated method names."),
    executor: str = typer.Option("local", "--executor", help="local or ray."),
    jobs: int = typer.Option(None, "--jobs", min=1),
    ray_address: str = typer.Option(None, "--ray-address"),
    out: Path = typer.Option(None, "--out", help="Write all rows (.csv or .parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Every method on one market per seed (seeded, or your topology/trace); mean metrics."""
    import polars as pl

    from schedlab.core.executors import make_executor
    from schedlab.mec_coalition.policies import POLICIES

    names = [n.strip() for n in methods.split(",") if n.strip()]
    if not names:
        raise ConfigError("names no method; give comma-separated names such as coalition,lfu",
                          field="methods")
    for name in names:
        if name not in POLICIES:
            from schedlab.core.errors import UnknownNameError
            raise UnknownNameError("method", name, list(POLICIES))
    market = dict(topology=topology, users=users, cloudlets=cloudlets, models=models,
                  n_users=n_users, tasks=tasks, reach=reach, zoo=zoo, families=families,
                  requests=requests)
    _market(seed=0, **market)  # bad files and names fail here, once, with one line
    items = [(market, s, names, queueing) for s in range(seeds)]
    pool = make_executor(executor, jobs, ray_address)
    rows: list[dict[str, Any]] = []
    try:
        with progress_bar(transient=True) as progress:
            bar = progress.add_task("seeds", total=len(items))
            for _, result in pool.map_unordered(compare_job, items):
                rows.extend(result)
                progress.advance(bar)
    finally:
        pool.close()
    frame = pl.DataFrame(rows).sort("seed", "policy")
    if out is not None:
        write_frame(frame, out)
    summary = frame.group_by("policy", maintain_order=True).agg(
        pl.col("payoff", "avg_delay_ms", "cost", "hit_ratio", "accuracy", "queueing_ms",
               "seconds").mean())
    if json_out:
        emit_json(dict(summary=summary.to_dicts(), rows=frame.to_dicts()))
        return
    table = Table(*summary.columns)
    for row in summary.iter_rows():
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    out_console.print(table)


@app.command()
@handle_errors
def spoa(
    cloudlets: int = typer.Option(5, "--cloudlets", min=1, max=8, help="n (brute force)."),
    n_users: int = typer.Option(25, "--n-users", min=0),
    seed: int = typer.Option(0, "--seed"),
    solver: str = typer.Option("ilp", "--solver", help="ilp, rounding or greedy values."),
    allocation: str = typer.Option("proportional", "--allocation",
                                   help="proportional or shapley."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Strong price of anarchy by enumerating every coalition structure (n <= 8)."""
    from schedlab.mec_coalition.coalition import (
        CoalitionGame,
        form_coalitions,
        strong_price_of_anarchy,
    )
    from schedlab.mec_coalition.model import Economy
    from schedlab.mec_coalition.workloads import synthetic

    inst = synthetic(cloudlets, 6, n_users, seed, tasks=3, economy=Economy(reach=cloudlets))
    game = CoalitionGame(inst, solver=solver, allocation=allocation, seed=seed)
    err_console.print(f"enumerating {2 ** cloudlets - 1} coalitions ...")
    result = strong_price_of_anarchy(game)
    formed = form_coalitions(game, seed)
    document = dict(spoa=result.spoa, optimum=result.optimum, worst_stable=result.worst_stable,
                    stable_structures=result.stable_structures, partitions=result.partitions,
                    mechanism=[sorted(s) for s in formed.structure],
                    mechanism_welfare=game.welfare(formed.structure), moves=formed.moves)
    if json_out:
        emit_json(document)
        return
    for key, value in document.items():
        out_console.print(f"{key}: {value}")
