"""Alibaba ``cluster-trace-gpu-v2023``: its GPU node list and pod list, and a generator shaped
like them.

Why here (``schedlab.traces``) and not in a system: gPooling and CouchSurfer both read this
trace, and no system may import another.

gPooling (../shared/papers/14-gpooling.md) is evaluated "using benchmarks derived from real
cluster traces"; the public trace of a GPU-sharing production cluster is Alibaba's
cluster-trace-gpu-v2023 (Weng et al., ATC'23). Two files matter:

- the node list (``sn, cpu_milli, memory_mib, gpu, model``): heterogeneous nodes, each with its
  CPU (thousandths of a core), memory (MiB), GPU count and GPU model;
- the pod list (``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
  creation_time, deletion_time, scheduled_time``): what each pod asks for (``gpu_milli`` is the
  share of *each* of its ``num_gpu`` GPUs), which GPU models it accepts (``gpu_spec``, models
  separated by ``|``; empty: any), and when it was created, scheduled and deleted (seconds).

The data is not the project's to redistribute: readers take a path, and the seeded generators
(:func:`synthetic_nodes`, :func:`synthetic_pods`) mimic the shape (node mix, request mix) for
tests and for ``reproduce`` where ../shared/data is absent. Bad rows raise one-line
``BadInputError`` naming file, line and field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.data import data_path
from schedlab.core.errors import BadInputError
from schedlab.core.io import csv_rows

FULL = 1000  # milli of one GPU
NODE_FILE, POD_FILE = "gpu2023_node_list_gpu_node.csv", "gpu2023_pod_list_default.csv"


@dataclass(frozen=True)
class Node:
    """One node: CPU (milli), memory (MiB), GPU count and model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class Pod:
    """One pod: per-pod CPU/memory, per-GPU share on ``num_gpu`` GPUs, accepted models, times."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; 0 for CPU-only pods
    gpu_spec: tuple[str, ...] = ()  # accepted GPU models; empty: any
    creation_time: float = 0.0
    scheduled_time: float | None = None
    deletion_time: float = 0.0
    qos: str = ""
    phase: str = ""

    @property
    def gpu_demand(self) -> int:
        """GPU milli the pod asks for in total."""
        return self.num_gpu * self.gpu_milli

    @property
    def kind(self) -> tuple[int, int, int, tuple[str, ...]]:
        """FGD's pod resource key: (cpu, num_gpu, gpu_milli, gpu_spec)."""
        return (self.cpu_milli, self.num_gpu, self.gpu_milli, self.gpu_spec)


def _int(row: dict, column: str, path: Path, line: int, *, low: int = 0,
         high: int | None = None) -> int:
    text = row[column]
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"{text!r} is not a number", path=path, line=line,
                            field=column) from None
    if not math.isfinite(value) or value != int(value):
        raise BadInputError(f"{text!r} is not a whole number", path=path, line=line, field=column)
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise BadInputError(f"must be {bound}, got {value}", path=path, line=line, field=column)
    return value


def _time(row: dict, column: str, path: Path, line: int, *, optional: bool = False):
    text = row.get(column, "")
    if text == "":
        if optional:
            return None
        raise BadInputError("missing value", path=path, line=line, field=column)
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"{text!r} is not a number", path=path, line=line,
                            field=column) from None
    if not math.isfinite(value) or value < 0:
        raise BadInputError(f"must be finite and >= 0, got {text}", path=path, line=line,
                            field=column)
    return value


def read_node_list(path: str | Path, limit: int | None = None) -> list[Node]:
    """The nodes of an Alibaba ``gpu2023_node_list`` CSV (``sn, cpu_milli, memory_mib, gpu,
    model``); nodes without GPUs are kept (they can host CPU-only pods)."""
    path = Path(path)
    if limit is not None and limit < 1:
        raise BadInputError(f"must be at least 1, got {limit}", field="limit")
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, row in csv_rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        name = row["sn"]
        if not name:
            raise BadInputError("missing node name", path=path, line=line, field="sn")
        if name in seen:
            raise BadInputError(f"node {name!r} listed twice", path=path, line=line, field="sn")
        seen.add(name)
        gpus = _int(row, "gpu", path, line, high=64)
        model = row["model"]
        if gpus and not model:
            raise BadInputError("a node with GPUs needs a model", path=path, line=line,
                                field="model")
        nodes.append(Node(name, _int(row, "cpu_milli", path, line),
                          _int(row, "memory_mib", path, line), gpus, model))
        if limit is not None and len(nodes) >= limit:
            break
    if not any(n.gpus for n in nodes):
        raise BadInputError("the node list has no GPUs", path=path, field="gpu")
    return nodes


