"""The search engine: one or more searchers, a shared incumbent, a task queue, an offload path.

Hydra-MCS (../shared/papers/02-hydra_mcs.md): threads share the size of the best mapping found
(so every thread prunes with it), hand untried branches to idle threads where the policy says
the remaining computation (RC) makes it worthwhile, and batch mid-sized subproblems to the GPU.
The engine only asks the policy; it never branches on which policy it holds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from schedlab.hydra_mcs import layout as K
from schedlab.hydra_mcs.graph import BitsetPair
from schedlab.hydra_mcs.policies import OpenLevel, WorkPolicy
from schedlab.hydra_mcs.rc import rc_of_counts
from schedlab.hydra_mcs.state import Searcher, Task


@dataclass
class Options:
    """Problem switches McSplit has, plus our time limit."""

    connected: bool = False
    heuristic: int = 0  # 0 = min_max, 1 = min_product
    big_first: bool = False
    timeout: float | None = None
    branching: int = 0  # 0 = McSplit's order, 1 = McSplit+RL, 2 = McSplitDAL (learned.py)
    log_sink: object = None  # proof.ProofWriter: the search tree goes there (--prove)


@dataclass
class Outcome:
    """What a search produced (indices in the *sorted* graphs; the API maps them back)."""

    pairs: list[tuple[int, int]]
    nodes: int
    seconds: float
    optimal: bool
    tasks_shared: int = 0
    offloaded: int = 0
    device_nodes: int = 0
    per_thread_nodes: list[int] = field(default_factory=list)
    kernel: str = ""  # "aot" (compiled ahead of time, aot.py) or "jit" (Numba's dispatcher)


class _Board:
    """The task queue and the idle count every worker sees (one lock, one condition)."""

    def __init__(self, threads: int) -> None:
        self.tasks: deque[Task] = deque()
        self.cond = threading.Condition()
        self.threads = threads
        self.idle = 0
        self.shared = np.zeros(4, np.int64)
        self.tasks_shared = 0
        self.error: BaseException | None = None

    def put(self, task: Task) -> None:
        with self.cond:
            self.tasks.append(task)
            self.tasks_shared += 1
            self.cond.notify()

    def get(self) -> Task | None:
        """Next task; None once the queue is empty and every thread is idle (search over)."""
        with self.cond:
            self.idle += 1
            while not self.tasks:
                if self.idle == self.threads or self.shared[K.S_STOP]:
                    self.cond.notify_all()
                    return None
                self.cond.wait(0.05)
            self.idle -= 1
            return self.tasks.popleft()


def _open_levels(s: Searcher, best: int) -> list[tuple[int, OpenLevel]]:
    """(absolute level, view) for each level with a child in progress, shallowest first."""
    depth, base = int(s.ctl[K.DEPTH]), int(s.params[K.P_BASE])
    out = []
    for d in range(base, depth):
        if s.lev[d, K.DONE]:
            continue
        st, c = int(s.lev[d, K.START]), int(s.lev[d, K.COUNT])
        lc, rc = s.alc[st : st + c], s.arc[st : st + c]
        gap = d + int(np.minimum(lc, rc).sum()) - best
        out.append((d, OpenLevel(d - base, rc_of_counts(lc, rc, gap), gap)))
    return out


class Engine:
    """Runs a policy on a prepared pair of bitset graphs."""

    def __init__(
        self,
        bits: BitsetPair,
        n0: int,
        policy: WorkPolicy,
        options: Options,
        device=None,
        batch: int = 64,
    ) -> None:
        self.bits, self.n0, self.policy, self.options = bits, n0, policy, options
        self.device = device if policy.offload_band() is not None else None
        self.batch = batch
        self.board = _Board(max(1, policy.threads))
        self.device_best: list[tuple[int, int]] = []
        self.device_nodes = 0
        self.offloaded = 0
        self.device_lock = threading.Lock()

    def _searcher(self, goal: int) -> Searcher:
        o = self.options
        s = Searcher(
            self.bits,
            self.n0,
            goal=goal,
            big_first=o.big_first,
            connected=o.connected,
            heuristic=o.heuristic,
            branching=o.branching,
            log_sink=o.log_sink,
            offload_nodes=self.batch if self.device is not None else 0,
        )
        band = self.policy.offload_band()
        if self.device is not None and band is not None:
            s.band[:] = band
        return s

    def _flush(self, s: Searcher) -> None:
        """Hand the searcher's offload buffer to the device and fold its answer back in."""
        count = int(s.ctl[K.OFFLOADED])
        if count == 0:
            return
        tasks = s.offload.take(count)
        s.ctl[K.OFFLOADED] = 0
        with self.device_lock:  # one accelerator: batches run one after the other
            size, pairs, nodes = self.device.solve(
                self.bits, tasks, self.options, int(self.board.shared[K.S_BEST])
            )
            self.device_nodes += nodes
            self.offloaded += count
            if size > len(self.device_best) and size > 0:
                self.device_best = pairs
                self.board.shared[K.S_BEST] = max(int(self.board.shared[K.S_BEST]), size)

    def _drive(self, s: Searcher, deadline: float | None) -> None:
        """Run one loaded searcher to the end of its task, sharing work at checkpoints."""
        board, policy = self.board, self.policy
        while True:
            status = s.run(board.shared, policy.checkpoint_nodes)
            if deadline is not None and time.monotonic() > deadline:
                board.shared[K.S_STOP] = 1
            if status != K.BUDGET_SPENT:
                break
            if int(s.ctl[K.OFFLOADED]) >= self.batch:
                self._flush(s)
            if board.threads > 1:
                best = max(int(s.ctl[K.BEST]), int(board.shared[K.S_BEST]))
                levels = _open_levels(s, best)
                for i in policy.share([lv for _, lv in levels], board.idle):
                    task = s.cut(levels[i][0])
                    task.rc = levels[i][1].rc
                    board.put(task)
        if self.device is not None and board.shared[K.S_STOP] == 0:
            self._flush(s)

    def _worker(self, s: Searcher, deadline: float | None) -> None:
        try:
            while (task := self.board.get()) is not None:
                s.load(task)
                self._drive(s, deadline)
        except BaseException as exc:  # surfaced by run(); stop the others meanwhile
            self.board.error = exc
            self.board.shared[K.S_STOP] = 1

    def run(self, goal: int = 1, deadline: float | None = None) -> tuple[list[Searcher], bool]:
        """Search from the root with ``goal``; returns the searchers and whether it finished."""
        board = self.board
        board.shared[K.S_STOP] = 0
        board.idle = 0
        searchers = [self._searcher(goal) for _ in range(board.threads)]
        board.tasks.append(searchers[0].root_task())
        try:
            if board.threads == 1:
                self._worker(searchers[0], deadline)
            else:
                pool = [
                    threading.Thread(target=self._worker, args=(s, deadline), daemon=True)
                    for s in searchers
                ]
                for t in pool:
                    t.start()
                for t in pool:
                    while t.is_alive():
                        t.join(0.1)
        except KeyboardInterrupt:
            board.shared[K.S_STOP] = 1
        if board.error is not None and not isinstance(board.error, KeyboardInterrupt):
            raise board.error
        finished = board.shared[K.S_STOP] == 0
        return searchers, bool(finished)


