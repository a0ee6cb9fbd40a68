"""Tool results bounded in bytes: each result's text is cut at ``tools.max_result_bytes`` by the toolbox itself
(``KGToolbox._capped``: in-process rollouts and the tool server alike), and `omne tools call` cuts what it prints
from a server of another version the same way.

A node with huge descriptions or thousands of relations could otherwise send megabytes per call. The cut is
made on a UTF-8 character boundary and ends with a marker that says so and how large the whole text was, so the
model (and whoever reads a transcript) knows that more existed.
"""

from __future__ import annotations


def truncation_marker(total: int) -> str:
    return f"\n… [truncated: the result has {total:,} bytes, more than tools.max_result_bytes]"


def cap_text(text: str, max_bytes: int) -> str:
    """``text`` whole when its UTF-8 form fits in ``max_bytes``, else its start and a marker, in ``max_bytes``."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    marker = truncation_marker(len(data))
    room = max(0, max_bytes - len(marker.encode("utf-8")))
    return data[:room].decode("utf-8", "ignore") + marker
