"""COSCO's baseline schedulers (Tuli et al., "COSCO: Container Orchestration using
Co-Simulation and Gradient Based Optimization for Fog Computing Environments", IEEE TPDS 2022;
code: github.com/imperial-qore/COSCO, ``scheduler/``), re-implemented from their descriptions
and code for our simulator (nothing is copied). What each one is and where ours differs:

* **GOBI** (``GOBI.py``, ``BaGTI/src/opt.py``, ``models.py``): a fully connected surrogate
  (in -> 128 Softplus -> 128 Softplus -> 64 Tanhshrink -> outputs, Sigmoid) of the next
  interval's normalised energy and response time from the host CPU utilisations, each
  container's IPS and a one-hot container->host allocation matrix; trained offline on runs of
  the simulator with random decisions on the same workload generator; the decision is found by
  AdamW (lr 0.8, cosine annealing T_max = 10) on the allocation itself, rounded to one-hot after
  every step, up to 200 steps, stopping when the allocation is unchanged for 30; every
  container whose argmax host differs from its current one is placed or **migrated**. Ours:
  a third output (SLA: tasks newly past their deadline) and the three combined with the same
  weights as every other scheduler's objective instead of COSCO's 0.8/0.2 energy/latency;
  at most ``slots`` containers are in the allocation matrix (COSCO runs at most as many
  containers as hosts); further waiting tasks go least-loaded; light online fine-tuning.
* **GOBI2** (``GOBI2.py``): GOBI whose surrogate also reads the simulator's predicted energy and
  response time (COSCO: ``runSimulationGOBI`` of GOBI's decision). Ours simulates, one interval
  ahead, GOBI's decision at run time and the decision taken in the offline data.
* **A3C** (``DRL.py``, ``A2C/``: COSCO's actor-critic): shared trunk, a value head (Sigmoid) and a
  per-container softmax over hosts, trained online with a replay of 10 from the last 50
  transitions and 30 % random decisions while training; here a standard one-step advantage
  actor-critic on the same interval cost, first trained on a private simulator run.
* **LR-MMT, MAD-MMT, IQR-MMT** (``*_MMT_Random.py``, ``Scheduler.py``): over-utilised hosts by
  local regression (loess, degree 1, span 0.6 over the last 10 utilisations, x1.2 >= 100 %),
  median absolute deviation or inter-quartile range of the utilisation history (threshold
  100 - 1.2 x spread); from each, the minimum-migration-time (smallest-RAM) container migrates;
  it and the new containers are placed at random (ours: random among hosts with RAM for it).
* **GA** (``GA.py``, ``BaGTI/src/ga.py``): a genetic algorithm over allocations scored by the
  GOBI surrogate: population 100, 10 % elitism, parents from the best 50, genes 45/45/10 %
  from either parent or random, stop when the best stops improving after 10 generations.
  Ours seeds the population with the current allocation plus random ones (COSCO: random
  allocations from its data set) and caps it at 60 generations.
* **POND** (``POND.py``): an upper-confidence-bound bandit per (application, host) with reward
  minus the normalised last-interval cost and a randomised max-weight improvement loop; our
  "application" is the Bitbrains VM trace a task replays.
* **HGP** (``HGP_LBFGS.py``, ``HGP/src/HGPopt.py``): a Gaussian-process surrogate with an
  upper-confidence objective (mean + 5 std) minimised by one BFGS iteration from the current
  allocation, then rounded. Ours: RBF kernel (median-distance length scale) on at most 300
  offline samples, gradient by autograd instead of finite differences.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from schedlab.carss.placement import greedy, least_loaded
from schedlab.carss.policies import _Passive
from schedlab.carss.simulator import Cluster, IntervalStats, Tasks, Weights
from schedlab.carss.workloads import make_tasks

TaskSource = Callable[[int, float, int, np.random.Generator], Tasks]


def _targets(stats: IntervalStats, cluster: Cluster) -> np.ndarray:
    """The three normalised parts of the shared objective (energy, response, SLA)."""
    hosts, dt = cluster.hosts, cluster.interval_s
    peak = float(hosts.power_table[:, -1].sum()) * dt
    return np.array(
        [stats.energy_j / peak, stats.tis_s / (dt * hosts.n), stats.newly_late / hosts.n]
    )


class _Encoded(_Passive):
    """COSCO's state encoding and offline data, shared by its learned schedulers."""

    name = "cosco"

    def __init__(
        self,
        seed: int = 0,
        slots: int | None = None,
        offline: int = 200,
        task_source: TaskSource | None = None,
        weights: Weights = Weights(),
    ) -> None:
        self.seed, self.slots_arg, self.offline = seed, slots, offline
        self.task_source = task_source
        self.weights = np.array([weights.energy, weights.response, weights.sla])
        self.rate = 1.0
        self.rng = np.random.default_rng(seed)
        self.ready = False
        self.scale = np.ones(3)
        self.max_ips = 1.0

    def prepare(self, history: np.ndarray) -> None:
        self.rate = float(np.mean(history)) if len(history) else 1.0

    # --- encoding ------------------------------------------------------------------------
    def _slot_index(self, cluster: Cluster) -> np.ndarray:
        """The containers in the allocation matrix: the oldest ``slots`` tasks in the system."""
        order = np.argsort(cluster.tasks.tid, kind="stable")
        return order[: self.S]

    def _encode(self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray) -> np.ndarray:
        """[host CPU utilisation (H), per slot: IPS / max IPS, one-hot host (S x (1 + H))]."""
        n = cluster.hosts.n
        util = np.clip(cluster.host_load(), 0.0, 2.0)
        block = np.zeros((self.S, 1 + n))
        block[: idx.size, 0] = cluster.demand()[idx] / self.max_ips
        ok = alloc >= 0
        block[np.flatnonzero(ok), 1 + alloc[ok]] = 1.0
        return np.concatenate([util, block.ravel()]).astype(np.float32)

    def _current(self, cluster: Cluster, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Current host of every slot task; waiting ones start on a random host (as COSCO)."""
        alloc = cluster.tasks.host[idx].copy()
        waiting = alloc < 0
        alloc[waiting] = rng.integers(0, cluster.hosts.n, int(waiting.sum()))
        return alloc

    def _placement(self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray) -> np.ndarray:
        """Slot tasks to their chosen hosts (migrating where it differs); other waiting tasks
        least-loaded on what is left."""
        placement = np.full(len(cluster.tasks), -1, dtype=np.int64)
        change = alloc != cluster.tasks.host[idx]
        placement[idx[change]] = alloc[change]
        twin = cluster.copy()
        twin.apply(placement)
        rest = greedy(twin, least_loaded)
        rest[idx] = -1
        return np.where(placement >= 0, placement, rest)

    # --- offline data (COSCO trains on simulator runs of its workload generator) ----------
    def _setup(self, cluster: Cluster) -> None:
        n = cluster.hosts.n
        self.S = int(self.slots_arg or 2 * n)
        if cluster.traces is not None:
            self.max_ips = float(cluster.traces[0].max())
        else:
            self.max_ips = 6000.0
        self.dim = n + self.S * (1 + n)
        self.ready = True

    def _source(self) -> TaskSource:
        if self.task_source is not None:
            return self.task_source
        return lambda count, arrival, tid, rng: make_tasks(count, arrival, tid, rng)

    def _offline_run(
        self, cluster: Cluster, decide: Callable | None = None, extra: Callable | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``offline`` intervals of a private simulator: random placements and migrations
        (or ``decide``), recording (encoded decision, normalised outcome)."""
        rng = np.random.default_rng(self.seed + 7919)
        source = self._source()

        def fresh() -> Cluster:
            return Cluster(cluster.hosts, cluster.interval_s, record=False, traces=cluster.traces)

        twin, tid, xs, ys = fresh(), 0, [], []
        for _ in range(self.offline):
            count = int(rng.poisson(self.rate * rng.uniform(0.5, 1.5)))
            twin.admit(source(count, twin.now, tid, rng))
            tid += count
            idx = self._slot_index(twin)
            if decide is not None:
                alloc = decide(twin, idx, rng)
            else:
                alloc = self._current(twin, idx, rng)
                if rng.random() < 0.5:  # random moves of running containers too
                    move = rng.random(idx.size) < 0.2
                    alloc[move] = rng.integers(0, twin.hosts.n, int(move.sum()))
                else:
                    spread = greedy(twin, least_loaded)[idx]
                    alloc = np.where(spread >= 0, spread, alloc)
            x = self._encode(twin, idx, alloc)
            if extra is not None:
                x = np.concatenate([x, extra(twin, idx, alloc)])
            placement = self._placement(twin, idx, alloc)
            stats = twin.step(*twin.apply(placement))
            xs.append(x)
            ys.append(_targets(stats, twin))
            if stats.waiting > 3 * twin.hosts.n:  # a runaway queue teaches nothing useful
                twin = fresh()
        return np.array(xs), np.array(ys)


class _FCN(nn.Module):
    """COSCO's surrogate: in -> 128 Softplus -> 128 Softplus -> 64 Tanhshrink -> k Sigmoid."""

    def __init__(self, dim: int, out: int = 3) -> None:
        super().__init__()
        self.find = nn.Sequential(
            nn.Linear(dim, 128),
            nn.Softplus(),
            nn.Linear(128, 128),
            nn.Softplus(),
            nn.Linear(128, 64),
            nn.Tanhshrink(),
            nn.Linear(64, out),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.find(x)


class GOBI(_Encoded):
    """COSCO's gradient-based optimisation over an FCN surrogate, migrations included."""

    name = "gobi"

    def __init__(
        self,
        seed: int = 0,
        slots: int | None = None,
        offline: int = 200,
        task_source: TaskSource | None = None,
        steps: int = 200,
        patience: int = 30,
        lr: float = 0.8,
        online: bool = True,
        epochs: int = 300,
        start: str = "random",
    ) -> None:
        super().__init__(seed, slots, offline, task_source)
        self.start = start  # where waiting containers start: "random" (COSCO) or least-loaded
        self.steps, self.patience, self.lr, self.online = steps, patience, lr, online
        self.epochs = epochs
        self.buffer: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=2000)
        self._pending: np.ndarray | None = None
        self.iterations: list[int] = []

    def _extra(self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray) -> np.ndarray | None:
        return None

    def _train_offline(self, cluster: Cluster) -> None:
        self._setup(cluster)
        extra = None if type(self)._extra is GOBI._extra else self._extra
        xs, ys = self._offline_run(cluster, extra=extra)
        self.scale = np.maximum(ys.max(axis=0) * 1.5, 1e-3)
        self.extra_dim = xs.shape[1] - self.dim
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self.net = _FCN(xs.shape[1])
        self.optimiser = torch.optim.AdamW(self.net.parameters(), lr=1e-3, weight_decay=1e-5)
        for x, y in zip(xs, ys, strict=True):
            self.buffer.append((x, np.minimum(y / self.scale, 1.0)))
        self._fit(self.epochs, 64)

    def _fit(self, steps: int, batch: int) -> None:
        for _ in range(steps):
            pick = self.rng.integers(0, len(self.buffer), min(batch, len(self.buffer)))
            x = torch.tensor(np.array([self.buffer[i][0] for i in pick]))
            y = torch.tensor(np.array([self.buffer[i][1] for i in pick]), dtype=torch.float32)
            loss = ((self.net(x) - y) ** 2).mean()
            self.optimiser.zero_grad()
            loss.backward()
            self.optimiser.step()

    def cost(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted objective (same weights as every scheduler) of encoded decisions."""
        w = torch.tensor(self.weights * self.scale, dtype=torch.float32)
        return (self.net(x) * w).sum(-1)

    def _optimise(
        self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray, extra: np.ndarray | None = None
    ) -> np.ndarray:
        """COSCO's opt(): AdamW on the allocation, one-hot rounding every step."""
        n = cluster.hosts.n
        base = self._encode(cluster, idx, alloc)
        if extra is not None:
            base = np.concatenate([base, extra])
        head = torch.tensor(base[:n])
        block = torch.tensor(base[n : self.dim].reshape(self.S, 1 + n))
        tail = torch.tensor(base[self.dim :])
        onehot = block[:, 1:].clone().requires_grad_(True)
        live = torch.zeros(self.S, 1)
        live[: idx.size] = 1.0
        opt = torch.optim.AdamW([onehot], lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        same, it = 0, 0
        while it < self.steps:
            old = onehot.detach().argmax(1)
            x = torch.cat([head, torch.cat([block[:, :1], onehot * live], 1).ravel(), tail])
            z = self.cost(x)
            opt.zero_grad()
            z.backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                new = onehot.argmax(1)
                onehot.zero_()
                onehot[torch.arange(self.S), new] = 1.0
            same = same + 1 if bool((new[: idx.size] == old[: idx.size]).all()) else 0
            it += 1
            if same > self.patience:
                break
        self.iterations.append(it)
        return onehot.detach().argmax(1).numpy()[: idx.size].astype(np.int64)

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        if not self.ready:
            self._train_offline(cluster)
        idx = self._slot_index(cluster)
        if idx.size == 0:
            self._pending = None
            return np.full(len(cluster.tasks), -1, dtype=np.int64)
        start = self._current(cluster, idx, rng)
        if self.start == "least-loaded":
            spread = greedy(cluster, least_loaded)[idx]
            start = np.where(spread >= 0, spread, start)
        extra = self._extra(cluster, idx, start)
        alloc = self._optimise(cluster, idx, start, extra)
        x = self._encode(cluster, idx, alloc)
        self._pending = x if extra is None else np.concatenate([x, extra])
        return self._placement(cluster, idx, alloc)

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        if self._pending is None or not self.online:
            return
        self.buffer.append((self._pending, np.minimum(_targets(stats, cluster) / self.scale, 1.0)))
        self._fit(2, 64)


class GOBI2(GOBI):
    """GOBI whose surrogate also reads the simulator's one-interval prediction."""

    name = "gobi2"

    def _extra(self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray) -> np.ndarray:
        twin = cluster.copy(freeze=True)
        stats = twin.step(*twin.apply(self._placement(cluster, idx, alloc)))
        t = _targets(stats, cluster)
        return np.minimum(t[:2] / self.scale[:2], 2.0).astype(np.float32)

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        if not self.ready:
            # the scale of the extra features comes from a first pass of offline data
            self._setup(cluster)
            _, ys = self._offline_run(cluster)
            self.scale = np.maximum(ys.max(axis=0) * 1.5, 1e-3)
            self.ready = False
            self._train_offline(cluster)
        return super().decide(cluster, rng)

    def _train_offline(self, cluster: Cluster) -> None:
        scale = self.scale.copy()
        super()._train_offline(cluster)
        self.scale = np.maximum(self.scale, scale)


class GA(GOBI):
    """COSCO's genetic algorithm over allocations, scored by the GOBI surrogate."""

    name = "ga"

    def __init__(self, population: int = 100, generations: int = 60, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.population, self.generations = population, generations

    def _optimise(
        self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray, extra: np.ndarray | None = None
    ) -> np.ndarray:
        n, k, rng = cluster.hosts.n, idx.size, self.rng
        pop = rng.integers(0, n, (self.population, k))
        pop[0] = alloc
        best_hist: list[float] = []
        fit = self._fitness(cluster, idx, pop)
        for gen in range(self.generations):
            order = np.argsort(fit)
            pop, fit = pop[order], fit[order]
            best_hist.append(float(fit[0]))
            if gen > 10 and best_hist[-1] >= best_hist[-2]:
                break
            elite = max(1, int(0.1 * self.population))
            kids = self.population - elite
            p1 = pop[rng.integers(0, min(50, len(pop)), kids)]
            p2 = pop[rng.integers(0, min(50, len(pop)), kids)]
            u = rng.random((kids, k))
            child = np.where(u < 0.45, p1, np.where(u < 0.9, p2, rng.integers(0, n, (kids, k))))
            pop = np.concatenate([pop[:elite], child])
            fit = np.concatenate([fit[:elite], self._fitness(cluster, idx, child)])
        self.iterations.append(len(best_hist))
        return pop[int(np.argmin(fit))]

    def _fitness(self, cluster: Cluster, idx: np.ndarray, pop: np.ndarray) -> np.ndarray:
        x = np.array([self._encode(cluster, idx, a) for a in pop])
        with torch.no_grad():
            return self.cost(torch.tensor(x)).numpy()


class HGP(GOBI):
    """COSCO's Gaussian-process surrogate, mean + 5 std, one BFGS iteration."""

    name = "hgp"

    def __init__(self, ucb: float = 5.0, points: int = 300, **kwargs: object) -> None:
        kwargs.setdefault("online", False)
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.ucb, self.points = ucb, points

    def _train_offline(self, cluster: Cluster) -> None:
        self._setup(cluster)
        xs, ys = self._offline_run(cluster)
        self.scale = np.maximum(ys.max(axis=0) * 1.5, 1e-3)
        y = (np.minimum(ys / self.scale, 1.0) * self.weights * self.scale).sum(1)
        pick = self.rng.permutation(len(xs))[: self.points]
        x = torch.tensor(xs[pick], dtype=torch.float64)
        d = torch.cdist(x, x)
        self.ell = float(d[d > 0].median()) if (d > 0).any() else 1.0
        self.signal = float(np.var(y)) + 1e-6
        self.noise = 1e-2 * self.signal
        self.mu = float(y[pick].mean())
        k = self._kernel(x, x) + self.noise * torch.eye(len(x), dtype=torch.float64)
        self.chol = torch.linalg.cholesky(k)
        self.alpha = torch.cholesky_solve(torch.tensor(y[pick] - self.mu)[:, None], self.chol)
        self.xs = x

    def _kernel(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return float(self.yvar) * torch.exp(-0.5 * torch.cdist(a, b) ** 2 / self.ell**2)

    @property
    def yvar(self) -> float:
        return self.signal

    def ucb_cost(self, x: torch.Tensor) -> torch.Tensor:
        k = self._kernel(x[None], self.xs)
        mean = self.mu + (k @ self.alpha)[0, 0]
        v = torch.cholesky_solve(k.T, self.chol)
        var = torch.clamp(self.yvar - (k @ v)[0, 0], min=1e-12)
        return mean + self.ucb * torch.sqrt(var)

    def _optimise(
        self, cluster: Cluster, idx: np.ndarray, alloc: np.ndarray, extra: np.ndarray | None = None
    ) -> np.ndarray:
        from scipy.optimize import minimize

        n = cluster.hosts.n
        x0 = self._encode(cluster, idx, alloc).astype(np.float64)

        def f(v: np.ndarray) -> tuple[float, np.ndarray]:
            t = torch.tensor(v, dtype=torch.float64, requires_grad=True)
            z = self.ucb_cost(t)
            z.backward()
            return float(z.detach()), t.grad.numpy()

        res = minimize(f, x0, jac=True, method="BFGS", tol=100, options={"maxiter": 1})
        block = res.x[n : self.dim].reshape(self.S, 1 + n)[: idx.size, 1:]
        self.iterations.append(int(res.nit))
        return block.argmax(1).astype(np.int64)

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        return None


class A3C(_Encoded):
    """COSCO's actor-critic scheduler: value and per-container policy heads on one trunk."""

    name = "a3c"

    def __init__(
        self,
        seed: int = 0,
        slots: int | None = None,
        offline: int = 200,
        task_source: TaskSource | None = None,
        explore: float = 0.3,
        gamma: float = 0.9,
    ) -> None:
        super().__init__(seed, slots, offline, task_source)
        self.explore, self.gamma = explore, gamma
        self.buffer: deque[tuple] = deque(maxlen=50)
        self.prev: tuple | None = None
        self.training = True

    def _build(self, cluster: Cluster) -> None:
        self._setup(cluster)
        n = cluster.hosts.n
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self.trunk = nn.Sequential(
                nn.Linear(self.dim, 128), nn.Softplus(), nn.Linear(128, 128), nn.Softplus()
            )
            self.value = nn.Sequential(
                nn.Linear(128, 64), nn.Tanhshrink(), nn.Linear(64, 1), nn.Sigmoid()
            )
            self.action = nn.Sequential(
                nn.Linear(128, 256), nn.Softplus(), nn.Linear(256, self.S * n)
            )
        params = [*self.trunk.parameters(), *self.value.parameters(), *self.action.parameters()]
        self.optimiser = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-5)
        # a private training episode on the same workload generator (COSCO's training mode)
        _, ys = self._offline_run(cluster)
        self.scale = np.maximum((ys * self.weights).sum(1).max() * 1.5, 1e-3)
        self._offline_run(cluster, decide=self._act_and_learn)
        self.prev = None

    def _policy(self, x: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(torch.tensor(x))
        logits = self.action(h).reshape(self.S, -1)
        return self.value(h)[0], torch.log_softmax(logits, dim=1)

    def _act_and_learn(
        self, cluster: Cluster, idx: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Choose an allocation for ``cluster``; learn from the previous transition."""
        state = self._encode(cluster, idx, self._current(cluster, idx, rng))
        if self.prev is not None and getattr(self, "_last_cost", None) is not None:
            self.buffer.append((*self.prev, self._last_cost, state))
            self._learn(self.buffer[-1])
            if len(self.buffer) >= 10:
                for j in rng.choice(len(self.buffer), 10, replace=False):
                    self._learn(self.buffer[int(j)])
        with torch.no_grad():
            _, logp = self._policy(state)
        if self.training and rng.random() < self.explore:
            alloc = rng.integers(0, cluster.hosts.n, idx.size)
        else:
            alloc = logp[: idx.size].argmax(1).numpy().astype(np.int64)
        self.prev = (state, alloc, idx.size)
        self._last_cost = None
        self._hook_cluster = cluster
        return alloc

    def _learn(self, item: tuple) -> None:
        state, alloc, k, cost, nxt = item
        v, logp = self._policy(state)
        with torch.no_grad():
            v_next, _ = self._policy(nxt)
        target = cost / self.scale + self.gamma * v_next
        advantage = (target - v).detach()
        chosen = logp[torch.arange(k), torch.tensor(alloc)]
        loss = ((v - target) ** 2).sum() + (advantage * chosen.sum())
        self.optimiser.zero_grad()
        loss.backward()
        self.optimiser.step()

    def _offline_run(
        self, cluster: Cluster, decide: Callable | None = None, extra: Callable | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if decide is None:
            return super()._offline_run(cluster)
        # learning episode: the cost of each interval is fed back before the next decision
        rng = np.random.default_rng(self.seed + 104729)
        source, twin, tid = (
            self._source(),
            Cluster(cluster.hosts, cluster.interval_s, record=False, traces=cluster.traces),
            0,
        )
        for _ in range(self.offline):
            count = int(rng.poisson(self.rate * rng.uniform(0.5, 1.5)))
            twin.admit(source(count, twin.now, tid, rng))
            tid += count
            idx = self._slot_index(twin)
            alloc = decide(twin, idx, rng)
            stats = twin.step(*twin.apply(self._placement(twin, idx, alloc)))
            self._last_cost = float((_targets(stats, twin) * self.weights).sum())
            if stats.waiting > 3 * twin.hosts.n:
                twin = Cluster(
                    cluster.hosts, cluster.interval_s, record=False, traces=cluster.traces
                )
                self.prev = None
        return np.zeros((0, self.dim)), np.zeros((0, 3))

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        if not self.ready:
            self._build(cluster)
        idx = self._slot_index(cluster)
        if idx.size == 0:
            return np.full(len(cluster.tasks), -1, dtype=np.int64)
        return self._placement(cluster, idx, self._act_and_learn(cluster, idx, rng))

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        self._last_cost = float((_targets(stats, cluster) * self.weights).sum())


# --- COSCO's heuristic baselines -------------------------------------------------------------

REGRESSION_BANDWIDTH = 10  # COSCO utils/MathConstants.py
CPU_MULTIPLIER = 1.2


def _loess_next(y: np.ndarray, span: float = 0.6) -> float:
    """Local linear regression (tricube weights, ``span`` of the points) fitted at the last
    point and extrapolated one step beyond the window (COSCO's LRSelection)."""
    x = np.arange(y.size, dtype=float)
    k = max(2, int(np.ceil(span * y.size)))
    dist = np.abs(x - x[-1])
    h = np.sort(dist)[k - 1] or 1.0
    w = np.clip(1 - (dist / (h * 1.0001)) ** 3, 0, None) ** 3
    a = np.vstack([np.ones_like(x), x]).T * np.sqrt(w)[:, None]
    coef = np.linalg.lstsq(a, y * np.sqrt(w), rcond=None)[0]
    return float(coef[0] + coef[1] * (y.size + 1))


class _MMT(_Passive):
    """Over-utilised-host detection + minimum migration time selection + random placement."""

    name = "mmt"

    def __init__(self) -> None:
        self.history: list[np.ndarray] = []

    def overloaded(self, util: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        util = 100.0 * np.clip(cluster.host_load(), 0.0, None)
        self.history.append(util)
        tk, hosts = cluster.tasks, cluster.hosts
        selected = []
        for h in np.flatnonzero(self.overloaded(util)):
            on = np.flatnonzero(tk.host == h)
            if on.size:
                selected.append(int(on[np.argmin(tk.ram[on])]))
        placement = np.full(len(tk), -1, dtype=np.int64)
        ram = cluster.ram_used().copy()
        for i in selected:
            ram[tk.host[i]] -= tk.ram[i]
        for i in [*selected, *np.flatnonzero(tk.host < 0)]:
            fits = np.flatnonzero(ram + tk.ram[i] <= hosts.ram)
            if fits.size:
                h = int(rng.choice(fits))
                placement[i] = h
                ram[h] += tk.ram[i]
            elif tk.host[i] >= 0:
                ram[tk.host[i]] += tk.ram[i]
        return placement


class ThresholdCheck:
    @staticmethod
    def threshold(util: np.ndarray) -> np.ndarray:
        return util > 70.0


class LRMMT(_MMT):
    """COSCO's LR-MMT-Random."""

    name = "lr-mmt"

    def overloaded(self, util: np.ndarray) -> np.ndarray:
        if len(self.history) < REGRESSION_BANDWIDTH:
            return ThresholdCheck.threshold(util)
        window = np.array(self.history[-REGRESSION_BANDWIDTH:])
        pred = np.array([_loess_next(window[:, h]) for h in range(window.shape[1])])
        return CPU_MULTIPLIER * pred >= 100.0


class MADMMT(_MMT):
    """COSCO's MAD-MMT-Random."""

    name = "mad-mmt"

    def overloaded(self, util: np.ndarray) -> np.ndarray:
        hist = np.array(self.history)
        mad = np.median(np.abs(hist - np.median(hist, axis=0)), axis=0)
        return util > 100.0 - CPU_MULTIPLIER * mad


class IQRMMT(_MMT):
    """COSCO's IQR-MMT-Random."""

    name = "iqr-mmt"

    def overloaded(self, util: np.ndarray) -> np.ndarray:
        q1, q3 = np.percentile(np.array(self.history), [25, 75], axis=0)
        return util > 100.0 - CPU_MULTIPLIER * (q3 - q1)


class POND(_Passive):
    """COSCO's POND: UCB weights per (application, host), randomised max-weight moves."""

    name = "pond"

    def __init__(self, seed: int = 0) -> None:
        self.r: np.ndarray | None = None
        self.n: np.ndarray | None = None
        self.last: tuple[np.ndarray, np.ndarray] | None = None
        self.costs: deque[tuple[float, float]] = deque(maxlen=20)

    def _app(self, cluster: Cluster) -> np.ndarray:
        return np.maximum(cluster.tasks.trace, 0)

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        tk, hosts = cluster.tasks, cluster.hosts
        apps = self._app(cluster)
        rows = max(
            int(apps.max()) + 1 if apps.size else 1, 0 if self.r is None else self.r.shape[0]
        )
        if self.r is None or self.r.shape[0] < rows:
            r, n = np.zeros((rows, hosts.n)), np.full((rows, hosts.n), 0.001)
            if self.r is not None:
                r[: self.r.shape[0]], n[: self.n.shape[0]] = self.r, self.n
            self.r, self.n = r, n
        alloc = tk.host.copy()
        waiting = alloc < 0
        alloc[waiting] = rng.integers(0, hosts.n, int(waiting.sum()))
        weight = 10 * self.r * np.sqrt(np.log(100) / self.n)
        for i in range(alloc.size):
            gain = weight[apps[i]] - weight[apps[i], alloc[i]]
            accept = (gain > 0) & (rng.integers(1, 101, hosts.n) < 5)
            if accept.any():
                alloc[i] = int(np.argmax(np.where(accept, gain, -np.inf)))
        self.last = (apps, alloc)
        return np.where(alloc != tk.host, alloc, -1)

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        if self.last is None:
            return
        energy, response = stats.energy_j, stats.tis_s
        self.costs.append((energy, response))
        es = [c[0] for c in self.costs]
        rs = [c[1] for c in self.costs]
        e = (energy - min(es)) / (0.1 + max(es) - min(es))
        lat = response / (0.1 + max(rs))
        reward = -(0.8 * e + 0.2 * lat)  # COSCO's Coeff_Energy / Coeff_Latency
        apps, alloc = self.last
        for a, h in zip(apps, alloc, strict=True):
            self.r[a, h] = (self.r[a, h] * self.n[a, h] + reward) / (self.n[a, h] + 1)
            self.n[a, h] += 1
        self.last = None
