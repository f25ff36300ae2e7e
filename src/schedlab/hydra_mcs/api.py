"""The library entry points: solve two graphs (ours, NetworkX, or files) and get a mapping.

Paper: Hydra-MCS (../shared/papers/02-hydra_mcs.md), on McSplit (Trimble & McCreesh, IJCAI
2017). Graphs are relabelled in McSplit's degree order before the search (so the search tree,
and the node count of the sequential mode, are McSplit's) and the mapping is translated back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.hydra_mcs.engine import Options, search
from schedlab.hydra_mcs.graph import (
    Graph,
    from_networkx,
    induced,
    mcsplit_order,
    to_bitsets,
)
from schedlab.hydra_mcs.policies import make_policy
from schedlab.hydra_mcs.readers import read_graph

HEURISTICS = {"min_max": 0, "min_product": 1}
LABELS = ("none", "vertex", "all")
GPU_KERNELS = ("auto", "block", "thread")
#: branching rules (learned.py): McSplit's own order, McSplit+RL's, McSplitDAL's
BRANCHINGS = {"mcsplit": 0, "rl": 1, "dal": 2}


@dataclass
class MCSResult:
    """A common induced subgraph: ``mapping[v] = w``, and how the search went."""

    size: int
    mapping: dict[int, int]
    nodes: int
    seconds: float
    optimal: bool
    policy: str
    threads: int
    tasks_shared: int = 0
    offloaded: int = 0
    device_nodes: int = 0
    kernel: str = ""  # "aot" (compiled ahead of time) or "jit" (Numba's dispatcher)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["mapping"] = {str(k): v for k, v in sorted(self.mapping.items())}
        return out


def solve(
    g0: Graph,
    g1: Graph,
    *,
    policy: str = "mcsplit",
    threads: int = 1,
    connected: bool = False,
    heuristic: str = "min_max",
    big_first: bool = False,
    timeout: float | None = None,
    gpu: bool = False,
    gpu_kernel: str = "auto",
    branching: str = "mcsplit",
    prove: str | Path | None = None,
    **policy_args,
) -> MCSResult:
    """Maximum common induced subgraph of two graphs in McSplit's encoding.

    ``gpu_kernel`` (with ``gpu``): ``block`` (a 32-thread block per offloaded subproblem,
    bidomains in shared memory), ``thread`` (one thread per subproblem) or ``auto``.
    ``branching``: ``mcsplit`` (McSplit's order, node counts equal to McSplit's), ``rl``
    (McSplit+RL's learned vertex scores) or ``dal`` (McSplitDAL's value function); the learned
    ones run one sequential searcher. ``prove``: write a certificate of the result to this file
    (``proof.py``; sequential McSplit order only).
    """
    check_options(
        connected=connected,
        directed=g0.directed or g1.directed,
        threads=threads,
        heuristic=heuristic,
        timeout=timeout,
        policy=policy,
        gpu_kernel=gpu_kernel,
        branching=branching,
        gpu=gpu,
        prove=prove,
        big_first=big_first,
    )
    if gpu and policy != "hydra-gpu":
        policy = "hydra-gpu"
    device = None
    if gpu:
        from schedlab.hydra_mcs.gpu import CudaDevice

        device = CudaDevice(kernel=gpu_kernel)
    try:
        work = make_policy(policy, threads, **policy_args)
    except TypeError as exc:  # an option the policy does not take
        raise ConfigError(
            f"policy {policy!r} does not take {sorted(policy_args)}: {exc}", field="policy"
        ) from None
    order0, order1 = mcsplit_order(g0, g1)
    s0, s1 = induced(g0, order0), induced(g1, order1)
    options = Options(connected, HEURISTICS[heuristic], big_first, timeout, BRANCHINGS[branching])
    writer = None
    if prove is not None:
        from schedlab.hydra_mcs.proof import ProofWriter

        writer = options.log_sink = ProofWriter(prove)
    try:
        out = search(to_bitsets(s0, s1), s0.n, work, options, device)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    mapping = {int(order0[v]): int(order1[w]) for v, w in out.pairs}
    if writer is not None:
        if not out.optimal:
            writer.abort()
            raise ConfigError(
                "the search stopped before the end: no certificate written",
                path=prove,
                field="prove",
            )
        from schedlab.hydra_mcs.proof import graph_digest

        writer.finish(
            dict(
                size=len(mapping),
                mapping=sorted(mapping.items()),
                order0=[int(x) for x in order0],
                order1=[int(x) for x in order1],
                connected=connected,
                directed=g0.directed,
                nodes=out.nodes,
                branching=branching,
                graphs=[graph_digest(g0), graph_digest(g1)],
            )
        )
    return MCSResult(
        len(mapping),
        mapping,
        out.nodes,
        out.seconds,
        out.optimal,
        work.name,
        work.threads,
        out.tasks_shared,
        out.offloaded,
        out.device_nodes,
        out.kernel,
    )


def check_options(
    *,
    fmt: str = "auto",
    labels: str = "none",
    directed: bool = False,
    connected: bool = False,
    threads: int = 1,
    policy: str = "mcsplit",
    heuristic: str = "min_max",
    timeout: float | None = None,
    gpu_kernel: str = "auto",
    branching: str = "mcsplit",
    gpu: bool = False,
    prove: str | Path | None = None,
    big_first: bool = False,
    **_ignored,
) -> None:
    """Refuse a bad option (one error naming it) before any graph is read or searched."""
    from schedlab.hydra_mcs.policies import POLICIES
    from schedlab.hydra_mcs.readers import FORMATS

    if heuristic not in HEURISTICS:
        raise UnknownNameError("heuristic", heuristic, sorted(HEURISTICS))
    if labels not in LABELS:
        raise UnknownNameError("labels", labels, LABELS)
    if fmt not in FORMATS:
        raise UnknownNameError("format", fmt, FORMATS)
    if gpu_kernel not in GPU_KERNELS:
        raise UnknownNameError("GPU kernel", gpu_kernel, GPU_KERNELS)
    if policy not in POLICIES:
        raise UnknownNameError("policy", policy, sorted(POLICIES))
    if connected and directed:
        raise ConfigError(
            "--connected and --directed cannot be combined (as in McSplit)", field="connected"
        )
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ConfigError(f"must be an integer >= 1, got {threads!r}", field="threads")
    if timeout is not None and not (timeout > 0):  # also rejects NaN
        raise ConfigError(f"must be positive, got {timeout}", field="timeout")
    if branching not in BRANCHINGS:
        raise UnknownNameError("branching", branching, list(BRANCHINGS))
    sequential = threads == 1 and not gpu and policy == "mcsplit"
    if prove is not None and not (sequential and not big_first):
        raise ConfigError(
            f"the certificate is written by one sequential searcher (policy "
            f"mcsplit, 1 thread, no GPU, no --big-first), not policy {policy} "
            f"with {threads} thread(s)"
            f"{' and the GPU' if gpu else ''}{' and big-first' if big_first else ''}",
            field="prove",
        )
    if branching != "mcsplit" and not sequential:
        raise ConfigError(
            f"learned branching ({branching}) runs one sequential searcher "
            f"(policy mcsplit, 1 thread, no GPU), not policy {policy} with "
            f"{threads} thread(s){' and the GPU' if gpu else ''}",
            field="branching",
        )


def solve_files(
    path0: str | Path,
    path1: str | Path,
    *,
    fmt: str = "auto",
    labels: str = "none",
    directed: bool = False,
    **kwargs,
) -> MCSResult:
    """Read two graph files (McSplit's --labels none/vertex(-x)/all(-a) meaning) and solve."""
    if labels not in LABELS:
        raise UnknownNameError("labels", labels, LABELS)
    vertex, edge = labels in ("vertex", "all"), labels == "all"
    g0 = read_graph(path0, fmt, directed=directed, vertex_labels=vertex, edge_labels=edge)
    g1 = read_graph(path1, fmt, directed=directed, vertex_labels=vertex, edge_labels=edge)
    return solve(g0, g1, **kwargs)


def maximum_common_induced_subgraph(
    G1,
    G2,
    *,
    node_label: str | None = None,
    edge_label: str | None = None,
    connected: bool = False,
    threads: int = 1,
    timeout: float | None = None,
    **kwargs,
) -> dict:
    """NetworkX front end: ``{node of G1: node of G2}`` for a maximum common induced subgraph.

    Nodes may be any hashable objects. ``node_label`` / ``edge_label`` name a node / edge
    attribute whose values (any hashable: str, int, tuple, ...) must be *equal* for two
    nodes / edges to match; a node or edge without the attribute has the value ``None``.
    Both graphs must be directed or both undirected. With ``timeout`` the result may not be
    maximum (use :func:`solve` for ``optimal``). Other keywords (``policy``, ``heuristic``,
    ``big_first``, ``gpu``, policy parameters) go to :func:`solve`. Bad input raises a
    :class:`~schedlab.core.errors.BadInputError` naming the field.
    """
    from schedlab.hydra_mcs.graph import LabelTable

    for name, value in (("node_label", node_label), ("edge_label", edge_label)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"an attribute name (str) or None, got {value!r}", field=name)
    for name, g in (("G1", G1), ("G2", G2)):
        if not hasattr(g, "is_directed"):
            raise ConfigError(f"expected a NetworkX graph, got {type(g).__name__}", field=name)
    if G1.is_directed() != G2.is_directed():
        raise ConfigError("one graph is directed and the other is not", field="G2")
    nodes_t, edges_t = LabelTable("node", (1 << 31) - 1), LabelTable("edge", (1 << 16) - 2)
    g0, nodes0 = from_networkx(
        G1, node_label=node_label, edge_label=edge_label, node_table=nodes_t, edge_table=edges_t
    )
    g1, nodes1 = from_networkx(
        G2, node_label=node_label, edge_label=edge_label, node_table=nodes_t, edge_table=edges_t
    )
    policy = kwargs.pop("policy", "mcsplit" if threads == 1 else "hydra-cpu")
    result = solve(
        g0, g1, policy=policy, threads=threads, connected=connected, timeout=timeout, **kwargs
    )
    return {nodes0[v]: nodes1[w] for v, w in result.mapping.items()}
