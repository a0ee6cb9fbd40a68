"""A disk cache in front of any ``ChatClient``: re-running never pays twice, and a killed run resumes.

Keyed by ``ChatRequest.cache_key(model)`` (model, messages, temperature, max_tokens, seed, json mode).
Each reply is written (one SQLite transaction, by diskcache) the moment it arrives, not at the end
of a batch, so ``kill -9`` loses only the requests that were in flight; failures are never cached,
so the next run asks again.

The cache never ends a run: a reply that cannot be written (a write error) is still handed out
(with a warning), an entry or value file that cannot be read back is a miss (asked again and
overwritten), and a ``cache.db`` that is not a database is moved aside and a fresh one started.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from types import TracebackType

import diskcache
from pydantic import ValidationError

from pipelines.llm.base import ChatClient, ChatReply, ChatRequest, LLMError, OnReply, Usage, complete_one

log = logging.getLogger(__name__)

KEY_PREFIX = "chat:v1:"
READ_ERRORS = (ValidationError, ValueError, TypeError, OSError, sqlite3.Error, diskcache.Timeout)
"""What reading one entry may raise when it is corrupt (UnicodeDecodeError of a value file is a
ValueError): all of them mean "not cached"."""
WRITE_ERRORS = (ValueError, TypeError, OSError, sqlite3.Error, diskcache.Timeout)


def open_disk_cache(cache_dir: Path) -> diskcache.Cache:
    """``diskcache.Cache(cache_dir)``; a ``cache.db`` that is not an SQLite database (a crash
    mid-copy, a stray file) is renamed ``cache.db.corrupt-<time>`` and an empty cache is started,
    because a cache is only a saving: losing it must not stop a run."""
    try:
        return diskcache.Cache(str(cache_dir))
    except sqlite3.DatabaseError as exc:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            if (cache_dir / name).exists():
                (cache_dir / name).rename(cache_dir / f"{name}.corrupt-{stamp}")
        log.warning("LLM cache %s: cache.db is unreadable (%s); moved aside as cache.db.corrupt-%s, starting empty",
                    cache_dir, exc, stamp)
        return diskcache.Cache(str(cache_dir))


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
        self._cache = open_disk_cache(self.cache_dir)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachedChatClient({self.inner!r}, cache_dir={str(self.cache_dir)!r})"

    def key(self, request: ChatRequest) -> str:
        return KEY_PREFIX + request.cache_key(self.model)

    def get(self, request: ChatRequest) -> ChatReply | None:
        """The cached reply to ``request`` (marked cached, cost 0), or None: also when the entry
        cannot be read (a corrupt value file, another version's format), so it is asked again and
        overwritten."""
        try:
            raw = self._cache.get(self.key(request))
            if raw is None:
                return None
            reply = ChatReply.model_validate_json(raw)
        except READ_ERRORS as exc:
            log.warning("LLM cache %s: unreadable entry for request %r treated as a miss (%s: %s)",
                        self.cache_dir, request.tag, type(exc).__name__, str(exc)[:200])
            return None
        return reply.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0})

    def __len__(self) -> int:
        return len(self._cache)

    def save(self, request: ChatRequest, reply: ChatReply) -> ChatReply:
        """Persist ``reply``; returns the reply as stored, which is what the caller is given, so that a
        rerun reads back exactly the same. Re-validation replaces lone surrogates (``scrub_text``) that a
        backend may have put in with ``model_copy``; a write that still fails is logged, not raised."""
        stored = ChatReply.model_validate(reply.model_dump())
        try:
            self._cache.set(self.key(request), stored.model_dump_json())
        except WRITE_ERRORS as exc:
            log.warning("LLM cache %s: could not store the reply to request %r (%s: %s); it is used uncached",
                        self.cache_dir, request.tag, type(exc).__name__, str(exc)[:200])
        return stored

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
            stored = self.save(requests[index], reply)  # persisted before anyone sees it
            self._deliver(stored, positions[keys[index]], requests, results, on_reply)

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
