"""Chat over any OpenAI-compatible endpoint (a provider, or a local ``vllm serve MODEL``).

The official ``openai`` SDK does the HTTP (one attempt each: ``max_retries=0``); this module adds what
the pipelines need on top: a hard wall-clock deadline per request, its own retries (exponential backoff
with jitter on timeouts, connection errors, 408/409/429 and 5xx, honouring ``Retry-After`` up to
``llm.max_retry_wait_s``), bounded concurrency, request-order results, failures as values, token and
cost counts, and a synchronous entry point that works from any thread.

The reply body is not trusted: it is read as a stream, at most ``body_limit`` bytes, and
``parse_completion`` validates it against ``CompletionBody`` (pydantic, strict types, only the fields
used), so that an HTML page, an empty body, a 204, a body of megabytes, 100,000 choices, absurd token
counts or a ``choices``/``message``/``usage`` of the wrong shape from some gateway becomes one
``LLMError`` naming what was wrong, never an exception out of ``complete_many``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from tqdm.auto import tqdm

from pipelines.config import LLMParams
from pipelines.errors import ConfigError
from pipelines.llm.base import ChatReply, ChatRequest, LLMError, OnReply, Usage, close_stop, complete_one, scrub_text

T = TypeVar("T")

log = logging.getLogger(__name__)

ENV_BASE_URL = "OMNE_LLM_BASE_URL"
ENV_MODEL = "OMNE_LLM_MODEL"
LOCAL_API_KEY = "EMPTY"  # what `vllm serve` accepts when started without --api-key

FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.5, 8.0  # the SDK's: 0.5 s doubling per retry up to 8 s, less up to 25 % jitter
MAX_CHOICES = 64  # one choice is asked for (n=1); a reply with more than this many is not a completion
MAX_TOKEN_COUNT = 100_000_000  # a usage count above this (no context window is near it) is a broken reply
MAX_FIELD_CHARS = 1_000  # ``model`` and ``finish_reason`` are names, never longer
BODY_BYTES_PER_CHAR, BODY_OVERHEAD_BYTES = 12, 65_536  # "\\ud83d\\ude00": 12 bytes of JSON for one character


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code in any thread.

    ``asyncio.run`` refuses to start inside a running event loop (a notebook, an async caller), so
    there the coroutine runs on a fresh loop in a worker thread while the caller's thread waits.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="omne-llm") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()  # type: ignore[arg-type]


class ReplyMessage(BaseModel):
    """``choices[i].message``: only its text is used (``role``, ``tool_calls``, ... are ignored)."""

    model_config = ConfigDict(extra="ignore")
    content: StrictStr  # null (a tool call, a refusal) or a list of parts is no usable text


class ReplyChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    message: ReplyMessage
    finish_reason: StrictStr | None = Field(default=None, max_length=MAX_FIELD_CHARS)


class ReplyUsage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_tokens: StrictInt = Field(default=0, ge=0, le=MAX_TOKEN_COUNT)
    completion_tokens: StrictInt = Field(default=0, ge=0, le=MAX_TOKEN_COUNT)


class CompletionBody(BaseModel):
    """The fields of an OpenAI ``ChatCompletion`` body that the pipelines use, with strict types (no
    "12" for 12, no 1 for "stop"): a body that does not match is a malformed reply, not a guess."""

    model_config = ConfigDict(extra="ignore")
    choices: list[ReplyChoice] = Field(min_length=1)
    model: StrictStr | None = Field(default=None, max_length=MAX_FIELD_CHARS)
    usage: ReplyUsage | None = None


class MalformedReply(ValueError):
    """An HTTP 2xx reply whose body is not a chat completion; the message says what was wrong."""


class AttemptFailed(Exception):
    """One attempt that got no usable body. ``kind``: "timeout", "connection" (a retry may fix both), "status"
    (an HTTP error ``status``; retried when ``should_retry``) or "reply" (a body too large to read, another SDK
    error: never retried); ``detail`` says the rest; ``wait_s`` is the server's Retry-After."""

    def __init__(self, kind: str, detail: str = "", *, status: int | None = None, retryable: bool = True,
                 wait_s: float | None = None) -> None:
        super().__init__(detail or kind)
        self.kind, self.detail, self.status, self.retryable, self.wait_s = kind, detail, status, retryable, wait_s


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a reply asks for before a retry, in seconds: ``retry-after-ms`` (as OpenAI sends), else
    ``retry-after`` in seconds or as an HTTP date; None when absent, unreadable, not finite or not positive."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            try:
                value = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError, IndexError, OverflowError):
                continue
        if math.isfinite(value) and value > 0:
            return value
    return None


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    """The SDK's rule: the server's ``x-should-retry`` if it says; else 408, 409, 429 and 5xx are retried."""
    said = headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    return status in (408, 409, 429) or status >= 500


