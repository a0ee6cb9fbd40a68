"""Issue 50, "nothing raises, nothing hangs, nothing bad is cached": the OpenAI-compatible client and the
disk cache against the scripted server on 127.0.0.1 playing hostile endpoints.

- every reply becomes a value or an error, whatever the body (nesting, size, 100,000 choices, 2^70 tokens,
  text that is not the JSON asked for, JSON cut at the token limit), also under hypothesis;
- only replies that passed the caller's check are cached, and a cached reply that fails it is dropped and
  asked again;
- the cache key names the endpoint;
- every request ends within its deadline (a trickled body, slow headers, a long Retry-After);
- `omne qa generate --generator llm` against an endpoint that never answers exits 2 with one line.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.config import LLMParams, Params
from pipelines.llm.base import MAX_JSON_DEPTH, ChatReply, ChatRequest, LLMError, Usage, json_object, require_replies
from pipelines.llm.cache import KEY_PREFIX, CachedChatClient
from pipelines.llm.malformed import (
    DELETE,
    FIELDS,
    VALUES,
    field_accepts,
    hostile_json_texts,
    hostile_shapes,
    mutate,
    valid_completion,
)
from pipelines.llm.openai_client import MAX_CHOICES, MAX_TOKEN_COUNT, OpenAIChatClient
from pipelines.llm.scripted import ScriptedServerLog, scripted_openai_app, serve_in_thread
from pipelines.llm.structured import check_reply, complete_json_many
from tests.conftest import chemistry_project, cli_env

TAG = "probe.hostile"


pytestmark = pytest.mark.usefixtures("no_llm_endpoint_env")


def needs_answer(value: dict[str, Any]) -> None:
    if not isinstance(value.get("answer"), str):
        raise ValueError('"answer" must be a string')


def answer_completion(text: str = "Mars", **changes: Any) -> dict[str, Any]:
    """A well-formed completion whose content is the JSON object the tests ask for."""
    document = valid_completion(json.dumps({"answer": text}))
    return {**document, **changes}


class Gateway:
    """A scripted server answering each conversation with the reply spec registered for its first prompt (a
    repair turn of that conversation gets the same reply: a sick endpoint stays sick)."""

    def __init__(self, url: str, log: ScriptedServerLog) -> None:
        self.url, self.log = url, log
        self.specs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def handle(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self.specs[body["messages"][0]["content"]]

    def ask(self, spec: dict[str, Any], **fields: Any) -> ChatRequest:
        prompt = f"prompt {uuid.uuid4().hex}"
        self.answer(prompt, spec)
        return ChatRequest(messages=[{"role": "user", "content": prompt}], tag=TAG, **fields)

    def answer(self, prompt: str, spec: dict[str, Any]) -> None:
        with self._lock:
            self.specs[prompt] = spec

    def sent(self, request: ChatRequest) -> int:
        """Requests the server got for this conversation (its first turn and repair turns)."""
        first = request.messages[0]
        return sum(n for key, n in self.log.received.items() if key in self._keys(first))

    def _keys(self, first: dict[str, str]) -> set[str]:
        from pipelines.llm.scripted import messages_key

        return {messages_key(body["messages"]) for body in self.log.bodies if body["messages"][0] == first}

    def params(self, **changes: Any) -> LLMParams:
        base = {"model": "test-model", "base_url": f"{self.url}/v1", "timeout_s": 5.0, "max_retries": 0,
                "concurrency": 16}
        return LLMParams(**{**base, **changes})

    def client(self, **changes: Any) -> OpenAIChatClient:
        return OpenAIChatClient(self.params(**changes))


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    holder: list[Gateway] = []
    app = scripted_openai_app(lambda body: holder[0].handle(body), retry_after_ms=1)
    with serve_in_thread(app) as url:
        holder.append(Gateway(url, app.state.log))
        yield holder[0]


def cached_replies(cache_dir: Path) -> list[ChatReply]:
    """Every reply stored in a cache folder, read directly (not through the client)."""
    with diskcache.Cache(str(cache_dir)) as raw:
        return [ChatReply.model_validate_json(raw[key]) for key in raw.iterkeys()]


# --- every reply is a value or an error ----------------------------------------------------------------------

def test_hostile_bodies_are_errors_at_the_default_limits(gateway: Gateway) -> None:
    """A 20 MB content field, 1,000,001 characters, 100,000 choices, 2^70 prompt tokens, a body nested 100,000
    deep: each one LLMError saying so, with llm's default max_reply_chars."""
    limit = LLMParams().max_reply_chars
    shapes = hostile_shapes(limit)
    client = gateway.client()
    started = time.perf_counter()
    results = client.complete_many([gateway.ask(s.spec) for s in shapes])
    for shape, result in zip(shapes, results, strict=True):
        assert isinstance(result, LLMError), shape.name
        assert shape.mentions in str(result) and f"tag {TAG}" in str(result), (shape.name, str(result)[:300])
        assert "unexpected" not in str(result) and len(str(result)) < 700
    assert "body over 12,065,536 bytes (llm.max_reply_chars=1,000,000), not read further" in str(results[0])
    assert client.usage.failed == len(shapes) and client.usage.first_error
    assert time.perf_counter() - started < 30


