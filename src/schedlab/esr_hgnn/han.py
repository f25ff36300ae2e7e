"""A HAN-style metapath GNN (Wang et al., WWW'19) that consumes sampled metapath neighbours.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) accelerates the sampling stage of end-to-end
mini-batch HGNN inference; to report the end-to-end effect we need the model stage too. HAN is the
reference metapath HGNN: per metapath, node-level attention (GAT) over the sampled metapath-based
neighbours; then semantic-level attention weighs the metapaths. torch_geometric is not needed:
the scatter-softmax is one ``scatter_reduce`` and two ``index_add`` calls.

Torch is imported lazily by callers (cli/experiment) through this module only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from schedlab.esr_hgnn.policies import SampleBatch


class MetapathGAT(nn.Module):
    """Node-level attention of one metapath: seeds attend over their sampled neighbours."""

    def __init__(self, in_dim: int, out_dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.proj = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, out_dim) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, out_dim) * 0.1)

    def forward(self, x_seed: torch.Tensor, x_nbr: torch.Tensor, seed_of: torch.Tensor,
                n_seeds: int) -> torch.Tensor:
        """``x_nbr[i]`` is a neighbour of seed ``seed_of[i]``; a seed always attends to itself."""
        hs = self.proj(x_seed).view(-1, self.heads, self.out_dim)
        hn = self.proj(x_nbr).view(-1, self.heads, self.out_dim)
        self_index = torch.arange(n_seeds)
        index = torch.cat([self_index, seed_of])
        h_src = torch.cat([hs, hn])  # self-loop first, as GAT/HAN add one
        logits = nn.functional.leaky_relu(
            (h_src * self.att_src).sum(-1) + (hs[index] * self.att_dst).sum(-1), 0.2)
        peak = torch.full((n_seeds, self.heads), -torch.inf).scatter_reduce(
            0, index.unsqueeze(-1).expand_as(logits), logits, reduce="amax")
        weights = torch.exp(logits - peak[index])
        norm = torch.zeros(n_seeds, self.heads).index_add(0, index, weights)
        alpha = weights / norm[index]
        out = torch.zeros(n_seeds, self.heads, self.out_dim).index_add(
            0, index, alpha.unsqueeze(-1) * h_src)
        return nn.functional.elu(out).reshape(n_seeds, -1)


class HAN(nn.Module):
    """HAN: one MetapathGAT per metapath, semantic attention, then a linear classifier."""

    def __init__(self, metapaths: Sequence[str], in_dim: int, hidden: int = 8, heads: int = 8,
                 semantic_dim: int = 128, classes: int = 4) -> None:
        super().__init__()
        self.metapaths = list(metapaths)
        self.gats = nn.ModuleList([MetapathGAT(in_dim, hidden, heads) for _ in self.metapaths])
        self.semantic = nn.Sequential(nn.Linear(hidden * heads, semantic_dim), nn.Tanh(),
                                      nn.Linear(semantic_dim, 1, bias=False))
        self.classify = nn.Linear(hidden * heads, classes)

    def forward(self, features: torch.Tensor, batch: SampleBatch) -> torch.Tensor:
        seeds = torch.from_numpy(batch.seeds)
        x_seed = features[seeds]
        per_metapath = []
        for mp, gat in zip(self.metapaths, self.gats, strict=True):
            ends = batch.endpoints[mp]
            seed_of, column = np.nonzero(ends >= 0)
            nbrs = torch.from_numpy(ends[seed_of, column])
            per_metapath.append(gat(x_seed, features[nbrs], torch.from_numpy(seed_of),
                                    seeds.numel()))
        z = torch.stack(per_metapath, dim=1)  # seeds x metapaths x dim
        beta = torch.softmax(self.semantic(z).mean(0), dim=0)  # one weight per metapath
        return self.classify((beta.unsqueeze(0) * z).sum(1))


@dataclass(frozen=True)
class InferenceTiming:
    seconds: float
    logits_checksum: float


def make_model(metapaths: Sequence[str], n_nodes: int, in_dim: int = 64,
               seed: int = 0) -> tuple[HAN, torch.Tensor]:
    """A seeded HAN and random input features of the target type (inference cost, not accuracy)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = HAN(metapaths, in_dim).eval()
    features = torch.randn(n_nodes, in_dim, generator=gen)
    return model, features


def time_inference(model: HAN, features: torch.Tensor, batch: SampleBatch,
                   repeats: int = 3) -> InferenceTiming:
    """Best-of-``repeats`` forward CPU time of one mini-batch under ``torch.inference_mode``.

    Thread CPU time, like the samplers' (see :func:`engine.measure_sampler`); callers pin torch
    to one intra-op thread so the whole forward pass runs on this thread.
    """
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.thread_time()
            logits = model(features, batch)
            best = min(best, time.thread_time() - start)
    return InferenceTiming(best, float(logits.sum()))
