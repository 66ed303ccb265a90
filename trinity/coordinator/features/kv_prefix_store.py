"""KV caches of earlier prompts, so a prompt that extends one of them costs only its new tokens.

The rendered prompt ends with end-of-turn + generation-prompt tokens that are NOT a prefix of the next
turn's prompt, so entries are matched by their longest common TOKEN prefix with the new prompt, and
only that common part is reused. Entries are evicted least-recently-used under a budget in tokens
(one token costs layers x 2 x kv_heads x head_dim numbers: 46 KB for SmolLM2-135M in float32).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class PrefixEntry:
    tokens: np.ndarray  # (T,) int64
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values, each (kv_heads, T, head_dim)
    entering: torch.Tensor | None  # (T, d) activations entering the first SVF-adapted layer, if SVF is on


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class PrefixStore:
    def __init__(self, max_tokens: int = 32768):
        self.max_tokens = int(max_tokens)
        self._entries: OrderedDict[bytes, PrefixEntry] = OrderedDict()
        self._tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: np.ndarray) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest token prefix with `tokens`, and that length."""
        best, best_len = None, 0
        for entry in self._entries.values():
            if entry.tokens[0] != tokens[0]:
                continue
            n = common_prefix_length(entry.tokens, tokens)
            if n > best_len:
                best, best_len = entry, n
        if best is not None:
            self._entries.move_to_end(best.tokens.tobytes())
        return best, best_len

    def add(self, entry: PrefixEntry) -> None:
        key = entry.tokens.tobytes()
        if len(entry.tokens) > self.max_tokens:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._tokens -= len(old.tokens)
        self._entries[key] = entry
        self._tokens += len(entry.tokens)
        while self._tokens > self.max_tokens:
            _, evicted = self._entries.popitem(last=False)
            self._tokens -= len(evicted.tokens)

    def clear(self) -> None:
        self._entries.clear()
        self._tokens = 0