def test_json_requests_never_raise_on_text_that_is_not_the_object(gateway: Gateway, tmp_path: Path) -> None:
    """"[" x 100,000 (the probe's RecursionError), 500 levels of objects, prose, JSON cut at the token limit,
    a 5,000-digit number, ...: each a JsonResult error, each repaired once, none cached."""
    cases = hostile_json_texts()
    requests = [gateway.ask({"json": mutate(valid_completion(text), ("choices", 0, "finish_reason"), finish)},
                            json_mode=True) for _, text, finish in cases]
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        results = complete_json_many(client, requests, repair_rounds=1, validate=needs_answer)
        assert len(client) == 0
    for (name, _, _), request, result in zip(cases, requests, results, strict=True):
        assert not result.ok and result.error and result.rounds == 2, (name, result.error)
        assert gateway.sent(request) == 2, name  # the first turn and one repair turn
    errors = {name: result.error for (name, _, _), result in zip(cases, results, strict=True)}
    assert errors["open_brackets_100000"] == f"not usable JSON (nested more than {MAX_JSON_DEPTH} levels deep)"
    assert errors["nested_500_deep"] == f"not usable JSON (nested more than {MAX_JSON_DEPTH} levels deep)"
    assert "cut off at the token limit" in errors["cut_at_length"]
    assert errors["number_of_5000_digits"].startswith("not usable JSON (Exceeds the limit")
    assert errors["prose"].startswith("not valid JSON") and errors["array_not_object"].startswith("expected a JSON")


def test_json_object_limits() -> None:
    assert json_object('{"a": ' * 63 + "1" + "}" * 63) is not None  # 63 levels: fine
    with pytest.raises(ValueError, match="nested more than 64 levels"):
        json_object('{"a": ' * 64 + "[]" + "}" * 64)
    assert json_object('{"a": "\\ud800 x", "\\udc80": 1}') == {"a": "\ufffd x", "\ufffd": 1}  # writable
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        json_object("[" * 10 + "]" * 10)


def test_a_validator_that_raises_something_else_is_a_bad_reply(gateway: Gateway, tmp_path: Path) -> None:
    def sloppy(value: dict[str, Any]) -> None:
        value["answer"].strip()  # KeyError, AttributeError on a reply of another shape

    requests = [gateway.ask({"json": valid_completion(json.dumps(v))}, json_mode=True)
                for v in ({"answer": "Mars"}, {"other": 1}, {"answer": 7})]
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        good, missing, wrong = complete_json_many(client, requests, repair_rounds=0, validate=sloppy)
        assert good.ok and not missing.ok and not wrong.ok and len(client) == 1
    assert "does not have the fields asked for (KeyError" in missing.error
    assert "(AttributeError" in wrong.error


# --- the property: 0 exceptions, 0 bad replies cached -----------------------------------------------------------

SMALL_LIMIT = 2_000  # max_reply_chars of the property's client: its body limit is 12 x 2,000 + 64 KiB

