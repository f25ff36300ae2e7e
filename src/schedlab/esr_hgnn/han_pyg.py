"""Train PyG's ``HANConv`` on a labelled DBLP-shaped ``HeteroData`` with different samplers.

Paper: ESR-HGNN (../shared/papers/05-esr_hgnn.md) claims its sampler speeds HGNN work up without
changing what is sampled. This module checks the second half where it matters to a user: the
accuracy a real PyG HAN (``torch_geometric.nn.HANConv``) reaches when its mini-batches come from
our trie sampler, from PyG's own metapath walk sampler (``MetaPath2Vec``'s hop function), and
with PyG's own full-graph recipe (``AddMetaPaths``, as in PyG's HAN example). Needs the ``pyg``
extra.

The graph is seeded, DBLP-shaped (author/paper/term/conference, DBLP's node counts times
``scale``) with four research areas as labels: a paper has an area, its conference is one of
that area's five, 80 % of its authors and 70 % of its terms come from the same area. Author
features are the area's centroid plus noise strong enough that features alone classify poorly, so
the metapath neighbours carry the signal.
"""

from __future__ import annotations

import time

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.esr_hgnn.pyg import MetapathLoader, MetapathSampler, require_pyg

AUTHOR, PAPER, TERM, CONF = "author", "paper", "term", "conference"
WRITES = (AUTHOR, "writes", PAPER)
WRITTEN = (PAPER, "rev_writes", AUTHOR)
HAS = (PAPER, "has", TERM)
HAS_REV = (TERM, "rev_has", PAPER)
IN = (PAPER, "published_in", CONF)
IN_REV = (CONF, "rev_published_in", PAPER)

#: HAN's DBLP metapaths APA, APTPA, APCPA as edge-type sequences
DBLP_METAPATHS = [[WRITES, WRITTEN], [WRITES, HAS, HAS_REV, WRITTEN], [WRITES, IN, IN_REV, WRITTEN]]

#: samplers feeding HANConv, plus ``features``: a linear classifier on author features alone
#: (the floor that shows how much the metapath neighbours add)
METHODS = ("trie", "naive", "pyg-walk", "pyg-full", "features")


