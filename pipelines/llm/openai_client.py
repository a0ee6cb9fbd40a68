"""Chat over any OpenAI-compatible endpoint (a provider, or a local ``vllm serve MODEL``).

The official ``openai`` SDK does the HTTP, the timeouts and the retries (exponential backoff with
jitter on timeouts, connection errors, 408/409/429 and 5xx, honouring ``Retry-After``); this module
adds what the pipelines need on top: bounded concurrency, request-order results, failures as values,
token and cost counts, and a synchronous entry point that works from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import openai
from tqdm.auto import tqdm

from pipelines.config import ConfigError, LLMParams
from pipelines.llm.base import ChatReply, ChatRequest, LLMError, OnReply, Usage, close_stop, complete_one

T = TypeVar("T")

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
                result = await self._call(client, request)
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
        kwargs: dict[str, Any] = {"model": self.model, "messages": request.messages,
                                  "temperature": request.temperature, "max_tokens": request.max_tokens}
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if request.stop:
            kwargs["stop"] = request.stop
        if request.prefix:  # continue the assistant turn (vLLM's continue_final_message)
            kwargs["messages"] = [*request.messages, {"role": "assistant", "content": request.prefix}]
            kwargs["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
        start = time.perf_counter()
        try:
            response = await client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            return LLMError(self._describe(exc))
        latency = time.perf_counter() - start
        if not response.choices or response.choices[0].message.content is None:
            return LLMError(f"{self.base_url} (model {self.model}): the reply has no message content")
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

    def _describe(self, exc: openai.OpenAIError) -> str:
        """Which endpoint, what went wrong, after how many retries: what someone debugging a run needs."""
        where = f"{self.base_url}/chat/completions (model {self.model})"
        request = getattr(exc, "request", None)
        retries = request.headers.get("x-stainless-retry-count", "?") if request is not None else "?"
        after = f"after {retries} retries (max_retries={self.params.max_retries})"
        if isinstance(exc, openai.APITimeoutError):
            return f"{where}: timed out (timeout_s={self.params.timeout_s}) {after}"
        if isinstance(exc, openai.APIStatusError):
            return f"{where}: HTTP {exc.status_code} {after}: {exc.message}"
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return f"{where}: connection failed {after}: {type(cause).__name__}: {cause}"
        return f"{where}: {type(exc).__name__}: {exc}"