Case = tuple[str, dict[str, Any], "bool | None"]  # (family, reply spec, usable as the JSON asked for; None: unknown)


def _good() -> st.SearchStrategy[Case]:
    text = st.text(st.characters(categories=["L", "N", "P", "Zs", "Cs", "So"]), max_size=40)
    return text.map(lambda t: ("good", {"json": answer_completion(t)}, True))


def _not_json() -> st.SearchStrategy[Case]:
    listed = st.sampled_from(hostile_json_texts()).map(
        lambda c: ("text", {"json": mutate(valid_completion(c[1]), ("choices", 0, "finish_reason"), c[2])}, False))
    prose = st.text(max_size=200).map(lambda t: ("text", {"json": valid_completion(t)}, None))
    return listed | prose


def _nested() -> st.SearchStrategy[Case]:
    def build(depth: int, bracket: str) -> Case:
        opening, closing = ("[", "]") if bracket == "[" else ('{"k": ', "}")
        content = '{"answer": "x", "n": ' + opening * depth + "0" + closing * depth + "}"
        return "nested", {"json": valid_completion(content)}, depth + 1 <= MAX_JSON_DEPTH

    return st.builds(build, st.integers(0, 3_000), st.sampled_from(["[", "{"]))


def _sized() -> st.SearchStrategy[Case]:
    def build(length: int) -> Case:
        content = json.dumps({"answer": "a" * length})
        return "size", {"json": valid_completion(content)}, len(content) <= SMALL_LIMIT

    return st.builds(build, st.integers(SMALL_LIMIT - 40, SMALL_LIMIT) | st.integers(1, 120_000))


def _choices() -> st.SearchStrategy[Case]:
    def build(n: int) -> Case:
        choice = answer_completion()["choices"][0]
        return "choices", {"json": answer_completion(choices=[choice] * n)}, 1 <= n <= MAX_CHOICES

    return st.builds(build, st.integers(0, 200) | st.just(100_000))


def _tokens() -> st.SearchStrategy[Case]:
    def build(count: int) -> Case:
        document = answer_completion(usage={"prompt_tokens": count, "completion_tokens": 1})
        return "tokens", {"json": document}, 0 <= count <= MAX_TOKEN_COUNT

    return st.builds(build, st.integers(-(2**80), 2**80) | st.sampled_from([2**70, 2**63, MAX_TOKEN_COUNT + 1]))


def _cut() -> st.SearchStrategy[Case]:
    def build(text: str, fraction: float) -> Case:
        content = json.dumps({"answer": text})
        cut = content[: int(len(content) * fraction)]
        return "cut", {"json": mutate(valid_completion(cut), ("choices", 0, "finish_reason"), "length")}, False

    return st.builds(build, st.text(max_size=30), st.floats(0.0, 0.99))


def _status() -> st.SearchStrategy[Case]:
    return st.sampled_from([204, 400, 404, 408, 429, 500, 503]).map(
        lambda s: ("status", {"status": s, "json": answer_completion()}, False))


def _raw_body() -> st.SearchStrategy[Case]:
    return st.tuples(st.sampled_from([200, 201]), st.binary(max_size=300) | st.text(max_size=300)).map(
        lambda b: ("body", {"status": b[0], "body": b[1]}, False))


def _mutated() -> st.SearchStrategy[Case]:
    content_paths = {("choices",), ("choices", 0), ("choices", 0, "message"), ("choices", 0, "message", "content")}

    def build(path: tuple[Any, ...], value: Any) -> Case:
        usable = field_accepts(path, value)
        expect = False if not usable else (None if path in content_paths else True)
        return "field", {"json": mutate(answer_completion(), path, value)}, expect

    return st.builds(build, st.sampled_from(FIELDS), st.sampled_from(VALUES) | st.just(DELETE))


HOSTILE = st.one_of(_not_json(), _nested(), _sized(), _choices(), _tokens(), _cut(), _status(), _raw_body(),
                    _mutated(), _good())  # good replies last: hypothesis favours the first branches


