"""The tool server for real: uvicorn on a loopback port (in a thread, and `omne tools serve` as a subprocess)."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
from collections.abc import Iterator

import httpx
import psutil
import pytest
from click.testing import CliRunner

from pipelines.agent.calls import ErrorType, ToolCall
from pipelines.agent.client import TOKEN_ENV, HttpToolClient, InProcessToolClient
from pipelines.agent.requests import CallRequest
from pipelines.agent.server import MAX_BATCH, create_app
from pipelines.agent.tools import TOOL_SPECS, KGToolbox, ToolResult
from pipelines.cli import cli
from pipelines.config import Params
from tests.conftest import cli_env
from tests.tool_support import ServerThread, free_port, wait_for_health

TOKEN = "s3cret-token"

CALLS: list[str | dict] = [
    'entity_matcher(node_name="Jupiter", graph_type="solar")',
    'node_info(node_name="Galileo Galilei", graph_type="solar")',
    'node_info(node_name="Ganymed", graph_type="solar")',
    'node_info(node_name="Vulcan", graph_type="solar")',
    'get_tail_relations(entity="Io")',
    'get_head_relations(entity="Io")',
    'get_head_entities(entity="Jupiter", relation="orbits")',
    'get_tail_entities(entity="Io", relation="eats")',
    'search(entity="Io", question="Who discovered Io?")',
    'search(entity="Io", question="q", backtrack=True)',
    'node_info(node_name="Io", graph_type="mars")',
    "node_info(node_name=3, graph_type='solar')",
    "__import__('os').system('x')",
    "node_info(",
    '{"name": "get_tail_entities", "arguments": {"entity": "Triton", "relation": "discovered by"}}',
    {"name": "get_head_entities", "arguments": {"entity": "Sun", "relation": "orbits"}},
    {"name": "node_info", "arguments": '{"node_name": "Pisa", "graph_type": "solar"}'},
    {"name": "nope"},
]


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[HttpToolClient]:
    client = HttpToolClient(server)
    yield client
    client.close()


@pytest.fixture(scope="module")
def local(toolbox: KGToolbox) -> InProcessToolClient:
    return InProcessToolClient(toolbox)


def dumped(result: ToolResult) -> dict:
    return result.model_dump(mode="json")


# ----- endpoints --------------------------------------------------------------------------------------------
def test_health_domains_tools_and_openapi(server: str) -> None:
    assert httpx.get(f"{server}/health").json() == {"status": "ok", "domains": ["solar"], "registered": ["solar"]}
    assert httpx.get(f"{server}/v1/domains").json() == [
        {"name": "solar", "built": True, "entities": 28, "relations": 33, "directed": True, "indexed": True}]
    tools = httpx.get(f"{server}/v1/tools").json()
    assert tools == [spec.json_schema() for spec in TOOL_SPECS.values()]
    assert [tool["function"]["name"] for tool in tools] == list(TOOL_SPECS)
    openapi = httpx.get(f"{server}/openapi.json").json()
    assert openapi["info"]["title"] == "omne KG tool server"
    for path in ("/health", "/v1/domains", "/v1/tools", "/v1/tools/call", "/v1/tools/batch",
                 "/v1/episodes/{episode_id}"):
        assert path in openapi["paths"], path
    assert {"CallRequest", "BatchRequest", "ToolResult"} <= set(openapi["components"]["schemas"])
    docs = httpx.get(f"{server}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_http_and_in_process_clients_give_the_same_results(http: HttpToolClient, local: InProcessToolClient,
                                                           toolbox: KGToolbox) -> None:
    for call in CALLS:
        expected = local.call(call)
        assert dumped(http.call(call)) == dumped(expected), call
        assert dumped(expected) == dumped(toolbox.call(call))
    for graph_type in ("solar", "mars", None):
        call = 'get_tail_relations(entity="Jupiter")'
        assert dumped(http.call(call, graph_type=graph_type)) == dumped(local.call(call, graph_type=graph_type))
    parsed = ToolCall(name="get_tail_entities", arguments={"entity": "Io", "relation": "orbits"})
    assert http.call(parsed) == local.call(parsed)
    assert http.call(parsed).content == 'Tail entities for entity "Io" with relation "orbits": Jupiter'


def test_batch_gives_the_same_results_as_single_calls(server: str, http: HttpToolClient,
                                                      local: InProcessToolClient) -> None:
    requests = [CallRequest(call=call) for call in CALLS] + [
        CallRequest(call='get_tail_relations(entity="Io")', graph_type="solar"),
        CallRequest(call='get_tail_relations(entity="Io")', graph_type="mars")]
    over_http = http.batch(requests)
    assert [dumped(r) for r in over_http] == [dumped(r) for r in local.batch(requests)]
    assert [dumped(r) for r in over_http] == [dumped(http.call(r.call, graph_type=r.graph_type)) for r in requests]
    raw = httpx.post(f"{server}/v1/tools/batch", json={"calls": []})
    assert raw.status_code == 200 and raw.json() == {"results": []}


def test_episode_id_keeps_search_backtracking_across_http_calls(server: str, http: HttpToolClient,
                                                                local: InProcessToolClient) -> None:
    steps = ['search(entity="Io", question="Who discovered Io?")',
             'search(entity="Galileo Galilei", question="Who discovered Io?")',
             'search(entity="", question="Who discovered Io?", backtrack=True)',
             'search(entity="", question="", backtrack=True)']
    remote = [http.call(step, episode_id="http-episode") for step in steps]
    in_process = [local.call(step, episode_id="local-episode") for step in steps]
    assert [dumped(r) for r in remote] == [dumped(r) for r in in_process]
    assert remote[2].ok and remote[2].content.startswith(
        'Backtracked from "Galileo Galilei" to "Io"; next candidate: "Jupiter".\nTriples of "Jupiter"')
    assert remote[3].error_type == ErrorType.NO_RESULTS and remote[3].content == (
        '<error>"Io" has no more candidates to try</error>')
    # without an episode id, or with another one, there is nothing to go back to
    for episode_id in (None, "other-episode"):
        alone = http.call(steps[2], episode_id=episode_id)
        assert alone.content == "<error>there is no previous entity to backtrack to</error>"
    # a batch keeps the state of its own episode too
    batch = http.batch([CallRequest(call=step, episode_id="batch-episode") for step in steps[:3]])
    assert batch[2].content == remote[2].content
    # ending an episode drops its state
    assert httpx.delete(f"{server}/v1/episodes/batch-episode").json() == {"dropped": True}
    assert httpx.delete(f"{server}/v1/episodes/batch-episode").json() == {"dropped": False}
    assert http.call(steps[2], episode_id="batch-episode").error_type == ErrorType.NO_RESULTS


def test_an_episode_question_orders_node_info_the_same_over_http(server: str, http: HttpToolClient,
                                                                 local: InProcessToolClient) -> None:
    """The request's question (tools.node_info_order: question, the project's params) reaches node_info over HTTP
    as in-process, is kept by its episode, and a question that is not text is a typed error, not a 422."""
    call = 'node_info(node_name="Galileo Galilei", graph_type="solar")'
    question = "Which moons did Galileo Galilei discover?"
    remote = http.call(call, question=question)
    assert dumped(remote) == dumped(local.call(call, question=question))
    assert remote.content.split("\n")[0] == "Entity: Galileo Galilei"
    assert remote.content.split("\n")[2:4] == ["Relations (5, closest to the question first):",
                                               "1. <-[discovered by]- Callisto [moon]"]
    assert http.call(call).content.split("\n")[2] == "Relations (5):"  # no question: the graph's order
    http.call('entity_matcher(node_name="Galileo", graph_type="solar")', episode_id="asked", question=question)
    assert http.call(call, episode_id="asked").content == remote.content  # kept by the episode
    batch = http.batch([CallRequest(call=call, question=question), CallRequest(call=call, question=["not", "text"]),
                        CallRequest(call=call, question="x" * 4001)])
    assert batch[0].content == remote.content
    assert batch[1].error_type == ErrorType.INVALID_ARGUMENT and batch[1].content == (
        "<error>question must be a string or null, got list</error>")
    assert batch[2].content == "<error>question is longer than 4000 characters</error>"


@pytest.mark.parametrize(("body", "headers", "detail"), [
    (b"{not json", {"content-type": "application/json"}, "it is not valid JSON"),
    (b'{"call": "get_tail_relations(entity=\\"Io\\")"', {"content-type": "application/json"}, "it is not valid JSON"),
    (b"{not json", {}, "send it as JSON (content-type: application/json)"),
    (b"", {"content-type": "application/json"}, "it is empty"),
])
def test_a_body_that_is_not_json_is_400_with_a_message(server: str, body: bytes, headers: dict, detail: str) -> None:
    response = httpx.post(f"{server}/v1/tools/call", content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json() == {"detail": f"the request body is not JSON: {detail}"}


@pytest.mark.parametrize(("body", "error_type", "message"), [
    (b'{"call": [1]}', "format_error", "the tool call must be text or a JSON object"),
    (b'{"graph_type": "solar"}', "format_error", "no tool call given (the request's call is missing)"),
    (b"[]", "invalid_argument", 'a call request must be a JSON object {"call": ..., "graph_type": ..., ...}, got an array'),
    (b"null", "invalid_argument", 'a call request must be a JSON object {"call": ..., "graph_type": ..., ...}, got null'),
])
def test_a_json_body_that_is_no_call_is_a_typed_tool_error(server: str, body: bytes, error_type: str,
                                                           message: str) -> None:
    """Were 422s: any JSON body is one call, and what cannot be used of it is that call's typed error."""
    response = httpx.post(f"{server}/v1/tools/call", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["ok"], result["error_type"], result["content"]) == (False, error_type, f"<error>{message}</error>")


