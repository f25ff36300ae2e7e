"""Seeded markets and the real EUA topology (Melbourne CBD edge sites and users, MIT licence).

The model zoo follows how foundation models are actually fine-tuned, with block sizes counted
layer by layer from real architectures (``model_configs.toml``: Llama-2-7B/13B, Llama-3-8B,
Qwen2-7B/1.5B, fp16): each base model is an embedding block, six contiguous layer groups and an
output head; a full fine-tune keeps the embeddings and the first 2-4 groups frozen (shared) and
owns the rest; a LoRA variant shares every base block and adds its adapter (rank and target
modules from the config, r·(d_in + d_out) per target per layer). A request is 256 tokens
(2 x non-embedding parameters FLOPs per token). The LLM zoo's accuracies are modelled (family
quality grows with log2 of the parameter count, fine-tuning adds a boost on its task);
``glue_zoo`` is the zoo whose accuracies are published (``accuracy.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.core.io import read_frame
from schedlab.mec_coalition.model import Cloudlets, Economy, Instance, Users, Zoo
from schedlab.mec_coalition.model_configs import TransformerConfig, get_config

#: the decoder families the seeded zoo draws from (real config.json numbers)
LLM_FAMILIES = ("qwen2-1.5b", "llama-2-7b", "qwen2-7b", "llama-3-8b", "llama-2-13b")
LAYER_GROUPS = 6
TOKENS = 256
GLUE_TOKENS = 128


def _base_blocks(cfg: TransformerConfig, block_gb: list[float]) -> list[int]:
    """Append ``cfg``'s embedding (+ tied head), layer groups and head; return their indices."""
    embed, groups, head = cfg.blocks_gb(LAYER_GROUPS)
    first = len(block_gb)
    block_gb.append(embed + (head if head < 1e-3 else 0.0))
    block_gb.extend(groups)
    if head >= 1e-3:
        block_gb.append(head)
    return list(range(first, len(block_gb)))


