"""A DP rank's radix (prefix) cache, reduced to what sets a real request's `cached_tokens`.

Which prompt prefixes it holds: prompts are keyed by chained block hashes (`wire._blocks`), a request hits
the longest run of leading blocks the cache has seen, and its own blocks are then cached. Capacity is in
tokens (the rank's KV pool); the least recently used blocks go first, as SGLang's eviction does. Each DP
rank has its own cache, as each DP-attention scheduler has its own tree.

A leaf module (it holds state and reads none of the deployment's), so that sim.py's `RankSim` can own one
without importing the KV part (prefix_cache.py), which reads the ranks.
"""

from __future__ import annotations

from collections import OrderedDict

from monitor.emulate.wire import CACHE_BLOCK


class PrefixCache:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_blocks = max(1, capacity_tokens // CACHE_BLOCK)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def match_and_insert(self, blocks: tuple[int, ...], prompt_tokens: int) -> int:
        """Cached tokens of a prompt (at least one token is always computed), then cache its blocks."""
        hit = 0
        for key in blocks:
            if key not in self._blocks:
                break
            hit += 1
        for key in blocks:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return min(hit * CACHE_BLOCK, max(prompt_tokens - 1, 0))

    def __len__(self) -> int:
        return len(self._blocks)
