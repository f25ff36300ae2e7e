"""The DFPT response integration of one micro-task, with its screening branch.

For a batch of grid points g with weights w_g, kernel values f_g = f_xc(rho0(r_g)) and the
batch's basis-function values phi_mu(r_g), a response density matrix D1 gives

    rho1(r_g) = sum_{mu,nu} phi_mu(r_g) D1_{mu nu} phi_nu(r_g)
    V1_{mu nu} += sum_g phi_mu(r_g) w_g f_g rho1(r_g) phi_nu(r_g)

(the LDA response potential, PySCF's ``nr_rks_fxc``). A task takes one of two branches, the
branch the performance model is built around: *dense* (most basis functions significant: use
all of them, no gather/scatter) or *sparse* (gather the significant rows/columns of D1, work on
the compact block, scatter-add the result). All scratch comes from the stream's allocator and
the batch data is staged into it first, the host-to-device copy of a GPU run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from schedlab.hip_dfpt.memory import Allocator
from schedlab.hip_dfpt.tasks import DENSE


@dataclass(frozen=True)
class StoredTask:
    """A micro-task's host data: compact basis values, their AO indices, weighted kernel."""

    ao: np.ndarray  # (n_points, n_columns): all AOs on the dense branch, significant otherwise
    idx: np.ndarray  # (n_columns,) AO indices of the columns
    fxc_w: np.ndarray  # (n_points,) weight x f_xc at each point
    branch: int


def stage(dst: Any, src: np.ndarray, xp: Any) -> None:
    """Copy host data into a device buffer (a real copy on CPU too, so the pipeline has one)."""
    if xp is np:
        np.copyto(dst, src)
    else:  # CuPy: asynchronous host-to-device copy on the current stream
        dst.set(src)


def response_task(task: StoredTask, dms: Any, out: Any, alloc: Allocator, xp: Any = np,
                  ) -> None:
    """Add this task's contribution to ``out`` (n_dm, nao, nao) for response matrices ``dms``."""
    n_g, n_c = task.ao.shape
    ndm = dms.shape[0]
    ao = alloc.acquire((n_g, n_c))
    stage(ao, task.ao, xp)
    fw = alloc.acquire((n_g,))
    stage(fw, task.fxc_w, xp)
    dense = task.branch == DENSE
    if dense:
        dsub = dms
    else:
        idx = xp.asarray(task.idx)
        dsub = alloc.acquire((ndm, n_c, n_c))
        dsub[...] = dms[:, idx[:, None], idx]
    work = alloc.acquire((ndm, n_g, n_c))
    xp.matmul(ao, dsub, out=work)
    work *= ao
    rho1 = alloc.acquire((ndm, n_g))
    xp.sum(work, axis=2, out=rho1)
    rho1 *= fw
    xp.multiply(ao[None, :, :], rho1[:, :, None], out=work)
    block = alloc.acquire((ndm, n_c, n_c))
    xp.matmul(ao.T, work, out=block)
    if dense:
        out += block
    else:
        out[:, idx[:, None], idx] += block
        alloc.release(dsub)
    for array in (ao, fw, work, rho1, block):
        alloc.release(array)


def potential_task(task: StoredTask, wv: np.ndarray, out: np.ndarray) -> None:
    """Ground-state XC potential matrix contribution: V_{mu nu} += sum_g phi_mu w_g v_g phi_nu.

    Used once to check the task data against PySCF's ``nr_rks`` before any response runs.
    """
    block = task.ao.T @ (task.ao * wv[:, None])
    out[task.idx[:, None], task.idx] += block


def density_task(task: StoredTask, dm: np.ndarray) -> np.ndarray:
    """rho(r_g) = sum phi_mu D_{mu nu} phi_nu for one task's points (ground-state density)."""
    sub = dm[task.idx[:, None], task.idx]
    return np.einsum("gi,gi->g", task.ao @ sub, task.ao)
