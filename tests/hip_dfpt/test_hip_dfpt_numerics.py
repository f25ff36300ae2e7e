"""The runtime reproduces PySCF: ground-state XC potential, response potential, polarisability.

Water in STO-3G keeps each SCF under a second; every balancer, the pooled and unpooled
allocators, both kernel branches and the composed/raw task sets must give PySCF's numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.dft import ground_state, pyscf_response
from schedlab.hip_dfpt.kernels import StoredTask, response_task
from schedlab.hip_dfpt.memory import BufferPool, NoPool
from schedlab.hip_dfpt.pipeline import (
    prepare,
    reference_polarizability,
    replay_balance,
    run_polarizability,
)
from schedlab.hip_dfpt.policies import BALANCERS, make_balancer
from schedlab.hip_dfpt.runtime import Runtime
from schedlab.hip_dfpt.tasks import DENSE, SPARSE
from schedlab.hip_dfpt.workloads import builtin_molecule

pytest.importorskip("pyscf")


@pytest.fixture(scope="module")
def work():
    return prepare(builtin_molecule("water"), "sto-3g")


@pytest.fixture(scope="module")
def reference(work):
    return reference_polarizability(work.system)


def _random_dms(nao: int, seed: int = 0) -> np.ndarray:
    dms = np.random.default_rng(seed).standard_normal((3, nao, nao))
    return dms + dms.transpose(0, 2, 1)


def test_task_data_reproduce_the_ground_state(work) -> None:
    assert work.vxc_error < 1e-10
    assert abs(work.composed.electrons - work.system.mol.nelectron) < 1e-3
    assert abs(work.raw.electrons - work.composed.electrons) < 1e-10


def test_response_potential_matches_pyscf(work) -> None:
    dms = _random_dms(work.system.nao)
    runtime = Runtime(work.composed, make_balancer("hip-dfpt"), devices=2, streams=2)
    ours = runtime.apply(dms) + work.system.mf.get_j(work.system.mol, dms, hermi=1)
    theirs = pyscf_response(work.system)(dms)
    assert np.allclose(ours, theirs, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("balancer", list(BALANCERS))
def test_every_balancer_gives_pyscf_polarisability(work, reference, balancer: str) -> None:
    run = run_polarizability(work, balancer, reference, devices=3, streams=2)
    assert run.relative_error < 1e-8
    assert np.allclose(run.alpha, run.alpha.T, atol=1e-8)
    assert all(np.isfinite(h.task_seconds).all() for h in run.runtime.history)


def test_unpooled_and_raw_tasks_agree(work) -> None:
    dms = _random_dms(work.system.nao, 1)
    pooled = Runtime(work.composed, make_balancer("count-balanced"), 2, 2).apply(dms)
    unpooled = Runtime(work.composed, make_balancer("count-balanced"), 2, 2, pooled=False).apply(
        dms
    )
    raw = Runtime(work.raw, make_balancer("round-robin"), 1, 1).apply(dms)
    assert np.allclose(pooled, unpooled, atol=1e-12)
    assert np.allclose(pooled, raw, atol=1e-11)


def test_dense_and_sparse_branches_compute_the_same(work) -> None:
    nao = work.system.nao
    task = next(t for t in work.composed.tasks if t.branch == SPARSE and len(t.idx) < nao)
    full = np.zeros((len(task.fxc_w), nao))
    full[:, task.idx] = task.ao
    dense = StoredTask(full, np.arange(nao), task.fxc_w, DENSE)
    dms = _random_dms(nao, 2)
    outs = []
    for stored in (task, dense):
        out = np.zeros_like(dms)
        response_task(stored, dms, out, NoPool())
        outs.append(out)
    assert np.allclose(outs[0], outs[1], atol=1e-13)


def test_pool_reuses_buffers_across_iterations(work) -> None:
    runtime = Runtime(work.composed, make_balancer("round-robin"), 1, 1)
    dms = _random_dms(work.system.nao, 3)
    runtime.apply(dms)
    first = runtime.pool_stats.allocations
    runtime.apply(dms)
    assert runtime.pool_stats.allocations == first  # one stream, same order: all hits
    assert runtime.pool_stats.hit_rate > 0.5


def test_calibration_uses_a_small_sample_and_predicts_all(work) -> None:
    runtime = Runtime(work.composed, make_balancer("hip-dfpt"), 2, 1, sample_fraction=0.05)
    cal = runtime.calibration
    assert len(cal.predicted) == len(work.composed.tasks) and (cal.predicted > 0).all()
    assert len(cal.sample) <= max(0.05 * len(work.composed.tasks) + 16, 16)


def test_replay_balance_of_a_single_device_is_one(work) -> None:
    plan = make_balancer("hip-dfpt").plan(
        work.composed.features, np.ones(len(work.composed.tasks)), 1, 2
    )
    assert replay_balance(plan, np.ones(len(work.composed.tasks)), 2) == pytest.approx(1.0)


def test_bad_runtime_input(work) -> None:
    runtime = Runtime(work.composed, make_balancer("hip-dfpt"), 1, 1)
    with pytest.raises(ConfigError):
        runtime.apply(np.zeros((3, 2, 2)))
    with pytest.raises(ConfigError):
        Runtime(work.composed, make_balancer("hip-dfpt"), 0, 1)


def test_meta_gga_functionals_and_bad_bases_are_rejected() -> None:
    with pytest.raises(ConfigError, match="LDA and GGA"):
        ground_state(builtin_molecule("h2"), "sto-3g", xc="tpss")
    with pytest.raises(ConfigError):
        ground_state(builtin_molecule("h2"), "no-such-basis")


def test_pool_view_shapes_and_accounting() -> None:
    pool = BufferPool()
    a = pool.acquire((3, 5))
    assert a.shape == (3, 5)
    pool.release(a)
    b = pool.acquire((15,))
    assert pool.stats.hits == 1 and pool.stats.allocations == 1 and b.shape == (15,)


@pytest.mark.gpu
def test_gpu_path_matches_cpu(work) -> None:
    pytest.importorskip("cupy")
    dms = _random_dms(work.system.nao, 4)
    cpu = Runtime(work.composed, make_balancer("hip-dfpt"), 1, 2).apply(dms)
    gpu = Runtime(work.composed, make_balancer("hip-dfpt"), 1, 2, gpu=True).apply(dms)
    assert np.allclose(cpu, gpu, atol=1e-11)


@pytest.mark.slow
def test_ray_actors_give_the_same_polarisability(work, reference) -> None:
    pytest.importorskip("ray")
    run = run_polarizability(work, "hip-dfpt", reference, devices=2, streams=1, backend="ray")
    assert run.relative_error < 1e-8


def test_guess_ground_state_keeps_the_grid_and_tasks_of_the_scf() -> None:
    """The memory study's cheap route (core-Hamiltonian ground state, no SCF) builds the same
    grid, batches, screening and micro-tasks as the converged SCF: only the density differs;
    building only the raw batches' features gives the same features as the full build."""
    work = prepare(builtin_molecule("water"), "sto-3g", grid_level=0)
    guess = prepare(builtin_molecule("water"), "sto-3g", 0, raw_store=False, scf="guess")
    assert np.array_equal(guess.system.weights, work.system.weights)
    assert len(guess.composed.tasks) == len(work.composed.tasks)
    for a, b in zip(guess.composed.tasks, work.composed.tasks, strict=True):
        assert np.array_equal(a.idx, b.idx) and a.branch == b.branch
    assert guess.composed.nbytes == work.composed.nbytes
    for name in ("n_points", "n_basis", "n_atoms", "branch", "key"):
        assert np.array_equal(getattr(guess.raw.features, name), getattr(work.raw.features, name))
    assert not guess.raw.tasks and guess.vxc_error < 1e-10  # V_xc of the guess density
    assert not np.allclose(guess.system.dm0, work.system.dm0)  # not the SCF's density
    with pytest.raises(ConfigError, match="scf"):
        ground_state(builtin_molecule("h2"), "sto-3g", scf="fast")
