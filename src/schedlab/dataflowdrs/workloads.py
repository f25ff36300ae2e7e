"""Seeded workflows that really run here, and the bottlenecks we inject into them.

DataFlowDrs (paper 09) is evaluated on representative scientific workflows. Three shapes:

* ``genomes``   1000-Genomes: individuals(i) -> individuals_merge -> mutation_overlap / frequency
                per population, with a sifting branch.
* ``mapreduce`` data-parallel map -> all-to-all partitions -> reduce -> collect.
* ``dlreader``  DL-training-like reader: decode shards -> collate batches -> a chain of epochs.

A :class:`WorkflowConfig` is the knob set the recommender changes: which tier each file group
lives on, each task group's I/O block size, the width of the merge stage, and parallelism.
:func:`inject` plants one known bottleneck (a slow storage tier, a serial merge, a small-I/O
storm) in a seeded variant, and returns the ground truth the ranking is scored against.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.dataflowdrs.runner import TaskSpec, Workflow
from schedlab.dataflowdrs.tiers import TierLayout

KB = 1024
MB = 1 << 20
BOTTLENECK_KINDS = ("slow-tier", "serial-task", "small-io")


@dataclass(frozen=True)
class WorkflowConfig:
    """Everything that shapes one run of a workflow: the recommender's knobs live here."""

    workflow: str = "genomes"
    scale: int = 6
    size_kb: int = 1024
    parallelism: int = 2
    default_tier: str = "local"
    tiers: dict[str, str] = field(default_factory=dict)  # file group -> tier
    blocks: dict[str, int] = field(default_factory=dict)  # task group -> I/O block bytes
    work: dict[str, float] = field(default_factory=dict)  # task group -> MB hashed per MB read
    merge_width: int = 1

    def tier(self, group: str) -> str:
        return self.tiers.get(group, self.default_tier)

    def block(self, group: str) -> int:
        return self.blocks.get(group, MB)

    def factor(self, group: str, default: float) -> float:
        return self.work.get(group, default)

    def with_tier(self, group: str, tier: str) -> WorkflowConfig:
        return replace(self, tiers={**self.tiers, group: tier})

    def with_block(self, group: str, block: int) -> WorkflowConfig:
        return replace(self, blocks={**self.blocks, group: block})


@dataclass(frozen=True)
class Truth:
    """The bottleneck planted in a variant: its kind and the group it lives in."""

    kind: str
    target: str


