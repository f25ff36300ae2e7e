"""The real DFT/DFPT workload: PySCF ground state, grid batches, task data and the CPHF cycle.

PySCF supplies the molecule, basis set, integration grid, exchange-correlation kernels (libxc)
and the Coulomb response; our runtime supplies every real-space response integration of the
DFPT (CPHF) cycle for the static polarisability. PySCF's own response function
(``mf.gen_response``, i.e. ``NumInt.nr_rks_fxc`` + ``get_j``) driven by the same Krylov solver
is the reference the runtime must match (the issue asks for 1e-8 relative).

LDA and GGA functionals run their whole XC response on the runtime (GGA needs basis gradients
and the 4x4 kernel); hybrids add PySCF's exact-exchange response (``get_k``, with the
functional's range-separation coefficients) to the Coulomb part, as PySCF's ``gen_response``
does. Meta-GGAs and non-local (NLC) functionals are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError, MissingDependencyError
from schedlab.hip_dfpt.kernels import AoSource, StoredTask, density_task, potential_task
from schedlab.hip_dfpt.tasks import DENSE, SPARSE, TaskFeatures
from schedlab.hip_dfpt.workloads import Molecule

#: basis-function values below this (absolute, on every point of a batch) are screened out
SCREEN_CUTOFF = 1e-12
#: above this fraction of significant basis functions the kernel takes the dense branch
DENSE_FRACTION = 0.6
#: ground states: PySCF's converged SCF, or the core-Hamiltonian guess (memory/time studies)
SCF_ROUTES = ("converged", "guess")


def pyscf_threads(threads: int = 1) -> Any:
    """PySCF's OpenMP pool, pinned: on a shared 2-core machine its busy-waiting threads made a
    water SCF 20x slower, and the runtime brings its own parallelism (devices x streams)."""
    from pyscf import lib

    return lib.with_omp_threads(threads)


def _pyscf() -> Any:
    try:
        import pyscf  # noqa: F401
        from pyscf import dft, gto
    except ImportError as exc:
        raise MissingDependencyError(
            "the DFPT workload needs PySCF", hint="pip install pyscf"
        ) from exc
    return gto, dft


@dataclass
class DFTSystem:
    """A converged closed-shell Kohn-Sham ground state and its integration grid."""

    molecule: Molecule
    basis: str
    xc: str
    mol: Any
    mf: Any
    coords: np.ndarray
    weights: np.ndarray

    @property
    def nao(self) -> int:
        return int(self.mol.nao)

    @property
    def dm0(self) -> np.ndarray:
        return self.mf.make_rdm1()

    @property
    def xctype(self) -> str:
        return str(self.mf._numint._xc_type(self.xc))

    @property
    def gga(self) -> bool:
        return self.xctype == "GGA"


def ground_state(
    molecule: Molecule,
    basis: str = "sto-3g",
    xc: str = "lda,vwn",
    grid_level: int = 1,
    conv_tol: float = 1e-11,
    max_memory: int = 2000,
    density_fit: bool | str = False,
    df_memory: int | None = None,
    scf: str = "converged",
) -> DFTSystem:
    """Run PySCF's restricted Kohn-Sham SCF; reject meta-GGA/NLC functionals, unknown bases.

    ``max_memory`` (MB) caps PySCF's own grid blocks (its default, 4,000, is most of what a
    large molecule's SCF would take). ``density_fit`` makes PySCF's Coulomb (and exchange)
    parts density-fitted, for the SCF and the response alike (large molecules); the grid
    integrations are unchanged. A string names the auxiliary basis (``"weigend"``: a Coulomb-only
    fit, enough for a pure functional); ``df_memory`` (MB) lets PySCF keep the fitted integrals
    in memory rather than in a scratch file: they are then computed once, before the SCF (without
    it PySCF's pure-functional DF recomputes every 3-centre integral in each ``get_j``, hours
    for a 667-function alkane on one core).

    ``scf="guess"`` skips the SCF: the ground state is the core-Hamiltonian guess (orbitals of
    h = T + V_nuc, lowest N/2 doubly occupied), with the same molecule, basis and grid. Not a
    physical ground state; it is for measuring the runtime's memory and time on molecules whose
    SCF would take hours here: the grid, batches, screening, task sizes and every array of the
    response integrations depend on the geometry, basis and grid only, not on the density."""
    if scf not in SCF_ROUTES:
        raise ConfigError(f"scf must be one of {SCF_ROUTES}, got {scf!r}", field="scf")
    gto, dft = _pyscf()
    try:
        mol = gto.M(
            atom=molecule.pyscf_atom(),
            basis=basis,
            charge=molecule.charge,
            unit="Angstrom",
            verbose=0,
        )
    except (KeyError, RuntimeError, ValueError, OSError) as exc:
        raise ConfigError(
            f"PySCF cannot build basis {basis!r} for {molecule.name}: {exc}", field="basis"
        ) from None
    mf = dft.RKS(mol)
    if density_fit:
        mf = mf.density_fit(auxbasis=density_fit if isinstance(density_fit, str) else None)
        if df_memory is not None:
            mf.with_df.max_memory = df_memory
            mf.max_memory = max(max_memory, df_memory)
    try:
        xctype = mf._numint._xc_type(xc)
        hyb = mf._numint.hybrid_coeff(xc)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"unknown functional {xc!r}: {exc}", field="xc") from None
    del hyb
    if xctype not in ("LDA", "GGA"):
        raise ConfigError(
            f"{xc!r} is {xctype}; the runtime integrates LDA and GGA response "
            "kernels (e.g. 'lda,vwn', 'pbe', 'pbe0', 'b3lyp')",
            field="xc",
        )
    mf.xc, mf.grids.level, mf.conv_tol = xc, grid_level, conv_tol
    mf.max_memory = max_memory
    if mf.do_nlc():
        raise ConfigError(
            f"{xc!r} has a non-local (NLC) part the runtime does not integrate", field="xc"
        )
    with pyscf_threads():
        if scf == "guess":
            # the grid exactly as the SCF would set it up (pruned on the initial guess)
            mf.initialize_grids(mol, mf.get_init_guess(mol))
            mo_energy, mo_coeff = mf.eig(mf.get_hcore(mol), mf.get_ovlp(mol))
            mf.mo_energy, mf.mo_coeff = mo_energy, mo_coeff
            mf.mo_occ = mf.get_occ(mo_energy, mo_coeff)
            mf.converged = True
        else:
            if density_fit and df_memory is not None:
                mf.with_df.build()  # the fitted 3-centre integrals, once, in memory
            mf.kernel()
    if not mf.converged:
        raise ConfigError(f"SCF for {molecule.name}/{basis} did not converge", field="molecule")
    return DFTSystem(
        molecule, basis, xc, mol, mf, np.asarray(mf.grids.coords), np.asarray(mf.grids.weights)
    )


def _batch_ao(system: DFTSystem, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ao = system.mf._numint.eval_ao(system.mol, system.coords[points], deriv=1 if system.gga else 0)
    size = np.abs(ao).max(axis=tuple(range(ao.ndim - 1)))
    return ao, np.flatnonzero(size > SCREEN_CUTOFF)


@dataclass
class TaskStore:
    """Every micro-task's host data and features, plus the ground-state checks.

    ``cached``: basis values stored per task (memory grows with grid x basis); otherwise each
    task keeps only its point indices and basis values are computed on the fly per task
    (``ao_source``), so memory grows with the batch.
    """

    tasks: list[StoredTask]
    features: TaskFeatures
    nao: int
    electrons: float  # integral of the runtime's ground-state density
    vxc: np.ndarray  # the runtime's ground-state XC potential matrix
    cached: bool = True
    ao_source: AoSource | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of per-task host data (basis values, kernel, indices)."""
        return int(
            sum(
                (t.ao.nbytes if t.ao is not None else 0)
                + t.fxc_w.nbytes
                + t.idx.nbytes
                + (t.points.nbytes if t.points is not None else 0)
                for t in self.tasks
            )
        )