def test_property_hostile_replies_raise_nothing_and_cache_nothing_bad(gateway: Gateway, tmp_path: Path) -> None:
    """At least 150 generated hostile replies (and good ones among them) through the cache and
    ``complete_json_many`` (one repair round): no exception, each a value or an error as expected, and every
    stored reply is one that passed the check."""
    counts = {"cases": 0, "hostile": 0, "ok": 0, "failed": 0}
    cache_dir = tmp_path / "cache"

    @settings(max_examples=30, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases=st.lists(HOSTILE, min_size=7, max_size=10))
    def run(cases: list[Case]) -> None:
        requests = [gateway.ask(spec, json_mode=True) for _, spec, _ in cases]
        with CachedChatClient(gateway.client(max_reply_chars=SMALL_LIMIT), cache_dir) as client:
            results = complete_json_many(client, requests, repair_rounds=1, validate=needs_answer)
        for (family, spec, expect), result in zip(cases, results, strict=True):
            assert result.ok == (result.value is not None) and result.ok != bool(result.error), (family, result)
            if expect is not None:
                assert result.ok == expect, (family, str(spec)[:300], result.error[:300])
            if result.ok:
                needs_answer(result.value)  # type: ignore[arg-type]
                json.dumps(result.value, ensure_ascii=False).encode("utf-8")  # writable
        counts["cases"] += len(cases)
        counts["hostile"] += sum(expect is not True for _, _, expect in cases)
        counts["ok"] += sum(r.ok for r in results)
        counts["failed"] += sum(not r.ok for r in results)

    run()
    stored = cached_replies(cache_dir)
    for reply in stored:  # 0 bad replies cached
        check_reply(reply, needs_answer)
        assert len(reply.text) <= SMALL_LIMIT and 0 <= reply.prompt_tokens <= MAX_TOKEN_COUNT
    assert len(stored) == counts["ok"]  # each good result stored once, nothing else
    assert counts["hostile"] >= 150 and counts["ok"] > 0 and counts["failed"] > 0, counts


# --- the cache keeps only what passed, and drops a poisoned entry --------------------------------------------

def test_a_bad_reply_is_not_cached_and_is_asked_again_once_the_endpoint_recovers(gateway: Gateway,
                                                                                tmp_path: Path) -> None:
    request = gateway.ask({"json": valid_completion("<html>maintenance</html>")}, json_mode=True)
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        [sick] = complete_json_many(client, [request], repair_rounds=0, validate=needs_answer)
        assert not sick.ok and len(client) == 0 and client.usage.requests == 1
    gateway.answer(request.messages[0]["content"], {"json": answer_completion("Phobos")})  # the endpoint recovers
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        [well] = complete_json_many(client, [request], repair_rounds=0, validate=needs_answer)
        assert well.value == {"answer": "Phobos"} and len(client) == 1 and gateway.sent(request) == 2
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        [again] = complete_json_many(client, [request], repair_rounds=0, validate=needs_answer)
        assert again.value == {"answer": "Phobos"} and client.usage.cached == 1 and gateway.sent(request) == 2


def test_a_poisoned_cache_entry_is_dropped_and_asked_again(gateway: Gateway, tmp_path: Path) -> None:
    """An entry that fails the caller's check (written by an older version, which cached every 200) is never
    replayed: it is dropped, the request is sent, and the good reply replaces it."""
    request = gateway.ask({"json": answer_completion("Deimos")}, json_mode=True)
    repeat = request.model_copy(update={"tag": "again"})  # the same request twice in the batch
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        client.save(request, ChatReply(text="[" * 100_000, model="test-model"))  # the probe's poison
        assert client.get(request) is not None
        seen: list[tuple[int, str]] = []
        results = complete_json_many(client, [request, repeat], repair_rounds=1, validate=needs_answer)
        assert [r.value for r in results] == [{"answer": "Deimos"}] * 2 and [r.rounds for r in results] == [1, 1]
        assert gateway.sent(request) == 1  # asked once, for both
        stored = client.get(request)
        assert stored is not None and json.loads(stored.text) == {"answer": "Deimos"} and len(client) == 1
        # a plain complete_many (no check) still takes what is cached
        client.complete_many([request], on_reply=lambda i, r: seen.append((i, r.text)))
        assert seen == [(0, stored.text)] and gateway.sent(request) == 1