class _Builder:
    """Collects tasks and files for one workflow, placing each file on its group's tier."""

    def __init__(self, cfg: WorkflowConfig, layout: TierLayout) -> None:
        self.cfg, self.layout = cfg, layout
        self.tasks: list[TaskSpec] = []
        self.initial: list[tuple[str, int]] = []
        self.groups: dict[str, str] = {}
        self.sizes: dict[str, int] = {}

    def file(self, group: str, name: str, size: int) -> str:
        path = str(Path(self.layout.root(self.cfg.tier(group))) / self.cfg.workflow / name)
        self.groups[path], self.sizes[path] = group, int(size)
        return path

    def source(self, group: str, name: str, size: int) -> str:
        path = self.file(group, name, size)
        self.initial.append((path, int(size)))
        return path

    def task(self, tid: str, group: str, inputs: list[str], outputs: list[str],
             factor: float, fixed: bool = False) -> None:
        """Add a task; its CPU work is ``factor`` MB hashed per MB read (``cfg.work`` wins
        unless ``fixed``)."""
        read_mb = sum(self.sizes[p] for p in inputs) / MB
        work = factor if fixed else self.cfg.factor(group, factor)
        self.tasks.append(TaskSpec(tid, group, tuple(inputs),
                                   tuple((p, self.sizes[p]) for p in outputs),
                                   self.cfg.block(group), work * read_mb))

    def merge(self, group: str, inputs: list[str], out_group: str, out: str, size: int,
              factor: float) -> str:
        """A merge stage; ``merge_width`` > 1 splits it into parallel parts plus a light join."""
        target = self.file(out_group, out, size)
        width = max(1, min(self.cfg.merge_width, len(inputs)))
        if width == 1:
            self.task(group, group, inputs, [target], factor)
            return target
        parts = []
        for k in range(width):
            part = self.file(out_group + "_part", f"{out}.part{k}", size // width)
            self.task(f"{group}_part{k:02d}", group, inputs[k::width], [part], factor)
            parts.append(part)
        self.task(f"{group}_join", group, parts, [target], 0.05, fixed=True)
        return target

    def build(self) -> Workflow:
        return Workflow(self.cfg.workflow, self.tasks, self.initial, self.groups,
                        config=dict(workflow=self.cfg.workflow, scale=self.cfg.scale,
                                    size_kb=self.cfg.size_kb, tiers=self.cfg.tiers,
                                    blocks=self.cfg.blocks, work=self.cfg.work,
                                    merge_width=self.cfg.merge_width,
                                    parallelism=self.cfg.parallelism))


def _genomes(b: _Builder) -> None:
    n, s = b.cfg.scale, b.cfg.size_kb * KB
    inds = []
    for i in range(n):
        chrom = b.source("chrom", f"chrom_{i:03d}.vcf", s)
        ind = b.file("ind", f"ind_{i:03d}.dat", s // 2)
        b.task(f"individuals_{i:03d}", "individuals", [chrom], [ind], 1.0)
        inds.append(ind)
    annotation = b.source("annotation", "annotation.vcf", s)
    sifted = b.file("sifted", "sifted.dat", s // 4)
    b.task("sifting", "sifting", [annotation], [sifted], 1.0)
    merged = b.merge("individuals_merge", inds, "merged", "merged.dat", n * s // 4, 1.0)
    for p in range(2):
        pop = b.source("populations", f"pop_{p}.txt", 4 * KB)
        for kind in ("mutation_overlap", "frequency"):
            out = b.file(kind, f"{kind}_{p}.dat", s // 8)
            b.task(f"{kind}_{p}", kind, [merged, sifted, pop], [out], 0.5)


def _mapreduce(b: _Builder) -> None:
    m, s, r = b.cfg.scale, b.cfg.size_kb * KB, 2
    parts: list[list[str]] = [[] for _ in range(r)]
    for i in range(m):
        split = b.source("split", f"split_{i:03d}.dat", s)
        outs = [b.file("part", f"part_{i:03d}_{j}.dat", s // (2 * r)) for j in range(r)]
        b.task(f"map_{i:03d}", "map", [split], outs, 1.0)
        for j, out in enumerate(outs):
            parts[j].append(out)
    reduced = []
    for j in range(r):
        out = b.file("reduced", f"reduced_{j}.dat", m * s // (2 * r))
        b.task(f"reduce_{j}", "reduce", parts[j], [out], 0.5)
        reduced.append(out)
    b.merge("collect", reduced, "result", "result.dat", m * s // 8, 1.0)


def _dlreader(b: _Builder) -> None:
    n, s = b.cfg.scale, b.cfg.size_kb * KB
    samples = []
    for k in range(n):
        shard = b.source("shards", f"shard_{k:03d}.rec", s)
        sample = b.file("samples", f"sample_{k:03d}.npy", s)
        b.task(f"decode_{k:03d}", "decode", [shard], [sample], 0.5)
        samples.append(sample)
    batches = b.merge("collate", samples, "batches", "batches.bin", n * s // 2, 1.0)
    previous: list[str] = []
    for e in range(2):
        ckpt = b.file("ckpt", f"ckpt_{e}.pt", 64 * KB)
        b.task(f"train_{e}", "train", [batches, *previous], [ckpt], 0.3)
        previous = [ckpt]


WORKFLOWS = {"genomes": _genomes, "mapreduce": _mapreduce, "dlreader": _dlreader}

#: where each kind of bottleneck may be planted: file groups (slow tier), task groups (small
#: I/O) and the merge group (serial task)
CANDIDATES: dict[str, dict[str, list[str]]] = {
    "genomes": {"slow-tier": ["ind", "merged"], "small-io": ["individuals"],
                "serial-task": ["individuals_merge"]},
    "mapreduce": {"slow-tier": ["part", "reduced"], "small-io": ["map"],
                  "serial-task": ["collect"]},
    "dlreader": {"slow-tier": ["samples", "batches"], "small-io": ["decode"],
                 "serial-task": ["collate"]},
}


def build(cfg: WorkflowConfig, layout: TierLayout) -> Workflow:
    """The task DAG of ``cfg`` with every file placed on its tier's directory."""
    if cfg.workflow not in WORKFLOWS:
        raise UnknownNameError("workflow", cfg.workflow, sorted(WORKFLOWS))
    if cfg.scale < 1 or cfg.size_kb < 1:
        raise ConfigError("scale and size_kb must be positive", field="scale")
    for group, tier in cfg.tiers.items():
        if tier not in layout.roots:
            raise ConfigError(f"unknown tier '{tier}' for file group '{group}'; valid: "
                              + ", ".join(sorted(layout.roots)), field="tier")
    for group, size in cfg.blocks.items():
        if size < 1:
            raise ConfigError(f"block size for task group '{group}' must be >= 1 byte, "
                              f"got {size}", field="block")
    builder = _Builder(cfg, layout)
    WORKFLOWS[cfg.workflow](builder)
    return builder.build()


def check_groups(cfg: WorkflowConfig, layout: TierLayout) -> None:
    """Reject ``tiers``/``blocks`` keys that name no file/task group of the workflow (a typo
    would otherwise be ignored silently)."""
    workflow = build(cfg, layout)
    files = sorted(set(workflow.file_groups.values()))
    tasks = sorted({t.group for t in workflow.tasks})
    for group in cfg.tiers:
        if group not in files:
            raise ConfigError(f"no file group '{group}' in {cfg.workflow}; valid: "
                              + ", ".join(files), field="tier")
    for group in cfg.blocks:
        if group not in tasks:
            raise ConfigError(f"no task group '{group}' in {cfg.workflow}; valid: "
                              + ", ".join(tasks), field="block")


def inject(cfg: WorkflowConfig, kind: str, seed: int) -> tuple[WorkflowConfig, Truth]:
    """Plant one bottleneck of ``kind`` in a seeded choice of group; return the ground truth.

    Magnitudes are fixed (a 25 MB/s shared tier, 1 KiB I/O calls, 150x merge work) so the
    planted problem is the dominant one, as in the paper's case studies.
    """
    if kind not in BOTTLENECK_KINDS:
        raise UnknownNameError("bottleneck kind", kind, list(BOTTLENECK_KINDS))
    target = random.Random(seed).choice(CANDIDATES[cfg.workflow][kind])
    if kind == "slow-tier":
        return cfg.with_tier(target, "shared"), Truth(kind, target)
    if kind == "small-io":
        return cfg.with_block(target, 1024), Truth(kind, target)
    return replace(cfg, work={**cfg.work, target: 150.0}, merge_width=1), Truth(kind, target)


def seeded_config(workflow: str, seed: int, scale: int | None = None,
                  size_kb: int = 1024) -> WorkflowConfig:
    """A baseline configuration with a seeded scale (so variants differ, not just labels)."""
    rng = random.Random(seed)
    n = scale if scale is not None else rng.choice([4, 5, 6])
    return WorkflowConfig(workflow=workflow, scale=n, size_kb=size_kb)