def build_store(
    system: DFTSystem,
    batches: list[np.ndarray],
    cache_ao: bool = True,
    features_only: bool = False,
) -> TaskStore:
    """Evaluate basis functions, screening and the XC kernel for every batch of grid points.
    ``features_only``: only the batches' features (no task data, no density or potential:
    ``electrons`` is NaN and ``vxc`` empty), half the cost of a large molecule's set-up when
    only the composed tasks are kept."""
    with pyscf_threads():
        return _build_store(system, batches, cache_ao, features_only)


def _build_store(
    system: DFTSystem, batches: list[np.ndarray], cache_ao: bool, features_only: bool = False
) -> TaskStore:
    ni, nao, gga = system.mf._numint, system.nao, system.gga
    dm0 = None if features_only else system.dm0
    aoslices = system.mol.aoslice_by_atom()
    ao_atom = np.repeat(np.arange(system.mol.natm), aoslices[:, 3] - aoslices[:, 2])
    atom_xyz = system.mol.atom_coords()
    source = None if cache_ao else AoSource(system.mol, system.coords, gga)
    compact = []
    rho = np.empty((4, len(system.weights))) if gga else np.empty(len(system.weights))
    n_b, n_at, branch, key = (np.empty(len(batches), dtype=np.int64) for _ in range(4))
    empty = np.empty((4, 4, 0)) if gga else np.empty(0)
    for i, points in enumerate(batches):
        ao, significant = _batch_ao(system, points)
        dense = len(significant) > DENSE_FRACTION * nao
        idx = np.arange(nao) if dense else significant
        ao = np.ascontiguousarray(ao[..., idx])
        task = StoredTask(
            ao if cache_ao else None,
            idx,
            empty,
            DENSE if dense else SPARSE,
            np.asarray(points, dtype=np.int64),
        )
        if not features_only:
            rho[..., points] = density_task(task, dm0, ao)
            compact.append(task)
        n_b[i], branch[i] = len(significant), task.branch
        n_at[i] = len(np.unique(ao_atom[significant]))
        centre = system.coords[points].mean(axis=0)
        key[i] = int(np.argmin(((atom_xyz - centre) ** 2).sum(axis=1)))
    if features_only:
        features = TaskFeatures(np.array([len(p) for p in batches]), n_b, n_at, branch, key)
        return TaskStore([], features, nao, float("nan"), np.zeros((0, 0)), cache_ao)
    xctype = "GGA" if gga else "LDA"
    _, vxc, fxc = ni.eval_xc_eff(system.xc, rho, deriv=2, xctype=xctype)[:3]
    if gga:
        vrho_w = np.asarray(vxc) * system.weights
        fxc_w = np.asarray(fxc) * system.weights
    else:
        vrho_w = np.asarray(vxc).reshape(-1) * system.weights
        fxc_w = np.asarray(fxc).reshape(-1) * system.weights
    tasks, vmat = [], np.zeros((nao, nao))
    for points, task in zip(batches, compact, strict=True):
        ao = task.ao if cache_ao else source(task)  # type: ignore[misc]
        potential_task(task, vrho_w[..., points], vmat, ao)
        tasks.append(
            StoredTask(
                task.ao,
                task.idx,
                np.ascontiguousarray(fxc_w[..., points]),
                task.branch,
                task.points,
            )
        )
    features = TaskFeatures(np.array([len(p) for p in batches]), n_b, n_at, branch, key)
    electrons = float((rho[0] if gga else rho) @ system.weights)
    return TaskStore(tasks, features, nao, electrons, vmat, cache_ao, source)


