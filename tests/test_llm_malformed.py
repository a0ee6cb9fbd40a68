"""Hostile replies: the OpenAI-compatible client against a real scripted server on 127.0.0.1 that sends
HTML pages, empty 200s, 204s, ``choices`` as strings, null messages, non-string content, lone
surrogates, ... (pipelines/llm/malformed.py), plus hypothesis-generated ones. ``complete_many`` and
``complete_json_many`` must never raise: every malformed reply is one ``LLMError`` result naming
what was wrong and the request's tag; the disk cache stores what cannot be encoded and reads a
corrupt entry as a miss.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import diskcache
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.config import LLMParams
from pipelines.llm.base import ChatReply, ChatRequest, LLMError, scrub_text
from pipelines.llm.cache import CachedChatClient
from pipelines.llm.malformed import (
    DELETE,
    FIELDS,
    ReplyShape,
    field_accepts,
    grid_shapes,
    json_path,
    mutate,
    named_shapes,
    probe_shapes,
    valid_completion,
)
from pipelines.llm.openai_client import OpenAIChatClient
from pipelines.llm.scripted import ScriptedServerLog, scripted_openai_app, serve_in_thread
from pipelines.llm.structured import complete_json_many
from tests.conftest import DATA, cli_env

TAG = "probe.malformed"


pytestmark = pytest.mark.usefixtures("no_llm_endpoint_env")


class Gateway:
    """A scripted server that answers each prompt with the reply spec registered for it."""

    def __init__(self, url: str, log: ScriptedServerLog) -> None:
        self.url, self.log = url, log
        self.specs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def handle(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self.specs[body["messages"][-1]["content"]]

    def ask(self, spec: dict[str, Any], tag: str = TAG, **fields: Any) -> ChatRequest:
        """A request (with a unique prompt) that the server answers with ``spec``."""
        prompt = f"prompt {uuid.uuid4().hex}"
        with self._lock:
            self.specs[prompt] = spec
        return ChatRequest(messages=[{"role": "user", "content": prompt}], tag=tag, **fields)

    def client(self, **changes: Any) -> OpenAIChatClient:
        base = {"model": "test-model", "base_url": f"{self.url}/v1", "timeout_s": 5.0, "max_retries": 1,
                "concurrency": 16}
        return OpenAIChatClient(LLMParams(**{**base, **changes}))


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    holder: list[Gateway] = []
    app = scripted_openai_app(lambda body: holder[0].handle(body), retry_after_ms=1)
    with serve_in_thread(app) as url:
        holder.append(Gateway(url, app.state.log))
        yield holder[0]


def check_results(shapes: list[ReplyShape], results: list[ChatReply | LLMError], tag: str = TAG) -> None:
    """Each error shape gave an LLMError naming its problem and the tag; each usable one a reply."""
    assert len(results) == len(shapes)
    for shape, result in zip(shapes, results, strict=True):
        if shape.expect == "usable":
            assert isinstance(result, ChatReply), (shape.name, result)
            continue
        assert isinstance(result, LLMError), (shape.name, result)
        message = str(result)
        assert shape.mentions in message, (shape.name, message)
        assert f"tag {tag}" in message and "/chat/completions (model test-model" in message, message
        assert "unexpected" not in message, message  # handled on purpose, not by the last-resort catch
        assert len(message) < 700, message  # an error page is cut to a snippet


# --- the hand-written shapes ---------------------------------------------------------------------------

def test_named_shapes_each_give_one_clear_result(gateway: Gateway) -> None:
    shapes = named_shapes()
    assert sum(s.expect == "error" for s in shapes) >= 27
    client = gateway.client(max_retries=1)
    requests = [gateway.ask(s.spec) for s in shapes]
    results = client.complete_many(requests)
    check_results(shapes, results)
    errors = sum(isinstance(r, LLMError) for r in results)
    assert client.usage.failed == errors and client.usage.requests == len(shapes) - errors
    for shape, request in zip(shapes, requests, strict=True):
        sent = gateway.log.count(request.messages)
        # transient failures are retried as the SDK does; a malformed 2xx body is asked once
        assert sent == (2 if shape.retried else 1), (shape.name, sent)


def test_the_messages_say_what_was_wrong(gateway: Gateway) -> None:
    shapes = {s.name: s for s in named_shapes()}
    names = ["html_login_page", "message_null", "choices_of_strings", "no_content_204", "usage_string",
             "error_object_200", "html_502"]
    results = gateway.client().complete_many([gateway.ask(shapes[n].spec) for n in names])
    message = dict(zip(names, map(str, results), strict=True))
    assert "malformed reply (HTTP 200, not retried): reply is not JSON: text/html body '<!DOCTYPE html>" \
        in message["html_login_page"]
    assert message["message_null"].endswith("malformed reply (HTTP 200, not retried): choices[0].message is null")
    assert message["choices_of_strings"].endswith(
        "choices[0] is string 'ok', expected an object; choices[1] is string 'ok', expected an object")
    assert "reply has an empty body (HTTP 204" in message["no_content_204"]
    assert message["usage_string"].endswith("usage is string '12 tokens', expected an object")
    assert message["error_object_200"].endswith("reply is an error object, not a completion: 'upstream overloaded'")
    assert "HTTP 502 after 1 retries (max_retries=1): Error code: 502, text/html body '<!DOCTYPE html>" \
        in message["html_502"]


def test_odd_but_usable_replies_are_replies(gateway: Gateway) -> None:
    shapes = {s.name: s for s in named_shapes() if s.expect == "usable"}
    results = dict(zip(shapes, gateway.client().complete_many([gateway.ask(s.spec) for s in shapes.values()]),
                       strict=True))
    assert all(isinstance(r, ChatReply) for r in results.values())
    assert results["lone_surrogate"].text == "before \ufffd after"  # writable everywhere downstream
    assert results["surrogate_pair_escaped"].text == "smile \U0001f600"
    assert results["bom_then_json"].text == "ok" and results["json_as_text_plain"].text == "ok"
    assert (results["usage_missing"].prompt_tokens, results["usage_missing"].completion_tokens) == (0, 0)
    assert results["model_missing"].model == "test-model" and results["finish_reason_null"].finish_reason is None
    assert results["empty_content"].text == "" and results["extra_fields"].text == "ok"
    for reply in results.values():
        reply.model_dump_json().encode("utf-8")  # nothing that cannot be written


# --- generated shapes -------------------------------------------------------------------------------------

def test_a_grid_of_hundreds_of_malformed_replies_never_raises(gateway: Gateway) -> None:
    shapes = grid_shapes()
    assert sum(s.expect == "error" for s in shapes) >= 300
    client = gateway.client(max_retries=0)
    results = client.complete_many([gateway.ask(s.spec) for s in shapes])  # one batch, 16 at a time
    check_results(shapes, results)
    usable = [s for s in shapes if s.expect == "usable"]
    assert client.usage.requests == len(usable) and client.usage.failed == len(shapes) - len(usable)


def test_probe_set_has_over_100_malformed_replies(gateway: Gateway) -> None:
    shapes = probe_shapes(100)
    assert sum(s.expect == "error" for s in shapes) == 100 and len({s.name for s in shapes}) == len(shapes)
    results = [gateway.client().complete_many([gateway.ask(s.spec)])[0] for s in shapes]  # one call each
    check_results(shapes, results)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**62), 2**62) | st.floats()
    | st.text(st.characters(categories=["L", "N", "P", "Zs", "Cs", "So"]), max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["content", "message", "role", "prompt_tokens", "finish_reason", "x"]), inner, max_size=3),
    max_leaves=6)
MUTATIONS = st.lists(st.tuples(st.sampled_from(FIELDS), JSON_VALUES | st.just(DELETE)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(mutations=MUTATIONS)
def test_property_any_field_of_any_type_gives_a_reply_or_a_named_error(gateway: Gateway,
                                                                        mutations: list[tuple[Any, Any]]) -> None:
    documents = [mutate(valid_completion(), path, value) for path, value in mutations]
    results = gateway.client(max_retries=0).complete_many([gateway.ask({"json": d}) for d in documents])
    for (path, value), result in zip(mutations, results, strict=True):
        if field_accepts(path, value):
            assert isinstance(result, ChatReply), (path, value, result)
            document = mutate(valid_completion(), path, value)
            assert result.text == scrub_text(document["choices"][0]["message"]["content"])
            result.model_dump_json().encode("utf-8")
        else:
            assert isinstance(result, LLMError), (path, value, result)
            named = path[:-1] if value is DELETE and isinstance(path[-1], int) else path
            assert json_path(named) in str(result) and f"tag {TAG}" in str(result), str(result)
            assert "unexpected" not in str(result)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(bodies=st.lists(st.tuples(st.sampled_from([200, 201, 203, 204, 206]),
                                 st.sampled_from(["application/json", "text/html", "text/plain", ""]),
                                 st.binary(max_size=300) | st.text(max_size=300)), min_size=1, max_size=6))
def test_property_arbitrary_2xx_bodies_are_malformed_replies(gateway: Gateway,
                                                             bodies: list[tuple[int, str, Any]]) -> None:
    requests = [gateway.ask({"status": s, "content_type": c, "body": b}) for s, c, b in bodies]
    for result in gateway.client(max_retries=0).complete_many(requests):
        assert isinstance(result, LLMError) and "malformed reply (HTTP 20" in str(result), result


# --- JSON requests and the CLI -------------------------------------------------------------------------

def test_complete_json_many_never_raises_and_does_not_repair_a_broken_endpoint(gateway: Gateway) -> None:
    shapes = [s for s in probe_shapes(100) if s.expect == "error"]
    requests = [gateway.ask(s.spec, json_mode=True) for s in shapes]
    results = complete_json_many(gateway.client(max_retries=0), requests, repair_rounds=2)
    assert len(results) == len(shapes)
    for shape, request, result in zip(shapes, requests, results, strict=True):
        assert not result.ok and result.rounds == 0 and result.raw == [], shape.name
        assert result.error.startswith("request failed: ") and shape.mentions in result.error, result.error
        assert gateway.log.count(request.messages) == 1  # no repair turn: the endpoint is the problem


def test_kg_import_against_an_html_gateway_is_one_error_line(project: Path) -> None:
    app = scripted_openai_app(lambda body: {"body": "<html><body>Sign in to the proxy</body></html>",
                                            "content_type": "text/html"})
    with serve_in_thread(app) as url:
        env = cli_env(OMNE_LLM_BASE_URL=f"{url}/v1", OMNE_LLM_MODEL="gateway-model")
        result = subprocess.run(["omne", "kg", "import", str(DATA / "text_domain" / "rivers.txt"), "--name",
                                 "rivers", "--format", "text"], cwd=project, env=env, capture_output=True,
                                text=True, timeout=600)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "extraction failed for all" in result.stderr and "reply is not JSON: text/html body" in result.stderr
    assert app.state.log.total >= 1


# --- the disk cache ----------------------------------------------------------------------------------------

def test_a_lone_surrogate_reply_is_cached_and_read_back(gateway: Gateway, tmp_path: Path) -> None:
    spec = {"json": mutate(valid_completion(), ("choices", 0, "message", "content"), "half \ud83d of a pair")}
    request = gateway.ask(spec)
    with CachedChatClient(gateway.client(), tmp_path / "cache") as first:
        [reply] = first.complete_many([request])
        assert isinstance(reply, ChatReply) and reply.text == "half \ufffd of a pair" and len(first) == 1
    with CachedChatClient(gateway.client(), tmp_path / "cache") as again:
        [hit] = again.complete_many([request])
        assert hit.cached and hit.text == reply.text and gateway.log.count(request.messages) == 1


def test_a_backend_that_bypasses_validation_cannot_break_a_save(tmp_path: Path) -> None:
    """A ``model_copy(update=...)`` skips validation: the cache still stores (and hands out) clean text."""

    class Sloppy:
        model = "sloppy"

        def __init__(self) -> None:
            from pipelines.llm.base import Usage

            self.usage = Usage()

        def complete_many(self, requests: list[ChatRequest], **_: Any) -> list[ChatReply | LLMError]:
            base = ChatReply(text="x", model=self.model)
            return [base.model_copy(update={"text": f"bad \udc80 {r.messages[0]['content']}"}) for r in requests]

    request = ChatRequest(messages=[{"role": "user", "content": "q \ud800"}])  # a lone surrogate in the key too
    with CachedChatClient(Sloppy(), tmp_path / "cache") as client:  # type: ignore[arg-type]
        [given_out] = client.complete_many([request])
        assert given_out.text == "bad \ufffd q \ufffd" and len(client) == 1
        assert client.complete_many([request])[0].text == given_out.text


@pytest.fixture()
def echo(gateway: Gateway) -> Callable[[str], ChatRequest]:
    def ask(text: str) -> ChatRequest:
        return gateway.ask({"json": mutate(valid_completion(), ("choices", 0, "message", "content"), text)})

    return ask


@pytest.mark.parametrize("junk", ["not json", b"\xff\xfe binary", 12345, '{"text": 1}', "", None],
                         ids=["text", "bytes", "int", "wrong-shape", "empty", "none"])
def test_a_corrupt_entry_is_a_miss(gateway: Gateway, echo: Callable[[str], ChatRequest], tmp_path: Path,
                                   junk: Any) -> None:
    request = echo("fresh")
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        with diskcache.Cache(str(tmp_path / "cache")) as raw:
            raw.set(client.key(request), junk)
        assert client.get(request) is None
        [reply] = client.complete_many([request])
        assert reply.text == "fresh" and not reply.cached and gateway.log.count(request.messages) == 1
        assert client.complete_many([request])[0].cached  # overwritten with the good reply


def test_a_corrupt_value_file_is_a_miss(gateway: Gateway, echo: Callable[[str], ChatRequest], tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    long_text = "river " * 8000  # over diskcache's 32 KiB: stored in its own .val file
    request = echo(long_text)
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        client.complete_many([request])
    [value_file] = (tmp_path / "cache").rglob("*.val")
    value_file.write_bytes(b"\xff\xfe\xfa not utf-8 at all")
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client, caplog.at_level(logging.WARNING):
        [reply] = client.complete_many([request])
        assert reply.text == long_text and not reply.cached and gateway.log.count(request.messages) == 2
        assert "treated as a miss" in caplog.text
        value_file_now = list((tmp_path / "cache").rglob("*.val"))
        value_file_now[0].unlink()  # a value file that vanished is a miss too (diskcache's own case)
        assert client.get(request) is None


def test_a_corrupt_database_is_moved_aside(gateway: Gateway, echo: Callable[[str], ChatRequest],
                                           tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "cache.db").write_bytes(b"this was a database once " * 200)
    request = echo("after the crash")
    with CachedChatClient(gateway.client(), cache_dir) as client:
        assert client.complete_many([request])[0].text == "after the crash" and len(client) == 1
    [aside] = cache_dir.glob("cache.db.corrupt-*")
    assert aside.read_bytes().startswith(b"this was a database once")
    with CachedChatClient(gateway.client(), cache_dir) as client:
        assert client.complete_many([request])[0].cached


def test_the_probe_reports_zero_exceptions() -> None:
    from bench._reliability_llm import run_llm_probe

    figures = run_llm_probe(120)
    assert figures["malformed_replies"] >= 100 and figures["exceptions"] == 0
    assert figures["llm_errors"] == figures["malformed_replies"] and figures["shapes"] >= 100
    assert figures["errors_naming_the_tag"] == figures["llm_errors"]
    assert figures["json_results_failed"] == figures["malformed_replies"]
    assert figures["usable_replies"] == figures["usable_shapes"] == figures["cached_rereads_equal"]
    json.dumps(figures)
