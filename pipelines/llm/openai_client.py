"""Chat over any OpenAI-compatible endpoint (a provider, or a local ``vllm serve MODEL``).

The official ``openai`` SDK does the HTTP, the timeouts and the retries (exponential backoff with
jitter on timeouts, connection errors, 408/409/429 and 5xx, honouring ``Retry-After``); this module
adds what the pipelines need on top: bounded concurrency, request-order results, failures as values,
token and cost counts, and a synchronous entry point that works from any thread.

The reply body is not trusted: the SDK hands back the raw HTTP response and ``parse_completion``
validates it against ``CompletionBody`` (pydantic, strict types, only the fields used), so that an
HTML page, an empty body, a 204 or a ``choices``/``message``/``usage`` of the wrong shape from some
gateway becomes one ``LLMError`` naming what was wrong, never an exception out of ``complete_many``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
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
    finish_reason: StrictStr | None = None


class ReplyUsage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_tokens: StrictInt = Field(default=0, ge=0)
    completion_tokens: StrictInt = Field(default=0, ge=0)


class CompletionBody(BaseModel):
    """The fields of an OpenAI ``ChatCompletion`` body that the pipelines use, with strict types (no
    "12" for 12, no 1 for "stop"): a body that does not match is a malformed reply, not a guess."""

    model_config = ConfigDict(extra="ignore")
    choices: list[ReplyChoice] = Field(min_length=1)
    model: StrictStr | None = None
    usage: ReplyUsage | None = None


class MalformedReply(ValueError):
    """An HTTP 2xx reply whose body is not a chat completion; the message says what was wrong."""


EXPECTED = {"model_type": "an object", "dict_type": "an object", "list_type": "an array", "string_type": "a string",
            "int_type": "an integer", "greater_than_equal": "a count >= 0", "too_short": "a non-empty array"}


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

    def complete(self, request: ChatRequest) -> ChatReply:
        return complete_one(self, request)

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        if not requests:
            return []
        return run_sync(lambda: self._run_all(requests, progress, desc, on_reply))

    async def _run_all(self, requests: list[ChatRequest], progress: bool, desc: str,
                       on_reply: OnReply | None) -> list[ChatReply | LLMError]:
        # One SDK client per event loop: its connection pool belongs to the loop that opened it.
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.params.timeout_s,
                                    max_retries=self.params.max_retries)
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
                    self.usage.failed += 1
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
            await client.close()

    async def _call(self, client: openai.AsyncOpenAI, request: ChatRequest) -> ChatReply | LLMError:
        """One request: the SDK sends it and retries what is transient (timeouts, connection errors,
        408/409/429, 5xx); the 2xx body is then validated here (``parse_completion``).

        A malformed 2xx body is not retried: the SDK does not either, and unlike a 5xx or a 429 it is
        not a passing state of a working endpoint but a wrong endpoint (a login or proxy page at the
        base URL, a gateway speaking another dialect), which would answer the same to every retry
        while the provider may already have billed the tokens. It is returned as an ``LLMError``;
        failures are never cached, so the next run asks again.

        Prompt text that cannot be encoded as UTF-8 (a lone surrogate from a badly decoded file) is
        sent with U+FFFD in its place (``scrub_text``), where the SDK would raise while encoding it.
        """
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
        start = time.perf_counter()
        try:
            raw = await client.chat.completions.with_raw_response.create(**kwargs)
        except openai.OpenAIError as exc:
            return LLMError(scrub_text(self._describe(exc, request)))
        latency = time.perf_counter() - start
        http = raw.http_response
        try:
            body = http.text  # decoded with the declared charset (else UTF-8), bad bytes replaced
        except (LookupError, ValueError):
            body = http.content.decode("utf-8", "replace")
        try:
            response = parse_completion(http.status_code, http.headers.get("content-type", ""), body)
        except MalformedReply as exc:
            return LLMError(f"{self._where(request)}: malformed reply (HTTP {http.status_code}, not retried): {exc}")
        choice = response.choices[0]
        usage = response.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        completion_tokens = usage.completion_tokens if usage else 0
        text = choice.message.content
        if request.stop and choice.finish_reason == "stop":
            text = close_stop(text, request.stop)  # the API drops the matched stop string
        return ChatReply(text=text, model=response.model or self.model,
                         prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                         cost_usd=price(self.params, prompt_tokens, completion_tokens), latency_s=latency,
                         finish_reason=choice.finish_reason)

    def _where(self, request: ChatRequest) -> str:
        tag = f", tag {request.tag}" if request.tag else ""
        return f"{self.base_url}/chat/completions (model {self.model}{tag})"

    def _describe(self, exc: openai.OpenAIError, request: ChatRequest) -> str:
        """Which endpoint and request, what went wrong, after how many retries: what someone debugging a
        run needs (an error page's body is cut to a one-line snippet)."""
        where = self._where(request)
        sent = getattr(exc, "request", None)
        retries = sent.headers.get("x-stainless-retry-count", "?") if sent is not None else "?"
        after = f"after {retries} retries (max_retries={self.params.max_retries})"
        if isinstance(exc, openai.APITimeoutError):
            return f"{where}: timed out (timeout_s={self.params.timeout_s}) {after}"
        if isinstance(exc, openai.APIStatusError):
            detail = one_line(exc.message, 300)
            if isinstance(exc.body, str) and exc.body.strip():  # not JSON (an HTML error page): show its start
                kind = exc.response.headers.get("content-type", "").split(";")[0] or "no content type"
                detail += f", {kind} body {snippet(exc.body)}"
            return f"{where}: HTTP {exc.status_code} {after}: {detail}"
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return f"{where}: connection failed {after}: {type(cause).__name__}: {cause}"
        return f"{where}: {type(exc).__name__}: {exc}"
