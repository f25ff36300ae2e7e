"""The bucketing kernels: split sorted (value, significance) records into buckets.

X-Bucket (../shared/papers/15-xbucket.md) keeps, per resource type, the peaks of completed
tasks as points (v_i, s_i) sorted by value, where the significance s_i is the task's arrival
rank (1, 2, 3, ...) so recent tasks weigh more. A bucket is a top value b_k (the largest point
in it) and a probability p_k = (sum of s_i in it) / (sum of all s_i); E_k is the
significance-weighted mean of the points in it. Allocating b_k to a task whose peak is v
wastes b_k - v when v <= b_k, and b_k plus whatever the retry costs when v > b_k.

Expected waste of splitting one range at break point b (greedy, one level of recursion), with
p1/p2 the probabilities of the lower/upper part, E1/E2 their means, m the range's top value:

* probabilistic (PG): p1*p1*(b - E1) + p1*p2*(m - E1) + p2*p1*(b + m - E2) + p2*p2*(m - E2)
* deterministic (DG): p1*(b - E1) + p2*(b + m - E2)

Expected waste of a whole bucket list (exhaustive, N buckets):

* probabilistic (PE): sum_i sum_j p_i p_j C[i][j], with C[i][j] = b_j - E_i for j >= i and, for
  j < i (the allocation failed), C[i][j] = b_j + sum_{k>j} (p_k / P_{>j}) C[i][k]: the wasted
  allocation plus the expected cost of the re-sampled retry among the buckets above b_j.
* deterministic (DE): sum_i p_i (b_0 + ... + b_i - E_i): try every bucket upwards in turn.

Greedy recursively splits each range at its cheapest break point until the cheapest choice is
not to split. Exhaustive tries 1..max_buckets candidate bucket lists (powers of two below
max/n, then n equal steps up to the max, each snapped down to the largest point it holds) and
keeps the cheapest. Quantized (Phung et al., 2021) cuts at count quantiles. These are the
formulas of the paper and of the reference implementation (cctools dttools/src/bucketing_*.c),
re-derived here with prefix sums so one split costs O(range) instead of O(range^2).

All kernels return (values, probabilities) of the non-empty buckets in increasing value order.
They are Numba-compiled (cache=True) because re-bucketing runs after every completed task.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _prefix(vals: np.ndarray, sigs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = vals.shape[0]
    csig = np.zeros(n + 1)
    cvs = np.zeros(n + 1)
    for i in range(n):
        csig[i + 1] = csig[i] + sigs[i]
        cvs[i + 1] = cvs[i] + vals[i] * sigs[i]
    return csig, cvs


@njit(cache=True)
def split_cost(csig, cvs, vals, lo, hi, b, deterministic):  # noqa: ANN001, ANN201
    """Expected waste of splitting the sorted range [lo, hi] after index b (formulas above)."""
    total = csig[hi + 1] - csig[lo]
    s1 = csig[b + 1] - csig[lo]
    s2 = total - s1
    p1 = s1 / total
    p2 = s2 / total
    e1 = (cvs[b + 1] - cvs[lo]) / s1
    e2 = (cvs[hi + 1] - cvs[b + 1]) / s2 if s2 > 0 else 0.0
    brk = vals[b]
    top = vals[hi]
    if deterministic:
        return p1 * (brk - e1) + p2 * (brk + top - e2)
    return (p1 * p1 * (brk - e1) + p1 * p2 * (top - e1)
            + p2 * p1 * (brk + top - e2) + p2 * p2 * (top - e2))


@njit(cache=True)
def _best_break(csig, cvs, vals, lo, hi, deterministic):  # noqa: ANN001, ANN201
    best = lo
    best_cost = np.inf
    for b in range(lo, hi + 1):
        cost = split_cost(csig, cvs, vals, lo, hi, b, deterministic)
        if cost <= best_cost:  # ties go to the higher break, as in the reference
            best_cost = cost
            best = b
    return best


@njit(cache=True)
def _group(vals, csig, tops):  # noqa: ANN001, ANN201
    """Buckets from sorted top values: each holds the points above the previous top."""
    total = csig[-1]
    out_v = np.empty(tops.shape[0])
    out_p = np.empty(tops.shape[0])
    count = 0
    prev_end = 0
    for k in range(tops.shape[0]):
        end = np.searchsorted(vals, tops[k], side="right")
        if end > prev_end:
            out_v[count] = vals[end - 1]
            out_p[count] = (csig[end] - csig[prev_end]) / total
            count += 1
            prev_end = end
    return out_v[:count], out_p[:count]


@njit(cache=True)
def greedy_buckets(vals, sigs, deterministic):  # noqa: ANN001, ANN201
    """Greedy bucketing (PG / DG): split every range at its cheapest break point, recursively."""
    n = vals.shape[0]
    csig, cvs = _prefix(vals, sigs)
    los = np.empty(2 * n + 1, np.int64)
    his = np.empty(2 * n + 1, np.int64)
    breaks = np.empty(n + 1, np.int64)
    los[0], his[0] = 0, n - 1
    head, tail, nb = 0, 1, 0
    while head < tail:
        lo, hi = los[head], his[head]
        head += 1
        b = _best_break(csig, cvs, vals, lo, hi, deterministic)
        if b == hi:  # cheapest is not to split
            continue
        breaks[nb] = b
        nb += 1
        if b + 1 != hi:  # the upper part has at least two points
            los[tail], his[tail] = b + 1, hi
            tail += 1
        if b != lo:
            los[tail], his[tail] = lo, b
            tail += 1
    breaks[nb] = n - 1
    nb += 1
    tops = np.sort(vals[np.sort(breaks[:nb])])
    return _group(vals, csig, tops)


@njit(cache=True)
def candidate_tops(top, n):  # noqa: ANN001, ANN201
    """Exhaustive bucketing's n-bucket candidate: 1, 2, 4, ... below top/n, then n equal steps."""
    steps = 0
    if top > 0:
        steps = int(np.floor(np.log(top / n) / np.log(2.0)))
        steps = max(steps, 0)
    out = np.empty(steps + n)
    for i in range(steps):
        out[i] = 2.0 ** i
    for i in range(n):
        out[steps + i] = top if i == n - 1 else top * (i + 1) / n
    return out