def test_an_entry_refused_again_is_not_stored(gateway: Gateway, tmp_path: Path) -> None:
    request = gateway.ask({"json": valid_completion("still not json")}, json_mode=True)
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        client.save(request, ChatReply(text="poison", model="test-model"))
        [result] = complete_json_many(client, [request], repair_rounds=0, validate=needs_answer)
        assert not result.ok and "not valid JSON" in result.error
        assert len(client) == 0 and gateway.sent(request) == 1  # the poison dropped, the new bad reply not kept


def test_keys_of_an_older_version_are_never_read(gateway: Gateway, tmp_path: Path) -> None:
    request = gateway.ask({"json": answer_completion("Io")}, json_mode=True)
    with CachedChatClient(gateway.client(), tmp_path / "cache") as client:
        with diskcache.Cache(str(tmp_path / "cache")) as raw:  # v1 keyed by model only
            raw.set("chat:v1:" + request.cache_key("test-model"),
                    ChatReply(text='{"answer": "stale"}', model="test-model").model_dump_json())
        [result] = complete_json_many(client, [request], validate=needs_answer)
        assert result.value == {"answer": "Io"} and gateway.sent(request) == 1
    assert KEY_PREFIX == "chat:v2:"


# --- the key names the endpoint --------------------------------------------------------------------------------

def test_the_cache_key_differs_by_base_url(gateway: Gateway, tmp_path: Path) -> None:
    request = gateway.ask({"json": answer_completion("Titan")})
    assert request.cache_key("m", "http://a/v1") != request.cache_key("m", "http://b/v1") != request.cache_key("m")
    with_v1 = CachedChatClient(gateway.client(), tmp_path / "cache")
    at_root = CachedChatClient(gateway.client(base_url=gateway.url), tmp_path / "cache")  # another endpoint URL
    try:
        assert with_v1.endpoint == f"{gateway.url}/v1" and at_root.endpoint == gateway.url
        assert with_v1.key(request) != at_root.key(request) and with_v1.key(request).startswith(KEY_PREFIX)
        assert not with_v1.complete_many([request])[0].cached
        assert not at_root.complete_many([request])[0].cached  # not served the other endpoint's reply
        assert gateway.sent(request) == 2 and len(with_v1) == 2
        assert with_v1.complete_many([request])[0].cached and at_root.complete_many([request])[0].cached
    finally:
        with_v1.close()
        at_root.close()


# --- the deadline -----------------------------------------------------------------------------------------------

