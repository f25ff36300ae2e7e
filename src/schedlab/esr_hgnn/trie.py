"""The metapath trie: metapaths that share a prefix share the trie nodes of that prefix.

ESR-HGNN's central observation (../shared/papers/05-esr_hgnn.md): ``APA`` and ``APCPA`` both
start with the hop ``A -> P``; sampling each metapath independently walks that hop twice. In a
trie every prefix appears once, so a sampler that expands trie *edges* instead of metapath *hops*
performs each shared traversal once and fans the result out to every branch below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class TrieNode:
    """One prefix: its last node type, its depth (hops from the root) and what hangs below."""

    prefix: str
    parent: int  # index of the parent node, -1 for the root
    children: dict[str, int] = field(default_factory=dict)
    terminal: bool = False  # some metapath ends here

    @property
    def depth(self) -> int:
        return len(self.prefix) - 1

    @property
    def type(self) -> str:
        return self.prefix[-1]


class MetapathTrie:
    """A prefix tree over metapaths that all start at the same node type.

    Nodes are stored in insertion order, which is breadth-respecting: a parent always precedes
    its children, so one forward pass over :attr:`nodes` visits every hop after its prefix.
    """

    def __init__(self, metapaths: Sequence[str]) -> None:
        if not metapaths:
            raise ValueError("a trie needs at least one metapath")
        roots = {mp[0] for mp in metapaths}
        if len(roots) != 1:
            raise ValueError(f"metapaths start at different types {sorted(roots)}")
        self.metapaths = list(dict.fromkeys(metapaths))
        self.nodes: list[TrieNode] = [TrieNode(metapaths[0][0], -1)]
        for mp in self.metapaths:
            current = 0
            for t in mp[1:]:
                child = self.nodes[current].children.get(t)
                if child is None:
                    child = len(self.nodes)
                    self.nodes.append(TrieNode(self.nodes[current].prefix + t, current))
                    self.nodes[current].children[t] = child
                current = child
            self.nodes[current].terminal = True

    @property
    def n_edges(self) -> int:
        """Hops the trie sampler walks: one per non-root node."""
        return len(self.nodes) - 1

    @property
    def naive_hops(self) -> int:
        """Hops naive per-metapath sampling walks for the same metapaths."""
        return sum(len(mp) - 1 for mp in self.metapaths)

    def node_of(self, metapath: str) -> int:
        current = 0
        for t in metapath[1:]:
            current = self.nodes[current].children[t]
        return current

    def weighted_cost(self, hop_cost: Callable[[str], float]) -> float:
        """Sum ``hop_cost(prefix)`` over trie edges: expected reads, every prefix walked once."""
        return sum(hop_cost(node.prefix) for node in self.nodes[1:])


def naive_weighted_cost(metapaths: Sequence[str], hop_cost: Callable[[str], float]) -> float:
    """Sum ``hop_cost(prefix)`` over every hop of every metapath: naive expected reads."""
    return sum(hop_cost(mp[: d + 1]) for mp in metapaths for d in range(1, len(mp)))