def test_batch_size_is_bounded(server: str) -> None:
    response = httpx.post(f"{server}/v1/tools/batch", json={"calls": [{"call": "x"}] * (MAX_BATCH + 1)})
    assert response.status_code == 422 and "4096" in response.text
    assert httpx.post(f"{server}/v1/tools/batch", json={"calls": "x"}).status_code == 422


def test_a_body_over_the_limit_is_refused_with_413(toolbox: KGToolbox) -> None:
    with ServerThread(create_app(toolbox, max_body_bytes=1000)) as small:
        too_big = httpx.post(f"{small.url}/v1/tools/call", json={"call": "x" * 2000})
        assert too_big.status_code == 413
        assert too_big.json() == {"detail": "request body larger than 1000 bytes"}
        fits = httpx.post(f"{small.url}/v1/tools/call", json={"call": 'get_tail_relations(entity="Io")'})
        assert fits.status_code == 200 and fits.json()["ok"] is True


def test_bearer_token_is_required_when_set(toolbox: KGToolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    call = {"call": 'get_tail_relations(entity="Jupiter")'}
    with ServerThread(create_app(toolbox, token=TOKEN)) as guarded:
        url = guarded.url
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):
            for method, path, body in (("POST", "/v1/tools/call", call), ("POST", "/v1/tools/batch", {"calls": [call]}),
                                       ("GET", "/v1/tools", None), ("GET", "/v1/domains", None)):
                response = httpx.request(method, f"{url}{path}", json=body, headers=headers)
                assert response.status_code == 401, (headers, path)
                assert response.json()["detail"] == "missing or wrong bearer token"
                assert response.headers["www-authenticate"] == "Bearer"
        good = httpx.post(f"{url}/v1/tools/call", json=call, headers={"Authorization": f"Bearer {TOKEN}"})
        assert good.status_code == 200 and good.json()["content"] == 'Tail relations for entity "Jupiter": orbits'
        assert httpx.get(f"{url}/health").status_code == 200  # liveness needs no token
        monkeypatch.delenv(TOKEN_ENV, raising=False)
        with pytest.raises(httpx.HTTPStatusError) as refused:
            HttpToolClient(url).call(call["call"])
        assert refused.value.response.status_code == 401
        with pytest.raises(httpx.HTTPStatusError):
            HttpToolClient(url, token="wrong").call(call["call"])
        assert HttpToolClient(url, token=TOKEN).call(call["call"]).ok
        assert HttpToolClient(url, token=TOKEN).batch([CallRequest(call=call["call"])])[0].ok
        monkeypatch.setenv(TOKEN_ENV, TOKEN)
        assert HttpToolClient(url).call(call["call"]).ok


