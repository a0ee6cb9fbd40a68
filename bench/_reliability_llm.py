"""The LLM client's part of bench/reliability.py: serve at least 100 malformed chat-completion replies
(HTML pages, empty 200s, 204s, ``choices`` as strings, null messages, wrong-typed fields, 5xx pages,
dropped bodies: pipelines/llm/malformed.py) from the scripted OpenAI-compatible server on 127.0.0.1
through the real ``OpenAIChatClient``, and count what came out: every one must be an ``LLMError``
result naming the problem and the request tag, and nothing may raise.

Each malformed reply is sent three ways: alone (``complete_many`` of one request, so an exception
is counted per reply), all in one concurrent batch, and through ``complete_json_many`` (no repair
turn may be spent on a broken endpoint). The odd-but-usable replies (a lone surrogate, a BOM, JSON
sent as text/plain, missing usage...) go through the disk cache twice: the reread must equal what
was handed out the first time. Then every shape is asked for a JSON object through the disk cache three
times (``_cache_rounds``): no reply that failed the parse may be cached (issue 50: poisoned replies replayed).
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # also importable as bench._reliability_llm
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402, F401 - the offline environment and the project root on sys.path

from pipelines.config import LLMParams  # noqa: E402
from pipelines.llm.base import ChatReply, ChatRequest, LLMError  # noqa: E402
from pipelines.llm.cache import CachedChatClient  # noqa: E402
from pipelines.llm.malformed import ReplyShape, named_shapes, probe_shapes  # noqa: E402
from pipelines.llm.openai_client import OpenAIChatClient  # noqa: E402
from pipelines.llm.scripted import scripted_openai_app, serve_in_thread  # noqa: E402
from pipelines.llm.structured import complete_json_many  # noqa: E402

TAG = "bench.reliability"
EXAMPLES = ("html_login_page", "message_null", "choices_of_strings", "no_content_204")


class _DropAsgiTracebacks(logging.Filter):
    """uvicorn logs a traceback for the shape that lies about its Content-Length: expected here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Exception in ASGI application")


def _request(index: int, json_mode: bool = False) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": f"probe {index}"}], tag=TAG, json_mode=json_mode)


def _cache_rounds(params: LLMParams, shapes: list[ReplyShape], rounds: int = 3) -> dict[str, Any]:
    """Every shape asked for a JSON object through the disk cache (``complete_json_many``), ``rounds`` times: a
    reply that failed (an LLMError, not JSON, not an object) must never be cached, so each round asks it again;
    a good one is cached once and then read back. Counts the cases, the exceptions, and the bad replies cached."""
    requests = [_request(i, json_mode=True) for i in range(len(shapes))]
    cases, exceptions, bad_cached, good_cached = 0, 0, 0, 0
    with tempfile.TemporaryDirectory(prefix="omne-probe-json-cache-") as cache_dir:
        for _ in range(rounds):
            with CachedChatClient(OpenAIChatClient(params), Path(cache_dir)) as cached:
                try:
                    results = complete_json_many(cached, requests, repair_rounds=0)
                except Exception:  # noqa: BLE001 - what the probe counts
                    exceptions += len(requests)
                    continue
                cases += len(requests)
                for request, result in zip(requests, results, strict=True):
                    kept = cached.get(request) is not None
                    bad_cached += kept and not result.ok
                    good_cached += kept and result.ok
    return {"cache_cases": cases, "cache_rounds": rounds, "cache_exceptions": exceptions,
            "bad_replies_cached": bad_cached, "good_replies_cached": good_cached}