#: MB PySCF's reference V_xc may hold in basis values at once (its default, 2,000, takes the
#: whole grid of a 667-function alkane in one block: 0.7 GiB of the parent's peak)
REFERENCE_MEMORY = 256


def reference_vxc(system: DFTSystem) -> np.ndarray:
    """PySCF's own ground-state XC potential matrix (``NumInt.nr_rks``), in grid blocks of at
    most ``REFERENCE_MEMORY`` MB of basis values."""
    with pyscf_threads():
        return system.mf._numint.nr_rks(
            system.mol, system.mf.grids, system.xc, system.dm0, max_memory=REFERENCE_MEMORY
        )[2]


def coulomb_response(system: DFTSystem) -> Callable[[np.ndarray], np.ndarray]:
    """The Coulomb part of the response, plus the exact-exchange part of a hybrid (neither is a
    grid integration; PySCF computes them, with the functional's range-separation split exactly
    as in ``gen_response``)."""
    mf, mol = system.mf, system.mol
    ni = mf._numint
    omega, alpha, hyb = ni.rsh_and_hybrid_coeff(system.xc, mol.spin)
    if not ni.libxc.is_hybrid_xc(system.xc):
        return lambda dm1: mf.get_j(mol, dm1, hermi=1)

    def jk(dm1: np.ndarray) -> np.ndarray:
        if omega == 0:
            vj, vk = mf.get_jk(mol, dm1, hermi=1)
            vk *= hyb
        elif alpha == 0:
            vj, vk = mf.get_j(mol, dm1, hermi=1), mf.get_k(mol, dm1, hermi=1, omega=-omega) * hyb
        elif hyb == 0:
            vj, vk = mf.get_j(mol, dm1, hermi=1), mf.get_k(mol, dm1, hermi=1, omega=omega) * alpha
        else:
            vj, vk = mf.get_jk(mol, dm1, hermi=1)
            vk *= hyb
            vk += mf.get_k(mol, dm1, hermi=1, omega=omega) * (alpha - hyb)
        return vj - 0.5 * vk

    return jk


