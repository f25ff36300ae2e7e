"""Plain data shared by the allocators, the replay engine and the real executor.

X-Bucket (Phung & Thain, "X-Bucket: online bucketing resource allocation for dynamic
workflows"; ../shared/papers/15-xbucket.md) handles each resource type on its own, so every
record here is a small fixed tuple of the three types the paper evaluates: cores, memory (MB)
and disk (MB). Slotted dataclasses keep a prediction allocation-free beyond one small object,
which matters for the per-prediction latency target (p99 <= 15 us).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the resource types, in the order every tuple below uses
RESOURCES: tuple[str, ...] = ("cores", "memory", "disk")


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of each resource type: cores, memory in MB, disk in MB."""

    cores: float
    memory: float
    disk: float

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.cores, self.memory, self.disk)

    def get(self, name: str) -> float:
        return getattr(self, name)

    @classmethod
    def of(cls, values: tuple[float, ...] | list[float]) -> Resources:
        return cls(float(values[0]), float(values[1]), float(values[2]))

    def fits_in(self, other: Resources) -> bool:
        """True when every type here is at most the same type in ``other``."""
        return self.cores <= other.cores and self.memory <= other.memory and self.disk <= other.disk

    def exceeded(self, allocation: Resources) -> tuple[str, ...]:
        """Names of the types whose usage (self) went above ``allocation``."""
        return tuple(
            name
            for name, used, given in zip(RESOURCES, self.as_tuple(), allocation.as_tuple(),
                                         strict=True)
            if used > given
        )


@dataclass(frozen=True, slots=True)
class ResourceReport:
    """What one attempt of a task reported back to the allocator.

    ``usage`` is what the monitor saw: on success the task's true peaks; on a failure, under the
    ``peak`` semantics (a replay knows the truth) the true peaks, under the ``allocation``
    semantics (a live monitor killed the task at its limit) the allocation for every exceeded
    type and the true peak for the others. ``exceeded`` is empty on success.
    """

    allocation: Resources
    usage: Resources
    wall_time: float
    exceeded: tuple[str, ...] = ()

    @property
    def success(self) -> bool:
        return not self.exceeded


@dataclass(frozen=True, slots=True)
class Task:
    """One task of a workflow: its category, true peaks and wall time (from a trace or generator).

    ``declared`` is the allocation a user wrote down for it, when the trace carries one.
    """

    task_id: str
    category: str
    peak: Resources
    wall_time: float
    declared: Resources | None = None


@dataclass(frozen=True, slots=True)
class Machine:
    """A worker's capacity: what Whole Machine allocates and what any allocation is capped at."""

    cores: float = 16.0
    memory: float = 65536.0
    disk: float = 65536.0

    @property
    def resources(self) -> Resources:
        return Resources(self.cores, self.memory, self.disk)

    @classmethod
    def covering(cls, tasks: list[Task], base: Machine | None = None) -> Machine:
        """``base`` (default 16 cores, 64 GiB, 64 GiB) grown by powers of two to fit every task."""
        base = base or cls()
        sizes = list(base.resources.as_tuple())
        for task in tasks:
            for i, used in enumerate(task.peak.as_tuple()):
                while used > sizes[i]:
                    sizes[i] *= 2
        return cls(*sizes)

    @classmethod
    def trace_max(cls, tasks: list[Task]) -> Machine:
        """The trace's largest value of each type (cctools' harness: Whole Machine = the max).

        A type no task uses (all zero) gets 1 so that allocations stay positive.
        """
        sizes = [1.0, 1.0, 1.0]
        for task in tasks:
            for i, used in enumerate(task.peak.as_tuple()):
                if used > sizes[i]:
                    sizes[i] = float(used)
        return cls(*sizes)

    @classmethod
    def parse(cls, spec: str, tasks: list[Task]) -> Machine:
        """``trace-max`` | ``covering`` (16 cores / 64 GiB / 64 GiB grown by powers of two, the
        former default) | ``CORES,MEMORY_MB,DISK_MB``; a bad spec names the field."""
        from schedlab.core.errors import BadInputError

        text = spec.strip().lower()
        if text == "trace-max":
            return cls.trace_max(tasks)
        if text == "covering":
            return cls.covering(tasks)
        parts = text.split(",")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 3 or not all(0 < v < float("inf") for v in values):
            raise BadInputError(f"expected trace-max, covering or CORES,MEMORY_MB,DISK_MB "
                                f"(three numbers > 0), got {spec!r}", field="whole_machine")
        return cls(*values)


@dataclass(slots=True)
class Defaults:
    """The bucketing defaults of the paper and of the reference implementation (cctools).

    ``first`` is the sampling-phase allocation (1 core, 1000 MB memory, 1000 MB disk), doubled
    (``growth``) after every failure; ``sampling`` completed tasks end the sampling phase;
    exhaustive bucketing tries 1..``max_buckets`` buckets.
    """

    first: Resources = field(default_factory=lambda: Resources(1.0, 1000.0, 1000.0))
    sampling: int = 10
    growth: float = 2.0
    max_buckets: int = 10
    #: a category still in its sampling phase predicts from the records of all categories
    #: pooled (when those are past sampling) instead of the defaults; see ``XBucket``
    pooled_fallback: bool = True
    #: with the pooled fallback, a cold category's fresh attempt of a type takes the pooled
    #: (category-blind) buckets' ``cold_quantile`` upper quantile instead of a bucket chosen as
    #: for a known category, and its retries never pass its own sampling step; None: neither
    #: (the former rule). 0.75 since issue 51 (0.9 before; chosen on the CCL traces: fewest
    #: cold retries among the rules that kept their mean efficiency, see docs/systems/xbucket.md)
    cold_quantile: float | None = 0.75
    #: which cold tasks take that prior: ``"sampling"`` every fresh task while the category is
    #: in sampling (the default); ``"first"`` only while the category has no record of the
    #: type, then a pooled bucket chosen as for a known category; ``"own-above"`` the prior
    #: while it has no record, then the pooled bucket at its largest own record (when its
    #: records repeat a value) or strictly above it (measured, not the default: see the docs)
    cold_prior: str = "sampling"
    #: a failed attempt whose monitor reported *more* than its allocation (a measured need, as
    #: a replay with peak semantics knows it) is retried at the smallest bucket / step at or
    #: above that value, not strictly above it (which skips an exact fit, e.g. 4 cores retried
    #: at 5). Applies to every allocator (X-Bucket and the alternatives alike). Issue 51.
    retry_inclusive: bool = True
    #: X-Bucket: while a category is in its sampling phase, a fresh task's allocation of a
    #: type is never below the smallest value the category's own records show, once they hold
    #: an exact repeat (a discrete resource such as whole cores): a category that always needs
    #: 4 cores no longer starts every sampling task at the default or the pool's 2 and pays a
    #: kill each time. Retries keep the sampling path. Issue 51.
    sampling_floor: bool = True
    #: time-weighted X-Bucket (``-tw``): a record's weight is the time its task held
    #: allocations, the killed attempts before its success included (in a category, the time of
    #: failed attempts is added to its next successful record), not its final run alone
    tw_kill_time: bool = True

    @classmethod
    def cctools(cls) -> Defaults:
        """cctools' own bucketing manager: no pooled fallback, no issue-51 rules (for the
        side-by-side reference comparison)."""
        return cls(pooled_fallback=False, cold_quantile=None, retry_inclusive=False,
                   sampling_floor=False)