def read_pod_list(path: str | Path, *, gpu_only: bool = False, times: bool = True) -> list[Pod]:
    """The pods of an Alibaba ``gpu2023_pod_list`` CSV.

    ``gpu_milli`` must be in 1..1000 for a GPU pod (0 for a CPU-only one); ``gpu_spec`` lists
    accepted models separated by ``|``; ``scheduled_time`` may be blank (never scheduled);
    ``deletion_time`` must not precede creation. With ``times=False`` (workload inflation,
    which draws pods without their times) the time columns may be absent.
    """
    path = Path(path)
    pods: list[Pod] = []
    required = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
    if times:
        required += ("creation_time", "deletion_time")
    for line, row in csv_rows(path, required):
        count = _int(row, "num_gpu", path, line, high=64)
        milli = _int(row, "gpu_milli", path, line, high=FULL)
        if count and not milli:
            raise BadInputError("a GPU pod needs gpu_milli in 1..1000", path=path, line=line,
                                field="gpu_milli")
        if not count:
            milli = 0
        created = _time(row, "creation_time", path, line) if "creation_time" in row else 0.0
        deleted = _time(row, "deletion_time", path, line) if "deletion_time" in row else created
        scheduled = _time(row, "scheduled_time", path, line, optional=True) \
            if "scheduled_time" in row else None
        if deleted < created:
            raise BadInputError(f"deletion ({deleted}) before creation ({created})", path=path,
                                line=line, field="deletion_time")
        if scheduled is not None and scheduled < created:
            raise BadInputError(f"scheduled ({scheduled}) before creation ({created})",
                                path=path, line=line, field="scheduled_time")
        spec = tuple(sorted({s.strip() for s in row.get("gpu_spec", "").split("|")
                             if s.strip()}))
        if count == 0 and gpu_only:
            continue
        pods.append(Pod(row.get("name", "") or f"pod-{line}", _int(row, "cpu_milli", path, line),
                        _int(row, "memory_mib", path, line), count, milli, spec, created,
                        scheduled, deleted, row.get("qos", ""), row.get("pod_phase", "")))
    if not any(p.num_gpu for p in pods):
        raise BadInputError("the trace has no GPU pods", path=path, field="num_gpu")
    return pods


def shared_trace() -> tuple[Path, Path] | None:
    """(node list, pod list) under ``<data dir>/alibaba`` (schedlab.core.data), or None."""
    nodes, pods = data_path("alibaba", NODE_FILE), data_path("alibaba", POD_FILE)
    return (nodes, pods) if nodes.is_file() and pods.is_file() else None


def load_cluster(seed: int = 0, pods: int = 8000) -> tuple[list, list, bool]:
    """(nodes, pods, real): the real node and pod lists where ../shared/data has them, else
    the seeded generator with their shape (1,213 nodes, ``pods`` pods)."""
    found = shared_trace()
    if found is not None:
        return read_node_list(found[0]), read_pod_list(found[1]), True
    return synthetic_nodes(1213, seed), synthetic_pods(pods, seed), False


#: node kinds of the GPU 2023 cluster's shape: (model, GPUs, CPU milli, memory MiB, share)
NODE_KINDS = (("G2", 8, 96_000, 393_216, 0.45), ("T4", 2, 104_000, 524_288, 0.32),
              ("P100", 2, 16_000, 122_880, 0.09), ("G3", 8, 128_000, 786_432, 0.04),
              ("V100M16", 4, 32_000, 131_072, 0.03), ("V100M32", 8, 64_000, 262_144, 0.03),
              ("A10", 1, 128_000, 1_048_576, 0.02), ("V100M16", 8, 64_000, 262_144, 0.02))