def trickled(app: Any, seconds_per_byte: float, trickle_bytes: int) -> Any:
    """``app`` (the scripted server) with the first ``trickle_bytes`` bytes of every response body sent one at a
    time, ``seconds_per_byte`` apart, then the rest: headers come at once, and no socket read ever waits long."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def slow_send(message: dict[str, Any]) -> None:
            body = message.get("body", b"")
            if message["type"] != "http.response.body" or not body:
                await send(message)
                return
            for offset in range(min(trickle_bytes, len(body))):
                await send({"type": "http.response.body", "body": body[offset:offset + 1], "more_body": True})
                await asyncio.sleep(seconds_per_byte)
            await send({"type": "http.response.body", "body": body[trickle_bytes:],
                        "more_body": message.get("more_body", False)})

        await app(scope, receive, slow_send)

    return wrapped


DEADLINE_PARAMS = {"timeout_s": 1.0, "max_retries": 1, "max_retry_wait_s": 0.2}  # deadline 1 x 2 + 0.2 = 2.2 s


def test_a_trickled_body_ends_at_the_deadline() -> None:
    app = scripted_openai_app(lambda body: "a reply that takes minutes to arrive")
    with serve_in_thread(trickled(app, 0.25, 12)) as url:  # 3 s for the body: past the 2.2 s deadline
        client = OpenAIChatClient(LLMParams(model="m", base_url=f"{url}/v1", **DEADLINE_PARAMS))
        assert client.deadline_s == pytest.approx(2.2)
        started = time.perf_counter()
        [result] = client.complete_many([ChatRequest(messages=[{"role": "user", "content": "slow"}], tag=TAG)])
        elapsed = time.perf_counter() - started
        assert isinstance(result, LLMError), result
        assert elapsed < 2.2 + 1.0, elapsed  # the SDK alone: a read timeout never fires (a byte every 0.25 s)
        message = str(result)
        assert "timed out after 2." in message and "(deadline 2.2 s: timeout_s=1 per attempt" in message, message
        assert "after 1 retries (max_retries=1)" in message and app.state.log.total == 2


def test_slow_headers_and_a_long_retry_after_end_at_the_deadline() -> None:
    def handler(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        if prompt == "slow headers":
            return {"sleep_s": 4, "text": "late"}  # past the deadline (the server stops sooner after the test)
        return {"status": 429, "headers": {"retry-after": "110"}}

    app = scripted_openai_app(handler, retry_after_ms=None)  # only the Retry-After: 110 of the handler
    with serve_in_thread(app) as url:
        client = OpenAIChatClient(LLMParams(model="m", base_url=f"{url}/v1", **DEADLINE_PARAMS))
        started = time.perf_counter()
        slow, limited = client.complete_many([ChatRequest(messages=[{"role": "user", "content": c}], tag=TAG)
                                              for c in ("slow headers", "rate limited")])
        elapsed = time.perf_counter() - started
    assert elapsed < 2.2 + 1.0, elapsed
    assert isinstance(slow, LLMError) and "timed out after" in str(slow) and "deadline 2.2 s" in str(slow)
    assert isinstance(limited, LLMError) and "HTTP 429 after 1 retries (max_retries=1)" in str(limited)
    assert app.state.log.total == 4  # two attempts each; the 110 s wait was cut to max_retry_wait_s


def test_retry_after_parsing() -> None:
    from pipelines.llm.openai_client import retry_after_s

    assert retry_after_s({"retry-after-ms": "250"}) == pytest.approx(0.25)
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "nan"}) is None and retry_after_s({"retry-after": "-1"}) is None
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None  # in the past
    assert retry_after_s({}) is None


# --- a stage whose requests all failed ---------------------------------------------------------------------------

def test_require_replies() -> None:
    require_replies(Usage(), "nothing asked")  # no requests: not a failure
    usage = Usage()
    usage.fail(LLMError("http://x/v1/chat/completions (model m): HTTP 500\nafter 4 retries"), 3)
    usage.fail(LLMError("second"))
    with pytest.raises(LLMError) as raised:
        require_replies(usage, "qa generate chemistry")
    assert str(raised.value) == ("qa generate chemistry: all 4 LLM requests failed; the first: "
                                 "http://x/v1/chat/completions (model m): HTTP 500 after 4 retries")
    usage.add(ChatReply(text="ok", model="m"))
    require_replies(usage, "some answered")


@pytest.mark.slow
def test_qa_generate_exits_2_when_every_llm_request_failed(tmp_path: Path) -> None:
    params: Params = chemistry_project(tmp_path / "project")
    app = scripted_openai_app(lambda body: 500, retry_after_ms=1)
    with serve_in_thread(app) as url:
        env = cli_env(OMNE_LLM_BASE_URL=f"{url}/v1", OMNE_LLM_MODEL="down-model", OPENAI_API_KEY="test-key")
        result = subprocess.run(["omne", "qa", "generate", "--domain", "chemistry", "--generator", "llm", "--limit",
                                 "2"], cwd=params.root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, (result.stdout, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "error: qa generate chemistry: all " in lines[0] and " LLM requests failed; the first: " in lines[0]
    assert "HTTP 500 after 4 retries (max_retries=4)" in lines[0] and "tag qa.generate" in lines[0]
    assert not (params.artifacts_dir / "qa" / "pairs" / "chemistry" / "qa_pairs.jsonl").exists()
    assert app.state.log.total >= 5