def test_bounded_concurrent_load_has_no_server_errors(server: str, local: InProcessToolClient) -> None:
    expected = [dumped(local.call(call)) for call in CALLS]

    async def load() -> list[tuple[int, int, dict | str]]:
        limit = asyncio.Semaphore(32)
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
        async with httpx.AsyncClient(base_url=server, limits=limits, timeout=60) as client:
            async def one(i: int) -> tuple[int, int, dict | str]:
                async with limit:
                    response = await client.post("/v1/tools/call", json={"call": CALLS[i % len(CALLS)]})
                    try:
                        return i, response.status_code, response.json()
                    except ValueError:
                        return i, response.status_code, response.text
            return await asyncio.gather(*(one(i) for i in range(1000)))

    responses = asyncio.run(load())
    assert len(responses) == 1000
    assert [status for _, status, _ in responses if status >= 500] == []
    assert {status for _, status, _ in responses} == {200}
    for i, _, body in responses:
        assert isinstance(body, dict)
        assert dumped(ToolResult.model_validate(body)) == expected[i % len(CALLS)]


# ----- `omne tools serve` ----------------------------------------------------------------------------------
def test_serve_binds_loopback_by_default() -> None:
    help_text = CliRunner().invoke(cli, ["tools", "serve", "--help"]).output
    host = re.search(r"--host TEXT\s+(.*?)(?=\n\s+--)", help_text, re.S)
    assert host and re.search(r"\[default:\s*127\.0\.0\.1\]", host[1]), help_text


