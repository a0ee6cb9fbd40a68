"""Scripted stand-ins for the external LLM endpoint: replay fixed replies to test prompts, parsing,
retries and caching without a model. (The only stand-in the project allows: see the developers' guide.)
``scripted_vllm_app`` plays a ``trl vllm-serve`` server for TRL's ``VLLMClient`` (RL rollouts with vLLM).

Two levels: ``ScriptedChatClient`` replaces the client in-process; ``scripted_openai_app`` is a real
OpenAI-compatible HTTP server (FastAPI, run by ``serve_in_thread``) so that the real SDK client, its
retries, timeouts and concurrency, and the cache are exercised end to end (tests and bench/qa.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from tqdm.auto import tqdm

from pipelines.llm.base import ChatReply, ChatRequest, LLMError, OnReply, Usage

Script = Sequence[str | Exception] | Callable[[ChatRequest], str]


class ScriptedChatClient:
    """A ``ChatClient`` whose replies come from a list (in call order) or a function of the request.

    A list item that is an exception is raised for that request (as an ``LLMError`` in
    ``complete_many``), which is how tests play timeouts and server errors at this level.
    Every request seen is kept in ``requests`` so tests can assert on the prompts.
    """

    def __init__(self, script: Script, model: str = "scripted") -> None:
        self.model = model
        self.usage = Usage()
        self.requests: list[ChatRequest] = []
        self._script = script
        self._next = 0
        self._lock = threading.Lock()

    def _reply_text(self, request: ChatRequest) -> str:
        with self._lock:
            self.requests.append(request)
            if callable(self._script):
                return self._script(request)
            if self._next >= len(self._script):
                raise LLMError(f"scripted client ran out of replies after {self._next} requests")
            item = self._script[self._next]
            self._next += 1
        if isinstance(item, Exception):
            raise item
        return item

    def complete(self, request: ChatRequest) -> ChatReply:
        text = self._reply_text(request)
        prompt_tokens = sum(len(m.get("content", "").split()) for m in request.messages)
        reply = ChatReply(text=text, model=self.model, prompt_tokens=prompt_tokens,
                          completion_tokens=len(text.split()))
        self.usage.add(reply, request.tag)
        return reply

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        results: list[ChatReply | LLMError] = []
        for index, request in enumerate(tqdm(requests, desc=desc, unit="req", disable=not progress)):
            try:
                reply = self.complete(request)
            except Exception as exc:  # noqa: BLE001 - every failure becomes the request's result
                self.usage.failed += 1
                results.append(exc if isinstance(exc, LLMError) else LLMError(str(exc)))
                continue
            if on_reply is not None:
                on_reply(index, reply)
            results.append(reply)
        return results


# --- a scripted OpenAI-compatible HTTP server ------------------------------------------------------

Handler = Callable[[dict[str, Any]], str | int | dict[str, Any]]


def messages_key(messages: list[dict[str, Any]]) -> str:
    """What the server counts requests by: the conversation (the same prompt sent twice counts 2)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class ScriptedServerLog:
    """What the scripted server saw: requests per conversation, and how many were in flight at most."""

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()  # messages_key -> requests received (retries included)
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        return sum(self.received.values())

    def count(self, messages: list[dict[str, Any]]) -> int:
        return self.received[messages_key(messages)]

    def _enter(self, body: dict[str, Any]) -> int:
        with self._lock:
            key = messages_key(body.get("messages", []))
            self.received[key] += 1
            self.bodies.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.received[key]

    def _exit(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _words(text: str) -> int:
    return len(text.split())


def scripted_openai_app(handler: Handler, latency_s: float = 0.0, *, model: str = "scripted-model",
                        retry_after_ms: int | None = 20) -> FastAPI:
    """An OpenAI-compatible chat server whose replies come from ``handler(request_json)``.

    The handler returns the reply text (``str``); an HTTP status to fail with (``int``, e.g. 500 or
    429, with an OpenAI-style error body); or a ``dict`` with any of ``text``, ``status``,
    ``sleep_s`` (sleep before answering, e.g. past the client's timeout), ``finish_reason``,
    ``headers``; or a ``dict`` with ``body`` (str or bytes, sent as is) or ``json`` (any value, sent
    as JSON, lone surrogates as ``\\ud800`` escapes), with optional ``status`` (default 200, 204
    included), ``content_type`` (default application/json) and ``headers``: the malformed replies
    that real gateways send (an HTML login page, an empty 200, a 204, ``choices`` as strings, ...).
    Every reply waits ``latency_s`` first, concurrently (it is an async sleep).
    Error replies carry ``retry-after-ms: retry_after_ms`` (as OpenAI sends on 429) so that the SDK's
    retries wait milliseconds in tests; ``None`` leaves the SDK's own exponential backoff.
    Token counts are whitespace words. ``app.state.log`` is the ``ScriptedServerLog``. Routes are
    served with and without the ``/v1`` prefix, so the server's root URL or root + "/v1" both work
    as an SDK base URL.
    """
    app = FastAPI(title="scripted OpenAI-compatible server")
    log = ScriptedServerLog()
    app.state.log = log

    async def chat(request: Request) -> Response:
        body = await request.json()
        log._enter(body)
        try:
            if latency_s:
                await asyncio.sleep(latency_s)
            action = handler(body)
            spec: dict[str, Any] = ({"text": action} if isinstance(action, str)
                                    else {"status": action} if isinstance(action, int) else dict(action))
            if spec.get("sleep_s"):
                await asyncio.sleep(float(spec["sleep_s"]))
            headers = {str(k): str(v) for k, v in spec.get("headers", {}).items()}
            status = int(spec.get("status", 200))
            if "body" in spec or "json" in spec:
                return _raw_reply(spec, status, headers, retry_after_ms)
            if status != 200:
                if retry_after_ms is not None:
                    headers.setdefault("retry-after-ms", str(retry_after_ms))
                kind = "rate_limit_exceeded" if status == 429 else "server_error"
                return JSONResponse({"error": {"message": f"scripted failure {status}", "type": kind,
                                               "param": None, "code": kind}}, status_code=status, headers=headers)
            text = str(spec.get("text", ""))
            prompt_tokens = sum(_words(str(m.get("content", ""))) for m in body.get("messages", []))
            return JSONResponse({
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", model),
                "choices": [{"index": 0, "finish_reason": spec.get("finish_reason", "stop"),
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": _words(text),
                          "total_tokens": prompt_tokens + _words(text)},
            }, headers=headers)
        finally:
            log._exit()

    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "omne"}]}

    for prefix in ("/v1", ""):
        app.add_api_route(f"{prefix}/chat/completions", chat, methods=["POST"])
        app.add_api_route(f"{prefix}/models", models, methods=["GET"])
    return app


