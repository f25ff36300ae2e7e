"""Fit the cost model's linear-layer, norm and all-reduce terms to Vidur's profiled timings.

Source: Microsoft Vidur (Agrawal et al., MLSys'24), ``data/profiling`` at commit
``7d47513363ec447a741ac5e47241580b47724fbf`` (MIT licence), read by path from a copy such as
``../shared/data/vidur_profiles`` (never vendored: only the fitted coefficients are stored, in
``calibration.toml``). Vidur's ``mlp.csv`` holds per-layer CUDA times (ms) of every non-attention
operator for 1-4096 (or 32768) tokens; ``all_reduce.csv`` NCCL all-reduce times by message size.

What is fitted, per GPU (``schedlab.llm.costmodel`` evaluates the same formulas):

* **linear layers** (QKV, output, gate+up, down projections, summed per layer): each GEMM is a
  roofline ``launch + max(weight bytes / (hbm_eff·HBM), FLOPs / (gemm_eff·peak))`` with the
  FLOPs wave-quantised over the GPU's SMs (``costmodel.gemm_roofline_ms``; the CTA tile of each
  projection and TP degree picked from ``TILES`` by coordinate descent), times an efficiency
  curve over log2(tokens) (piecewise linear, quarter-octave knots) fitted minimax (an LP) on the
  log ratio, one curve per TP degree (each is a different per-GPU GEMM shape). The physical
  parameters come from a least-squares fit on the log ratio over all token counts and TPs.
* **norms and element-wise ops** (2 RMSNorms, SiLU·mul, RoPE, 2 residual adds, per layer):
  per kernel ``launch + bytes / (eff·HBM)`` (bytes it reads and writes), least squares; the
  per-layer sum times its own minimax efficiency curve over log2(tokens).
* **all-reduce** (per network and GPU count): ``alpha + 2(n-1)/n · bytes / bus_bw`` (ring),
  fitted on message sizes a 1-4096-token activation has (hidden·2 bytes·tokens).

Run ``python -m schedlab.llm.calibrate PROFILES_DIR`` to refit, rewrite ``calibration.toml`` and
print the error tables; :func:`error_table` recomputes the errors from the stored coefficients.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
#: (Vidur GPU folder, Vidur model folder, schedlab model name)
COMPUTE_SETS = [
    ("a100", "meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("a100", "meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
    ("h100", "meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("a40", "meta-llama/Llama-2-7b-hf", "llama-2-7b"),
]
#: Vidur GPU folder -> schedlab GPU name (Vidur profiles the 80 GB A100 and the SXM H100)
GPU_OF = {"a100": "a100-80g", "h100": "h100", "a40": "a40"}
#: Vidur network folder -> schedlab GPU name whose all-reduce it calibrates
NETWORK_OF = {"a100_pairwise_nvlink": "a100-80g", "h100_dgx": "h100"}
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
NORM_OPS = ("input_layernorm", "post_attention_layernorm", "mlp_act", "attn_rope", "add", "add")
KNOT_STEP = 0.25
KNOTS = tuple(float(x) for x in np.arange(0.0, 12.0 + 1e-9, KNOT_STEP))
#: GEMM tiles tried per GPU: token rounding only (height), or (height over tokens, width over
#: output features) CTA tiles of cuBLAS/CUTLASS's bf16 tensor-core GEMMs (the kernel names in
#: kernels.toml: 64x128, 128x128, 128x256, 256x128), wave-quantised over the GPU's SM count
#: (specs.toml). A discrete choice per GPU, per projection and per TP degree, picked by
#: coordinate descent on the worst error over the same profile (a fitted parameter, chosen
#: from these shapes, not derived from cuBLAS's heuristics); never per token count
TILES = (1, 16, 32, 64, 128, (64, 128), (128, 64), (128, 128), (128, 256), (256, 128))
MAX_TOKENS = 4096


@dataclass(frozen=True)
class Shape:
    """Per-GPU (sharded) layer shape of a Llama-architecture model."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    tp: int = 1

    def gemms(self) -> list[tuple[float, float]]:
        """(K, N) of the QKV, output, gate+up and down projections on one of ``tp`` GPUs."""
        h, hd, tp = self.hidden, self.head_dim, self.tp
        return [
            (h, (self.heads + 2 * self.kv_heads) * hd / tp),
            (self.heads * hd / tp, h),
            (h, 2 * self.ffn / tp),
            (self.ffn / tp, h),
        ]


