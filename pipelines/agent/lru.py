"""A thread-safe least-recently-used cache bounded by the bytes of its entries (the toolbox's query and phrase
vectors). Apart from the tools because it knows nothing of them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class ByteLRU:
    """A thread-safe least-recently-used cache bounded by the (estimated) bytes of its entries: a bound
    on the entry count bounds nothing when clients choose the entries' sizes. An entry larger than the
    whole budget is not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (value, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.nbytes -= dropped

    def clear(self, keep: Callable[[Hashable], bool] | None = None) -> None:
        """Drop every entry (or those whose key ``keep`` rejects)."""
        with self._lock:
            for key in [k for k in self._entries if keep is None or not keep(k)]:
                self.nbytes -= self._entries.pop(key)[1]
