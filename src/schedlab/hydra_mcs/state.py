"""A searcher's preallocated state, and subproblems (tasks) cut out of it.

Everything the kernel needs to resume lives here, so a searcher can be paused after a node
budget, inspected, and have its untried branches handed to another thread or to the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedlab.hydra_mcs import aot
from schedlab.hydra_mcs import layout as K
from schedlab.hydra_mcs.graph import BitsetPair


@dataclass
class Task:
    """An open node: its bidomains, the mapping that led there, and where its iteration stood.

    ``sel``/``vert``/``lastw`` describe a node whose branches ``w <= lastw`` were already taken
    elsewhere (``sel = -1`` means a fresh node that has not branched yet).
    """

    left: np.ndarray  # (D, W) uint64
    right: np.ndarray
    lcount: np.ndarray  # (D,) int32
    rcount: np.ndarray
    adjacent: np.ndarray  # (D,) uint8
    map_v: np.ndarray  # (size,) int64
    map_w: np.ndarray
    sel: int = -1
    vert: int = -1
    lastw: int = -1
    rc: float = 0.0

    @property
    def size(self) -> int:
        return int(self.map_v.shape[0])


@dataclass
class Offload:
    """The buffer the kernel copies offloaded nodes into (one per searcher)."""

    left: np.ndarray
    right: np.ndarray
    counts: np.ndarray  # (cap_dom, 3) int32: |L|, |R|, adjacent
    meta: np.ndarray  # (cap_nodes, 3) int64: first domain, domain count, mapping size
    mapping: np.ndarray  # (cap_nodes, n0, 2) int64

    @classmethod
    def empty(cls, n0: int, words: int, nodes: int = 0) -> Offload:
        cap_dom = max(1, nodes * max(1, n0))
        return cls(
            np.zeros((cap_dom, words), np.uint64),
            np.zeros((cap_dom, words), np.uint64),
            np.zeros((cap_dom, 3), np.int32),
            np.zeros((max(1, nodes), 3), np.int64),
            np.zeros((max(1, nodes), max(1, n0), 2), np.int64),
        )

    def take(self, count: int) -> list[Task]:
        """The first ``count`` offloaded nodes as tasks."""
        tasks = []
        for k in range(count):
            start, c, size = (int(x) for x in self.meta[k])
            sl = slice(start, start + c)
            tasks.append(
                Task(
                    self.left[sl].copy(),
                    self.right[sl].copy(),
                    self.counts[sl, 0].copy(),
                    self.counts[sl, 1].copy(),
                    self.counts[sl, 2].astype(np.uint8),
                    self.mapping[k, :size, 0].copy(),
                    self.mapping[k, :size, 1].copy(),
                )
            )
        return tasks


def _count(words: np.ndarray) -> int:
    return sum(int(x).bit_count() for x in words)


class Searcher:
    """One thread's search state over a fixed graph pair."""

    def __init__(
        self,
        bits: BitsetPair,
        n0: int,
        *,
        goal: int = 1,
        big_first: bool = False,
        connected: bool = False,
        heuristic: int = 0,
        trace_rows: int = 0,
        trace_depth: int = 0,
        offload_nodes: int = 0,
        branching: int = 0,
        log_sink=None,
    ) -> None:
        self.bits = bits
        self.n0 = n0
        words = bits.words
        levels = n0 + 2
        cap = (n0 + 2) * (n0 + 3) // 2 + max(n0, bits.init_l.shape[0]) + 8
        self.al = np.zeros((cap, words), np.uint64)
        self.ar = np.zeros((cap, words), np.uint64)
        self.alc = np.zeros(cap, np.int32)
        self.arc = np.zeros(cap, np.int32)
        self.aadj = np.zeros(cap, np.uint8)
        # per bidomain: |L & N(v)| (one edge class), or |L - N(v)| and |L & N_k(v)| per class
        k_classes = bits.nb0.shape[1]
        self.alin = np.zeros(cap * (1 if k_classes == 1 else 2 * k_classes + 2), np.int64)
        self.lev = np.zeros((levels, K.LEV_COLS), np.int64)
        self.cur_v = np.zeros(levels, np.int64)
        self.cur_w = np.zeros(levels, np.int64)
        self.best_v = np.zeros(levels, np.int64)
        self.best_w = np.zeros(levels, np.int64)
        self.ctl = np.zeros(8, np.int64)
        self.params = np.zeros(K.N_PARAMS, np.int64)
        self.params[K.P_GOAL] = goal
        self.params[K.P_BIGFIRST] = int(big_first)
        self.params[K.P_CONNECTED] = int(connected)
        self.params[K.P_HEUR] = heuristic
        self.params[K.P_TRACE_DEPTH] = trace_depth
        self.params[K.P_BUDGET] = 1 << 62
        self.trace = np.zeros((max(1, trace_rows + 1), K.TRACE_COLS), np.float64)
        self.offload = Offload.empty(n0, words, offload_nodes)
        self.band = np.array([1.0, 0.0])  # empty band: nothing is offloaded
        self.status = K.FINISHED
        # the compiled kernel (aot.py) when available, else Numba's JIT dispatcher
        self.branching = branching
        # the proof log (proof.py): the kernel fills self.log, log_sink(records) drains it
        self.log_sink = log_sink
        self.log = np.zeros(1 << 20 if log_sink is not None else 1, np.int32)
        self.learned = bool(branching) or log_sink is not None
        if self.learned:  # learned.py: McSplit+RL (1), McSplitDAL (2) or McSplit's order (0)
            n1 = bits.nb1.shape[0]
            self.vscore = np.zeros(max(1, n0), np.float64)
            self.wscore = np.zeros((max(1, n0) if branching == 2 else 1, max(1, n1)), np.float64)
            self.todo = np.zeros((levels, words), np.uint64)
            limits = (1e9, 1e9) if branching == 1 else (1e5, 1e9)
            self.learn = np.array([float(branching), *limits])
            self.kernel, self._search = aot.learned_function()
        else:
            self.kernel, self._search = (
                aot.search_function_w1() if words == 1 else aot.search_function()
            )
        self._checked = False

    def root_task(self) -> Task:
        """The root: one bidomain per label both graphs share, nothing mapped yet."""
        b = self.bits
        return Task(
            b.init_l.copy(),
            b.init_r.copy(),
            _popcounts(b.init_l),
            _popcounts(b.init_r),
            np.zeros(b.init_l.shape[0], np.uint8),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )

    def load_root(self) -> None:
        self.load(self.root_task())

    def load(self, task: Task) -> None:
        """Make ``task`` this searcher's subtree (its prefix mapping stays fixed)."""
        d = task.size
        c = task.left.shape[0]
        self.al[:c], self.ar[:c] = task.left, task.right
        self.alc[:c], self.arc[:c], self.aadj[:c] = task.lcount, task.rcount, task.adjacent
        self.cur_v[:d], self.cur_w[:d] = task.map_v, task.map_w
        self.lev[d] = 0
        self.lev[d, K.START], self.lev[d, K.COUNT] = 0, c
        self.lev[d, K.SUMMIN] = int(np.minimum(task.lcount, task.rcount).sum())
        self.params[K.P_BASE] = d
        self.ctl[K.DEPTH] = d
        if task.sel < 0:
            self.lev[d, K.FRESH] = 1
            self.ctl[K.ENTER] = 1
        else:
            self.lev[d, K.SEL], self.lev[d, K.VERT] = task.sel, task.vert
            self.lev[d, K.LASTW] = task.lastw
            self.ctl[K.ENTER] = 0
            # the kernel caches |L_i & N(v)| when it selects v; a cut node was selected
            # elsewhere, so rebuild that cache here or the child bounds would be wrong
            nb0, v = self.bits.nb0, task.vert
            k_classes = nb0.shape[1]
            if k_classes == 1:
                for i in range(c):
                    self.alin[i] = _count(task.left[i] & nb0[v, 0])
            else:
                stride = 2 * k_classes + 2  # kernel.left_class_counts' layout
                for i in range(c):
                    base = i * stride
                    self.alin[base] = _count(task.left[i] & ~self.bits.any0[v])
                    m = 0
                    for k in range(k_classes):
                        cnt = _count(task.left[i] & nb0[v, k])
                        if cnt:
                            self.alin[base + 2 + 2 * m], self.alin[base + 3 + 2 * m] = k, cnt
                            m += 1
                    self.alin[base + 1] = m
        self.status = K.BUDGET_SPENT

    def run(self, shared: np.ndarray, budget: int) -> int:
        """Advance the search by at most ``budget`` nodes (releases the GIL)."""
        self.params[K.P_BUDGET] = budget
        if self.learned:
            return self._run_learned(shared)
        args = (
            self.bits.nb0,
            self.bits.nb1,
            self.bits.any0,
            self.bits.any1,
            self.al,
            self.ar,
            self.alc,
            self.arc,
            self.aadj,
            self.alin,
            self.lev,
            self.cur_v,
            self.cur_w,
            self.best_v,
            self.best_w,
            self.ctl,
            self.params,
            shared,
            self.band,
            self.trace,
            self.offload.left,
            self.offload.right,
            self.offload.counts,
            self.offload.meta,
            self.offload.mapping,
        )
        if not self._checked:
            # the compiled wrapper trusts its argument types: anything else goes to the JIT.
            # Checked once: the arrays are this searcher's own and only ever updated in place
            # (``shared`` is the engine's one array for the whole search).
            if self.kernel == "aot" and not aot.args_ok(args):
                self.kernel, self._search = "jit", aot.jit_search()
            self._checked = True
        elif self.kernel == "aot" and not aot.args_ok(args[17:18], aot.ARGS[17:18]):
            return self._run_jit(args)
        self.status = int(self._search(*args))
        return self.status

    def _run_learned(self, shared: np.ndarray) -> int:
        args = (
            self.bits.nb0,
            self.bits.nb1,
            self.bits.any0,
            self.bits.any1,
            self.al,
            self.ar,
            self.alc,
            self.arc,
            self.aadj,
            self.lev,
            self.cur_v,
            self.cur_w,
            self.best_v,
            self.best_w,
            self.ctl,
            self.params,
            shared,
            self.vscore,
            self.wscore,
            self.todo,
            self.learn,
            self.log,
        )
        if self.kernel == "aot" and not aot.args_ok(args, aot.LEARNED_ARGS):
            from schedlab.hydra_mcs.learned import search_learned

            self.kernel, self._search = "jit", search_learned
        while True:
            self.status = int(self._search(*args))
            if self.log_sink is not None and (
                self.status == K.LOG_FULL or self.status == K.FINISHED
            ):
                self.log_sink(self.log[: int(self.ctl[K.LOGPOS])])
                self.ctl[K.LOGPOS] = 0
            if self.status != K.LOG_FULL:
                return self.status

    def _run_jit(self, args: tuple) -> int:
        self.kernel, self._search = "jit", aot.jit_search()
        self.status = int(self._search(*args))
        return self.status

    @property
    def nodes(self) -> int:
        return int(self.ctl[K.NODES])

    @property
    def best(self) -> list[tuple[int, int]]:
        size = int(self.ctl[K.BEST])
        return list(zip(self.best_v[:size].tolist(), self.best_w[:size].tolist(), strict=True))

    def cut(self, d: int) -> Task:
        """Cut the untried branches of level ``d`` (and its "v unmatched" tail) into a task.

        This searcher will pop straight past ``d`` when it gets back there.
        """
        s, c = int(self.lev[d, K.START]), int(self.lev[d, K.COUNT])
        sl = slice(s, s + c)
        task = Task(
            self.al[sl].copy(),
            self.ar[sl].copy(),
            self.alc[sl].copy(),
            self.arc[sl].copy(),
            self.aadj[sl].copy(),
            self.cur_v[:d].copy(),
            self.cur_w[:d].copy(),
            int(self.lev[d, K.SEL]) - s,
            int(self.lev[d, K.VERT]),
            int(self.lev[d, K.LASTW]),
        )
        self.lev[d, K.DONE] = 1
        return task


def _popcounts(rows: np.ndarray) -> np.ndarray:
    return np.array([sum(int(x).bit_count() for x in row) for row in rows], dtype=np.int32)