def backoff_s(retries_done: int) -> float:
    """The wait before retry ``retries_done + 1`` when the server names none: exponential, with jitter."""
    return min(FIRST_BACKOFF_S * 2.0 ** min(retries_done, 16), MAX_BACKOFF_S) * (1.0 - 0.25 * random.random())


EXPECTED = {"model_type": "an object", "dict_type": "an object", "list_type": "an array", "string_type": "a string",
            "int_type": "an integer", "greater_than_equal": "a count >= 0", "too_short": "a non-empty array",
            "less_than_equal": f"a count <= {MAX_TOKEN_COUNT:,}",
            "string_too_long": f"a string of at most {MAX_FIELD_CHARS:,} characters"}


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type (what a gateway author would call it)."""
    for kind, name in ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string"), (list, "array"),
                       (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (an error page can be megabytes)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def snippet(value: object, limit: int = 80) -> str:
    """A short, quoted, one-line rendering of a body or a value for an error message."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, RecursionError):  # a value nested too deeply to print
        text = f"<{json_type(value)}>"
    return repr(one_line(text, limit))  # repr: control characters and lone surrogates escaped


def json_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's ``("choices", 0, "message")`` as ``choices[0].message``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "reply"


def shape_problems(error: ValidationError, limit: int = 3) -> str:
    """Each mismatch as "<path> is null" / "<path> is missing" / "<path> is <type> <value>, expected ..."."""
    problems = []
    for item in error.errors(include_url=False):
        where, value, kind = json_path(item["loc"]), item.get("input"), item["type"]
        if kind == "missing":
            problems.append(f"{where} is missing")
        elif value is None:
            problems.append(f"{where} is null")
        elif kind == "too_short" and isinstance(value, list) and not value:
            problems.append(f"{where} is an empty array")
        else:
            expected = EXPECTED.get(kind, item["msg"].lower())
            problems.append(f"{where} is {json_type(value)} {snippet(value, 40)}, expected {expected}")
    more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


