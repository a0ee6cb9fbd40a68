"""A disk cache in front of any ``ChatClient``: re-running never pays twice, and a killed run resumes.

Keyed by ``ChatRequest.cache_key(model, endpoint)``: the endpoint (the inner client's base URL; "" for a
model in this process, whose name already holds a hash of its weights), the model, the messages,
temperature, max_tokens, seed, json mode, stop strings and prefix. A reply from one endpoint is never
served for another.

Each reply is written (one SQLite transaction, by diskcache) the moment it arrives, not at the end
of a batch, so ``kill -9`` loses only the requests that were in flight. What is kept: only replies
the caller did not refuse. The caller's ``on_reply`` sees each reply first; returning ``False`` (the
reply failed its parse or validation: ``complete_json_many`` refuses one that is not the JSON object
asked for) means it is handed out but not stored, so a bad reply from a sick endpoint is not replayed
forever. A cached reply that the caller refuses (stored by an older version, or before a stricter
check) is dropped and asked again. Failures (``LLMError``) are never cached, so the next run asks again.

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

KEY_PREFIX = "chat:v2:"
"""v2: the key covers the endpoint (v1 keys, model only, are never read: delete the folder to reclaim their space)."""
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


def endpoint_of(client: ChatClient) -> str:
    """Where ``client``'s replies come from, for the cache key: its ``base_url`` (an HTTP endpoint), else "" (a
    model in this process, named by ``client.model``)."""
    return str(getattr(client, "base_url", "") or "")


class CachedChatClient:
    """A ``ChatClient`` that answers from ``cache_dir`` when it can and asks ``inner`` otherwise.

    ``usage`` counts every reply handed out (hits with ``cached=True`` and cost 0); ``inner.usage``
    counts only what was really sent. The same request twice in one batch is sent once. ``on_reply``'s verdict
    decides what is stored (module docstring).
    """

    def __init__(self, inner: ChatClient, cache_dir: Path) -> None:
        self.inner = inner
        self.model = inner.model
        self.endpoint = endpoint_of(inner)
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.usage = Usage()
        self._cache = open_disk_cache(self.cache_dir)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachedChatClient({self.inner!r}, cache_dir={str(self.cache_dir)!r})"

    def key(self, request: ChatRequest) -> str:
        return KEY_PREFIX + request.cache_key(self.model, self.endpoint)

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

    @staticmethod
    def storable(reply: ChatReply) -> ChatReply:
        """``reply`` as it would be stored, which is what the caller is given, so that a rerun reads back exactly
        the same: re-validation replaces lone surrogates (``scrub_text``) that a backend may have put in with
        ``model_copy``."""
        return ChatReply.model_validate(reply.model_dump())

    def save(self, request: ChatRequest, reply: ChatReply) -> ChatReply:
        """Persist ``reply``; returns the reply as stored (``storable``). A write that fails is logged, not raised."""
        stored = self.storable(reply)
        self._store(request, stored)
        return stored

    def _store(self, request: ChatRequest, stored: ChatReply) -> None:
        try:
            self._cache.set(self.key(request), stored.model_dump_json())
        except WRITE_ERRORS as exc:
            log.warning("LLM cache %s: could not store the reply to request %r (%s: %s); it is used uncached",
                        self.cache_dir, request.tag, type(exc).__name__, str(exc)[:200])

    def drop(self, request: ChatRequest) -> None:
        """Delete the entry of ``request`` (a reply the caller refused); a failure is logged, not raised."""
        try:
            self._cache.delete(self.key(request))
        except WRITE_ERRORS as exc:
            log.warning("LLM cache %s: could not drop the entry of request %r (%s: %s)",
                        self.cache_dir, request.tag, type(exc).__name__, str(exc)[:200])

    def complete(self, request: ChatRequest) -> ChatReply:
        return complete_one(self, request)

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        """Cached replies first (each vetted by ``on_reply``: a refused one is dropped and sent again), then the
        rest in one batch of ``inner``, each stored the moment it arrives unless ``on_reply`` refused it."""
        results: list[ChatReply | LLMError | None] = [None] * len(requests)
        keys = [self.key(r) for r in requests]
        positions: dict[str, list[int]] = {}  # key of each distinct request -> where its reply goes
        to_send: list[int] = []
        for index, (request, key) in enumerate(zip(requests, keys, strict=True)):
            if key in positions:
                positions[key].append(index)
                continue
            positions[key] = [index]
            hit = self.get(request)
            if hit is not None:
                if on_reply is None or on_reply(index, hit) is not False:
                    self._hand_out(hit, index, requests, results)
                    continue
                log.info("LLM cache %s: the cached reply to request %r failed the caller's check; dropped and asked "
                         "again", self.cache_dir, request.tag)
                self.drop(request)
            to_send.append(index)
        for indices in positions.values():  # repeats of a request answered from the cache
            if results[indices[0]] is not None:
                self._repeat(indices, requests, results, on_reply)

        def arrived(sent_index: int, reply: ChatReply) -> None:
            index = to_send[sent_index]
            given = self.storable(reply)
            verdict = on_reply(index, given) if on_reply is not None else None
            if verdict is not False:  # persisted before the next reply is handled
                self._store(requests[index], given)
            self._hand_out(given, index, requests, results)
            self._repeat(positions[keys[index]], requests, results, on_reply)

        if to_send:
            sent = self.inner.complete_many([requests[i] for i in to_send], progress=progress, desc=desc,
                                            on_reply=arrived)
            for sent_index, result in enumerate(sent):
                indices = positions[keys[to_send[sent_index]]]
                if isinstance(result, LLMError):
                    for index in indices:
                        results[index] = result
                    with self._lock:
                        self.usage.fail(result, len(indices))
                elif results[indices[0]] is None:  # an inner client that did not call on_reply
                    arrived(sent_index, result)
        assert all(r is not None for r in results), "every request has a result"
        return results  # type: ignore[return-value]

    def _hand_out(self, reply: ChatReply, index: int, requests: list[ChatRequest],
                  results: list[ChatReply | LLMError | None]) -> None:
        results[index] = reply
        with self._lock:
            self.usage.add(reply, requests[index].tag)

    def _repeat(self, indices: list[int], requests: list[ChatRequest], results: list[ChatReply | LLMError | None],
                on_reply: OnReply | None) -> None:
        """A repeat of a request in the same batch was not paid for: it gets the first one's reply as a cache hit."""
        first = results[indices[0]]
        assert isinstance(first, ChatReply)
        for index in indices[1:]:
            given = first.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0})
            self._hand_out(given, index, requests, results)
            if on_reply is not None:
                on_reply(index, given)

    def close(self) -> None:
        self._cache.close()

    def __enter__(self) -> CachedChatClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
