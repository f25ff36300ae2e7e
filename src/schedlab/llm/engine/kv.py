"""Paged K/V memory: a device block pool and a separate host block store, real tensors.

``BlockPool`` holds ``k``/``v`` tensors of shape [layers, blocks, block_tokens, kv_heads,
head_dim] and a free list of physical block ids; a request's block table lists the ids that hold
its positions. ``HostStore`` is a second, separately allocated pool of the same layout (the CPU
memory tier of vLLM's offloading connector / SGLang's HiCache); ``offload`` and ``reload`` are
real tensor copies between the two, timed by the caller.
"""

from __future__ import annotations

import torch

from schedlab.core.errors import ConfigError


class BlockPool:
    """Fixed-size pool of K/V blocks with a free list."""

    def __init__(
        self,
        layers: int,
        blocks: int,
        block_tokens: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if blocks < 0 or block_tokens < 1:
            raise ConfigError(
                f"needs blocks >= 0 and block_tokens >= 1, got {blocks}, {block_tokens}",
                field="blocks",
            )
        shape = (layers, blocks, block_tokens, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.blocks, self.block_tokens = blocks, block_tokens
        self.free = list(range(blocks - 1, -1, -1))

    @property
    def block_bytes(self) -> int:
        k = self.k
        return 2 * k.shape[0] * k.shape[2] * k.shape[3] * k.shape[4] * k.element_size()

    def n_free(self) -> int:
        return len(self.free)

    def take(self) -> int:
        return self.free.pop()

    def give(self, block: int) -> None:
        self.free.append(block)


class HostStore(BlockPool):
    """The host tier: its own tensors; copies in and out of a device ``BlockPool``."""

    def offload(self, pool: BlockPool, src: int) -> int:
        dst = self.take()
        self.k[:, dst].copy_(pool.k[:, src])
        self.v[:, dst].copy_(pool.v[:, src])
        return dst

    def reload(self, pool: BlockPool, src: int, dst: int) -> None:
        pool.k[:, dst].copy_(self.k[:, src])
        pool.v[:, dst].copy_(self.v[:, src])
