"""The LLM layer against a real (scripted) OpenAI-compatible server on 127.0.0.1 and real tiny models:
parsing and counts, the SDK's retries, timeouts, bounded concurrency, JSON repair, the disk cache
(including a run killed with SIGKILL and resumed), and the local transformers backend.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import diskcache
import pytest

from pipelines.config import LLMParams, load_params
from pipelines.errors import ConfigError
from pipelines.llm.base import ChatReply, ChatRequest, LLMError
from pipelines.llm.cache import CachedChatClient
from pipelines.llm.factory import build_chat_client
from pipelines.llm.openai_client import OpenAIChatClient
from pipelines.llm.scripted import ScriptedChatClient, ScriptedServerLog, scripted_openai_app, serve_in_thread
from pipelines.llm.structured import complete_json_many
from tests.conftest import PROJECT_ROOT, cli_env
from tests.model_support import build_tiny_llama

pytestmark = pytest.mark.usefixtures("no_llm_endpoint_env")


def ask(text: str, **fields: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **fields)


def last_user(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


class Server:
    """A running scripted server: its base URL, its request log, and LLMParams pointing at it."""

    def __init__(self, url: str, log: ScriptedServerLog) -> None:
        self.url, self.log = url, log

    def params(self, **changes: Any) -> LLMParams:
        base = {"model": "test-model", "base_url": f"{self.url}/v1", "timeout_s": 5.0, "max_retries": 2,
                "concurrency": 8}
        return LLMParams(**{**base, **changes})

    def client(self, **changes: Any) -> OpenAIChatClient:
        return OpenAIChatClient(self.params(**changes))


@pytest.fixture()
def serve() -> Iterator[Callable[..., Server]]:
    """Start scripted servers for one test: ``serve(handler, latency_s=0.0, **options)``."""
    stack: list[Any] = []

    def start(handler: Callable[[dict[str, Any]], Any], latency_s: float = 0.0, **options: Any) -> Server:
        app = scripted_openai_app(handler, latency_s, **options)
        context = serve_in_thread(app)
        url = context.__enter__()
        stack.append(context)
        return Server(url, app.state.log)

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def fail_first(times: int, status: int | dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """A handler that fails each prompt ``times`` times with ``status``, then echoes it."""
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(body: dict[str, Any]) -> Any:
        prompt = last_user(body)
        with lock:
            seen[prompt] += 1
            attempt = seen[prompt]
        return status if attempt <= times else f"echo {prompt}"

    return handler


# --- the OpenAI-compatible client -------------------------------------------------------------------

def test_replies_parsed_with_tokens_and_cost(serve: Callable[..., Server]) -> None:
    server = serve(lambda body: f"echo {last_user(body)} done")
    client = server.client(price_prompt_per_1k=1.0, price_completion_per_1k=2.0)
    requests = [ask(f"question number {i}", tag="t") for i in range(5)]
    requests.append(ask("json please", json_mode=True, seed=7, temperature=0.3, max_tokens=50))
    replies = client.complete_many(requests)
    assert [r.text for r in replies] == [f"echo {last_user({'messages': q.messages})} done" for q in requests]
    first = replies[0]
    assert isinstance(first, ChatReply) and first.model == "test-model" and not first.cached
    assert (first.prompt_tokens, first.completion_tokens, first.finish_reason) == (3, 5, "stop")
    assert first.cost_usd == pytest.approx((3 * 1.0 + 5 * 2.0) / 1000)
    assert client.usage.requests == 6 and client.usage.by_tag == {"t": 5} and client.usage.failed == 0
    assert client.usage.cost_usd == pytest.approx(sum(r.cost_usd for r in replies))
    body = next(b for b in server.log.bodies if last_user(b) == "json please")
    assert body["response_format"] == {"type": "json_object"} and body["seed"] == 7
    assert body["temperature"] == 0.3 and body["max_tokens"] == 50 and body["model"] == "test-model"
    plain = next(b for b in server.log.bodies if last_user(b) == "question number 0")
    assert "response_format" not in plain and "seed" not in plain
    assert client.complete(ask("single")).text == "echo single done"


def test_server_error_then_success_is_retried_with_backoff(serve: Callable[..., Server]) -> None:
    server = serve(fail_first(1, 500), retry_after_ms=None)  # the SDK's own exponential backoff (~0.5 s)
    client = server.client()
    started = time.perf_counter()
    reply = client.complete(ask("flaky"))
    assert reply.text == "echo flaky" and server.log.count(ask("flaky").messages) == 2
    assert time.perf_counter() - started >= 0.3  # it waited before retrying
    assert client.usage.requests == 1 and client.usage.failed == 0


def test_rate_limit_is_retried(serve: Callable[..., Server]) -> None:
    server = serve(fail_first(2, 429))
    reply = server.client(max_retries=3).complete(ask("busy"))
    assert reply.text == "echo busy" and server.log.count(ask("busy").messages) == 3


def test_errors_after_max_retries_say_where_and_why(serve: Callable[..., Server]) -> None:
    server = serve(lambda body: 503 if last_user(body) == "down" else 400 if last_user(body) == "bad" else "ok")
    client = server.client(max_retries=2)
    down, bad, fine = client.complete_many([ask("down"), ask("bad"), ask("fine")])
    assert isinstance(down, LLMError) and isinstance(bad, LLMError) and fine.text == "ok"
    assert "HTTP 503" in str(down) and "after 2 retries" in str(down) and server.url in str(down)
    assert "HTTP 400" in str(bad) and "after 0 retries" in str(bad)  # a client error is not retried
    assert server.log.count(ask("down").messages) == 3 and server.log.count(ask("bad").messages) == 1
    assert client.usage.failed == 2 and client.usage.requests == 1
    with pytest.raises(LLMError, match="HTTP 503"):
        client.complete(ask("down"))


def test_timeout_is_retried_then_fails(serve: Callable[..., Server]) -> None:
    slow_once = fail_first(1, {"sleep_s": 1.0, "text": "too late"})
    server = serve(lambda body: {"sleep_s": 1.0, "text": "never"} if last_user(body) == "stuck" else slow_once(body))
    client = server.client(timeout_s=0.3, max_retries=1)
    recovered, stuck = client.complete_many([ask("slow"), ask("stuck")])
    assert recovered.text == "echo slow" and server.log.count(ask("slow").messages) == 2
    assert isinstance(stuck, LLMError)
    assert "timed out" in str(stuck) and "after 1 retries" in str(stuck) and "timeout_s=0.3" in str(stuck)
    assert server.log.count(ask("stuck").messages) == 2


def test_unreachable_endpoint_is_an_llm_error() -> None:
    from pipelines.llm.scripted import free_port

    client = OpenAIChatClient(LLMParams(model="m", base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0))
    [result] = client.complete_many([ask("anyone?")])
    assert isinstance(result, LLMError) and "connection failed" in str(result)


def test_concurrency_is_bounded_and_overlaps(serve: Callable[..., Server]) -> None:
    server = serve(lambda body: "ok", latency_s=0.2)
    replies = server.client(concurrency=8).complete_many([ask(f"q{i}") for i in range(24)], progress=True)
    assert all(r.text == "ok" for r in replies)
    assert server.log.max_in_flight == 8  # 8 at a time, never more (24 x 0.2 s would be 4.8 s in sequence)
    other = serve(lambda body: "ok", latency_s=0.1)
    other.client(concurrency=2).complete_many([ask(f"q{i}") for i in range(6)])
    assert other.log.max_in_flight == 2


def test_complete_many_from_a_running_event_loop_and_threads(serve: Callable[..., Server]) -> None:
    server = serve(lambda body: f"echo {last_user(body)}")
    client = server.client()

    async def inside_loop() -> list[ChatReply | LLMError]:
        return client.complete_many([ask("a"), ask("b")])  # a notebook or an async caller

    assert [r.text for r in asyncio.run(inside_loop())] == ["echo a", "echo b"]
    outputs: dict[int, str] = {}

    def work(n: int) -> None:
        outputs[n] = client.complete(ask(f"t{n}")).text

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outputs == {n: f"echo t{n}" for n in range(4)} and client.usage.requests == 6


def test_models_route_and_root_url(serve: Callable[..., Server]) -> None:
    import httpx

    server = serve(lambda body: "ok")
    assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"] == "scripted-model"
    assert OpenAIChatClient(server.params(base_url=server.url)).complete(ask("x")).text == "ok"


def test_configuration_from_params_and_env(monkeypatch: pytest.MonkeyPatch, project: Path,
                                           serve: Callable[..., Server]) -> None:
    params = load_params(project / "params.yaml")
    with pytest.raises(ConfigError, match="OMNE_LLM_MODEL"):
        build_chat_client(params)
    server = serve(lambda body: f"model {body['model']}")
    monkeypatch.setenv("OMNE_LLM_MODEL", "env-model")
    monkeypatch.setenv("OMNE_LLM_BASE_URL", f"{server.url}/v1")
    client = build_chat_client(params)
    assert isinstance(client, CachedChatClient) and client.model == "env-model"
    assert client.cache_dir == project / "artifacts" / "cache" / "llm"
    assert client.complete(ask("hi")).text == "model env-model"
    client.close()
    uncached = build_chat_client(params.model_copy(update={"llm": params.llm.model_copy(update={"cache": False})}))
    assert isinstance(uncached, OpenAIChatClient)


# --- JSON replies with a repair round --------------------------------------------------------------

def test_broken_json_is_repaired_in_one_round(serve: Callable[..., Server]) -> None:
    def handler(body: dict[str, Any]) -> str:
        if len(body["messages"]) == 1:
            return '{"answer": "Mars",' if "repairable" in last_user(body) else "no json here"
        return '```json\n{"answer": "Mars"}\n```' if "repairable" in body["messages"][0]["content"] else "still not"

    server = serve(handler)
    good, bad = complete_json_many(server.client(), [ask("repairable", json_mode=True), ask("hopeless")],
                                   repair_rounds=1)
    assert good.value == {"answer": "Mars"} and good.error == "" and good.rounds == 2 and good.ok
    assert good.raw == ['{"answer": "Mars",', '```json\n{"answer": "Mars"}\n```']
    assert bad.value is None and not bad.ok and bad.rounds == 2 and "not valid JSON" in bad.error
    repair = next(b for b in server.log.bodies if len(b["messages"]) == 3 and "repairable" in b["messages"][0]["content"])
    assert repair["messages"][1] == {"role": "assistant", "content": '{"answer": "Mars",'}
    assert "not valid JSON" in repair["messages"][2]["content"] and "JSON object only" in repair["messages"][2]["content"]
    assert repair["response_format"] == {"type": "json_object"}
    assert server.log.total == 4  # two first tries, one repair each, nothing more


def test_validation_errors_go_back_to_the_model() -> None:
    def needs_answer(value: dict[str, Any]) -> None:
        if "answer" not in value:
            raise ValueError('missing key "answer"')

    # Replies in call order: round 1 for the three requests, then the repair round for the two bad ones.
    client = ScriptedChatClient(['{"question": "q"}', "[1, 2]", LLMError("gone"),
                                 '{"question": "q", "answer": "a"}', "[3]"])
    fixed, listy, failed = complete_json_many(client, [ask("1"), ask("2"), ask("3")], validate=needs_answer)
    assert len(client.requests) == 5
    assert client.requests[3].messages[-1]["content"].startswith('Your reply could not be used: missing key "answer"')
    assert fixed.value == {"question": "q", "answer": "a"} and fixed.rounds == 2
    assert listy.value is None and "expected a JSON object" in listy.error and listy.raw == ["[1, 2]", "[3]"]
    assert failed.value is None and failed.error.startswith("request failed") and failed.rounds == 0
    none = complete_json_many(ScriptedChatClient(["nope"]), [ask("x")], repair_rounds=0)[0]
    assert none.rounds == 1 and none.value is None


def test_cut_off_json_says_so() -> None:
    class Truncating(ScriptedChatClient):
        def complete(self, request: ChatRequest) -> ChatReply:
            return super().complete(request).model_copy(update={"finish_reason": "length"})

    [result] = complete_json_many(Truncating(['{"a": "lo', '{"a": "lo']), [ask("x")])
    assert "cut off at the token limit" in result.error


# --- the disk cache -----------------------------------------------------------------------------------

def test_cache_never_pays_twice(serve: Callable[..., Server], tmp_path: Path) -> None:
    server = serve(lambda body: f"echo {last_user(body)}")
    requests = [ask(f"p{i}", tag="qa") for i in range(5)]
    with CachedChatClient(server.client(price_prompt_per_1k=1.0), tmp_path / "cache") as first:
        replies = first.complete_many([*requests, requests[0]])  # a repeat inside the batch
        assert [r.text for r in replies] == [f"echo p{i}" for i in range(5)] + ["echo p0"]
        assert server.log.total == 5 and [r.cached for r in replies] == [False] * 5 + [True]
        assert first.inner.usage.requests == 5 and first.usage.requests == 6 and first.usage.cached == 1
    with CachedChatClient(server.client(price_prompt_per_1k=1.0), tmp_path / "cache") as again:
        seen: dict[int, str] = {}
        replies = again.complete_many(requests, on_reply=lambda i, r: seen.__setitem__(i, r.text))
        assert server.log.total == 5  # nothing was sent
        assert all(r.cached and r.cost_usd == 0.0 for r in replies) and replies[3].prompt_tokens == 1
        assert again.usage.cached == 5 and again.usage.cost_usd == 0.0 and again.inner.usage.requests == 0
        assert seen == {i: f"echo p{i}" for i in range(5)}
        other = again.complete_many([ask("p0", temperature=0.5)])  # another parameter is another key
        assert not other[0].cached and server.log.total == 6


def test_failures_are_not_cached(serve: Callable[..., Server], tmp_path: Path) -> None:
    broken = {"on": True}
    server = serve(lambda body: 500 if broken["on"] else "fine")
    with CachedChatClient(server.client(max_retries=0), tmp_path / "cache") as client:
        [failed] = client.complete_many([ask("x")])
        assert isinstance(failed, LLMError) and client.usage.failed == 1 and len(client) == 0
        broken["on"] = False
        assert client.complete(ask("x")).text == "fine" and server.log.total == 2


KILL_WORKER = """
import sys
from pathlib import Path
from pipelines.config import LLMParams
from pipelines.llm.base import ChatRequest
from pipelines.llm.cache import CachedChatClient
from pipelines.llm.openai_client import OpenAIChatClient
base_url, cache_dir = sys.argv[1], Path(sys.argv[2])
client = CachedChatClient(OpenAIChatClient(LLMParams(model="m", base_url=base_url, concurrency=4)), cache_dir)
requests = [ChatRequest(messages=[{"role": "user", "content": f"prompt {i}"}]) for i in range(20)]
results = client.complete_many(requests)
print(sum(1 for r in results if not r.cached))
"""


def test_killed_run_resumes_without_losing_or_duplicating(serve: Callable[..., Server], tmp_path: Path) -> None:
    server = serve(lambda body: f"echo {last_user(body)}", latency_s=0.4)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    env = cli_env(PYTHONPATH=str(PROJECT_ROOT))
    worker = subprocess.Popen([sys.executable, "-c", KILL_WORKER, f"{server.url}/v1", str(cache_dir)], env=env,
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with diskcache.Cache(str(cache_dir)) as peek:
            deadline = time.monotonic() + 60
            while len(peek) < 5:
                assert worker.poll() is None, worker.communicate()
                assert time.monotonic() < deadline, "the worker cached nothing"
                time.sleep(0.01)
            os.kill(worker.pid, signal.SIGKILL)
            assert worker.wait(timeout=30) == -signal.SIGKILL
            cached_at_kill = {key for key in peek.iterkeys()}
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
    assert 5 <= len(cached_at_kill) < 20
    requests = [ask(f"prompt {i}") for i in range(20)]
    with CachedChatClient(OpenAIChatClient(server.params(model="m", concurrency=4)), cache_dir) as resumed:
        replies = resumed.complete_many(requests)
        assert [r.text for r in replies] == [f"echo prompt {i}" for i in range(20)]
        assert sum(r.cached for r in replies) == len(cached_at_kill)
        for request in requests:
            expected_once = resumed.key(request) in cached_at_kill
            count = server.log.count(request.messages)
            assert count == 1 if expected_once else count in (1, 2), (request, count)
    paid_twice = [r for r in requests if server.log.count(r.messages) == 2]
    assert len(paid_twice) <= 4  # only the requests in flight at the kill (concurrency 4)
    assert server.log.total == 20 + len(paid_twice)


# --- the local transformers backend --------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer llama with random weights and a BPE tokenizer trained here: no files, no hub."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def test_local_greedy_batched_equals_one_at_a_time(tiny_llama: Path) -> None:
    from pipelines.llm.local import TransformersChatClient

    questions = ["Mars?", "Which moon orbits the planet that orbits the Sun?", "Phobos", "Deimos orbit Mars.",
                 "The Sun", "Answer with the entity name only. Which planet?"]
    requests = [ask(q, temperature=0.0, max_tokens=12 if i != 2 else 4) for i, q in enumerate(questions)]
    batched = TransformersChatClient(tiny_llama, batch_size=4, device="cpu")
    single = TransformersChatClient(tiny_llama, batch_size=1, device="cpu")
    seen: list[int] = []
    many = batched.complete_many(requests, on_reply=lambda i, r: seen.append(i))
    ones = single.complete_many(requests)
    assert [r.text for r in many] == [r.text for r in ones]
    assert [r.completion_tokens for r in many] == [r.completion_tokens for r in ones]
    assert sorted(seen) == list(range(len(requests)))
    for request, reply in zip(requests, many, strict=True):
        assert isinstance(reply, ChatReply) and reply.cost_usd == 0.0 and reply.model == batched.model
        assert reply.prompt_tokens == len(batched.prompt_ids(request))
        assert 1 <= reply.completion_tokens <= request.max_tokens
        assert reply.finish_reason in ("stop", "length")
    assert many[2].completion_tokens <= 4 and batched.usage.requests == len(requests)
    assert batched.model.startswith("tiny-llama-") and batched.model == single.model


def test_local_sampling_is_seeded(tiny_llama: Path, tmp_path: Path) -> None:
    from pipelines.llm.local import TransformersChatClient

    client = TransformersChatClient(tiny_llama, batch_size=2, device="cpu")
    requests = [ask(q, temperature=1.0, seed=3, max_tokens=10) for q in ("Mars?", "Phobos?", "Sun?")]
    first = [r.text for r in client.complete_many(requests)]
    assert first == [r.text for r in client.complete_many(requests)]
    with CachedChatClient(client, tmp_path / "cache") as cached:
        assert [r.text for r in cached.complete_many(requests)] == first
        assert all(r.cached for r in cached.complete_many(requests))


def test_factory_builds_the_local_backend(project: Path, tiny_llama: Path) -> None:
    from pipelines.llm.local import TransformersChatClient

    params = load_params(project / "params.yaml")
    llm = params.llm.model_copy(update={"backend": "transformers", "model": str(tiny_llama), "device": "cpu"})
    client = build_chat_client(params.model_copy(update={"llm": llm}))
    assert isinstance(client, CachedChatClient) and isinstance(client.inner, TransformersChatClient)
    assert client.complete(ask("Mars?", max_tokens=3)).completion_tokens <= 3
    client.close()
    with pytest.raises(ConfigError, match="not a transformers model folder"):
        build_chat_client(params.model_copy(update={"llm": llm.model_copy(update={"model": "no/such/folder"})}))


@pytest.mark.slow
def test_smollm2_converts_once_and_answers(tmp_path: Path) -> None:
    from pipelines.llm.local import TransformersChatClient
    from pipelines.llm.smollm2 import smollm2_folder
    from pipelines.manifest import read_manifest

    artifacts = tmp_path / "artifacts"
    folder = smollm2_folder(artifacts)
    assert folder == artifacts / "models" / "smollm2" and (folder / "config.json").is_file()
    manifest = read_manifest(folder)
    assert manifest is not None and manifest.kind == "base_model" and manifest.rows["parameters"] > 100_000_000
    assert [p.name for p in folder.parent.iterdir()] == ["smollm2"]  # no temporary folder left behind
    started = time.perf_counter()
    assert smollm2_folder(artifacts) == folder and time.perf_counter() - started < 1.0  # converted once
    client = TransformersChatClient(folder, name="smollm2", device="cpu")
    reply = client.complete(ask("What is the capital of France? Answer in one word.", max_tokens=8))
    assert "Paris" in reply.text and reply.finish_reason in ("stop", "length")
    assert client.model.startswith("smollm2-")
