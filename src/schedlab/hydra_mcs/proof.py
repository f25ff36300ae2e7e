"""``--prove``: a certificate that the size found is the maximum, and its independent checker.

What is certified: the witness mapping is a common induced (connected, with ``--connected``)
subgraph of size k, *and* no common subgraph has more than k vertices. The second part is the
search tree itself, written by the kernel (``learned.search_learned``, which runs McSplit's
order, or the learned one with ``--branching``) while it searches, in preorder:

* a node is one record: ``-1`` (closed: pruned by its bound, or nothing left to branch on) or
  the left vertex v it branches on;
* a branching node is followed by its children, each one record w (v ↦ w) and that child's
  records, then ``-2``, then the node where v stays unmatched (its records).

The checker (:func:`check`) shares no code with the search: it reads the two graphs, rebuilds
every node's domains from the definition (plain Python sets over the adjacency matrices: the
vertices of the pattern a vertex w of the target can still be matched with are those with the
same label and the same adjacency value to every mapped pair), and checks at every node that

* a closed node's bound, |mapping| + Σ min(|L_i|, |R_i|), is at most k (or, with
  ``--connected``, that no remaining pattern vertex is adjacent to a non-empty mapping);
* a branching node's v lies in one domain (an adjacent one with ``--connected``), its
  children are exactly the target vertices of that domain, each once, and the "v unmatched"
  node follows;

so every common subgraph extending the root (i.e. every one) is covered by a closed node whose
bound is ≤ k. Cost: 4 bytes per node and per child, about 8 bytes per search node; the
checker runs in pure Python at ~50-100 k nodes/s, so certificates are for searches of up to a
few million nodes (s20 pairs: 0.26 M nodes, 2 MB), not for the 10^8-node ones.

File: one JSON line (format, size, mapping in the files' vertex numbers, the vertex orders the
search used, flags, node and record counts, a SHA-256 of each graph as read), then the records
as little-endian int32. Written to a temporary sibling and renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError

FORMAT = "hydra-mcs-proof 1"
CLOSED, END = -1, -2


class ProofError(BadInputError):
    """The certificate does not prove the claim (or is not a certificate of these graphs)."""


def graph_digest(g) -> str:
    """SHA-256 of a graph as read (adjacency values, labels, directedness)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(g.adj, dtype=np.uint32).tobytes())
    h.update(np.ascontiguousarray(g.labels, dtype=np.uint32).tobytes())
    h.update(b"D" if g.directed else b"U")
    return h.hexdigest()


class ProofWriter:
    """Collects the kernel's records in a temporary file; :meth:`finish` writes the proof."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        folder = self.path.parent
        if not folder.is_dir():
            raise BadInputError("folder does not exist", path=folder, field="prove")
        if self.path.is_dir():  # refused before the search, not after it
            raise BadInputError("is a directory, not a file name", path=self.path, field="prove")
        try:
            fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".records", dir=folder)
        except OSError as exc:
            raise BadInputError(
                f"cannot write here: {exc.strerror}", path=self.path, field="prove"
            ) from exc
        self._records = Path(name)
        self._file = os.fdopen(fd, "wb")
        self.count = 0

    def __call__(self, records: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(records, dtype="<i4").tobytes())
        self.count += int(records.shape[0])

    def abort(self) -> None:
        self._file.close()
        self._records.unlink(missing_ok=True)

    def finish(self, header: dict) -> Path:
        """Write header + records to ``path`` atomically; removes the temporary records."""
        self._file.close()
        header = dict(format=FORMAT, **header, records=self.count)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        try:
            with os.fdopen(fd, "wb") as out, open(self._records, "rb") as src:
                out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
                while chunk := src.read(1 << 22):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, self.path)
        except OSError as exc:  # a disk that filled up, a folder replaced meanwhile, ...
            Path(tmp).unlink(missing_ok=True)
            raise BadInputError(
                f"cannot write the certificate: {exc.strerror}", path=self.path, field="prove"
            ) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        finally:
            self._records.unlink(missing_ok=True)
        return self.path


def read(path: str | Path) -> tuple[dict, np.ndarray]:
    """The header and the records of a certificate file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            first = f.readline()
            body = f.read()
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror}", path=path) from exc
    try:
        header = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ProofError("first line is not a JSON header", path=path, line=1) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ProofError(f"not a {FORMAT!r} certificate", path=path, line=1, field="format")
    if len(body) % 4:
        raise ProofError(f"records are {len(body)} bytes, not a multiple of 4", path=path)
    return header, np.frombuffer(body, dtype="<i4")


def _valid_mapping(g0, g1, pairs: list[tuple[int, int]], connected: bool) -> str | None:
    left = [v for v, _ in pairs]
    right = [w for _, w in pairs]
    if len(set(left)) != len(left) or len(set(right)) != len(right):
        return "the mapping is not one-to-one"
    for v, w in pairs:
        if not (0 <= v < g0.n and 0 <= w < g1.n):
            return f"pair ({v}, {w}) names a vertex the graphs do not have"
        if int(g0.labels[v]) != int(g1.labels[w]):
            return f"labels differ on ({v}, {w})"
    for i, (v1, w1) in enumerate(pairs):
        for v2, w2 in pairs[i + 1 :]:
            if int(g0.adj[v1, v2]) != int(g1.adj[w1, w2]) or int(g0.adj[v2, v1]) != int(
                g1.adj[w2, w1]
            ):
                return f"adjacency differs between ({v1}, {w1}) and ({v2}, {w2})"
    if connected and len(left) > 1:
        seen, todo = {left[0]}, [left[0]]
        while todo:
            a = todo.pop()
            for b in left:
                if b not in seen and (g0.adj[a, b] or g0.adj[b, a]):
                    seen.add(b)
                    todo.append(b)
        if len(seen) != len(left):
            return "the mapped subgraph is not connected"
    return None


