"""A disk cache in front of any ``ChatClient``: re-running never pays twice, and a killed run resumes.

Keyed by ``ChatRequest.cache_key(model)`` (model, messages, temperature, max_tokens, seed, json mode).
Each reply is written (one SQLite transaction, by diskcache) the moment it arrives, not at the end
of a batch, so ``kill -9`` loses only the requests that were in flight; failures are never cached,
so the next run asks again.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

import diskcache
from pydantic import ValidationError

from pipelines.llm.base import ChatClient, ChatReply, ChatRequest, LLMError, OnReply, Usage, complete_one

KEY_PREFIX = "chat:v1:"


class CachedChatClient:
    """A ``ChatClient`` that answers from ``cache_dir`` when it can and asks ``inner`` otherwise.

    ``usage`` counts every reply handed out (hits with ``cached=True`` and cost 0); ``inner.usage``
    counts only what was really sent. The same request twice in one batch is sent once.
    """

    def __init__(self, inner: ChatClient, cache_dir: Path) -> None:
        self.inner = inner
        self.model = inner.model
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.usage = Usage()
        self._cache = diskcache.Cache(str(self.cache_dir))
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachedChatClient({self.inner!r}, cache_dir={str(self.cache_dir)!r})"

    def key(self, request: ChatRequest) -> str:
        return KEY_PREFIX + request.cache_key(self.model)

    def get(self, request: ChatRequest) -> ChatReply | None:
        """The cached reply to ``request`` (marked cached, cost 0), or None."""
        raw = self._cache.get(self.key(request))
        if raw is None:
            return None
        try:
            reply = ChatReply.model_validate_json(raw)
        except ValidationError:  # written by an incompatible version: ask again (and overwrite it)
            return None
        return reply.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0})

    def __len__(self) -> int:
        return len(self._cache)

    def complete(self, request: ChatRequest) -> ChatReply:
        return complete_one(self, request)

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        results: list[ChatReply | LLMError | None] = [None] * len(requests)
        keys = [self.key(r) for r in requests]
        positions: dict[str, list[int]] = {}  # key of each request to send -> where its reply goes
        to_send: list[int] = []
        for index, (request, key) in enumerate(zip(requests, keys, strict=True)):
            if key in positions:
                positions[key].append(index)
                continue
            hit = self.get(request)
            if hit is not None:
                self._deliver(hit, [index], requests, results, on_reply)
                continue
            positions[key] = [index]
            to_send.append(index)

        def arrived(sent_index: int, reply: ChatReply) -> None:
            index = to_send[sent_index]
            self._cache.set(keys[index], reply.model_dump_json())  # persisted before anyone sees it
            self._deliver(reply, positions[keys[index]], requests, results, on_reply)

        if to_send:
            sent = self.inner.complete_many([requests[i] for i in to_send], progress=progress, desc=desc,
                                            on_reply=arrived)
            for sent_index, result in enumerate(sent):
                if isinstance(result, LLMError):
                    for index in positions[keys[to_send[sent_index]]]:
                        results[index] = result
                    with self._lock:
                        self.usage.failed += len(positions[keys[to_send[sent_index]]])
                elif results[to_send[sent_index]] is None:  # an inner client that did not call on_reply
                    arrived(sent_index, result)
        assert all(r is not None for r in results), "every request has a result"
        return results  # type: ignore[return-value]

    def _deliver(self, reply: ChatReply, indices: list[int], requests: list[ChatRequest],
                 results: list[ChatReply | LLMError | None], on_reply: OnReply | None) -> None:
        for n, index in enumerate(indices):
            # A repeat of a request in the same batch was not paid for: it is served as a cache hit.
            given = reply if n == 0 else reply.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0})
            results[index] = given
            with self._lock:
                self.usage.add(given, requests[index].tag)
            if on_reply is not None:
                on_reply(index, given)

    def close(self) -> None:
        self._cache.close()

    def __enter__(self) -> CachedChatClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
