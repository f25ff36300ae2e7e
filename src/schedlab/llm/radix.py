"""A two-tier prefix cache: a radix tree over token blocks with a GPU tier and a host tier.

Following SGLang's RadixAttention (Zheng et al., 2024) with unit-length edges: each node is one
block of ``block_tokens`` tokens, keyed by the block hash, so a prompt's cached prefix is the
longest root path whose nodes are resident somewhere. A node may live on the GPU, in host
memory, or both (LMCache-style: the host copy stays after a load back to the GPU).

Who decides what: this module only keeps the tree consistent. The GPU tier evicts unpinned nodes
in LRU order (leaves first, because touching a path refreshes ancestors after descendants); the
*host* tier's admission and eviction decisions belong to a CacheManager (``llm.plugins``;
FairCache's and its baselines in ``schedlab.faircache.cachemgr``), which the engine consults. A
node that is resident nowhere is removed together with its subtree, because nothing below it
can be matched any more.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator


class Node:
    """One cached block. ``pins`` > 0 while a running request uses it (then it is never evicted).

    ``m_*`` slots belong to the active CacheManager (its per-block statistics), so managers need
    no side tables keyed by node id.
    """

    __slots__ = (
        "key",
        "parent",
        "children",
        "uid",
        "depth",
        "gpu",
        "host",
        "pins",
        "alive",
        "computer",
        "cost",
        "users",
        "last_user",
        "last",
        "m_freq",
        "m_key",
        "m_ver",
        "m_owner",
        "m_count",
        "howner",
    )

    def __init__(self, key: object, parent: Node | None, uid: int, depth: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[object, Node] = {}
        self.uid = uid
        self.depth = depth
        self.gpu = False
        self.host = False
        self.pins = 0
        self.alive = True
        self.computer = -1  # tenant whose request computed this block's KV
        self.cost = 0.0  # prefill tokens that computing it took
        self.users: set[int] = set()
        self.last_user = -1
        self.last = 0.0
        self.m_freq = 0.0
        self.m_key = 0.0
        self.m_ver = 0
        self.m_owner = -1
        self.m_count = 0
        self.howner = -1  # tenant whose host share holds the host copy (engine bookkeeping)

    def __repr__(self) -> str:
        tiers = ("G" if self.gpu else "") + ("H" if self.host else "")
        return f"Node(uid={self.uid}, depth={self.depth}, {tiers or '-'}, pins={self.pins})"


class PrefixCache:
    """The tree plus per-tier occupancy; the engine drives it, managers pick host victims."""

    def __init__(self, gpu_blocks: int, block_tokens: int, block_bytes: int) -> None:
        self.gpu_blocks = gpu_blocks
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes
        self._roots: dict[int, Node] = {}
        self._uids = itertools.count(1)
        self.gpu_lru: OrderedDict[int, Node] = OrderedDict()  # unpinned GPU-resident nodes
        self.gpu_used = 0  # blocks held by cached nodes on the GPU (pinned or not)
        self.host_used = 0
        self.nodes = 0

    def root(self, namespace: int) -> Node:
        node = self._roots.get(namespace)
        if node is None:
            node = self._roots[namespace] = Node(None, None, 0, -1)
            node.gpu = True
            node.pins = 1  # a root is never evicted
        return node

    def match(self, namespace: int, blocks: tuple[int, ...]) -> list[Node]:
        """Resident nodes along the longest cached prefix of ``blocks``."""
        node = self.root(namespace)
        path: list[Node] = []
        for key in blocks:
            child = node.children.get(key)
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def extend(
        self, namespace: int, path: list[Node], blocks: tuple[int, ...], tenant: int, now: float
    ) -> list[Node]:
        """Create GPU nodes for ``blocks[len(path):]`` below ``path``; return the new nodes."""
        parent = path[-1] if path else self.root(namespace)
        created = []
        for key in blocks[len(path) :]:
            node = Node(key, parent, next(self._uids), parent.depth + 1)
            node.gpu, node.computer, node.last, node.pins = True, tenant, now, 1
            parent.children[key] = node
            created.append(node)
            parent = node
        self.gpu_used += len(created)
        self.nodes += len(created)
        return created

    def pin(self, node: Node) -> None:
        if node.pins == 0:
            self.gpu_lru.pop(node.uid, None)
        node.pins += 1

    def unpin(self, path: list[Node], now: float) -> None:
        """Release a finished request's path; deepest first, so ancestors end up more recent."""
        for node in reversed(path):
            node.pins -= 1
            node.last = now
            if node.pins == 0 and node.gpu:
                self.gpu_lru[node.uid] = node

    def evictable_gpu(self) -> int:
        return len(self.gpu_lru)

    def pop_gpu_lru(self) -> Node | None:
        """Take the least recently used unpinned GPU node off the GPU (the caller re-homes it)."""
        if not self.gpu_lru:
            return None
        _, node = self.gpu_lru.popitem(last=False)
        node.gpu = False
        self.gpu_used -= 1
        return node

    def load_to_gpu(self, node: Node) -> None:
        """A host hit: the block now also occupies a GPU block (host copy kept)."""
        node.gpu = True
        self.gpu_used += 1

    def remove_subtree(self, node: Node) -> Iterator[Node]:
        """Detach ``node``; yield every node removed (so managers can forget host copies)."""
        if node.parent is not None:
            node.parent.children.pop(node.key, None)
        stack = [node]
        while stack:
            current = stack.pop()
            stack.extend(current.children.values())
            current.children = {}
            current.alive = False
            if current.gpu:
                self.gpu_lru.pop(current.uid, None)
                current.gpu = False
                self.gpu_used -= 1
            self.nodes -= 1
            yield current
