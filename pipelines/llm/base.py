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

    def cache_key(self, model: str, endpoint: str = "") -> str:
        """A hash of ``endpoint`` (where the reply comes from: a base URL, "" for a model in this process),
        ``model`` and every field but ``tag``."""
        fields = self.model_dump(exclude={"tag"})
        for name in ("stop", "prefix"):  # unset agent fields leave the keys of other requests unchanged
            if not fields[name]:
                del fields[name]
        blob = json.dumps({"endpoint": endpoint, "model": model, **fields}, sort_keys=True, ensure_ascii=False)
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


OnReply = Callable[[int, ChatReply], bool | None]
"""Called with (index in the request list, reply) the moment a reply arrives, in the thread that runs the
requests: the cache persists each reply there, so a killed run loses only the requests in flight.

Its return value is the caller's verdict on the reply: ``False`` means "unusable" (it failed the caller's
parse or validation, e.g. not the JSON object asked for), and a cache then does not keep it; a cached reply
so refused is dropped and asked again (``on_reply`` then sees the new reply for the same index). ``None``
or ``True``: keep it. Plain clients ignore the value."""


class Usage(BaseModel):
    """Running totals of a client: what a generation run cost (shown by the CLI, kept in manifests)."""

    requests: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    by_tag: dict[str, int] = Field(default_factory=dict)
    first_error: str = ""  # the first failure's message (what a stage whose requests all failed reports)

    def fail(self, error: BaseException | str, count: int = 1) -> None:
        """Count ``count`` failed requests; the first failure's message is kept (on one line)."""
        self.failed += count
        if not self.first_error:
            self.first_error = " ".join(str(error).split())[:1000]

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
    (optional) sees each successful reply as soon as it arrives, and its return value is the caller's verdict
    (``OnReply``: ``False`` keeps a reply out of a cache)."""

    model: str
    usage: Usage

    def complete(self, request: ChatRequest) -> ChatReply: ...

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]: ...


def require_replies(usage: Usage, what: str) -> None:
    """Raise ``LLMError`` when every LLM request counted in ``usage`` failed (an endpoint that is down, a base URL
    pointing at the wrong service, ...): a stage that got no reply at all has failed, it did not produce an empty
    result. The message says how many failed and the first failure, on one line."""
    if usage.failed and not usage.requests:
        first = usage.first_error or "(no message recorded)"
        raise LLMError(f"{what}: all {usage.failed} LLM requests failed; the first: {first}")


def complete_one(client: ChatClient, request: ChatRequest) -> ChatReply:
    """``complete`` in terms of ``complete_many``: one request, its failure raised as the ``LLMError``."""
    result = client.complete_many([request])[0]
    if isinstance(result, LLMError):
        raise result
    return result


MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a JSON reply: no reply the pipelines ask for nests past a
few levels, and a deeper value would break later recursive code (printing, writing) with RecursionError."""


def json_depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _scrub_json(value: Any) -> Any:
    """``value`` with every string (and key) passed through ``scrub_text``: a "\\ud800" escape parses to a lone
    surrogate, which no writer downstream can encode. Only called on values of bounded depth."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, list):
        return [_scrub_json(item) for item in value]
    if isinstance(value, dict):
        return {scrub_text(key): _scrub_json(item) for key, item in value.items()}
    return value


def json_object(text: str) -> dict[str, Any]:
    """Parse a reply that must be one JSON object; a ```json fence around it is tolerated.

    Raises ``ValueError`` with what is wrong, which goes back to the model in the repair round: not JSON, not
    an object, nested deeper than ``MAX_JSON_DEPTH`` (also when too deep for the parser itself), or a number
    too long to convert. Strings in the value never hold lone surrogates (``scrub_text``).
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ValueError(f"not usable JSON (nested more than {MAX_JSON_DEPTH} levels deep)") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ValueError(f"not usable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"not usable JSON (nested more than {MAX_JSON_DEPTH} levels deep)")
    return _scrub_json(value)


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