def pyscf_response(system: DFTSystem) -> Callable[[np.ndarray], np.ndarray]:
    """PySCF's complete response function: the reference for the runtime's numerics."""
    return system.mf.gen_response(hermi=1)


def polarizability(
    system: DFTSystem,
    response: Callable[[np.ndarray], np.ndarray],
    tol: float = 1e-11,
    max_cycle: int = 60,
) -> tuple[np.ndarray, int]:
    """Static polarisability tensor (a.u.) from the coupled-perturbed KS equations.

    ``response(dm1)`` maps symmetric first-order density matrices (3, nao, nao) to the induced
    potential; the Krylov solver and the dipole perturbation are PySCF's. Returns the tensor and
    the number of response evaluations.
    """
    from pyscf.scf import cphf

    mf, mol = system.mf, system.mol
    occ = mf.mo_occ > 0
    orbo, orbv = mf.mo_coeff[:, occ], mf.mo_coeff[:, ~occ]
    charges = mol.atom_charges()
    centre = charges @ mol.atom_coords() / charges.sum()
    with mol.with_common_orig(centre):
        int_r = mol.intor_symmetric("int1e_r", comp=3)
    h1 = np.einsum("xpq,pa,qi->xai", int_r, orbv, orbo)
    calls = [0]

    def vind(mo1: np.ndarray) -> np.ndarray:
        mo1 = mo1.reshape(-1, orbv.shape[1], orbo.shape[1])
        dm1 = np.einsum("xai,pa,qi->xpq", mo1, orbv, orbo)
        dm1 = (dm1 + dm1.transpose(0, 2, 1)) * 2
        calls[0] += 1
        return np.einsum("xpq,pa,qi->xai", response(dm1), orbv, orbo)

    with pyscf_threads():
        mo1 = cphf.solve(vind, mf.mo_energy, mf.mo_occ, h1, None, max_cycle, tol)[0]
    e2 = np.einsum("xai,yai->xy", h1, mo1)
    return -(e2 + e2.T) * 2, calls[0]