def gemm_ms(
    k_dim, n_dim, tokens, peak_flops, hbm_bytes_s, gemm_eff, hbm_eff, launch_us, tile, sms=0
):
    """The per-GEMM roofline (without the efficiency curve), milliseconds. ``tile`` is the
    tile height over tokens, or a (height, width) pair: then the FLOPs are wave-quantised over
    ``sms`` SMs (``costmodel.gemm_roofline_ms``)."""
    from schedlab.llm.costmodel import gemm_roofline_ms

    tile_m, tile_n = tile if isinstance(tile, tuple) else (tile, 0)
    return gemm_roofline_ms(
        k_dim,
        n_dim,
        tokens,
        peak_flops,
        hbm_bytes_s,
        gemm_eff,
        hbm_eff,
        launch_us,
        tile_m,
        tile_n,
        sms,
    )


def curve(tokens, knots_values) -> np.ndarray:
    """The fitted multiplicative efficiency curve at ``tokens`` (clamped outside the knots)."""
    x = np.log2(np.maximum(np.asarray(tokens, dtype=float), 1.0))
    return np.exp(np.interp(x, KNOTS, knots_values))


def _hat(tokens) -> np.ndarray:
    x = np.log2(np.asarray(tokens, dtype=float))
    eye = np.eye(len(KNOTS))
    return np.stack([np.interp(x, KNOTS, eye[j]) for j in range(len(KNOTS))], axis=1)


GRID_HAT = _hat(np.arange(1, 4097, dtype=float))


def _minimax(
    residual: np.ndarray, basis: np.ndarray, monotone: list[tuple[np.ndarray, np.ndarray]] = ()
) -> np.ndarray:
    """Knot values c minimising max |residual - basis·c| (a linear program).

    ``monotone`` holds (basis, log of the uncorrected model) on a dense grid of token counts
    (every integer, per model): the corrected model ``log_base + basis·c`` is constrained to
    be non-decreasing along each, so more tokens never cost less, also between profiled sizes.
    """
    from scipy.optimize import linprog

    rows, cols = basis.shape
    ones = np.ones((rows, 1))
    a_ub = [np.hstack([-basis, -ones]), np.hstack([basis, -ones])]
    b_ub = [-residual, residual]
    for grid_basis, log_base in monotone:
        d_basis = grid_basis[1:] - grid_basis[:-1]
        d_base = log_base[1:] - log_base[:-1]
        keep = np.abs(d_basis).sum(axis=1) > 0
        a_ub.append(np.hstack([-d_basis[keep], np.zeros((int(keep.sum()), 1))]))
        b_ub.append(d_base[keep])
    lp = linprog(
        np.r_[np.zeros(cols), 1.0],
        A_ub=np.vstack(a_ub),
        b_ub=np.concatenate(b_ub),
        bounds=[(-3, 3)] * cols + [(0, None)],
    )
    if not lp.success:
        raise RuntimeError(f"minimax fit failed: {lp.message}")
    return lp.x[:cols]


def load_compute(root: str | Path):
    """Medians per (model, tokens, tp) of every profiled (GPU, model) set present under root."""
    import pandas as pd

    root = Path(root)
    frames = []
    for gpu, folder, name in COMPUTE_SETS:
        path = root / "compute" / gpu / folder / "mlp.csv"
        if not path.is_file():
            continue
        frame = pd.read_csv(path)
        need = [
            "num_tokens",
            "num_tensor_parallel_workers",
            "n_embd",
            "n_head",
            "n_kv_head",
            "n_expanded_embd",
        ]
        need += [f"time_stats.{op}.median" for op in dict.fromkeys(LINEAR_OPS + NORM_OPS)]
        missing = [c for c in need if c not in frame.columns]
        if missing:
            raise BadInputError("missing column", path=path, line=1, field=missing[0])
        frame = frame[frame.num_tokens <= MAX_TOKENS]
        frame = (
            frame.groupby(["num_tokens", "num_tensor_parallel_workers"])
            .median(numeric_only=True)
            .reset_index()
        )
        frame["vidur_gpu"], frame["model"], frame["file"] = gpu, name, str(path)
        frames.append(frame)
    if not frames:
        raise BadInputError("no Vidur compute profiles (compute/<gpu>/<model>/mlp.csv)", path=root)
    return pd.concat(frames, ignore_index=True)