def run_llm_probe(n_replies: int = 120) -> dict[str, Any]:
    """Serve ``n_replies`` malformed replies (named shapes first, then generated ones) plus the usable
    odd ones; return the counts (``exceptions`` must be 0 and ``llm_errors`` equal ``malformed_replies``)."""
    started = time.perf_counter()
    shapes = probe_shapes(n_replies)
    errors = [s for s in shapes if s.expect == "error"]
    usable = [s for s in shapes if s.expect == "usable"]
    by_prompt: dict[str, ReplyShape] = {_request(i).messages[0]["content"]: s for i, s in enumerate(shapes)}
    app = scripted_openai_app(lambda body: by_prompt[body["messages"][0]["content"]].spec, retry_after_ms=1)
    quiet = _DropAsgiTracebacks()
    logging.getLogger("uvicorn.error").addFilter(quiet)
    figures: dict[str, Any] = {"malformed_replies": len(errors), "exceptions": 0}
    try:
        with serve_in_thread(app) as url:
            params = LLMParams(model="probe-model", base_url=f"{url}/v1", timeout_s=10.0, max_retries=1,
                               concurrency=8)
            client = OpenAIChatClient(params)
            error_requests = [_request(shapes.index(s)) for s in errors]

            alone: list[ChatReply | LLMError | None] = []
            for request in error_requests:  # one call per reply: an exception is pinned to its shape
                try:
                    alone.append(client.complete_many([request])[0])
                except Exception:  # noqa: BLE001 - what the probe counts
                    figures["exceptions"] += 1
                    alone.append(None)
            try:
                batch: list[ChatReply | LLMError | None] = list(client.complete_many(error_requests))
            except Exception:  # noqa: BLE001
                figures["exceptions"] += len(error_requests)
                batch = [None] * len(error_requests)
            try:
                json_results = complete_json_many(client, [_request(shapes.index(s), json_mode=True) for s in errors],
                                                  repair_rounds=1)
            except Exception:  # noqa: BLE001
                figures["exceptions"] += len(errors)
                json_results = []

            with tempfile.TemporaryDirectory(prefix="omne-probe-cache-") as cache_dir:
                usable_requests = [_request(shapes.index(s)) for s in usable]
                with CachedChatClient(OpenAIChatClient(params), Path(cache_dir)) as cached:
                    first = cached.complete_many(usable_requests)
                with CachedChatClient(OpenAIChatClient(params), Path(cache_dir)) as cached:
                    again = cached.complete_many(usable_requests)
            sent = app.state.log.total
            figures.update(_cache_rounds(params, shapes))
    finally:
        logging.getLogger("uvicorn.error").removeFilter(quiet)

    messages = [str(r) for r in alone if isinstance(r, LLMError)]
    figures.update({
        "llm_errors": len(messages),
        "replies_from_malformed": sum(isinstance(r, ChatReply) for r in alone),
        "errors_naming_the_tag": sum(f"tag {TAG}" in m for m in messages),
        "errors_naming_the_problem": sum(isinstance(r, LLMError) and s.mentions in str(r)
                                         for s, r in zip(errors, alone, strict=True)),
        "batch_llm_errors": sum(isinstance(r, LLMError) for r in batch),
        "json_results_failed": sum(not r.ok and r.error.startswith("request failed") for r in json_results),
        "shapes": len({s.name for s in errors}),
        "named_shapes": len({s.name for s in errors} & {s.name for s in named_shapes()}),
        "families": len({s.family for s in errors}),
        "retried_shapes": sum(s.retried for s in errors),
        "usable_shapes": len(usable),
        "usable_replies": sum(isinstance(r, ChatReply) for r in first),
        "cached_rereads_equal": sum(isinstance(a, ChatReply) and isinstance(b, ChatReply) and b.cached
                                    and a.text == b.text for a, b in zip(first, again, strict=True)),
        "requests_sent": sent,
        "examples": {s.name: str(r).split(": ", 1)[1] for s, r in zip(errors, alone, strict=True)
                     if s.name in EXAMPLES and isinstance(r, LLMError)},
        "wall_s": round(time.perf_counter() - started, 2),
    })
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(run_llm_probe(), indent=2, ensure_ascii=False))