def search(bits: BitsetPair, n0: int, policy: WorkPolicy, options: Options, device=None) -> Outcome:
    """Solve the prepared pair; big-first runs goals n0, n0-1, ... as McSplit does."""
    start = time.perf_counter()
    best: list[tuple[int, int]] = []
    nodes = 0
    per_thread: list[int] = []
    finished = True
    shared_tasks = offloaded = device_nodes = 0
    goals = range(n0, 0, -1) if options.big_first else [1]
    carry = 0
    kernel = ""
    deadline = None if options.timeout is None else time.monotonic() + options.timeout
    for goal in goals:
        engine = Engine(bits, n0, policy, options, device)
        engine.board.shared[K.S_BEST] = carry
        searchers, finished = engine.run(goal, deadline)
        for s in searchers:
            if len(s.best) > len(best):
                best = s.best
        if len(engine.device_best) > len(best):
            best = engine.device_best
        carry = len(best)
        kernel = searchers[0].kernel
        counts = [s.nodes for s in searchers]
        per_thread = [a + b for a, b in zip(per_thread or [0] * len(counts), counts, strict=True)]
        nodes += sum(counts)
        shared_tasks += engine.board.tasks_shared
        offloaded += engine.offloaded
        device_nodes += engine.device_nodes
        if not finished or len(best) >= goal:
            break
    return Outcome(
        best,
        nodes,
        time.perf_counter() - start,
        finished,
        shared_tasks,
        offloaded,
        device_nodes,
        per_thread,
        kernel,
    )