def parse_completion(status: int, content_type: str, text: str) -> CompletionBody:
    """The validated body of a 2xx reply, or ``MalformedReply`` saying what is wrong with it.

    The content type is only reported, not required: some gateways send JSON as text/plain, and
    the body decides. A leading BOM is tolerated; a 200 carrying an ``{"error": ...}`` object (as
    some proxies send) is reported with its message.
    """
    kind = content_type.split(";")[0].strip() or "no content type"
    body = text.lstrip("\ufeff")
    if not body.strip():
        raise MalformedReply(f"reply has an empty body (HTTP {status}, {kind})")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise MalformedReply(f"reply is not JSON: {kind} body {snippet(body)} ({reason})") from None
    if not isinstance(document, dict):
        raise MalformedReply(f"reply is a JSON {json_type(document)}, not an object: {snippet(document)}")
    choices = document.get("choices")
    if isinstance(choices, list) and len(choices) > MAX_CHOICES:
        raise MalformedReply(f"choices has {len(choices):,} items, expected 1 (at most {MAX_CHOICES} accepted)")
    if "choices" not in document and "error" in document:
        error = document["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise MalformedReply(f"reply is an error object, not a completion: {snippet(message, 200)}")
    try:
        return CompletionBody.model_validate(document)
    except ValidationError as exc:
        raise MalformedReply(shape_problems(exc)) from None


def price(params: LLMParams, prompt_tokens: int, completion_tokens: int) -> float:
    return (prompt_tokens * params.price_prompt_per_1k + completion_tokens * params.price_completion_per_1k) / 1000.0


class OpenAIChatClient:
    """A ``ChatClient`` over ``/v1/chat/completions``; base URL and model from params or the environment.

    ``OMNE_LLM_BASE_URL`` / ``OMNE_LLM_MODEL`` override params (so one params.yaml serves several
    endpoints); the key is read from the variable named by ``params.api_key_env`` and never stored.

    Every request ends within ``deadline_s`` = ``timeout_s`` x (1 + ``max_retries``) + ``max_retry_wait_s``
    x ``max_retries`` of being sent (``_call``), whatever the endpoint does.
    """

    def __init__(self, params: LLMParams, *, base_url: str | None = None, model: str | None = None) -> None:
        self.params = params
        self.base_url = (base_url or os.environ.get(ENV_BASE_URL) or params.base_url).rstrip("/")
        self.model = model or os.environ.get(ENV_MODEL) or params.model
        if not self.model:
            raise ConfigError(f"the openai LLM backend needs a model name: set llm.model in params.yaml or "
                              f"{ENV_MODEL} (the endpoint is {self.base_url})")
        self._api_key = os.environ.get(params.api_key_env) or LOCAL_API_KEY
        self.usage = Usage()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIChatClient(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def deadline_s(self) -> float:
        """The longest a request may take from being sent to its result: every attempt and every wait."""
        p = self.params
        return p.timeout_s * (1 + p.max_retries) + p.max_retry_wait_s * p.max_retries

    @property
    def body_limit(self) -> int:
        """The most bytes of a reply body read: room for ``max_reply_chars`` characters, each escaped."""
        return BODY_BYTES_PER_CHAR * self.params.max_reply_chars + BODY_OVERHEAD_BYTES

    def complete(self, request: ChatRequest) -> ChatReply:
        return complete_one(self, request)

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        if not requests:
            return []
        return run_sync(lambda: self._run_all(requests, progress, desc, on_reply))

    async def _run_all(self, requests: list[ChatRequest], progress: bool, desc: str,
                       on_reply: OnReply | None) -> list[ChatReply | LLMError]:
        # One SDK client per event loop: its connection pool belongs to the loop that opened it. The SDK makes
        # one attempt per call (max_retries=0): ``_call`` retries, so that the deadline covers the waits too.
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.params.timeout_s,
                                    max_retries=0)
        gate = asyncio.Semaphore(self.params.concurrency)
        bar = tqdm(total=len(requests), desc=desc, unit="req", disable=not progress)

        async def one(index: int, request: ChatRequest) -> ChatReply | LLMError:
            async with gate:
                try:
                    result = await self._call(client, request)
                except Exception as exc:  # noqa: BLE001 - a bug here must not sink the other requests' results
                    log.warning("unexpected error in request %r", request.tag, exc_info=True)
                    result = LLMError(f"{self._where(request)}: unexpected {type(exc).__name__}: {exc}")
            with self._lock:
                if isinstance(result, LLMError):
                    self.usage.fail(result)
                else:
                    self.usage.add(result, request.tag)
            if on_reply is not None and not isinstance(result, LLMError):
                on_reply(index, result)
            bar.update(1)
            return result

        try:
            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))
        finally:
            bar.close()
            try:  # closing the pool must not outlast the deadline either (a connection stuck mid-body)
                async with asyncio.timeout(max(self.params.timeout_s, 1.0)):
                    await client.close()
            except (TimeoutError, OSError, openai.OpenAIError) as exc:
                log.warning("closing the connections to %s: %s: %s", self.base_url, type(exc).__name__, exc)

    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        """The SDK arguments of ``request``. Prompt text that cannot be encoded as UTF-8 (a lone surrogate from a
        badly decoded file) is sent with U+FFFD in its place (``scrub_text``), where the SDK would raise."""
        messages = [{key: scrub_text(value) for key, value in message.items()} for message in request.messages]
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages,
                                  "temperature": request.temperature, "max_tokens": request.max_tokens}
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if request.stop:
            kwargs["stop"] = [scrub_text(s) for s in request.stop]
        if request.prefix:  # continue the assistant turn (vLLM's continue_final_message)
            kwargs["messages"] = [*messages, {"role": "assistant", "content": scrub_text(request.prefix)}]
            kwargs["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
        return kwargs

    async def _call(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ChatReply | LLMError:
        """One request, with its retries, ending within ``deadline_s`` of being sent, whatever the endpoint does.

        Why the retries are done here and not by the SDK: the SDK's ``timeout`` bounds each socket operation
        (connect, each read), not an attempt, so headers sent slowly or a body trickled a byte at a time keep
        an attempt going indefinitely, and it waits as long as a ``Retry-After`` says (up to 2 minutes). Here
        each attempt (send, headers, the whole body) runs under ``asyncio.timeout(timeout_s)``, a wall-clock
        limit the server cannot stretch, and each wait before a retry (``Retry-After``, else exponential
        backoff with jitter) is capped at ``max_retry_wait_s``; no attempt starts past the deadline, and the
        last one gets only the time left. What is retried is what the SDK retries: timeouts, connection
        errors, 408/409/429 and 5xx (or what the server's ``x-should-retry`` says).

        A 2xx body is validated here (``parse_completion``) and never retried when malformed: unlike a 5xx or a
        429 it is not a passing state of a working endpoint but a wrong endpoint (a login or proxy page at the
        base URL, a gateway speaking another dialect), which would answer the same to every retry while the
        provider may already have billed the tokens. A body over ``body_limit`` bytes is not read further, and
        content over ``max_reply_chars`` characters is refused. Each is returned as an ``LLMError``; failures
        are never cached, so the next run asks again.
        """
        kwargs = self._arguments(request)
        started = time.monotonic()
        deadline = started + self.deadline_s
        retries = 0
        while True:
            attempt_started = time.perf_counter()
            try:
                async with asyncio.timeout(max(0.0, min(self.params.timeout_s, deadline - time.monotonic()))):
                    status, content_type, body = await self._attempt(client, kwargs)
            except TimeoutError:
                failure = AttemptFailed("timeout")
            except AttemptFailed as exc:
                failure = exc
            else:
                return self._reply(request, status, content_type, body, time.perf_counter() - attempt_started)
            wait = min(failure.wait_s if failure.wait_s is not None else backoff_s(retries),
                       self.params.max_retry_wait_s)
            if (not failure.retryable or retries >= self.params.max_retries
                    or time.monotonic() + wait >= deadline):
                return LLMError(scrub_text(self._failed(request, failure, retries, time.monotonic() - started)))
            await asyncio.sleep(wait)
            retries += 1

    async def _attempt(self, client: openai.AsyncOpenAI, kwargs: dict[str, Any]) -> tuple[int, str, str]:
        """One HTTP exchange: (status, content type, body text) of a 2xx reply, its body read in chunks up to
        ``body_limit`` bytes. Raises ``AttemptFailed`` saying what went wrong."""
        limit = self.body_limit
        try:
            async with client.chat.completions.with_streaming_response.create(**kwargs) as raw:
                http = raw.http_response
                status, content_type = http.status_code, http.headers.get("content-type", "")
                too_large = AttemptFailed("reply", f"reply too large (HTTP {status}, not retried): body over "
                                          f"{limit:,} bytes (llm.max_reply_chars={self.params.max_reply_chars:,}), "
                                          "not read further", retryable=False)
                declared = http.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise too_large
                chunks, size = [], 0
                try:
                    async for chunk in raw.iter_bytes():
                        size += len(chunk)
                        if size > limit:
                            raise too_large
                        chunks.append(chunk)
                except AttemptFailed:
                    raise
                except Exception as exc:  # noqa: BLE001 - the connection broke mid-body (httpx's errors)
                    raise AttemptFailed("connection", f"{type(exc).__name__} while reading the body: {exc}") \
                        from None
                encoding = http.charset_encoding or "utf-8"
        except openai.APIStatusError as exc:
            headers = exc.response.headers
            raise AttemptFailed("status", self._status_detail(exc), status=exc.status_code,
                                retryable=should_retry(exc.status_code, headers), wait_s=retry_after_s(headers)) \
                from None
        except openai.APITimeoutError:  # the SDK's own (per read) timeout: the same as the attempt's
            raise AttemptFailed("timeout") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise AttemptFailed("connection", f"{type(cause).__name__}: {cause}") from None
        except openai.OpenAIError as exc:
            raise AttemptFailed("reply", f"{type(exc).__name__}: {exc}", retryable=False) from None
        content = b"".join(chunks)
        try:  # the declared charset (else UTF-8), bad bytes replaced
            return status, content_type, content.decode(encoding, "replace")
        except LookupError:
            return status, content_type, content.decode("utf-8", "replace")

    def _reply(self, request: ChatRequest, status: int, content_type: str, body: str,
               latency: float) -> ChatReply | LLMError:
        """The ``ChatReply`` of a 2xx body, or the ``LLMError`` saying why the body is not one."""
        try:
            response = parse_completion(status, content_type, body)
        except MalformedReply as exc:
            return LLMError(f"{self._where(request)}: malformed reply (HTTP {status}, not retried): {exc}")
        choice = response.choices[0]
        text = choice.message.content
        if len(text) > self.params.max_reply_chars:
            return LLMError(f"{self._where(request)}: reply too large (HTTP {status}, not retried): "
                            f"choices[0].message.content has {len(text):,} characters, over "
                            f"llm.max_reply_chars={self.params.max_reply_chars:,}")
        usage = response.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        completion_tokens = usage.completion_tokens if usage else 0
        if request.stop and choice.finish_reason == "stop":
            text = close_stop(text, request.stop)  # the API drops the matched stop string
        return ChatReply(text=text, model=response.model or self.model,
                         prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                         cost_usd=price(self.params, prompt_tokens, completion_tokens), latency_s=latency,
                         finish_reason=choice.finish_reason)

    def _where(self, request: ChatRequest) -> str:
        tag = f", tag {request.tag}" if request.tag else ""
        return f"{self.base_url}/chat/completions (model {self.model}{tag})"

    def _failed(self, request: ChatRequest, failure: AttemptFailed, retries: int, elapsed: float) -> str:
        """Which endpoint and request, what went wrong, after how many retries and how long: what someone
        debugging a run needs (an error page's body is cut to a one-line snippet)."""
        where = self._where(request)
        after = f"after {retries} retries (max_retries={self.params.max_retries})"
        if failure.kind == "timeout":
            p = self.params
            return (f"{where}: timed out after {elapsed:.1f} s (deadline {self.deadline_s:g} s: "
                    f"timeout_s={p.timeout_s:g} per attempt, waits of at most max_retry_wait_s="
                    f"{p.max_retry_wait_s:g}) {after}")
        if failure.kind == "status":
            return f"{where}: HTTP {failure.status} {after}: {failure.detail}"
        if failure.kind == "connection":
            return f"{where}: connection failed {after}: {failure.detail}"
        return f"{where}: {failure.detail}"

    @staticmethod
    def _status_detail(exc: openai.APIStatusError) -> str:
        """The error's message; an error page's body that is not JSON (an HTML page) is shown by its start."""
        detail = one_line(exc.message, 300)
        if isinstance(exc.body, str) and exc.body.strip():
            kind = exc.response.headers.get("content-type", "").split(";")[0] or "no content type"
            detail += f", {kind} body {snippet(exc.body)}"
        return detail