def synthetic_dblp(
    scale: float = 0.25, seed: int = 0, features: int = 64, classes: int = 4, noise: float = 5.0
):
    """A labelled DBLP-shaped HeteroData with reverse edge types (``rev_<rel>``) and masks."""
    require_pyg()
    import torch
    from torch_geometric.data import HeteroData

    if not 0 < scale <= 64:
        raise BadInputError(f"scale {scale} must be in (0, 64]", field="scale")
    rng = np.random.default_rng([seed, 0xD8])
    n_a, n_p, n_t = (max(classes * 4, int(round(c * scale))) for c in (4057, 14328, 7723))
    n_c = 5 * classes
    area_a = rng.integers(0, classes, n_a)
    area_p = rng.integers(0, classes, n_p)
    area_t = rng.integers(0, classes, n_t)
    by_area_a = [np.flatnonzero(area_a == k) for k in range(classes)]
    by_area_t = [np.flatnonzero(area_t == k) for k in range(classes)]

    def pick(pool_by_area, n_total, areas, share):
        same = rng.random(areas.size) < share
        out = rng.integers(0, n_total, areas.size)
        for k in range(classes):
            idx = np.flatnonzero(same & (areas == k))
            if pool_by_area[k].size:
                out[idx] = rng.choice(pool_by_area[k], idx.size)
        return out

    # authors per paper 1-3 (mean ~1.4 as DBLP's P->A), terms per paper ~6
    k_auth = rng.choice([1, 1, 1, 2, 3], n_p)
    ap_p = np.repeat(np.arange(n_p), k_auth)
    ap_a = pick(by_area_a, n_a, area_p[ap_p], 0.8)
    k_term = rng.integers(3, 10, n_p)
    pt_p = np.repeat(np.arange(n_p), k_term)
    pt_t = pick(by_area_t, n_t, area_p[pt_p], 0.7)
    pc_c = area_p * 5 + rng.integers(0, 5, n_p)
    # every author writes at least one paper of their own area
    lonely = np.setdiff1d(np.arange(n_a), ap_a)
    own = [np.flatnonzero(area_p == k) for k in range(classes)]
    extra_p = np.empty(lonely.size, dtype=np.int64)
    for k in range(classes):
        sel = area_a[lonely] == k
        extra_p[sel] = rng.choice(own[k], int(sel.sum()))
    ap_p, ap_a = np.concatenate([ap_p, extra_p]), np.concatenate([ap_a, lonely])
    ap_key = np.unique(ap_a * n_p + ap_p)
    ap = np.vstack([ap_key // n_p, ap_key % n_p])
    pt_key = np.unique(pt_p * n_t + pt_t)
    pt = np.vstack([pt_key // n_t, pt_key % n_t])
    centroids = rng.normal(0, 1, (classes, features))
    x = centroids[area_a] + rng.normal(0, noise, (n_a, features))

    data = HeteroData()
    data[AUTHOR].x = torch.tensor(x, dtype=torch.float32)
    data[AUTHOR].y = torch.tensor(area_a, dtype=torch.long)
    split = rng.permutation(n_a)
    n_train, n_val = int(0.3 * n_a), int(0.1 * n_a)
    for name, ids in (
        ("train_mask", split[:n_train]),
        ("val_mask", split[n_train : n_train + n_val]),
        ("test_mask", split[n_train + n_val :]),
    ):
        mask = torch.zeros(n_a, dtype=torch.bool)
        mask[torch.from_numpy(ids)] = True
        data[AUTHOR][name] = mask
    data[PAPER].num_nodes, data[TERM].num_nodes, data[CONF].num_nodes = n_p, n_t, n_c
    for fwd, rev, index in (
        (WRITES, WRITTEN, ap),
        (HAS, HAS_REV, pt),
        (IN, IN_REV, np.vstack([np.arange(n_p), pc_c])),
    ):
        t = torch.from_numpy(np.ascontiguousarray(index, dtype=np.int64))
        data[fwd].edge_index = t
        data[rev].edge_index = t.flip(0)
    return data


class HAN:
    """HANConv (8 heads) + a linear classifier, as PyG's HAN example builds it."""

    def __init__(
        self,
        in_channels: int,
        metadata,
        classes: int,
        hidden: int = 64,
        heads: int = 8,
        seed: int = 0,
    ) -> None:
        import torch
        from torch_geometric.nn import HANConv

        torch.manual_seed(seed)
        self.conv = HANConv(in_channels, hidden, metadata, heads=heads, dropout=0.2)
        self.lin = torch.nn.Linear(hidden, classes)
        self.params = list(self.conv.parameters()) + list(self.lin.parameters())

    def __call__(self, x_dict, edge_index_dict):
        out = self.conv(x_dict, edge_index_dict)[AUTHOR]
        return self.lin(out)

    def train(self, mode: bool = True) -> None:
        self.conv.train(mode)
        self.lin.train(mode)


def train_han(
    data,
    method: str = "trie",
    metapaths=None,
    fanout: int = 10,
    batch: int = 128,
    epochs: int = 10,
    lr: float = 0.005,
    seed: int = 0,
) -> dict:
    """Train on ``train_mask`` authors, return test accuracy (``test_mask``) and sampling time.

    ``trie``/``naive``/``pyg-walk`` train and test on mini-batches whose metapath neighbours come
    from that sampler (``fanout`` walks per seed and metapath); ``pyg-full`` uses PyG's
    ``AddMetaPaths`` full metapath adjacency, full batch (PyG's HAN example). Torch runs on one
    thread here (restored afterwards): the tiny scatters of mini-batch HAN are 40x slower with
    intra-op threads on a loaded 2-core machine.
    """
    require_pyg()
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_han(data, method, metapaths, fanout, batch, epochs, lr, seed)
    finally:
        torch.set_num_threads(threads)


def _train_han(data, method, metapaths, fanout, batch, epochs, lr, seed) -> dict:
    import torch
    import torch.nn.functional as F

    if method not in METHODS:
        raise BadInputError(
            f"unknown method {method!r}; valid: {', '.join(METHODS)}", field="method"
        )
    metapaths = metapaths or DBLP_METAPATHS
    store = data[AUTHOR]
    y = store.y
    classes = int(y.max()) + 1
    sampler_seconds = 0.0
    if method == "features":
        torch.manual_seed(seed)
        lin = torch.nn.Linear(store.x.size(1), classes)
        opt = torch.optim.Adam(lin.parameters(), lr=lr * 4, weight_decay=1e-3)
        for _ in range(epochs * 20):
            opt.zero_grad()
            F.cross_entropy(lin(store.x[store.train_mask]), y[store.train_mask]).backward()
            opt.step()
        with torch.no_grad():
            pred = lin(store.x).argmax(-1)
        acc = float((pred[store.test_mask] == y[store.test_mask]).float().mean())
        return dict(method=method, test_accuracy=acc, sampling_cpu_s=0.0, edges=0)
    if method == "pyg-full":
        import torch_geometric.transforms as T

        t0 = time.process_time()
        full = T.AddMetaPaths(
            metapaths, drop_orig_edge_types=True, drop_unconnected_node_types=True
        )(data.clone())
        sampler_seconds = time.process_time() - t0
        edge_types = [et for et in full.edge_types if et[1].startswith("metapath_")]
        model = HAN(store.x.size(1), ([AUTHOR], edge_types), classes, seed=seed)
        opt = torch.optim.Adam(model.params, lr=lr, weight_decay=1e-3)
        for _ in range(epochs * 4):
            model.train()
            opt.zero_grad()
            out = model(full.x_dict, full.edge_index_dict)
            F.cross_entropy(out[store.train_mask], y[store.train_mask]).backward()
            opt.step()
        model.train(False)
        with torch.no_grad():
            pred = model(full.x_dict, full.edge_index_dict).argmax(-1)
        mask = store.test_mask
        acc = float((pred[mask] == y[mask]).float().mean())
        return dict(
            method=method,
            test_accuracy=acc,
            sampling_cpu_s=sampler_seconds,
            edges=int(sum(full[et].edge_index.size(1) for et in edge_types)),
        )
    train_ids = store.train_mask.nonzero().view(-1)
    test_ids = store.test_mask.nonzero().view(-1)
    loader = MetapathLoader(
        data,
        metapaths,
        fanout,
        batch_size=min(batch, train_ids.numel()),
        input_nodes=(AUTHOR, train_ids),
        shuffle=True,
        method=method,
        seed=seed,
    )
    edge_types = loader.metapath_sampler.metapath_edge_types
    model = HAN(store.x.size(1), ([AUTHOR], edge_types), classes, seed=seed)
    opt = torch.optim.Adam(model.params, lr=lr, weight_decay=1e-3)
    for _ in range(epochs):
        it = iter(loader)
        while True:
            t0 = time.process_time()
            sub = next(it, None)
            sampler_seconds += time.process_time() - t0
            if sub is None:
                break
            model.train()
            opt.zero_grad()
            n = sub[AUTHOR].batch_size
            out = model(sub.x_dict, sub.edge_index_dict)[:n]
            F.cross_entropy(out, sub[AUTHOR].y[:n]).backward()
            opt.step()
    model.train(False)
    test = MetapathSampler(data, metapaths, fanout, method=method, seed=seed + 1)
    correct = 0
    with torch.no_grad():
        for start in range(0, test_ids.numel(), 512):
            ids = test_ids[start : start + 512]
            t0 = time.process_time()
            sub = test.subgraph(ids)
            sampler_seconds += time.process_time() - t0
            pred = model(sub.x_dict, sub.edge_index_dict)[: ids.numel()].argmax(-1)
            correct += int((pred == y[ids]).sum())
    return dict(
        method=method,
        test_accuracy=correct / test_ids.numel(),
        sampling_cpu_s=sampler_seconds,
        edges=None,
    )


def compare_training(
    scale: float = 0.25,
    epochs: int = 10,
    fanout: int = 10,
    batch: int = 128,
    seed: int = 0,
    methods=METHODS,
) -> list[dict]:
    """Test accuracy of HANConv per sampler on one seeded graph; also the features-only floor."""
    data = synthetic_dblp(scale, seed)
    rows = []
    for m in methods:
        t0 = time.perf_counter()
        row = train_han(data, m, fanout=fanout, batch=batch, epochs=epochs, seed=seed)
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
    return rows
