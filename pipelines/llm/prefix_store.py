"""The key/value states of prompt prefixes, kept between batches so that they are computed once.

Agent prompts all start with the same system prompt, and each round of an episode repeats the previous
round's conversation: most of a prompt's tokens have been through the model before. ``PrefixStore`` keeps
the key/value states of such token sequences (LRU, within a byte budget) and finds the stored one that
shares the longest prefix with a new prompt, so that a generation backend runs only the prompt's new
tokens. The store knows nothing of models: its owner drops it when the weights it was computed with change.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

KV = list[tuple[Any, Any]]  # per layer: (keys, values), each [1, kv heads, tokens, head dim] (torch or numpy)
ANCHOR_MIN_TOKENS = 16  # a first message shorter than this is not worth a forward pass (and an entry) of its own


def _storage(array: Any) -> tuple[int, int]:
    """(address, bytes) of the whole memory an array views: a torch tensor's storage, or a numpy array's
    outermost base."""
    if hasattr(array, "untyped_storage"):
        storage = array.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    while isinstance(getattr(array, "base", None), np.ndarray):
        array = array.base
    return array.__array_interface__["data"][0], array.nbytes


@dataclass
class PrefixEntry:
    """One stored sequence and its states."""

    tokens: np.ndarray  # the token ids whose states ``kv`` holds, one position each
    kv: KV
    nbytes: int


class PrefixStore:
    """Key/value states of token sequences, kept across ``generate`` calls for their prefixes (LRU,
    at most ``max_bytes``). ``match`` finds the stored sequence sharing the longest prefix with a
    prompt; a sequence that is a prefix of a newly stored one is dropped (the new one serves it).

    An entry's size is the whole of every storage its tensors view (a slice of a longer tensor keeps
    all of it alive), so ``nbytes`` never understates what the store holds; an entry larger than the
    budget is not kept (``max_bytes`` 0: nothing is)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self.nbytes = 0
        self._next = 0

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0

    @staticmethod
    def _common(a: np.ndarray, b: np.ndarray) -> int:
        n = min(len(a), len(b))
        differ = np.flatnonzero(a[:n] != b[:n])
        return int(differ[0]) if len(differ) else n

    def match(self, ids: np.ndarray) -> tuple[int, PrefixEntry | None]:
        """(length of the longest common prefix, the entry holding it); the entry becomes most recent."""
        best, found = 0, None
        for key, entry in self.entries.items():
            common = self._common(entry.tokens, ids)
            if common > best:
                best, found = common, key
        if found is None:
            return 0, None
        self.entries.move_to_end(found)
        return best, self.entries[found]

    def add(self, tokens: np.ndarray, kv: KV) -> None:
        for key in [k for k, e in self.entries.items()
                    if len(e.tokens) <= len(tokens) and self._common(e.tokens, tokens) == len(e.tokens)]:
            self.nbytes -= self.entries.pop(key).nbytes
        storages = dict(_storage(t) for pair in kv for t in pair)
        entry = PrefixEntry(tokens=tokens, kv=kv, nbytes=sum(storages.values()))
        if entry.nbytes > self.max_bytes:
            return
        self.entries[self._next] = entry
        self._next += 1
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            self.nbytes -= self.entries.popitem(last=False)[1].nbytes
