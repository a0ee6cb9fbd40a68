"""glibc's heap, handed back to the OS: what a long-lived process (the tool server, `omne run`'s training stages)
needs after freeing much memory, since glibc keeps freed heap pages mapped until ``malloc_trim``."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any


def malloc_trim() -> bool:
    """Hand the free pages of the heap back to the OS, holes between live blocks included (glibc's
    ``malloc_trim(0)``); False where malloc is not glibc's."""
    trim = glibc_function("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


def glibc_function(name: str) -> Any:
    """The C library's function ``name`` (glibc's malloc tuning), or None where there is no such library or
    function (another libc, no libc to load)."""
    library = ctypes.util.find_library("c")
    if not library:
        return None
    try:
        return getattr(ctypes.CDLL(library), name, None)
    except OSError:  # pragma: no cover - no libc to load
        return None
