"""Our metapath sampler beside every library sampler installed, on an OGB-MAG-shaped graph and
on DBLP, same seeds, metapaths and output (issue 50's target: >= 3x the fastest library).

Run: ``python benchmarks/esr_hgnn/compare_libs.py [--scale 0.18] [--batch 512 2048]``
(``--quick`` for a small graph). DGL is measured when ``import dgl`` works (not a dependency:
dgl 2.1.0 from PyPI needs its graphbolt import made optional to load with torch 2.13, see
docs/systems/esr_hgnn.md); otherwise its rows say why not.

Samplers, each producing ``batch * walks`` endpoints per metapath (walks drawn with
replacement: ``walks`` draws at the first hop, then one per hop):

* ``ours``: :class:`pyg.MetapathSampler` ``sample_numpy`` with ``method="auto"`` (what the
  adapter does by default: the trie where it is predicted to save >= 10 % of the reads, else
  naive); ``ours-trie``/``ours-naive`` forced; ``ours+ei`` adds the ``edge_index`` tensors.
* ``pyg-hop``: PyG's ``MetaPath2Vec`` hop function per hop and metapath on precomputed CSR.
* ``pyg-mp2v``: ``MetaPath2Vec._pos_sample`` per metapath, ``walks_per_node=walks``.
* ``dgl-walk``: ``dgl.sampling.random_walk(g, seeds repeated walks times, metapath=...)``.

Time is process CPU time (load-independent on a shared machine), torch/Numba/DGL on one thread,
best of ``repeats``, samplers interleaved in rotating order, each timed call after an untimed
call of the same sampler. Verdict per set and batch: ``win`` if ours >= 3x the fastest library
sampler, ``tie`` if faster but under 3x, ``lose`` if slower.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from schedlab.core.errors import SchedlabError  # noqa: E402
from schedlab.esr_hgnn.pyg import (  # noqa: E402
    MetapathSampler,
    PyGWalker,
    letters_to_metapath,
    to_heterodata,
    typed_graph,
)
from schedlab.esr_hgnn.typed import TypedGraph, auto_method, check_metapaths  # noqa: E402
from schedlab.esr_hgnn.workloads import (  # noqa: E402
    MAG_METAPATHS,
    generate,
    mag_like,
    metapath_set,
)

LIBRARIES = ("pyg-hop", "pyg-mp2v", "dgl-walk")


def mag_graph(scale: float, cache: Path | None) -> TypedGraph:
    """The OGB-MAG-shaped graph, cached as .npz (generation takes ~30 s at scale 0.18)."""
    path = cache / f"esr_mag_{scale}.npz" if cache else None
    if path is not None and path.exists():
        z = np.load(path, allow_pickle=False)
        counts = json.loads(str(z["counts"]))
        edges = {tuple(k.split("|")): z[k] for k in z.files if k != "counts"}
        return TypedGraph.from_edge_index(counts, edges)
    graph = mag_like(scale, 0)
    if path is not None:
        arrays = {"|".join(et): graph.edge_index(et) for et in graph.edge_types}
        np.savez(path, counts=json.dumps(graph.num_nodes), **arrays)
    return graph


def heterodata(graph: TypedGraph):
    from torch_geometric.data import HeteroData

    data = HeteroData()
    for t, n in graph.num_nodes.items():
        data[t].num_nodes = n
    for et in graph.edge_types:
        data[et].edge_index = torch.from_numpy(graph.edge_index(et))
    return data


def dgl_sampler(graph: TypedGraph, mps, walks: int):
    """DGL's metapath random walk, or the reason it cannot run here."""
    try:
        import dgl
    except Exception as exc:  # ImportError, or a missing native library at import
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    dgl.seed(0)
    g = dgl.heterograph(
        {et: (torch.from_numpy(graph.edge_index(et)[0]), torch.from_numpy(graph.edge_index(et)[1]))
         for et in graph.edge_types},
        num_nodes_dict=dict(graph.num_nodes),
    )

    def run(seeds, seeds_t):
        start = seeds_t.repeat_interleave(walks)
        return {mp: dgl.sampling.random_walk(g, start, metapath=list(mp))[0][:, -1] for mp in mps}

    return run, f"dgl {dgl.__version__}"


def samplers(data, graph: TypedGraph, mps, walks: int):
    from torch_geometric.nn import MetaPath2Vec

    fns = {}
    for name, method in (("ours", "auto"), ("ours-trie", "trie"), ("ours-naive", "naive")):
        s = MetapathSampler(data, mps, walks, method=method)
        fns[name] = lambda seeds, seeds_t, s=s: s.sample_numpy(seeds)
    ei = MetapathSampler(data, mps, walks)
    fns["ours+ei"] = lambda seeds, seeds_t: ei.sample(seeds)
    walker = PyGWalker(graph)
    fns["pyg-hop"] = lambda seeds, seeds_t: {mp: walker.walk(mp, seeds_t, (walks,)) for mp in mps}
    edge_dict = {et: data[et].edge_index for et in data.edge_types}
    models = [
        MetaPath2Vec(edge_dict, 1, list(mp), walk_length=len(mp), context_size=len(mp) + 1,
                     walks_per_node=walks,
                     num_nodes_dict={t: data[t].num_nodes for t in data.node_types})
        for mp in mps
    ]
    fns["pyg-mp2v"] = lambda seeds, seeds_t: {
        mp: m._pos_sample(seeds_t)[:, -1] for mp, m in zip(mps, models, strict=True)
    }
    dgl_fn, dgl_note = dgl_sampler(graph, mps, walks)
    if dgl_fn is not None:
        fns["dgl-walk"] = dgl_fn
    return fns, dgl_note