def test_omne_tools_serve_as_a_subprocess(solar: Params, local: InProcessToolClient) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(["omne", "tools", "serve", "--port", str(port), "--token", TOKEN,
                                "--max-body-bytes", "5000"], cwd=solar.root, env=cli_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_health(url, process=process).json() == {"status": "ok", "domains": ["solar"], "registered": ["solar"]}
        # the default host is loopback only
        listening = {c.laddr.ip for c in psutil.Process(process.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN}
        assert listening == {"127.0.0.1"}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{url}/v1/domains").status_code == 401
        assert httpx.get(f"{url}/v1/domains", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert httpx.get(f"{url}/v1/domains", headers=auth).json()[0]["entities"] == 28
        assert httpx.get(f"{url}/v1/tools", headers=auth).json() == [s.json_schema() for s in TOOL_SPECS.values()]
        assert "/v1/tools/call" in httpx.get(f"{url}/openapi.json").json()["paths"]
        client = HttpToolClient(url, token=TOKEN)
        for call in CALLS:
            assert dumped(client.call(call)) == dumped(local.call(call)), call
        requests = [CallRequest(call=call) for call in CALLS[:6]]
        assert [dumped(r) for r in client.batch(requests)] == [dumped(r) for r in local.batch(requests)]
        too_big = httpx.post(f"{url}/v1/tools/call", json={"call": "x" * 6000}, headers=auth)
        assert too_big.status_code == 413 and "5000 bytes" in too_big.json()["detail"]
        malformed = httpx.post(f"{url}/v1/tools/call", content=b"{oops", headers={**auth, "content-type":
                                                                                    "application/json"})
        assert malformed.status_code == 400
        client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"omne tools serve did not stop on SIGTERM:\n{err}")
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM: exit 0 or "killed by SIGTERM"
    assert process.returncode in (0, -signal.SIGTERM), err
    assert f"serving solar on {url} (token required)" in out
    assert "Traceback" not in err
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)


# ----- regressions of bugs found by these tests ---------------------------------------------------
def test_a_streamed_body_over_the_limit_is_413(toolbox: KGToolbox) -> None:
    """Regression (was a bug): BodySizeLimit (pipelines/agent/server.py:85) raises _TooLarge from receive() while FastAPI reads
    the body; FastAPI's request handler catches every exception while reading and answers
    400 'There was an error parsing the body', so a chunked body (no Content-Length) over the limit is
    never a 413."""
    def chunks() -> Iterator[bytes]:
        yield b'{"call": "'
        for _ in range(30):
            yield b"x" * 100
        yield b'"}'

    with ServerThread(create_app(toolbox, max_body_bytes=1000)) as small:
        response = httpx.post(f"{small.url}/v1/tools/call", content=chunks(),
                              headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text


def test_http_and_in_process_clients_agree_on_tool_call_objects(http: HttpToolClient,
                                                                local: InProcessToolClient) -> None:
    """Regression (was a bug): InProcessToolClient.call(ToolCall) goes to KGToolbox.execute without binding the call against the
    specs (pipelines/agent/tools.py:176-202), so an unknown name / a wrong type / a missing argument is a
    SERVER_ERROR (KeyError, TypeError), while HttpToolClient sends the same ToolCall as a dict that the
    server re-parses into INVALID_ACTION / INVALID_ARGUMENT / MISSING_FIELDS: the two clients disagree."""
    calls = [ToolCall(name="nope", arguments={}),
             ToolCall(name="node_info", arguments={"node_name": 3, "graph_type": "solar"}),
             ToolCall(name="get_tail_entities", arguments={"entity": "Io"})]
    remote = [http.call(call).error_type for call in calls]
    assert remote == [ErrorType.INVALID_ACTION, ErrorType.INVALID_ARGUMENT, ErrorType.MISSING_FIELDS]
    assert [local.call(call).error_type for call in calls] == remote


def test_a_lone_surrogate_in_a_call_gets_a_tool_result_over_http(server: str, local: InProcessToolClient) -> None:
    """A JSON body may carry a lone surrogate escape ("\\ud800"): it is refused as an invalid argument,
    in-process and over HTTP alike, and the reply is valid JSON."""
    body = b'{"call": {"name": "get_tail_relations", "arguments": {"entity": "\\ud800"}}}'
    assert local.call({"name": "get_tail_relations", "arguments": {"entity": "\ud800"}}).error_type == (
        ErrorType.INVALID_ARGUMENT)
    response = httpx.post(f"{server}/v1/tools/call", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["error_type"] == "invalid_argument"