def _shapes(frame) -> list[Shape]:
    return [
        Shape(
            int(r.n_embd),
            int(r.n_head),
            int(r.n_kv_head),
            int(r.n_embd // r.n_head),
            int(r.n_expanded_embd),
            int(r.num_tensor_parallel_workers),
        )
        for r in frame.itertuples()
    ]


_DIMS: dict[int, tuple] = {}  # id(shapes) -> (shapes, [rows, 4 GEMMs, (K, N)])


def _pair(tile) -> tuple[int, int]:
    return tuple(tile) if isinstance(tile, (tuple, list)) else (int(tile), 0)


def _linear_base(frame, shapes, peak, hbm, eff, mem, launch, tiles, sms=0) -> np.ndarray:
    """The four projections' rooflines summed; ``tiles``: one tile per GEMM (or one for all)."""
    if not (isinstance(tiles, tuple) and len(tiles) == 4):
        tiles = (tiles,) * 4
    n = frame.num_tokens.to_numpy(dtype=float)
    dims = _DIMS.get(id(shapes))
    if dims is None or dims[0] is not shapes:
        per = np.array([s.gemms() for s in shapes], dtype=float).reshape(len(shapes), 4, 2)
        dims = _DIMS[id(shapes)] = (shapes, per)
        if len(_DIMS) > 64:
            _DIMS.pop(next(iter(_DIMS)))
    per = dims[1]
    total = np.zeros(len(frame))
    for j in range(4):
        total += gemm_ms(per[:, j, 0], per[:, j, 1], n, peak, hbm, eff, mem, launch, tiles[j], sms)
    return total


def norm_op_bytes(shape: Shape, op: str, tokens) -> np.ndarray:
    """Bytes one element-wise kernel reads and writes for ``tokens`` tokens (bf16)."""
    h, tp = shape.hidden, shape.tp
    per_token = {
        "input_layernorm": 2 * h,
        "post_attention_layernorm": 2 * h,
        "mlp_act": 3 * shape.ffn / tp,
        "attn_rope": 2 * (shape.heads + shape.kv_heads) * shape.head_dim / tp,
        "add": 3 * h,
    }[op]
    return 2.0 * per_token * np.asarray(tokens, dtype=float)


GRID = np.arange(1, MAX_TOKENS + 1, dtype=float)


def _group_shapes(data, shapes, tps, tp) -> list[Shape]:
    """One Shape per model among the rows of TP degree ``tp``."""
    seen: dict[str, Shape] = {}
    for model, shape, t in zip(data.model, shapes, tps, strict=True):
        if t == tp:
            seen.setdefault(model, shape)
    return list(seen.values())


def fit_gpu(frame, peak: float, hbm: float, sms: int = 0, tiles: dict | None = None) -> dict:
    """Fit one GPU's linear and norm terms (all the models it has profiles of).

    The GEMM roofline's physical parameters (efficiencies, launch) are fitted by least squares
    on the log ratio over every token count and TP degree; the tile height is the one whose
    fitted model has the smallest worst tp=1 error; each TP degree (a different GEMM shape per
    GPU) then gets its own efficiency curve over tokens, fitted minimax. The norm kernels'
    launch and bandwidth are fitted on tp=1 rows, their per-layer sum gets curves the same way.
    ``tiles`` (TP degree -> four (height, width) tiles, as stored) skips the tile search.
    """
    from scipy.optimize import least_squares

    data = frame.sort_values(["model", "num_tensor_parallel_workers", "num_tokens"])
    shapes = _shapes(data)
    n = data.num_tokens.to_numpy(dtype=float)
    tps = data.num_tensor_parallel_workers.to_numpy()
    y_lin = sum(data[f"time_stats.{op}.median"].to_numpy() for op in LINEAR_OPS)
    candidates = TILES if sms else tuple(t for t in TILES if not isinstance(t, tuple))

    def attempt(tiles):
        """(worst tp=1 error, tiles, physical parameters, curves) for per-GEMM ``tiles``."""

        def resid(q):
            base = _linear_base(data, shapes, peak, hbm, q[0], q[1], q[2], tiles, sms)
            return np.log(base / y_lin)

        fit = least_squares(resid, [0.7, 0.8, 3.0], bounds=([0.05, 0.05, 0.0], [1.0, 1.0, 30.0]))
        r = -resid(fit.x)
        curves = {}
        # the tp=1 curve decides the tiles; the other TP degrees get their own tiles and
        # curves below
        for tp in [1] if (tps == 1).any() else np.unique(tps):
            mono = []
            for shape in _group_shapes(data, shapes, tps, tp):
                base = sum(
                    gemm_ms(k, nn, GRID, peak, hbm, *fit.x, tile, sms)
                    for (k, nn), tile in zip(shape.gemms(), tiles, strict=True)
                )
                mono.append((GRID_HAT, np.log(base)))
            curves[int(tp)] = _minimax(r[tps == tp], _hat(n[tps == tp]), mono)
        one = tps == 1
        worst = float(np.max(np.abs(np.exp(-(r[one] - _hat(n[one]) @ curves[1])) - 1)))
        return worst, tiles, fit.x, curves

    def descend(best, score):
        """Coordinate descent over each GEMM's tile (cuBLAS picks a kernel per shape), two
        sweeps over the same candidates; ``score(tiles)`` -> (worst error, result)."""
        for _ in range(2 if len(candidates) > 1 else 0):
            for j in range(4):
                for tile in candidates:
                    if tile == best[1][j]:
                        continue
                    tiles = best[1][:j] + (tile,) + best[1][j + 1 :]
                    err, result = score(tiles)
                    if err < best[0] - 1e-6:
                        best = (err, tiles, result)
        return best

    # tp = 1: one tile for all four GEMMs, then each GEMM's own; the physical parameters are
    # the least-squares fit (over every TP degree) under the chosen tp=1 tiles
    def given(tp):
        return tuple(t[0] if t[1] == 0 else tuple(t) for t in tiles[str(tp)])

    if tiles is not None:
        first = attempt(given(1))
        result1, tiles1 = first, first[1]
    else:
        first = min((attempt((tile,) * 4) for tile in candidates), key=lambda a: a[0])
        _, tiles1, result1 = descend(
            (first[0], first[1], first), lambda tiles: (lambda a: (a[0], a))(attempt(tiles))
        )
    _, _, (eff, mem, launch), curves = result1
    # every other TP degree is a different per-GPU GEMM shape, so cuBLAS may pick other
    # kernels: its tiles are chosen the same way, the physical parameters kept
    params = (eff, mem, launch)
    by_tp = {1: tiles1}
    for tp in (int(t) for t in np.unique(tps) if t != 1):
        sel = tps == tp
        group = _group_shapes(data, shapes, tps, tp)

        def score(tiles, sel=sel, group=group, tp=tp):
            base = _linear_base(
                data[sel],
                [s for s, k in zip(shapes, sel, strict=True) if k],
                peak,
                hbm,
                *params,
                tiles,
                sms,
            )
            r = np.log(y_lin[sel] / base)
            mono = [
                (
                    GRID_HAT,
                    np.log(
                        sum(
                            gemm_ms(k, nn, GRID, peak, hbm, *params, tile, sms)
                            for (k, nn), tile in zip(shape.gemms(), tiles, strict=True)
                        )
                    ),
                )
                for shape in group
            ]
            knots = _minimax(r, _hat(n[sel]), mono)
            return float(np.max(np.abs(np.exp(-(r - _hat(n[sel]) @ knots)) - 1))), knots

        start = tiles1 if tiles is None else given(tp)
        err, knots = score(start)
        if tiles is None:
            _, by_tp[tp], curves[tp] = descend((err, start, knots), score)
        else:
            by_tp[tp], curves[tp] = start, knots
    tiles = tiles1
    # norms: per kernel launch + bytes / (eff · HBM) (least squares on the log ratio)
    norms = {}
    one = tps == 1
    for op in dict.fromkeys(NORM_OPS):
        y = data[f"time_stats.{op}.median"].to_numpy()[one]
        nbytes = np.array(
            [norm_op_bytes(s, op, t) for s, t, keep in zip(shapes, n, one, strict=True) if keep]
        )

        def resid_op(q, y=y, nbytes=nbytes):
            return np.log((q[0] * 1e-3 + 1e3 * nbytes / (q[1] * hbm)) / y)

        q = least_squares(resid_op, [3.0, 0.5], bounds=([0.0, 0.01], [50.0, 1.0])).x
        norms[op] = [round(float(q[0]), 4), round(float(q[1]), 4)]
    y_norm = sum(data[f"time_stats.{op}.median"].to_numpy() for op in NORM_OPS)
    base_norm = np.zeros(len(data))
    for op in NORM_OPS:
        nbytes = np.array([norm_op_bytes(s, op, t) for s, t in zip(shapes, n, strict=True)])
        base_norm += norms[op][0] * 1e-3 + 1e3 * nbytes / (norms[op][1] * hbm)
    rn = np.log(y_norm / base_norm)
    norm_curves = {}
    for tp in np.unique(tps):
        mono = []
        for shape in _group_shapes(data, shapes, tps, tp):
            base = sum(
                norms[op][0] * 1e-3 + 1e3 * norm_op_bytes(shape, op, GRID) / (norms[op][1] * hbm)
                for op in NORM_OPS
            )
            mono.append((GRID_HAT, np.log(base)))
        norm_curves[int(tp)] = _minimax(rn[tps == tp], _hat(n[tps == tp]), mono)
    return dict(
        gemm_efficiency=float(eff),
        hbm_efficiency=float(mem),
        knot_step=KNOT_STEP,
        gemm_launch_us=float(launch),
        tile_tokens=int(_pair(tiles[2])[0]),  # the LM head takes gate/up's tile (widest GEMM)
        tile_n=int(_pair(tiles[2])[1]),
        gemm_tiles={str(tp): [list(_pair(t)) for t in tl] for tp, tl in by_tp.items()},
        norm_ops=norms,
        curve_log={str(k): [round(float(v), 6) for v in c] for k, c in curves.items()},
        norm_curve_log={str(k): [round(float(v), 6) for v in c] for k, c in norm_curves.items()},
    )


def load_allreduce(root: str | Path):
    import pandas as pd

    frames = []
    for folder in NETWORK_OF:
        path = Path(root) / "network" / folder / "all_reduce.csv"
        if not path.is_file():
            continue
        frame = pd.read_csv(path)
        for column in ("num_workers", "size", "time_stats.all_reduce.median"):
            if column not in frame.columns:
                raise BadInputError("missing column", path=path, line=1, field=column)
        frame = frame.groupby(["num_workers", "size"])["time_stats.all_reduce.median"].median()
        frame = frame.reset_index().rename(columns={"time_stats.all_reduce.median": "ms"})
        frame["network"], frame["file"] = folder, str(path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else None


def allreduce_sizes(hidden: int = 4096) -> tuple[int, int]:
    """Message sizes of a 1- and a MAX_TOKENS-token bf16 activation."""
    return 2 * hidden, 2 * hidden * MAX_TOKENS


def fit_allreduce(frame) -> dict[str, list[float]]:
    from scipy.optimize import least_squares

    lo, hi = allreduce_sizes()
    out = {}
    for workers, part in frame.groupby("num_workers"):
        part = part[(part["size"] >= lo / 2) & (part["size"] <= hi * 2)]
        ring = 2.0 * (workers - 1) / workers * part["size"].to_numpy(dtype=float)
        y = part.ms.to_numpy()

        def resid(q, ring=ring, y=y):
            return np.log((q[0] * 1e-3 + ring / (q[1] * 1e9) * 1e3) / y)

        fit = least_squares(resid, [20.0, 100.0], bounds=([0.0, 1.0], [500.0, 2000.0]))
        out[str(int(workers))] = [round(float(fit.x[0]), 4), round(float(fit.x[1]), 3)]
    return out


def error_table(root: str | Path):
    """Measured vs modelled per-layer times with the *stored* coefficients (pandas frame).

    Columns: gpu, model, tp, tokens, term (linear|norm|layer), measured_ms, model_ms, error.
    """
    import pandas as pd

    frame = load_compute(root)
    return pd.concat(
        [_layer_errors(part, vgpu) for vgpu, part in frame.groupby("vidur_gpu")],
        ignore_index=True,
    )


def _layer_errors(data, vgpu: str, calibration=None):
    """Per-layer rows (linear, norm, layer) of one Vidur GPU's profile rows, evaluated through
    ``CostModel`` exactly as a simulation would (``calibration``: a fit, else the stored one)."""
    import pandas as pd

    from schedlab.llm.costmodel import CostModel, get_model

    rows = []
    for (name, tp), sub in data.groupby(["model", "num_tensor_parallel_workers"]):
        cost = CostModel.from_specs(
            get_model(name), GPU_OF[vgpu], tp=int(tp), calibration=calibration
        )
        lin_cols, nrm_cols = _op_columns(sub, LINEAR_OPS), _op_columns(sub, NORM_OPS)
        for r in sub.itertuples():
            t = int(r.num_tokens)
            lin = sum(r[i] for i in lin_cols)
            nrm = sum(r[i] for i in nrm_cols)
            ml, mn = cost.layer_linear_ms(t), cost.layer_norm_ms(t)
            for term, meas, mod in (
                ("linear", lin, ml),
                ("norm", nrm, mn),
                ("layer", lin + nrm, ml + mn),
            ):
                rows.append(
                    dict(
                        gpu=GPU_OF[vgpu],
                        model=name,
                        tp=int(tp),
                        tokens=t,
                        term=term,
                        measured_ms=meas,
                        model_ms=mod,
                        error=mod / meas - 1,
                    )
                )
    return pd.DataFrame(rows)


def monotone_floor(table):
    """Per (gpu, model, tp, term): the smallest worst |error| that *any* model which never makes
    more tokens cheaper can reach on the profile (pandas frame, column ``floor``).

    For token counts i < j with measured times y_i > y_j, a non-decreasing model has m_i <= m_j,
    and the best it can do for that pair is m_i = m_j = 2·y_i·y_j / (y_i + y_j), an error of
    (y_i - y_j) / (y_i + y_j) on both; the floor is the largest such pair (the running maximum
    of y against each later y). ``table`` is ``error_table``'s (measured_ms per token count).
    The profiles dip where cuBLAS switches kernels (A40 tp=4 gate/up: 0.183 ms at 136 tokens,
    0.116 ms at 168), so a scheduler's cost model, which must not make a bigger batch cheaper,
    cannot be closer than this to them."""
    import pandas as pd

    rows = []
    for key, part in table.groupby(["gpu", "model", "tp", "term"]):
        y = part.sort_values("tokens").measured_ms.to_numpy(dtype=float)
        top = np.maximum.accumulate(y)
        rows.append(dict(zip(("gpu", "model", "tp", "term"), key, strict=True)))
        rows[-1]["floor"] = float(np.max((top - y) / (top + y)))
    return pd.DataFrame(rows)


def _op_columns(frame, ops) -> list[int]:
    cols = list(frame.columns)
    return [cols.index(f"time_stats.{op}.median") + 1 for op in ops]  # itertuples offsets


def allreduce_error_table(root: str | Path):
    import pandas as pd

    from schedlab.llm.costmodel import CostModel

    frame = load_allreduce(root)
    if frame is None:
        return pd.DataFrame(columns=["gpu", "workers", "bytes", "measured_ms", "model_ms", "error"])
    lo, hi = allreduce_sizes()
    rows = []
    costs: dict = {}
    for r in frame[(frame["size"] >= lo) & (frame["size"] <= hi)].itertuples():
        gpu = NETWORK_OF[r.network]
        key = (gpu, int(r.num_workers))
        if key not in costs:
            costs[key] = CostModel.from_specs("llama-2-7b", gpu, tp=int(r.num_workers))
        cost = costs[key]
        mod = cost.allreduce_ms(float(r.size))
        rows.append(
            dict(
                gpu=gpu,
                network=r.network,
                workers=int(r.num_workers),
                bytes=int(r.size),
                measured_ms=r.ms,
                model_ms=mod,
                error=mod / r.ms - 1,
            )
        )
    return pd.DataFrame(rows)


def _fitted_errors(fitted: dict, data, vgpu: str):
    """Per-layer errors (linear, norm, layer) of ``data``'s rows under a fitted (not stored)
    calibration, evaluated through ``CostModel`` exactly as a simulation would."""
    from schedlab.llm.costmodel import calibration_from_row

    return _layer_errors(data, vgpu, calibration_from_row(GPU_OF[vgpu], fitted))


def holdout(
    root: str | Path, gpu: str = "a100", train: str = "llama-2-7b", test: str = "llama-3-8b"
) -> dict[int, float]:
    """Max |error| of the linear layers on ``test``'s profile when the GPU's coefficients are
    fitted on ``train``'s alone, per TP degree (a check that the fit is not model-specific)."""
    from schedlab.llm.costmodel import get_gpu

    frame = load_compute(root)
    part = frame[frame.vidur_gpu == gpu]
    if not {train, test} <= set(part.model):
        raise BadInputError(f"needs profiles of {train} and {test} on {gpu}", path=root)
    spec = get_gpu(GPU_OF[gpu])
    fitted = fit_gpu(
        part[part.model == train], spec.bf16_tflops * 1e12, spec.hbm_gbs * 1e9, spec.sms
    )
    err = _fitted_errors(fitted, part[part.model == test], gpu)
    err = err[err.term == "linear"]
    return {int(t): float(e.error.abs().max()) for t, e in err.groupby("tp")}


def holdout_tokens(root: str | Path, every: int = 4, tps: tuple[int, ...] = (1,)):
    """Per-layer error on *held-out token counts*: every ``every``-th profiled token count
    (from the second) is left out of the fit (physical parameters, tile choice and curves) and
    the model is scored on those alone. Frame with gpu, model, tp, tokens, term, error."""
    import pandas as pd

    from schedlab.llm.costmodel import get_gpu

    frame = load_compute(root)
    frame = frame[frame.num_tensor_parallel_workers.isin(tps)]
    out = []
    for vgpu, part in frame.groupby("vidur_gpu"):
        counts = np.sort(part.num_tokens.unique())
        held = set(counts[1::every].tolist())
        test = part.num_tokens.isin(held)
        spec = get_gpu(GPU_OF[vgpu])
        fitted = fit_gpu(part[~test], spec.bf16_tflops * 1e12, spec.hbm_gbs * 1e9, spec.sms)
        out.append(_fitted_errors(fitted, part[test], vgpu))
    return pd.concat(out, ignore_index=True)


def fit_all(root: str | Path, stored_tiles: bool = False) -> dict:
    """Fit every profiled GPU (``stored_tiles``: reuse calibration.toml's tile choices)."""
    from schedlab.llm.costmodel import get_gpu

    frame = load_compute(root)
    gpus: dict[str, dict] = {}
    for vgpu, part in frame.groupby("vidur_gpu"):
        spec = get_gpu(GPU_OF[vgpu])
        tiles = None
        if stored_tiles:
            stored = tomllib.loads(Path(__file__).with_name("calibration.toml").read_text())
            tiles = stored["gpus"].get(GPU_OF[vgpu], {}).get("gemm_tiles")
        fitted = fit_gpu(part, spec.bf16_tflops * 1e12, spec.hbm_gbs * 1e9, spec.sms, tiles)
        fitted["profiled"] = ", ".join(sorted(set(part.model)))
        gpus[GPU_OF[vgpu]] = fitted
    net = load_allreduce(root)
    if net is not None:
        for folder, part in net.groupby("network"):
            gpus.setdefault(NETWORK_OF[folder], {})["allreduce"] = fit_allreduce(part)
            gpus[NETWORK_OF[folder]]["allreduce_source"] = f"network/{folder}/all_reduce.csv"
    return gpus


def write_toml(gpus: dict, path: Path) -> None:
    from schedlab.core.io import write_text

    lines = [
        "# Fitted cost-model coefficients (schedlab.llm.calibrate); do not edit by hand.",
        "# Source: Microsoft Vidur data/profiling (MIT licence), commit " + VIDUR_COMMIT + ",",
        "# compute/<gpu>/<model>/mlp.csv and network/<net>/all_reduce.csv (times in ms).",
        "# Refit: python -m schedlab.llm.calibrate ../shared/data/vidur_profiles",
        "# gemm_efficiency / hbm_efficiency: fraction of datasheet bf16 peak / HBM bandwidth;",
        "# curve_log / norm_curve_log: per TP degree, ln of the efficiency-curve multiplier",
        "#   at log2(tokens) = 0, 0.25, ..., 12 (linear layers / norms of one layer);",
        "# norm_ops: op -> [launch_us, fraction of HBM bandwidth]: launch + bytes / (frac*HBM);",
        "# allreduce: workers -> [alpha_us, bus_gbs] of alpha + 2(n-1)/n * bytes / bus.",
        "# GPUs without a profile borrow a profiled GPU of the same architecture ([borrow]).",
        "",
    ]
    for gpu, fitted in sorted(gpus.items()):
        lines.append(f"[gpus.{gpu}]")
        for key, value in fitted.items():
            if key in ("allreduce", "norm_ops", "curve_log", "norm_curve_log", "gemm_tiles"):
                continue
            lines.append(f"{key} = {_toml_value(value)}")
        for key in ("gemm_tiles", "curve_log", "norm_curve_log"):
            if key in fitted:
                pairs = ", ".join(f'"{k}" = {v}' for k, v in fitted[key].items())
                lines.append(f"{key} = {{ {pairs} }}")
        if "norm_ops" in fitted:
            pairs = ", ".join(f"{k} = {v}" for k, v in fitted["norm_ops"].items())
            lines.append(f"norm_ops = {{ {pairs} }}")
        if "allreduce" in fitted:
            pairs = ", ".join(f'"{k}" = {v}' for k, v in fitted["allreduce"].items())
            lines.append(f"allreduce = {{ {pairs} }}")
        lines.append("")
    lines += [
        "[borrow]",
        "# unprofiled GPU = profiled GPU of the same architecture",
        'a800 = "a100-80g"',
        'h200 = "h100"',
        'a6000 = "a40"',
        'a10g = "a40"',
        "",
    ]
    write_text(path, "\n".join(lines))


def _toml_value(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return repr(round(value, 6))
    return str(value)


def summarise(table) -> str:
    """Max |error| per (gpu, model, tp, term), and at the powers of two for tp=1."""
    out = []
    worst = table.assign(abs_err=table.error.abs()).groupby(["gpu", "model", "tp", "term"])
    out.append(
        worst.abs_err.agg(["max", lambda s: s.quantile(0.95)])
        .rename(columns={"<lambda_0>": "p95"})
        .round(3)
        .to_string()
    )
    pow2 = table[
        (table.tp == 1) & table.tokens.isin([2**i for i in range(13)]) & (table.term == "linear")
    ]
    out.append(
        pow2.pivot_table(index="tokens", columns=["gpu", "model"], values="error")
        .round(3)
        .to_string()
    )
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BadInputError as exc:  # one line naming the file/field, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m schedlab.llm.calibrate VIDUR_PROFILES_DIR [--write] [--holdout]")
        return 2
    root = Path(argv[0])
    if "--write" in argv:
        gpus = fit_all(root)
        target = Path(__file__).with_name("calibration.toml")
        write_toml(gpus, target)
        from schedlab.llm import costmodel

        costmodel._load_calibration.cache_clear()
        print(f"wrote {target}")
    table = error_table(root)
    print(summarise(table))
    floor = monotone_floor(table).set_index(["gpu", "model", "tp", "term"]).floor
    worst = table.assign(abs_err=table.error.abs()).groupby(["gpu", "model", "tp", "term"]).abs_err
    print("layer: max |error| vs the floor of any non-decreasing model (monotone_floor):")
    print(
        worst.max()
        .to_frame("max")
        .join(floor)
        .xs("layer", level="term")
        .round(3)
        .unstack("tp")
        .to_string()
    )
    try:
        print(
            "held out (A100: fitted on Llama-2-7B, tested on Llama-3-8B), linear max |err| per tp:",
            {k: round(v, 3) for k, v in holdout(root).items()},
        )
    except BadInputError:
        pass
    if "--holdout" in argv:
        held = holdout_tokens(root, tps=(1, 2, 4, 8))
        print("held-out token counts (every 4th, every tp; fitted on the rest), max / median:")
        print(
            held.assign(abs_err=held.error.abs())
            .groupby(["gpu", "model", "tp", "term"])
            .abs_err.agg(["max", "median"])
            .round(3)
            .to_string()
        )
    ar = allreduce_error_table(root)
    if len(ar):
        print(
            ar.assign(abs_err=ar.error.abs())
            .groupby(["gpu", "workers"])
            .abs_err.agg(["max", "median"])
            .round(3)
            .to_string()
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