def measure(label, data, graph, mps, batch, walks, repeats, seed=0):
    torch.set_num_threads(1)
    start = mps[0][0][0]
    seeds = np.random.default_rng([seed, batch]).choice(graph.num_nodes[start], batch,
                                                         replace=False)
    seeds_t = torch.from_numpy(seeds)
    fns, dgl_note = samplers(data, graph, mps, walks)
    for fn in fns.values():  # JIT warm-up
        fn(seeds, seeds_t)
    best = {name: float("inf") for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fns[name](seeds, seeds_t)
            t0 = time.process_time()
            fns[name](seeds, seeds_t)
            best[name] = min(best[name], time.process_time() - t0)
    libs = {k: v for k, v in best.items() if k in LIBRARIES}
    fastest = min(libs, key=libs.get)
    ratio = libs[fastest] / best["ours"]
    verdict = "win" if ratio >= 3 else "tie" if ratio >= 1 else "lose"
    return dict(
        graph=label, metapaths=len(mps), batch=batch, walks=walks,
        auto_picks=auto_method(mps, (walks,)),
        cpu_ms={k: round(v * 1e3, 3) for k, v in best.items()},
        fastest_library=fastest, ours_vs_fastest=round(ratio, 2),
        ours_ei_vs_fastest=round(libs[fastest] / best["ours+ei"], 2),
        trie_vs_naive=round(best["ours-naive"] / best["ours-trie"], 2),
        verdict=verdict, dgl=dgl_note,
    )


def subgraph_cost(data, graph, mps, batch: int, walks: int, repeats: int) -> dict:
    """What a loader batch costs beyond sampling: ``subgraph`` (relabel + edge_index, no
    features in ``data``) minus ``sample_numpy``, process CPU time, best of ``repeats``."""
    torch.set_num_threads(1)
    sampler = MetapathSampler(data, mps, walks)
    seeds = np.random.default_rng([1, batch]).choice(graph.num_nodes[mps[0][0][0]], batch,
                                                      replace=False)
    best = {}
    for name, fn in (("sample", sampler.sample_numpy), ("subgraph", sampler.subgraph)):
        fn(seeds)
        t = float("inf")
        for _ in range(repeats):
            fn(seeds)
            t0 = time.process_time()
            fn(seeds)
            t = min(t, time.process_time() - t0)
        best[name] = t
    build = max(0.0, best["subgraph"] - best["sample"])
    return dict(metapaths=len(mps), batch=batch, sample_ms=round(best["sample"] * 1e3, 3),
                build_ms=round(build * 1e3, 3), build_over_sample=round(build / best["sample"], 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=0.18, help="OGB-MAG scale (0.18: 349k nodes)")
    ap.add_argument("--batch", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--walks", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--cache", default="/tmp", help="directory for the generated graph")
    ap.add_argument("--quick", action="store_true", help="scale 0.01, one batch, 3 repeats")
    ap.add_argument("--subgraph", action="store_true",
                    help="only the loader's subgraph-building cost beside sampling (batch 1024)")
    args = ap.parse_args()
    if args.quick:
        args.scale, args.batch, args.repeats = 0.01, [256], 3
    if args.subgraph:
        mag = mag_graph(args.scale, Path(args.cache) if args.cache else None)
        data = heterodata(mag)
        for name, raw in MAG_METAPATHS.items():
            row = subgraph_cost(data, mag, check_metapaths(mag, raw), 1024, args.walks,
                                args.repeats)
            print(json.dumps(dict(graph=f"mag x{args.scale} {name}", **row)), flush=True)
        return
    try:
        rows = []
        mag = mag_graph(args.scale, Path(args.cache) if args.cache else None)
        mag_data = heterodata(mag)
        for name, raw in MAG_METAPATHS.items():
            mps = check_metapaths(mag, raw)
            for b in args.batch:
                rows.append(measure(f"mag x{args.scale} {name}", mag_data, mag, mps, b,
                                    args.walks, args.repeats))
                print(json.dumps(rows[-1]), flush=True)
        dblp = generate("dblp", 1.0, 0)
        data = to_heterodata(dblp)
        typed = typed_graph(data)
        for which in ("han", "sym6"):
            mps = check_metapaths(typed, [letters_to_metapath(dblp, m)
                                          for m in metapath_set(dblp, "dblp", which)])
            rows.append(measure(f"dblp x1 {which}", data, typed, mps, 512, args.walks,
                                args.repeats))
            print(json.dumps(rows[-1]), flush=True)
    except SchedlabError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
