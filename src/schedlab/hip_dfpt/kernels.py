"""The DFPT response integration of one micro-task, with its screening branch.

For a batch of grid points g with weights w_g, kernel values f_g = f_xc(rho0(r_g)) and the
batch's basis-function values phi_mu(r_g), a response density matrix D1 gives

    rho1(r_g) = sum_{mu,nu} phi_mu(r_g) D1_{mu nu} phi_nu(r_g)
    V1_{mu nu} += sum_g phi_mu(r_g) w_g f_g rho1(r_g) phi_nu(r_g)

(the LDA response potential, PySCF's ``nr_rks_fxc``). For a GGA the task also needs the basis
gradients: rho1 and its gradient (4 components) contract with the 4x4 kernel f_xy, and
V1 = phi^T (sum_x phi_x w_x) + transpose, as PySCF's GGA branch of ``nr_rks_fxc``.

A task takes one of two branches, the branch the performance model is built around: *dense*
(most basis functions significant: use all of them, no gather/scatter) or *sparse* (gather the
significant rows/columns of D1, work on the compact block, scatter-add the result). All scratch
comes from the stream's allocator and the batch data is staged into it first, the
host-to-device copy of a GPU run.

Basis values are either cached per task (``StoredTask.ao``, fast, memory grid x basis) or
computed on the fly per task from the task's grid points (:class:`AoSource`, memory per batch).
The block is added to ``out``: a float array (plain summation, order-dependent in the last bits)
or a :class:`~schedlab.hip_dfpt.reduction.FixedPoint` accumulator (exact, order-independent:
results are bit-identical whatever the devices, streams or task order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from schedlab.hip_dfpt.memory import Allocator
from schedlab.hip_dfpt.tasks import DENSE


@dataclass(frozen=True)
class StoredTask:
    """A micro-task's host data: compact basis values, their AO indices, weighted kernel.

    LDA: ``ao`` (n_points, n_columns), ``fxc_w`` (n_points,). GGA: ``ao`` (4, n_points,
    n_columns) (values, x/y/z gradients), ``fxc_w`` (4, 4, n_points). ``ao`` is ``None`` when
    basis values are computed on the fly from ``points`` (indices into the grid).
    """

    ao: np.ndarray | None  # all AOs on the dense branch, significant ones otherwise
    idx: np.ndarray  # (n_columns,) AO indices of the columns
    fxc_w: np.ndarray  # weight x f_xc at each point
    branch: int
    points: np.ndarray | None = None

    @property
    def gga(self) -> bool:
        return self.fxc_w.ndim == 3

    @property
    def n_points(self) -> int:
        return int(self.fxc_w.shape[-1])


class AoSource:
    """Basis-function values of a task computed on the fly (PySCF ``eval_ao``, per batch)."""

    def __init__(self, mol: Any, coords: np.ndarray, gga: bool) -> None:
        self.mol, self.coords, self.deriv = mol, coords, 1 if gga else 0

    def __call__(self, task: StoredTask) -> np.ndarray:
        from pyscf.dft import numint

        ao = numint.eval_ao(self.mol, self.coords[task.points], deriv=self.deriv)
        return np.ascontiguousarray(ao[..., task.idx])


def stage(dst: Any, src: np.ndarray, xp: Any) -> None:
    """Copy host data into a device buffer (a real copy on CPU too, so the pipeline has one)."""
    if xp is np:
        np.copyto(dst, src)
    else:  # CuPy: asynchronous host-to-device copy on the current stream
        dst.set(src)


def accumulate(out: Any, block: Any, idx: Any, dense: bool) -> None:
    """out[:, idx, idx] += block (fixed-point accumulators know how to add themselves)."""
    if hasattr(out, "add_block"):
        out.add_block(block, None if dense else idx)
    elif dense:
        out += block
    else:
        out[:, idx[:, None], idx] += block


def response_task(
    task: StoredTask,
    dms: Any,
    out: Any,
    alloc: Allocator,
    xp: Any = np,
    ao_source: AoSource | None = None,
) -> None:
    """Add this task's contribution to ``out`` (n_dm, nao, nao) for response matrices ``dms``."""
    host_ao = task.ao if task.ao is not None else ao_source(task)  # type: ignore[misc]
    ndm = dms.shape[0]
    ao = alloc.acquire(host_ao.shape)
    stage(ao, host_ao, xp)
    fw = alloc.acquire(task.fxc_w.shape)
    stage(fw, task.fxc_w, xp)
    n_c = host_ao.shape[-1]
    dense = task.branch == DENSE
    idx = None
    if dense:
        dsub = dms
    else:
        idx = xp.asarray(task.idx)
        dsub = alloc.acquire((ndm, n_c, n_c))
        dsub[...] = dms[:, idx[:, None], idx]
    if task.gga:
        block, scratch = _gga_block(ao, fw, dsub, alloc, xp)
    else:
        block, scratch = _lda_block(ao, fw, dsub, alloc, xp)
    accumulate(out, block, idx, dense)
    if not dense:
        alloc.release(dsub)
    for array in (ao, fw, block, *scratch):
        alloc.release(array)


