"""The contract every LLM backend meets: chat requests in, replies with token and cost counts out.

QA synthesis, judging and text->KG extraction only see ``ChatClient``; whether the replies come
from an OpenAI-compatible endpoint (any provider, or a local ``vllm serve``), a local transformers
model, the disk cache or a scripted test double is decided when the client is built.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator


class LLMError(RuntimeError):
    """A request that failed for good (after retries): timeout, HTTP error, or a malformed reply (not
    JSON, not a chat completion). ``complete_many`` returns it as that request's result, never raises it."""


class ChatRequest(BaseModel):
    """One chat completion request; ``cache_key`` covers everything that shapes the reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    messages: list[dict[str, str]]  # OpenAI chat format: {"role": ..., "content": ...}
    temperature: float = 0.0
    max_tokens: int = 1024
    seed: int | None = None
    json_mode: bool = False  # ask the endpoint for a JSON object (response_format) where it supports it
    stop: list[str] = []  # generation ends after the first of these; the reply keeps it (agent rollouts)
    prefix: str = ""  # text the assistant turn starts with; the reply is only what follows it
    tag: str = ""  # what the request is for (e.g. "qa.generate"): for logs and counts, not part of the key

    def cache_key(self, model: str) -> str:
        fields = self.model_dump(exclude={"tag"})
        for name in ("stop", "prefix"):  # unset agent fields leave the keys of other requests unchanged
            if not fields[name]:
                del fields[name]
        blob = json.dumps({"model": model, **fields}, sort_keys=True, ensure_ascii=False)
        # surrogatepass: the same bytes as utf-8 for any valid text, and no crash on a lone surrogate
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def scrub_text(text: str) -> str:
    """``text`` with every lone surrogate (e.g. a reply's JSON holding "\\ud800") replaced by U+FFFD.

    Such a str cannot be encoded as UTF-8, so it would crash every later write (the disk cache,
    JSON, parquet); an adjacent high+low pair is joined into the character it encodes.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


class ChatReply(BaseModel):
    """One reply; ``cost_usd`` is what this call paid (0 for a cache hit, whose token counts are the original's)."""

    model_config = ConfigDict(extra="forbid")
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached: bool = False
    finish_reason: str | None = None  # "stop", or "length" when max_tokens cut the reply (told in the repair round)

    @field_validator("text", "model", "finish_reason")
    @classmethod
    def _encodable(cls, value: str | None) -> str | None:
        """A reply is always writable: lone surrogates become U+FFFD (see ``scrub_text``)."""
        return value if value is None else scrub_text(value)


OnReply = Callable[[int, ChatReply], None]
"""Called with (index in the request list, reply) the moment a reply arrives, in the thread that runs the
requests: the cache persists each reply there, so a killed run loses only the requests in flight."""


class Usage(BaseModel):
    """Running totals of a client: what a generation run cost (shown by the CLI, kept in manifests)."""

    requests: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    by_tag: dict[str, int] = Field(default_factory=dict)

    def add(self, reply: ChatReply, tag: str = "") -> None:
        self.requests += 1
        self.cached += int(reply.cached)
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cost_usd += reply.cost_usd
        if tag:
            self.by_tag[tag] = self.by_tag.get(tag, 0) + 1


@runtime_checkable
class ChatClient(Protocol):
    """What the pipelines call. ``complete_many`` runs requests concurrently (bounded by the client)
    and returns, in request order, a reply or the ``LLMError`` that ended that request; ``on_reply``
    (optional) sees each successful reply as soon as it arrives."""

    model: str
    usage: Usage

    def complete(self, request: ChatRequest) -> ChatReply: ...

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]: ...


def complete_one(client: ChatClient, request: ChatRequest) -> ChatReply:
    """``complete`` in terms of ``complete_many``: one request, its failure raised as the ``LLMError``."""
    result = client.complete_many([request])[0]
    if isinstance(result, LLMError):
        raise result
    return result


def json_object(text: str) -> dict[str, Any]:
    """Parse a reply that must be one JSON object; a ```json fence around it is tolerated.

    Raises ``ValueError`` with what is wrong, which goes back to the model in the repair round.
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to and including the first stop string (and whether one was found).

    Endpoints that drop the matched stop string (the OpenAI API does) end a reply right before it;
    ``close_stop`` puts it back, so that every backend returns calls and answers with closed tags.
    """
    hits = [(text.find(s), s) for s in stop if s and s in text]
    if not hits:
        return text, False
    index, matched = min(hits)
    return text[:index + len(matched)], True


def close_stop(text: str, stop: list[str]) -> str:
    """Re-append the closing tag an endpoint stripped: the last opened and unclosed ``<tag>`` among
    the stop strings ``</tag>``."""
    best, closing = -1, ""
    for s in stop:
        if s.startswith("</") and s.endswith(">"):
            opening = "<" + s[2:]
            start = text.rfind(opening)
            if start > best and text.find(s, start) < 0:
                best, closing = start, s
    return text + closing if closing else text
