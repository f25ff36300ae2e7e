"""Synthetic all-electron systems at the paper's scale (up to 200,006 atoms), as task features.

PySCF cannot integrate 200,000 atoms on this machine, so the scale study draws batch features
from a documented generative model of an all-electron grid (FHI-aims style: atom-centred radial
shells cut into batches of at most ``max_points`` points). Parameters and their meaning:

* atoms fill a sphere at ``density`` atoms/A^3 (0.1: liquid water, proteins); 40% are heavy
  (C/N/O, 14 basis functions, a tier-1-like basis), 60% hydrogen (5);
* an atom's *neighbourhood basis* is the number of basis functions of atoms within ``cutoff``
  (4 A), so surface atoms see fewer than buried ones (a real source of imbalance);
* each atom has 1 + Poisson(``batches_per_atom`` - 1) batches at radial depth u ~ U(0, 1):
  inner batches are dense (up to ``max_points`` points), outer ones sparse (few points) but
  reach more neighbours' functions (n_basis grows with u), with lognormal scatter.

Tasks are ordered along a Morton curve of the atoms, so contiguous chunks are spatially compact,
as a real code's batch list is.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.tasks import TaskFeatures


def _morton_order(xyz: np.ndarray, bits: int = 10) -> np.ndarray:
    cells = ((xyz - xyz.min(0)) / (np.ptp(xyz, 0).max() + 1e-9) * (2**bits - 1)).astype(np.int64)
    code = np.zeros(len(xyz), dtype=np.int64)
    for bit in range(bits):
        for axis in range(3):
            code |= ((cells[:, axis] >> bit) & 1) << (3 * bit + axis)
    return np.argsort(code, kind="stable")


def synthetic_system(n_atoms: int, seed: int, batches_per_atom: float = 8.0,
                     max_points: int = 128, density: float = 0.1, cutoff: float = 4.0,
                     ) -> TaskFeatures:
    """Batch features of a globular all-electron system of ``n_atoms`` atoms."""
    if n_atoms < 1 or batches_per_atom < 1 or max_points < 1:
        raise ConfigError("need n_atoms >= 1, batches_per_atom >= 1, max_points >= 1",
                          field="synthetic")
    rng = np.random.default_rng(seed)
    radius = (3 * n_atoms / (4 * np.pi * density)) ** (1 / 3)
    direction = rng.standard_normal((n_atoms, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    xyz = direction * radius * rng.random(n_atoms)[:, None] ** (1 / 3)
    xyz = xyz[_morton_order(xyz)]
    heavy = rng.random(n_atoms) < 0.4
    counts = {}
    for name, mask in (("heavy", heavy), ("light", ~heavy)):
        if mask.any():
            tree = cKDTree(xyz[mask])
            counts[name] = tree.query_ball_point(xyz, cutoff, return_length=True)
        else:
            counts[name] = np.zeros(n_atoms, dtype=np.int64)
    neighbourhood = 14 * counts["heavy"] + 5 * counts["light"]
    per_atom = 1 + rng.poisson(batches_per_atom - 1, n_atoms)
    atom = np.repeat(np.arange(n_atoms), per_atom)
    depth = rng.random(len(atom))
    points = max_points * np.exp(-3.0 * depth) * rng.lognormal(0.0, 0.3, len(atom))
    n_points = np.clip(np.round(points), 1, max_points).astype(np.int64)
    own = np.where(heavy, 14, 5)[atom]
    basis = neighbourhood[atom] * (0.35 + 0.9 * depth) * rng.lognormal(0.0, 0.15, len(atom))
    n_basis = np.clip(np.round(basis), own, None).astype(np.int64)
    n_atoms_seen = np.maximum(1, np.round(n_basis / 8.6)).astype(np.int64)  # 8.6 = mean basis
    return TaskFeatures(n_points, n_basis, n_atoms_seen, np.zeros(len(atom), dtype=np.int64),
                        atom)