def _lda_block(ao: Any, fw: Any, dsub: Any, alloc: Allocator, xp: Any) -> tuple[Any, list]:
    ndm, (n_g, n_c) = dsub.shape[0], ao.shape
    work = alloc.acquire((ndm, n_g, n_c))
    xp.matmul(ao, dsub, out=work)
    work *= ao
    rho1 = alloc.acquire((ndm, n_g))
    xp.sum(work, axis=2, out=rho1)
    rho1 *= fw
    xp.multiply(ao[None, :, :], rho1[:, :, None], out=work)
    block = alloc.acquire((ndm, n_c, n_c))
    xp.matmul(ao.T, work, out=block)
    return block, [work, rho1]


def _gga_block(ao: Any, fw: Any, dsub: Any, alloc: Allocator, xp: Any) -> tuple[Any, list]:
    """GGA: rho1 = (rho, grad rho) of D1; wv_x = sum_y f_xy rho1_y; V = phi^T sum_x phi_x wv_x
    (wv_0 halved) plus its transpose, exactly PySCF's ``nr_rks_fxc`` contraction."""
    ndm, (_, n_g, n_c) = dsub.shape[0], ao.shape
    c = alloc.acquire((ndm, n_g, n_c))
    xp.matmul(ao[0], dsub, out=c)
    prod = alloc.acquire((ndm, n_g, n_c))
    rho1 = alloc.acquire((ndm, 4, n_g))
    for x in range(4):
        xp.multiply(c, ao[x], out=prod)
        xp.sum(prod, axis=2, out=rho1[:, x])
    rho1[:, 1:] *= 2.0
    wv = alloc.acquire((ndm, 4, n_g))
    xp.einsum("xyg,dyg->dxg", fw, rho1, out=wv)
    wv[:, 0] *= 0.5
    xp.multiply(ao[0][None], wv[:, 0, :, None], out=c)  # c is free again: the weighted AOs
    for x in range(1, 4):
        xp.multiply(ao[x][None], wv[:, x, :, None], out=prod)
        c += prod
    half = alloc.acquire((ndm, n_c, n_c))
    xp.matmul(ao[0].T, c, out=half)
    block = alloc.acquire((ndm, n_c, n_c))
    xp.add(half, half.transpose(0, 2, 1), out=block)
    return block, [c, prod, rho1, wv, half]


def potential_task(
    task: StoredTask, wv: np.ndarray, out: np.ndarray, ao: np.ndarray | None = None
) -> None:
    """Ground-state XC potential matrix contribution: V_{mu nu} += sum_g phi_mu w_g v_g phi_nu
    (GGA: ``wv`` is (4, n_points) and the gradient terms enter as in PySCF's ``nr_rks``).

    Used once to check the task data against PySCF's ``nr_rks`` before any response runs.
    """
    ao = task.ao if ao is None else ao
    if wv.ndim == 1:
        block = ao.T @ (ao * wv[:, None])
    else:
        wv = wv.copy()
        wv[0] *= 0.5
        half = ao[0].T @ np.einsum("xgi,xg->gi", ao, wv)
        block = half + half.T
    out[task.idx[:, None], task.idx] += block


def density_task(task: StoredTask, dm: np.ndarray, ao: np.ndarray | None = None) -> np.ndarray:
    """rho(r_g) = sum phi_mu D_{mu nu} phi_nu for one task's points (ground-state density);
    GGA: (4, n_points) with the density gradient 2 sum (grad phi_mu) D phi_nu."""
    ao = task.ao if ao is None else ao
    sub = dm[task.idx[:, None], task.idx]
    if ao.ndim == 2:
        return np.einsum("gi,gi->g", ao @ sub, ao)
    c = ao[0] @ sub
    rho = np.einsum("gi,xgi->xg", c, ao)
    rho[1:] *= 2.0
    return rho