def synthetic_nodes(count: int, seed: int = 0) -> list[Node]:
    """``count`` nodes drawn from the GPU 2023 cluster's node mix (not its rows)."""
    if count < 1:
        raise BadInputError(f"must be at least 1, got {count}", field="nodes")
    rng = np.random.default_rng(seed)
    share = np.array([k[4] for k in NODE_KINDS])
    kinds = rng.choice(len(NODE_KINDS), size=count, p=share / share.sum())
    return [Node(f"node-{i:05d}", NODE_KINDS[k][2], NODE_KINDS[k][3], NODE_KINDS[k][1],
                 NODE_KINDS[k][0]) for i, k in enumerate(kinds)]


#: fractional GPU shares and weights of a sharing pod (the trace's histogram, rounded)
SHARE_MILLI = np.array([100, 200, 250, 300, 400, 460, 500, 600, 700, 800, 900])
SHARE_WEIGHT = np.array([0.04, 0.06, 0.04, 0.10, 0.10, 0.20, 0.05, 0.08, 0.05, 0.24, 0.04])


def synthetic_pods(count: int, seed: int = 0, *, span: float = 1.3e7) -> list[Pod]:
    """``count`` pods with the trace's request mix: ~13 % CPU-only, ~48 % one whole GPU,
    ~38 % a GPU share, ~1 % gangs of 2/4/8 whole GPUs; CPU and memory per GPU as in the
    trace's bulk; heavy-tailed lifetimes, creation times spread over ``span`` seconds."""
    if count < 1:
        raise BadInputError(f"must be at least 1, got {count}", field="pods")
    rng = np.random.default_rng(seed)
    kind = rng.choice(4, size=count, p=[0.13, 0.48, 0.38, 0.01])
    pods = []
    created = np.sort(rng.uniform(0, span, size=count))
    life = rng.lognormal(np.log(3600.0), 2.2, size=count)
    for i in range(count):
        if kind[i] == 0:
            gpus, milli = 0, 0
        elif kind[i] == 1:
            gpus, milli = 1, FULL
        elif kind[i] == 2:
            gpus, milli = 1, int(rng.choice(SHARE_MILLI, p=SHARE_WEIGHT / SHARE_WEIGHT.sum()))
        else:
            gpus, milli = int(rng.choice([2, 4, 8], p=[0.2, 0.2, 0.6])), FULL
        per_gpu = max(gpus, 1) * (milli / FULL if gpus else 1.0)
        cpu = int(rng.choice([2000, 4000, 6000, 8000, 12000, 16000],
                             p=[0.1, 0.2, 0.2, 0.15, 0.3, 0.05]) * max(per_gpu, 0.5))
        memory = int(cpu / 1000 * rng.choice([2048, 4096], p=[0.4, 0.6]))
        cpu = min(cpu, 96_000)
        pods.append(Pod(f"pod-{i:06d}", cpu, min(memory, 393_216), gpus, milli, (),
                        float(created[i]), float(created[i]),
                        float(min(created[i] + life[i], span * 1.01))))
    return pods


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def write_node_list(nodes: list[Node], path: str | Path) -> Path:
    """Write nodes in the node-list format, atomically."""
    from schedlab.core.io import write_text

    lines = ["sn,cpu_milli,memory_mib,gpu,model"]
    lines += [f"{n.name},{n.cpu_milli},{n.memory_mib},{n.gpus},{n.model}" for n in nodes]
    return write_text(path, "\n".join(lines) + "\n")


def write_pod_list(pods: list[Pod], path: str | Path) -> Path:
    """Write pods in the pod-list format, atomically."""
    from schedlab.core.io import write_text

    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
             "creation_time,deletion_time,scheduled_time"]
    for p in pods:
        scheduled = "" if p.scheduled_time is None else _num(p.scheduled_time)
        lines.append(f"{p.name},{p.cpu_milli},{p.memory_mib},{p.num_gpu},{p.gpu_milli},"
                     f"{'|'.join(p.gpu_spec)},{p.qos},{p.phase},{_num(p.creation_time)},"
                     f"{_num(p.deletion_time)},{scheduled}")
    return write_text(path, "\n".join(lines) + "\n")
