"""Tool results bounded in bytes: each result's text is cut at ``tools.max_result_bytes`` by the toolbox itself
(in-process rollouts too) and, for any result an HTTP client gets, once more by the served app.

A node with huge descriptions or thousands of relations could otherwise send megabytes per call. The cut is
made on a UTF-8 character boundary and ends with a marker that says so and how large the whole text was, so the
model (and whoever reads a transcript) knows that more existed. ``ResultByteCap`` applies it to the responses of
``/v1/tools/call`` and ``/v1/tools/batch`` (each result of a batch on its own); ``cap_text`` is the rule itself.
"""

from __future__ import annotations

import json
from typing import Any

TOOL_PATHS = frozenset({"/v1/tools/call", "/v1/tools/batch"})


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


def _cap_result(result: Any, max_bytes: int) -> bool:
    """Cut ``result["content"]`` in place; whether it was cut."""
    if not isinstance(result, dict) or not isinstance(content := result.get("content"), str):
        return False
    capped = cap_text(content, max_bytes)
    result["content"] = capped
    return capped is not content


def cap_response(body: bytes, max_bytes: int) -> bytes:
    """A tool response body (one result, or ``{"results": [...]}``) with every result's text capped; the same
    bytes when nothing was cut (or the body is not a tool result)."""
    if len(body) <= max_bytes:  # no content field can be longer than the body holding it
        return body
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    results = payload.get("results") if isinstance(payload, dict) and "results" in payload else [payload]
    cut = [_cap_result(r, max_bytes) for r in results] if isinstance(results, list) else []
    if not any(cut):
        return body
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class ResultByteCap:
    """ASGI middleware: the responses of the tool endpoints with each result's text cut at ``max_bytes``."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path", "").rstrip("/") not in TOOL_PATHS:
            await self.app(scope, receive, send)
            return
        start: dict | None = None
        chunks: list[bytes] = []

        async def buffered(message: dict) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            if start["status"] == 200:
                body = cap_response(body, self.max_bytes)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, buffered)


def with_result_cap(app: Any, max_bytes: int) -> Any:
    """``app`` (the tool server's FastAPI app) with ``ResultByteCap`` outermost; returns ``app``."""
    app.add_middleware(ResultByteCap, max_bytes=max_bytes)
    return app