@njit(cache=True)
def bucket_means(vals, csig, cvs, bucket_vals):  # noqa: ANN001, ANN201
    means = np.empty(bucket_vals.shape[0])
    prev_end = 0
    for k in range(bucket_vals.shape[0]):
        end = np.searchsorted(vals, bucket_vals[k], side="right")
        means[k] = (cvs[end] - cvs[prev_end]) / (csig[end] - csig[prev_end])
        prev_end = end
    return means


@njit(cache=True)
def list_cost(bvals, probs, means, deterministic):  # noqa: ANN001, ANN201
    """Expected waste of a bucket list (PE / DE formulas in the module docstring), O(N^2)."""
    n = bvals.shape[0]
    total = 0.0
    if deterministic:
        running = 0.0
        for i in range(n):
            running += bvals[i]
            total += probs[i] * (running - means[i])
        return total
    for i in range(n):
        above_cost = 0.0  # sum_{k>j} p_k C[i][k]
        above_prob = 0.0
        for j in range(n - 1, -1, -1):
            if j >= i:
                c = bvals[j] - means[i]
            else:
                c = bvals[j] + above_cost / above_prob
            above_cost += probs[j] * c
            above_prob += probs[j]
        total += probs[i] * above_cost
    return total


@njit(cache=True)
def exhaustive_buckets(vals, sigs, max_buckets, deterministic):  # noqa: ANN001, ANN201
    """Exhaustive bucketing (PE / DE): the cheapest of the 1..max_buckets candidate lists."""
    csig, cvs = _prefix(vals, sigs)
    best_cost = np.inf
    best_v = vals[-1:]
    best_p = np.ones(1)
    for n in range(1, max_buckets + 1):
        bvals, probs = _group(vals, csig, candidate_tops(vals[-1], n))
        means = bucket_means(vals, csig, cvs, bvals)
        cost = list_cost(bvals, probs, means, deterministic)
        if cost < best_cost:
            best_cost = cost
            best_v, best_p = bvals, probs
    return best_v, best_p


@njit(cache=True)
def quantized_buckets(vals, max_buckets):  # noqa: ANN001, ANN201
    """Quantized bucketing (Phung et al., 2021): cut at count quantiles, probability by count."""
    n = vals.shape[0]
    out_v = np.empty(n)
    out_p = np.empty(n)
    count = 0
    members = 0
    made = 0
    cut = int(np.floor(n / max_buckets))
    for i in range(1, n + 1):
        members += 1
        if i >= cut:
            out_v[count] = vals[i - 1]
            out_p[count] = members / n
            count += 1
            members = 0
            made += 1
            cut = int(np.floor((1.0 + made) / max_buckets * n))
    return out_v[:count], out_p[:count]