def make_zoo(models: int, tasks: int, seed: int,
             families: tuple[str, ...] = LLM_FAMILIES) -> Zoo:
    """``models`` models in families of about ten (one base, full fine-tunes, LoRA variants)."""
    if models < 1 or tasks < 1:
        raise BadInputError("needs at least one model and one task", field="models")
    configs = [get_config(name) for name in families]
    rng = np.random.default_rng(seed)
    n_families = max(1, round(models / 10))
    sizes = [models // n_families + (f < models % n_families) for f in range(n_families)]
    block_gb: list[float] = []
    rows: list[list[int]] = []
    acc, tflop, family, kind = [], [], [], []
    for f, count in enumerate(sizes):
        cfg = configs[int(rng.integers(len(configs)))]
        params_b = cfg.total_params() / 1e9
        quality = rng.uniform(0.50, 0.66) + 0.02 * np.log2(params_b)
        base_acc = np.clip(quality + rng.normal(0, 0.03, tasks), 0.05, 0.98)
        base_blocks = _base_blocks(cfg, block_gb)
        groups = base_blocks[1: 1 + LAYER_GROUPS]
        rows.append(base_blocks)
        acc.append(base_acc)
        tflop.append(cfg.tflop_per_request(TOKENS))
        family.append(f)
        kind.append("base")
        offset = int(rng.integers(tasks))
        for v in range(count - 1):
            task = (offset + v) % tasks
            if v % 5 in (1, 3):  # two in five variants are full fine-tunes
                frozen = int(rng.integers(2, 5))
                own = list(range(len(block_gb), len(block_gb) + len(base_blocks) - 1 - frozen))
                block_gb.extend(block_gb[b] for b in base_blocks[1 + frozen:])
                rows.append([base_blocks[0], *groups[:frozen], *own])
                boost, others = rng.uniform(0.15, 0.25), -0.05
                kind.append("full-ft")
                tflop.append(cfg.tflop_per_request(TOKENS))
            else:
                rows.append([*base_blocks, len(block_gb)])
                block_gb.append(cfg.lora_params() * 2 / 1e9)
                boost, others = rng.uniform(0.10, 0.18), -0.01
                kind.append("lora")
                tflop.append(cfg.tflop_per_request(TOKENS))  # adapter merged: same FLOPs
            a = base_acc + others
            a[task] = base_acc[task] + boost
            acc.append(np.clip(a, 0.05, 0.98))
            family.append(f)
    return _zoo(block_gb, rows, acc, tflop, family, kind)


def glue_zoo(families: tuple[str, ...] = ("roberta-base", "deberta-v2-xxlarge"),
             tasks: tuple[str, ...] | None = None) -> tuple[Zoo, list[str], list[str]]:
    """Per family and GLUE task a full fine-tune and a LoRA variant, with published accuracies.

    A full fine-tune (as in the LoRA paper's FT rows) changes every weight, so it owns all its
    blocks; a LoRA variant shares the whole base and adds its adapter (the paper's rank and
    W_q/W_v targets) plus a trained classification head. Accuracy is the published GLUE score on
    the variant's own task and 0 elsewhere. Returns the zoo, model names and task names.
    """
    from schedlab.mec_coalition.accuracy import GLUE_TASKS, glue_score

    tasks = tuple(tasks or GLUE_TASKS)
    block_gb: list[float] = []
    rows: list[list[int]] = []
    acc, tflop, family, kind, names = [], [], [], [], []
    for f, name in enumerate(families):
        cfg = get_config(name)
        base = _base_blocks(cfg, block_gb)
        head_gb = cfg.classifier_params() * 2 / 1e9
        for t, task in enumerate(tasks):
            for variant in ("ft", "lora"):
                if variant == "ft":
                    own = list(range(len(block_gb), len(block_gb) + len(base) + 1))
                    block_gb.extend([*(block_gb[b] for b in base), head_gb])
                    rows.append(own)
                else:
                    rows.append([*base, len(block_gb)])
                    block_gb.append((cfg.lora_params() * 2) / 1e9 + head_gb)
                score = np.zeros(len(tasks))
                score[t] = glue_score(name, variant, task)
                acc.append(score)
                tflop.append(cfg.tflop_per_request(GLUE_TOKENS))
                family.append(f)
                kind.append("full-ft" if variant == "ft" else "lora")
                names.append(f"{name}-{variant}-{task}")
    return _zoo(block_gb, rows, acc, tflop, family, kind), names, list(tasks)


def _zoo(block_gb, rows, acc, tflop, family, kind) -> Zoo:
    blocks = np.zeros((len(rows), len(block_gb)), dtype=bool)
    for m, row in enumerate(rows):
        blocks[m, row] = True
    return Zoo(np.array(block_gb), blocks, np.array(acc), np.array(tflop),
               np.array(family), tuple(kind))


def make_cloudlets(xy: np.ndarray, rng: np.random.Generator, **given: np.ndarray) -> Cloudlets:
    """Cloudlets at ``xy`` (km) with seeded capacities unless ``given`` supplies them."""
    n = xy.shape[0]
    seeded_gpus = rng.integers(1, 5, n)  # drawn even when given: the same stream either way
    gpus = given["gpus"] if "gpus" in given else seeded_gpus
    gpu = given.get("gpu_tflops", rng.uniform(80, 200, n))
    return Cloudlets(
        xy=xy,
        storage_gb=given.get("storage_gb", rng.uniform(8, 24, n)),
        compute_tflops=given.get("compute_tflops", gpus * gpu * 0.6),
        gpu_tflops=gpu,
        storage_cost=given.get("storage_cost", rng.uniform(0.01, 0.03, n)),
        compute_cost=given.get("compute_cost", rng.uniform(0.02, 0.05, n)),
        gpus=gpus if "gpus" in given or "compute_tflops" not in given else None,
    )


def make_users(xy: np.ndarray, tasks: int, rng: np.random.Generator,
               **given: np.ndarray) -> Users:
    """Users at ``xy`` with Zipf-popular tasks and seeded rates, needs and prices."""
    u = xy.shape[0]
    popularity = 1.0 / np.arange(1, tasks + 1) ** 0.8
    task = given.get("task", rng.choice(tasks, size=u, p=popularity / popularity.sum()))
    return Users(
        xy=xy,
        task=np.asarray(task, dtype=int),
        rate=given.get("rate", rng.uniform(0.2, 1.0, u)),
        data_mb=given.get("data_mb", rng.uniform(0.05, 1.0, u)),
        acc_req=given.get("acc_req", rng.uniform(0.5, 0.85, u)),
        deadline_s=given.get("deadline_s", rng.uniform(0.08, 0.25, u)),
        price=given.get("price", rng.uniform(0.5, 1.5, u)),
        service_scv=given.get("service_scv"),
    )


def synthetic(cloudlets: int, models: int, users: int, seed: int, tasks: int = 10,
              economy: Economy | None = None) -> Instance:
    """A seeded market on a square the density of Melbourne's CBD (125 sites on ~2.2 km)."""
    if cloudlets < 1 or users < 0:
        raise BadInputError("needs at least one cloudlet and no negative user count",
                            field="cloudlets")
    rng = np.random.default_rng(seed)
    side = 2.2 * np.sqrt(cloudlets / 125)
    zoo = make_zoo(models, tasks, seed)
    sites = make_cloudlets(rng.uniform(0, side, (cloudlets, 2)), rng)
    sites = _fit_largest_model(sites, zoo)
    people = make_users(rng.uniform(0, side, (users, 2)), tasks, rng)
    return Instance(zoo, sites, people, economy or Economy())


def _fit_largest_model(sites: Cloudlets, zoo: Zoo) -> Cloudlets:
    """Seeded markets must be valid: make sure at least one cloudlet can hold every model."""
    need = float(zoo.model_gb.max())
    if sites.storage_gb.max() >= need:
        return sites
    storage = sites.storage_gb.copy()
    storage[int(np.argmax(storage))] = need * 1.1
    return Cloudlets(sites.xy, storage, sites.compute_tflops, sites.gpu_tflops,
                     sites.storage_cost, sites.compute_cost, sites.gpus)


# --- real topology ---------------------------------------------------------------------------

_SERVER_COLUMNS = ("storage_gb", "compute_tflops", "gpu_tflops", "storage_cost", "compute_cost",
                   "gpus")
_USER_COLUMNS = ("task", "rate", "data_mb", "acc_req", "deadline_s", "price", "service_scv")


def from_files(servers: Path, users: Path | None, models: int, seed: int, tasks: int = 10,
               max_users: int | None = None, economy: Economy | None = None,
               max_sites: int | None = None) -> Instance:
    """A market on a real topology: EUA-style CSVs with latitude/longitude columns.

    ``max_sites`` keeps the sites nearest the sites' centroid (a compact sub-area) and only the
    users whose nearest site among all is one of them.

    Optional columns (``storage_gb``, ``compute_tflops``, ... for sites; ``task``, ``rate``, ...
    for users) override the seeded values, so a user's own measured capacities are used as is.
    Without a users file, ``max_users`` users are placed uniformly over the sites' area.
    """
    rng = np.random.default_rng(seed)
    site_xy, site_cols, origin = _read_positions(servers, _SERVER_COLUMNS, None)
    all_sites = site_xy
    if max_sites is not None:
        if max_sites < 1:
            raise BadInputError(f"must be at least 1, got {max_sites}", field="max_sites")
        centre = site_xy.mean(axis=0)
        keep = np.sort(np.argsort(np.linalg.norm(site_xy - centre, axis=1),
                                  kind="stable")[:max_sites])
        site_xy = site_xy[keep]
        site_cols = {k: v[keep] for k, v in site_cols.items()}
    zoo = make_zoo(models, tasks, seed)
    sites = make_cloudlets(site_xy, rng, **site_cols)
    if "gpus" in site_cols:  # the planners' compute cap must leave the GPUs' queue stable
        physical = sites.gpus * sites.gpu_tflops
        over = sites.compute_tflops >= physical
        if over.any():
            k = int(np.argmax(over))
            row = int(keep[k]) if max_sites is not None else k
            raise BadInputError(
                f"compute_tflops {sites.compute_tflops[k]:g} is not below gpus x gpu_tflops = "
                f"{physical[k]:g}: that cloudlet's queue would never drain", path=servers,
                line=row + 2, field="compute_tflops")
    if "storage_gb" not in site_cols:  # seeded capacities must admit the seeded zoo
        sites = _fit_largest_model(sites, zoo)
    if users is not None:
        user_xy, user_cols, _ = _read_positions(users, _USER_COLUMNS, origin)
        if max_sites is not None:
            nearest = np.argmin(np.linalg.norm(user_xy[:, None] - all_sites[None], axis=2), 1)
            inside = np.isin(nearest, keep)
            user_xy = user_xy[inside]
            user_cols = {k: v[inside] for k, v in user_cols.items()}
        if max_users is not None and max_users < user_xy.shape[0]:
            pick = np.sort(rng.choice(user_xy.shape[0], max_users, replace=False))
            user_xy = user_xy[pick]
            user_cols = {k: v[pick] for k, v in user_cols.items()}
    else:
        low, high = site_xy.min(axis=0), site_xy.max(axis=0)
        user_xy, user_cols = rng.uniform(low, high, (max_users or 4 * len(site_xy), 2)), {}
    if "task" in user_cols and user_cols["task"].size and user_cols["task"].max() >= tasks:
        raise BadInputError(f"task ids must be below {tasks}", path=users, field="task")
    people = make_users(user_xy, tasks, rng, **user_cols)
    return Instance(zoo, sites, people, economy or Economy())


def _read_positions(path: Path, optional: tuple[str, ...],
                    origin: tuple[float, float] | None):
    """Read lat/lon (or x_km/y_km) plus optional numeric columns; errors name line and field."""
    frame = read_frame(path)
    names = {c.lower().strip(): c for c in frame.columns}
    if frame.height == 0:
        raise BadInputError("has no rows", path=path)
    if {"x_km", "y_km"} <= names.keys():
        xy = np.column_stack([_numeric(frame, names[c], path) for c in ("x_km", "y_km")])
        origin = origin or (0.0, 0.0)
    else:
        lat_name = next((names[k] for k in ("latitude", "lat") if k in names), None)
        lon_name = next((names[k] for k in ("longitude", "lon", "lng") if k in names), None)
        if lat_name is None or lon_name is None:
            raise BadInputError("needs latitude/longitude (or x_km/y_km) columns; found "
                                f"{', '.join(frame.columns)}", path=path, field="latitude")
        lat = _numeric(frame, lat_name, path, -90, 90)
        lon = _numeric(frame, lon_name, path, -180, 180)
        origin = origin or (float(lat.mean()), float(lon.mean()))
        xy = np.column_stack([(lon - origin[1]) * 111.32 * np.cos(np.radians(origin[0])),
                              (lat - origin[0]) * 110.57])
    cols = {c: _numeric(frame, names[c], path, 0) for c in optional if c in names}
    return xy, cols, origin


def _numeric(frame: pl.DataFrame, column: str, path: Path, low: float | None = None,
             high: float | None = None) -> np.ndarray:
    """A column as floats; the first missing, non-numeric or out-of-range cell is reported."""
    raw = frame[column]
    values = raw.cast(pl.Float64, strict=False)
    bad = values.is_null() | values.is_nan()
    if low is not None:
        bad = bad | (values < low).fill_null(False)
    if high is not None:
        bad = bad | (values > high).fill_null(False)
    if bad.any():
        row = int(bad.arg_max())
        line = row + 2 if path.suffix.lower() == ".csv" else row + 1
        rng_text = f" in [{low}, {high}]" if high is not None else (
            f" >= {low}" if low is not None else "")
        raise BadInputError(f"value {raw[row]!r} is not a finite number{rng_text}", path=path,
                            line=line, field=column)
    return values.to_numpy().astype(float)


# --- real demand and published accuracies on a market ------------------------------------------


def with_demand(inst: Instance, trace: Path, mean_rate: float = 0.6) -> Instance:
    """``inst`` with each user's task, rate and service SCV taken from a GenAI request trace."""
    from dataclasses import replace

    from schedlab.mec_coalition.alibaba import demand, read_trace

    got = demand(read_trace(trace), inst.users.n, inst.zoo.n_tasks, mean_rate, path=trace)
    users = replace(inst.users, task=got.task, rate=got.rate, service_scv=got.service_scv)
    return Instance(inst.zoo, inst.cloudlets, users, inst.economy)


def with_glue_zoo(inst: Instance, seed: int, trace: Path | None = None,
                  mean_rate: float = 0.6) -> tuple[Instance, list[str]]:
    """``inst``'s sites and users with the published-accuracy GLUE zoo (8 tasks).

    Users keep their positions; tasks (and rates, SCVs) come from ``trace`` when given, else
    Zipf(0.8) over the 8 tasks. A user's accuracy need is drawn uniformly between the weakest and
    the strongest published score on its task (modelled), so some users need the 1.5 B model.
    """
    from dataclasses import replace

    zoo, names, tasks = glue_zoo()
    rng = np.random.default_rng(seed + 7919)
    base = replace(inst.users, task=rng.choice(len(tasks), size=inst.users.n,
                                               p=_zipf(len(tasks))))
    sites = _fit_largest_model(inst.cloudlets, zoo)
    priced = Instance(zoo, sites, base, inst.economy)
    if trace is not None:
        priced = with_demand(priced, trace, mean_rate)
    scores = np.where(zoo.acc > 0, zoo.acc, np.nan)
    low, high = np.nanmin(scores, axis=0), np.nanmax(scores, axis=0)
    task = priced.users.task
    need = low[task] + rng.uniform(0, 1, task.size) * (high[task] - low[task])
    users = replace(priced.users, acc_req=need)
    return Instance(zoo, sites, users, inst.economy), names


def _zipf(n: int, s: float = 0.8) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** s
    return weights / weights.sum()


#: heterogeneous providers (modelled): share of "large" providers and each tier's multipliers
#: on storage, compute (and GPUs), storage price and compute price
PROVIDER_TIERS = {"large": dict(storage=2.0, compute=2, price=0.6),
                  "small": dict(storage=0.5, compute=1, price=1.5)}
LARGE_SHARE = 0.25
#: each provider's service-price level for the users homed at it, drawn from this range
PRICE_LEVELS = (0.6, 1.6)


def heterogeneous(inst: Instance, seed: int) -> tuple[Instance, np.ndarray]:
    """``inst`` with asymmetric providers (one per cloudlet) and differing prices.

    A quarter of the providers (seeded) are large: twice the storage, twice the GPUs and
    compute, storage and compute 40 % cheaper (economies of scale); the rest are small: half the
    storage, prices 50 % higher. Each provider sets a price level U(0.6, 1.6) that multiplies
    what the users homed at it pay. Returns the market and the tier of each cloudlet
    (True = large). All of this is modelled, to test what coalition formation adds where
    providers differ; positions, demand and model sizes stay those of ``inst``.
    """
    from dataclasses import replace

    c, n = inst.cloudlets, inst.cloudlets.n
    rng = np.random.default_rng(seed + 104729)
    large = rng.random(n) < LARGE_SHARE
    large[int(np.argmax(c.storage_gb))] = True  # the largest site stays large: models fit
    tier = {k: np.where(large, PROVIDER_TIERS["large"][k], PROVIDER_TIERS["small"][k])
            for k in ("storage", "compute", "price")}
    gpus = c.servers * tier["compute"]
    sites = replace(c, storage_gb=c.storage_gb * tier["storage"],
                    compute_tflops=c.compute_tflops * tier["compute"],
                    storage_cost=c.storage_cost * tier["price"],
                    compute_cost=c.compute_cost * tier["price"], gpus=gpus)
    fits = inst.zoo.model_gb.max()
    if sites.storage_gb.max() < fits:  # a model no site can hold would be refused
        k = int(np.argmax(sites.storage_gb))
        sites.storage_gb[k] = fits
    level = rng.uniform(*PRICE_LEVELS, n)
    home = inst.home
    users = replace(inst.users, price=inst.users.price * level[home])
    return Instance(inst.zoo, sites, users, inst.economy), large