TokenHandler = Callable[[list[int], dict[str, Any]], list[int]]


def scripted_vllm_app(handler: TokenHandler, *, model: str = "scripted-vllm") -> FastAPI:
    """A stand-in for a ``trl vllm-serve`` server (vLLM's OpenAI-compatible server) as TRL's ``VLLMClient`` talks
    to it: ``/health``, ``/v1/models`` and ``/v1/completions`` with token-id prompts (``return_token_ids``).
    Each prompt's completion tokens are ``handler(prompt_ids, request_json)``, ``n`` times; no log-probabilities.
    ``app.state.log`` (``ScriptedServerLog``) keeps every completions request body."""
    app = FastAPI(title="scripted vLLM server")
    log = ScriptedServerLog()
    app.state.log = log

    async def health() -> dict[str, Any]:
        return {}

    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "omne"}]}

    async def completions(request: Request) -> Response:
        body = await request.json()
        log._enter(body)
        try:
            rows = [prompt for prompt in body["prompt"] for _ in range(int(body.get("n", 1)))]
            choices = [{"index": index, "text": "", "prompt_token_ids": prompt, "token_ids": handler(prompt, body),
                        "logprobs": None, "finish_reason": "stop"} for index, prompt in enumerate(rows)]
            return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion",
                                 "created": int(time.time()), "model": model, "choices": choices})
        finally:
            log._exit()

    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route("/v1/completions", completions, methods=["POST"])
    return app


def _raw_reply(spec: dict[str, Any], status: int, headers: dict[str, str], retry_after_ms: int | None) -> Response:
    """The body exactly as the handler gave it (no OpenAI envelope): ``body`` bytes/str or ``json``."""
    if "json" in spec:  # ensure_ascii: a lone surrogate goes out as its \\u escape, as a buggy server sends it
        content: bytes = json.dumps(spec["json"], ensure_ascii=True).encode("ascii")
    else:
        raw = spec["body"]
        content = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogatepass")
    if status >= 400 and retry_after_ms is not None:
        headers.setdefault("retry-after-ms", str(retry_after_ms))
    if status == 204 or 100 <= status < 200 or status == 304:  # no body allowed: an empty reply
        content = b""
    return Response(content=content, status_code=status, headers=headers,
                    media_type=str(spec.get("content_type", "application/json")))


# --- uvicorn in a background thread (shared with the tool server tests) ----------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class UvicornThread:
    """uvicorn serving ``app`` on 127.0.0.1:<free port> in a daemon thread (a context manager).

    Entering returns once uvicorn is accepting connections; leaving stops it, cancelling requests
    still running after ``graceful_s`` (a scripted handler may be asleep past a client's timeout).
    """

    def __init__(self, app: Any, *, graceful_s: int | None = 5, start_timeout_s: float = 60.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off", timeout_graceful_shutdown=graceful_s))
        self.thread = threading.Thread(target=self.server.run, daemon=True, name=f"uvicorn-{self.port}")
        self._start_timeout_s = start_timeout_s

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        deadline = time.monotonic() + self._start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"uvicorn on port {self.port} exited before it started")
            if time.monotonic() > deadline:
                self.server.should_exit = True
                raise RuntimeError(f"uvicorn on port {self.port} did not start within {self._start_timeout_s}s")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        if self.thread.is_alive():
            raise RuntimeError(f"uvicorn on port {self.port} did not stop")


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 in a thread for the ``with`` block; yields its root URL."""
    with UvicornThread(app) as running:
        yield running.url
