"""Heterogeneous hosts with SPECpower-style power-vs-utilisation curves.

CARSS (paper 07, ../shared/papers/07-carss.md) inherits COSCO/GOBI's cluster model (Tuli et al.):
hosts with CPU, RAM, disk and network capacity whose power draw is a piecewise-linear function of
CPU utilisation sampled at 0%, 10%, ..., 100%. The tables below are the public SPECpower_ssj2008
figures that CloudSim ships as ``PowerModelSpecPower*`` (HP ProLiant ML110 G4/G5, IBM x3250 and
x3550); CPU capacities follow CloudSim's examples (MIPS per core x cores).

COSCO's own simulated fleet (``simulator/environment/AzureFog.py`` in imperial-qore/COSCO) uses
three Azure VM sizes, B2s, B4ms and B8ms, in the ratio 4:4:2, with the power tables of
``metrics/powermodels/PMB2s.py``, ``PMB4ms.py`` and ``PMB8ms.py``, which COSCO takes from
SPECpower_ssj2008 results: IBM System x3200 M2 (res2011q1/power_ssj2008-20110124-00340), IBM
x3350 (res2008q2/power_ssj2008-20080506-00052) and Huawei RH2288H V2
(res2014q2/power_ssj2008-20140408-00655). Their IPS, RAM (MB), disk (MB) and bandwidth figures
are COSCO's; ``make_hosts(n, COSCO_FLEET)`` builds that fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError


@dataclass(frozen=True)
class HostModel:
    """One public server model: capacities and its 11-point power curve in watts."""

    name: str
    cpu_mips: float
    ram_mb: float
    disk_mb: float
    net_mbps: float
    power_w: tuple[float, ...]


HOST_MODELS: dict[str, HostModel] = {
    "hp-ml110-g4": HostModel(
        "hp-ml110-g4",
        2 * 1860.0,
        8192.0,
        100_000.0,
        1000.0,
        (86, 89.4, 92.6, 96, 99.5, 102, 106, 108, 112, 114, 117),
    ),
    "hp-ml110-g5": HostModel(
        "hp-ml110-g5",
        2 * 2660.0,
        8192.0,
        100_000.0,
        1000.0,
        (93.7, 97, 101, 105, 110, 116, 121, 125, 129, 133, 135),
    ),
    "ibm-x3250": HostModel(
        "ibm-x3250",
        4 * 2933.0,
        16384.0,
        200_000.0,
        1000.0,
        (41.6, 46.7, 52.3, 57.9, 65.4, 73, 80.7, 89.5, 99.6, 105, 113),
    ),
    "ibm-x3550": HostModel(
        "ibm-x3550",
        12 * 2933.0,
        24576.0,
        400_000.0,
        10_000.0,
        (66, 107, 120, 131, 143, 156, 173, 191, 211, 229, 247),
    ),
    # COSCO (AzureFog.py): IPS, RAMSize, DiskSize, BwUp and the PMB* power tables
    "azure-b2s": HostModel(
        "azure-b2s",
        4029.0,
        4295.0,
        32212.0,
        5000.0,
        (75.2, 78.2, 84.1, 89.6, 94.9, 100.0, 105.0, 109.0, 112.0, 115.0, 117.0),
    ),
    "azure-b4ms": HostModel(
        "azure-b4ms",
        4029.0,
        17180.0,
        32212.0,
        5000.0,
        (71.0, 77.9, 83.4, 89.2, 95.6, 102.0, 108.0, 114.0, 119.0, 123.0, 126.0),
    ),
    "azure-b8ms": HostModel(
        "azure-b8ms",
        16111.0,
        34360.0,
        32212.0,
        5000.0,
        (68.7, 78.3, 84.0, 88.4, 92.5, 97.3, 104.0, 111.0, 121.0, 131.0, 137.0),
    ),
}
#: COSCO's simulated fleet: B2s, B4ms and B8ms in the ratio 4:4:2 (AzureFog.generateHosts)
COSCO_FLEET = ["azure-b2s"] * 4 + ["azure-b4ms"] * 4 + ["azure-b8ms"] * 2
#: the default fleet of the earlier experiments (CloudSim's SPECpower servers)
CLOUDSIM_FLEET = ["hp-ml110-g4", "hp-ml110-g5", "ibm-x3250", "ibm-x3550"]


@dataclass(frozen=True)
class Hosts:
    """A cluster as arrays (one entry per host) so the simulator's hot loop stays vectorised."""

    names: tuple[str, ...]
    cpu: np.ndarray
    ram: np.ndarray
    disk: np.ndarray
    net: np.ndarray
    power_table: np.ndarray  # (n, 11) watts at 0..100% utilisation

    @property
    def n(self) -> int:
        return len(self.names)

    def power(self, util: np.ndarray) -> np.ndarray:
        """Watts per host at CPU utilisation ``util`` (0..1), linear between table points."""
        u = np.clip(np.asarray(util, dtype=float), 0.0, 1.0) * 10.0
        lo = np.minimum(np.floor(u).astype(int), 9)
        frac = u - lo
        rows = np.arange(self.n)
        return self.power_table[rows, lo] * (1 - frac) + self.power_table[rows, lo + 1] * frac

    def idle_power(self) -> np.ndarray:
        return self.power_table[:, 0].copy()


def make_hosts(n: int, models: list[str] | None = None) -> Hosts:
    """``n`` hosts cycling through ``models`` (default: the four CloudSim servers; pass
    :data:`COSCO_FLEET` for COSCO's Azure fleet)."""
    if n < 1:
        raise BadInputError("a cluster needs at least one host", field="hosts")
    chosen = models or CLOUDSIM_FLEET
    for name in chosen:
        if name not in HOST_MODELS:
            raise UnknownNameError("host model", name, sorted(HOST_MODELS))
    fleet = [HOST_MODELS[chosen[i % len(chosen)]] for i in range(n)]
    return Hosts(
        names=tuple(m.name for m in fleet),
        cpu=np.array([m.cpu_mips for m in fleet]),
        ram=np.array([m.ram_mb for m in fleet]),
        disk=np.array([m.disk_mb for m in fleet]),
        net=np.array([m.net_mbps for m in fleet]),
        power_table=np.array([m.power_w for m in fleet], dtype=float),
    )