def check(path: str | Path, g0, g1) -> dict:
    """Check the certificate at ``path`` for graphs ``g0``, ``g1`` (as read for the search).

    Returns ``{"size", "nodes", "records", "connected"}`` when it proves that ``size`` is the
    maximum (of a common *connected* subgraph when ``connected``: the header's problem);
    raises :class:`ProofError` naming the record (its index) where it fails.
    """
    path = Path(path)
    header, rec = read(path)
    try:
        k = int(header["size"])
        pairs = [(int(v), int(w)) for v, w in header["mapping"]]
        order0 = [int(x) for x in header["order0"]]
        order1 = [int(x) for x in header["order1"]]
        connected = bool(header["connected"])
        claimed_nodes = int(header["nodes"])
        digests = header["graphs"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ProofError(
            f"header field missing or malformed: {exc}", path=path, line=1, field="header"
        ) from None
    for name, g, digest in (("pattern", g0, digests[0]), ("target", g1, digests[1])):
        if graph_digest(g) != digest:
            raise ProofError(
                f"certificate is for another {name} graph (digest differs)",
                path=path,
                field=name,
                hint="read both graphs with the flags given to solve: --format, "
                "--labels, --directed",
            )
    if sorted(order0) != list(range(g0.n)) or sorted(order1) != list(range(g1.n)):
        raise ProofError(
            "vertex orders are not permutations of the graphs' vertices", path=path, field="order"
        )
    if len(pairs) != k:
        raise ProofError(
            f"the mapping has {len(pairs)} pairs, the claim is {k}", path=path, field="mapping"
        )
    bad = _valid_mapping(g0, g1, pairs, connected)
    if bad:
        raise ProofError(bad, path=path, field="mapping")
    adj0 = [[int(x) for x in row] for row in g0.adj]
    adj1 = [[int(x) for x in row] for row in g1.adj]
    records = rec.tolist()
    state = dict(pos=0, nodes=0)

    def fail(msg: str) -> ProofError:
        return ProofError(f"record {state['pos'] - 1}: {msg}", path=path)

    def take() -> int:
        if state["pos"] >= len(records):
            state["pos"] += 1
            raise fail("the records end in the middle of the tree")
        state["pos"] += 1
        return records[state["pos"] - 1]

    def refine(domains, i, v, w):
        out = []
        for j, (lset, rset, adjacent) in enumerate(domains):
            if j == i:
                lset = [u for u in lset if u != v]
                rset = [x for x in rset if x != w]
            by0: dict[int, list[int]] = {}
            by1: dict[int, list[int]] = {}
            row0, row1 = adj0[v], adj1[w]
            for u in lset:
                by0.setdefault(row0[u], []).append(u)
            for x in rset:
                by1.setdefault(row1[x], []).append(x)
            for value, part in by0.items():
                if value in by1:
                    out.append((part, by1[value], adjacent or value != 0))
        return out

    def node(depth: int, domains) -> None:
        while True:  # the "v unmatched" node is a tail call: a loop, not recursion
            state["nodes"] += 1
            r = take()
            live = [(i, dm) for i, dm in enumerate(domains) if dm[0] and dm[1]]
            if r == CLOSED:
                bound = depth + sum(min(len(lset), len(rset)) for _, (lset, rset, _) in live)
                if bound <= k:
                    return
                if connected and depth > 0 and not any(dm[2] for _, dm in live):
                    if depth > k:
                        raise fail(f"a connected mapping of size {depth} > {k} was closed")
                    return
                raise fail(f"closed node at depth {depth} has bound {bound} > {k}")
            if r < 0 or r >= len(order0):
                raise fail(f"{r} is not a vertex or a closed node")
            v = order0[r]
            where = [i for i, dm in live if v in dm[0]]
            if not where:
                raise fail(f"branching vertex {v} is in no domain of this node")
            i = where[0]
            if connected and depth > 0 and not domains[i][2]:
                raise fail(f"branching vertex {v} is not adjacent to the mapping (--connected)")
            targets = set(domains[i][1])
            seen: set[int] = set()
            while (c := take()) != END:
                if c < 0 or c >= len(order1):
                    raise fail(f"{c} is not a target vertex")
                w = order1[c]
                if w not in targets or w in seen:
                    raise fail(f"child {v} -> {w}: {w} is not an untried target of v's domain")
                seen.add(w)
                node(depth + 1, refine(domains, i, v, w))
            if seen != targets:
                raise fail(f"children of {v} miss targets {sorted(targets - seen)[:5]}")
            lset, rset, adjacent = domains[i]
            domains = [
                *domains[:i],
                ([u for u in lset if u != v], rset, adjacent),
                *domains[i + 1 :],
            ]

    labels0 = {int(x) for x in g0.labels}
    labels1 = {int(x) for x in g1.labels}
    root = [
        (
            [u for u in range(g0.n) if int(g0.labels[u]) == lab],
            [x for x in range(g1.n) if int(g1.labels[x]) == lab],
            False,
        )
        for lab in sorted(labels0 & labels1)
    ]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * (g0.n + 50)))
    try:
        node(0, root)
    finally:
        sys.setrecursionlimit(old)
    if state["pos"] != len(records):
        raise ProofError(
            f"{len(records) - state['pos']} records after the end of the tree", path=path
        )
    if state["nodes"] != claimed_nodes:
        raise ProofError(
            f"the tree has {state['nodes']} nodes, the header says {claimed_nodes}",
            path=path,
            field="nodes",
        )
    return dict(size=k, nodes=state["nodes"], records=len(records), connected=connected)
