"""The tool server against hostile clients, for real (uvicorn on 127.0.0.1, the solar KG built in a temp
folder): memory bounded in bytes, 401 for any token, unbuilt domains listed, /health free under load,
typed errors for bad request fields, no absolute server path in an error."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipelines.agent.calls import ErrorType
from pipelines.agent.client import HttpToolClient, InProcessToolClient
from pipelines.agent.lru import ByteLRU
from pipelines.agent.requests import CallRequest
from pipelines.agent.scope import Scope
from pipelines.agent.server import EpisodeStore, create_app
from pipelines.agent.tools import SEARCH_PATH_FRAMES, EpisodeState, KGToolbox, ToolResult
from pipelines.config import Params, ToolParams, load_params
from pipelines.domains import load_registry
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from tests.conftest import TINY_REGISTRY, make_project
from tests.tool_support import ServerThread, traced_growth, with_tools

CALL = 'get_tail_relations(entity="Io")'
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def local(toolbox: KGToolbox) -> InProcessToolClient:
    return InProcessToolClient(toolbox)


def dumped(result: ToolResult) -> dict:
    return result.model_dump(mode="json")


def seeds(tag: str, count: int, chars: int) -> list[str]:
    """``count`` distinct seed names of ``chars`` characters (none in the KG: only their size matters)."""
    return [f"{tag}-{i}-".ljust(chars, "x") for i in range(count)]


@pytest.fixture()
def bounded(solar: Params, toolbox: KGToolbox) -> Iterator[tuple[str, object]]:
    """A server whose episode store holds at most 1 MB, its URL and app (to read its episode store)."""
    small = KGToolbox(with_tools(solar, episodes_max_bytes=1_000_000), encoder=toolbox.encoder)
    app = create_app(small)
    with ServerThread(app) as running:
        yield running.url, app


# ----- 1. memory bounded in bytes; ending an episode frees its scope --------------------------------
def test_a_scope_over_the_byte_limit_is_a_typed_error_and_is_not_kept(server: str, bounded: tuple,
                                                                       local: InProcessToolClient) -> None:
    url, app = bounded
    limit = ToolParams().scope_max_bytes
    huge = {"seeds": seeds("big", 100, 18_000), "hops": 2}  # ~1.8 MB: the probe's request
    body = {"call": CALL, "episode_id": "huge", "scope": huge}
    response = httpx.post(f"{url}/v1/tools/call", json=body, timeout=30)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["ok"] is False and result["error_type"] == "invalid_argument"
    assert f"more than the {limit} allowed" in result["content"]
    assert len(app.state.episodes) == 0  # refused, so never stored
    assert dumped(local.call(CALL, episode_id="huge", scope=Scope(**huge))) == result
    fits = {"seeds": ["Io", *seeds("ok", 50, 100)], "hops": 1}
    assert httpx.post(f"{url}/v1/tools/call", json={**body, "scope": fits}).json()["ok"] is True


def test_large_scopes_do_not_grow_server_memory(bounded: tuple) -> None:
    """Was ~1.8 MiB kept per request (episodes and the scope cache keyed by the seeds themselves)."""
    url, app = bounded
    per_scope = {"hops": 2}

    with httpx.Client(base_url=url, timeout=30) as client:
        def send(tag: str, count: int, chars: int, delete: bool) -> None:
            for i in range(count):
                scope = {**per_scope, "seeds": ["Io", *seeds(f"{tag}{i}", 99, chars)]}
                response = client.post("/v1/tools/call", json={"call": CALL, "episode_id": f"{tag}{i}", "scope": scope})
                assert response.status_code == 200, response.text
                if delete:
                    assert client.delete(f"/v1/episodes/{tag}{i}").json() == {"dropped": True}

        send("warm", 20, 100, delete=True)
        # at the limit (99 x 160 bytes ~ 16 KB, kept while the episode lives), each ended: nothing stays
        assert traced_growth(lambda: send("ended", 200, 160, delete=True)) < 1_000_000
        # over the limit (1.8 MB each, refused): nothing at all stays
        assert traced_growth(lambda: send("huge", 30, 18_000, delete=False)) < 1_000_000
        # never ended: the store keeps at most tools.episodes_max_bytes (1 MB here) of 300 x 16 KB
        assert traced_growth(lambda: send("kept", 300, 160, delete=False)) < 2_500_000
        assert app.state.episodes.nbytes <= 1_000_000 and 0 < len(app.state.episodes) < 300


def test_the_episode_store_is_bounded_in_bytes_and_frees_on_drop() -> None:
    store = EpisodeStore(max_bytes=200_000)
    for i in range(100):
        store.get(f"e{i}", "solar", Scope(seeds=seeds(f"s{i}", 100, 100)))
        assert store.nbytes <= 200_000
    assert 0 < len(store) < 100
    kept = list(store._states)  # noqa: SLF001
    assert kept[-1] == "e99"  # least recently used dropped first
    for episode_id in kept:
        assert store.drop(episode_id)
    assert len(store) == 0 and store.nbytes == 0


def test_the_search_path_and_the_toolbox_caches_are_bounded(solar: Params, toolbox: KGToolbox) -> None:
    small = KGToolbox(with_tools(solar, cache_max_bytes=8_000), encoder=toolbox.encoder)
    for i in range(10):  # distinct queries: each cached vector is ~1.9 KB
        query = f'entity_matcher(node_name="Jupiter moon {i}", graph_type="solar")'
        result = small.call(query)
        assert result.ok and (i > 1 or dumped(result) == dumped(toolbox.call(query)))
        small.call(CALL, episode=EpisodeState(scope=Scope(seeds=[f"Io {i}", "Io"])))
        assert small._cache.nbytes <= 8_000  # noqa: SLF001
    assert 0 < len(small._cache) < 10  # noqa: SLF001
    assert all(key[0] == "query" for key in small._cache._entries)  # noqa: SLF001 - scopes are kept by episodes
    KGToolbox._embed.cache_clear()  # noqa: SLF001 - what bench/rollout.py calls: query vectors go
    assert len(small._cache) == 0 and small._cache.nbytes == 0  # noqa: SLF001
    episode = EpisodeState()
    for _ in range(SEARCH_PATH_FRAMES + 20):
        assert toolbox.call('search(entity="Io", question="Who discovered Io?")', graph_type="solar",
                            episode=episode).ok
    assert len(episode.path) == SEARCH_PATH_FRAMES
    cache = ByteLRU(100)
    cache.put("a", 1, 60)
    cache.put("b", 2, 60)
    cache.put("c", 3, 101)  # larger than the whole budget: not kept
    assert (cache.get("a"), cache.get("b"), cache.get("c"), cache.nbytes) == (None, 2, None, 60)


# ----- 2. any malformed token is a 401 ----------------------------------------------------------------------
@pytest.mark.parametrize("header", [b"Bearer \xc3\xa9t\xc3\xa9", b"Bearer \xff\xfe", b"Bearer s3cret-tok\xc3\xa9n",
                                    b"Bearer \x80", b"bearer x", b"Bearer", b"\xc3\xa9"])
def test_a_malformed_token_is_401(toolbox: KGToolbox, header: bytes) -> None:
    """Was a 500: secrets.compare_digest raises TypeError on non-ASCII str."""
    with ServerThread(create_app(toolbox, token="s3cret-token")) as guarded:
        for method, path in (("POST", "/v1/tools/call"), ("GET", "/v1/domains"), ("GET", "/v1/tools")):
            response = httpx.request(method, f"{guarded.url}{path}", json={"call": CALL},
                                     headers={"Authorization": header})
            assert response.status_code == 401, (header, path, response.text)
            assert response.json() == {"detail": "missing or wrong bearer token"}


def test_a_non_ascii_server_token_matches_its_utf8_bytes(toolbox: KGToolbox) -> None:
    with ServerThread(create_app(toolbox, token="clé-secrète")) as guarded:
        good = httpx.post(f"{guarded.url}/v1/tools/call", json={"call": CALL},
                          headers={"Authorization": "Bearer clé-secrète".encode()})
        assert good.status_code == 200 and good.json()["ok"] is True
        wrong = httpx.post(f"{guarded.url}/v1/tools/call", json={"call": CALL},
                           headers={"Authorization": "Bearer clé-secrète".encode("latin-1")})
        assert wrong.status_code == 401


# ----- 3 and 6. unbuilt domains are listed; errors show no absolute path ------------------------------------
@pytest.fixture(scope="module")
def half_built(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """Two registered domains, only solar built (lunar: same sources, no artifacts/kg/lunar)."""
    registry = TINY_REGISTRY + TINY_REGISTRY.split("\n", 1)[1].replace("solar:", "lunar:", 1)
    root = make_project(tmp_path_factory.mktemp("half") / "project", registry=registry)
    params = load_params(root / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params)
    build_entity_index("solar", params)
    return params


def test_unbuilt_domains_are_listed_not_a_500(half_built: Params, toolbox: KGToolbox) -> None:
    box = KGToolbox(half_built, encoder=toolbox.encoder)
    assert box.domain_names == ["solar", "lunar"]
    with ServerThread(create_app(box)) as running:
        response = httpx.get(f"{running.url}/v1/domains")
        assert response.status_code == 200, response.text
        solar, lunar = response.json()
        assert solar == {"name": "solar", "built": True, "entities": 28, "relations": 33, "directed": True,
                         "indexed": True}
        assert lunar["name"] == "lunar" and lunar["built"] is False
        assert lunar["detail"].startswith("artifacts/kg/lunar: no built knowledge graph here"), lunar
        assert httpx.get(f"{running.url}/health").json() == {
            "status": "ok", "domains": ["solar"], "registered": ["solar", "lunar"]}
        result = httpx.post(f"{running.url}/v1/tools/call", json={"call": CALL, "graph_type": "lunar"}).json()
    root = str(half_built.root)
    assert result["error_type"] == "server_error"
    assert result["content"] == ('<error>graph "lunar" is not available: artifacts/kg/lunar: no built knowledge '
                                 "graph here (run `omne kg build` first)</error>")
    assert root not in result["content"] and root not in lunar["detail"]
    assert dumped(box.call(CALL, graph_type="lunar")) == result


# ----- 4. /health never waits behind tool work ---------------------------------------------------------------
def test_health_answers_while_every_tool_thread_is_busy(solar: Params, toolbox: KGToolbox,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Was a sync endpoint: 48 calls in flight took all 40 threads of the shared pool, /health queued."""
    box = KGToolbox(with_tools(solar, server_threads=2), encoder=toolbox.encoder)
    release, started = threading.Event(), threading.Semaphore(0)
    original = box._handlers["get_tail_relations"]  # noqa: SLF001

    def blocking(*args: object) -> object:
        started.release()
        release.wait(60)
        return original(*args)

    monkeypatch.setitem(box._handlers, "get_tail_relations", blocking)  # noqa: SLF001
    statuses: list[int] = []
    with ServerThread(create_app(box)) as running:
        def one() -> None:
            statuses.append(httpx.post(f"{running.url}/v1/tools/call", json={"call": CALL}, timeout=90).status_code)

        clients = [threading.Thread(target=one) for _ in range(48)]
        try:
            for thread in clients:
                thread.start()
            for _ in range(2):
                assert started.acquire(timeout=30)
            time.sleep(0.5)  # every request has arrived and waits
            t0 = time.perf_counter()
            health = httpx.get(f"{running.url}/health", timeout=5)
            assert health.status_code == 200 and time.perf_counter() - t0 < 1.0
            assert httpx.get(f"{running.url}/v1/tools", timeout=5).status_code == 200
        finally:
            release.set()
            for thread in clients:
                thread.join(90)
    assert statuses == [200] * 48


# ----- 5. request fields become typed tool errors ------------------------------------------------------------
BAD_FIELDS = [
    ({"graph_type": 3}, "graph_type must be a string or null, got int"),
    ({"graph_type": ["solar"]}, "graph_type must be a string or null, got list"),
    ({"graph_type": "\ud800"}, "graph_type is not valid Unicode"),
    ({"graph_type": "s" * 201}, "graph_type is longer than 200 characters"),
    ({"episode_id": 7}, "episode_id must be a string or null, got int"),
    ({"episode_id": {"a": 1}}, "episode_id must be a string or null, got dict"),
    ({"episode_id": "\udfff"}, "episode_id is not valid Unicode"),
    ({"episode_id": "e" * 201}, "episode_id is longer than 200 characters"),
    ({"scope": {"seeds": ["Io\ud800"]}}, "a scope seed is not valid Unicode"),
]


@pytest.mark.parametrize(("fields", "message"), BAD_FIELDS)
def test_bad_request_fields_are_typed_tool_errors(server: str, local: InProcessToolClient, fields: dict,
                                                  message: str) -> None:
    """Were a 422/400 over HTTP (or a surrogate echoed into the reply), and raised in-process."""
    expected = {"name": "get_tail_relations", "arguments": {"entity": "Io"}, "ok": False,
                "error_type": "invalid_argument", "content": f"<error>{message}", "graph_type": None}
    in_process = dumped(local.call(CALL, **{k: Scope(**v) if k == "scope" else v for k, v in fields.items()}))
    assert in_process["content"].startswith(expected["content"]), in_process
    assert {**in_process, "content": expected["content"]} == expected
    # over HTTP, with the surrogates as JSON escapes (what a hostile client sends)
    body = json.dumps({"call": CALL, **fields})
    response = httpx.post(f"{server}/v1/tools/call", content=body, headers=JSON)
    assert response.status_code == 200, response.text
    assert response.json() == in_process
    # in a batch, a bad item is its own error and spoils nothing else
    batch = httpx.post(f"{server}/v1/tools/batch", headers=JSON, content=json.dumps({
        "calls": [{"call": CALL}, {"call": CALL, **fields}, {"call": CALL}]}))
    assert batch.status_code == 200, batch.text
    results = batch.json()["results"]
    assert results[1] == in_process and results[0] == results[2] and results[0]["ok"] is True


def test_bad_request_fields_in_process_never_raise(toolbox: KGToolbox, local: InProcessToolClient) -> None:
    assert local.call(CALL, episode_id=["unhashable"]).error_type == ErrorType.INVALID_ARGUMENT  # was TypeError
    assert local.call(CALL, graph_type=3.5).error_type == ErrorType.INVALID_ARGUMENT  # was a ValidationError
    assert local.call(CALL, scope={"seeds": "Io"}).content.startswith("<error>invalid scope: seeds:")  # type: ignore[arg-type]
    assert local.call(CALL, scope={"seeds": ["Jupiter"], "hops": 1}).content == (  # type: ignore[arg-type]
        'Tail relations for entity "Io": orbits')
    assert toolbox.call(CALL, graph_type={"x": 1}).error_type == ErrorType.INVALID_ARGUMENT  # type: ignore[arg-type]
    state = EpisodeState(scope={"seeds": ["Io"], "hops": 0})  # type: ignore[arg-type]
    assert toolbox.call(CALL, graph_type="solar", episode=state).error_type == ErrorType.NO_RESULTS
    assert isinstance(state.scope, Scope)
    for result in (local.call(CALL, graph_type="\ud800"), local.call("node_info(", episode_id="\ud800")):
        result.model_dump_json()  # encodable: no surrogate reaches a reply
    requests = [CallRequest(call=CALL, graph_type=3), CallRequest(call=CALL, episode_id=[1])]
    assert [r.error_type for r in local.batch(requests)] == [ErrorType.INVALID_ARGUMENT] * 2


def test_http_client_sends_and_reads_typed_errors(server: str, local: InProcessToolClient) -> None:
    client = HttpToolClient(server)
    try:
        assert dumped(client.call(CALL, graph_type="s" * 300)) == dumped(local.call(CALL, graph_type="s" * 300))
        assert client.call(CALL, episode_id="e" * 201).error_type == ErrorType.INVALID_ARGUMENT
    finally:
        client.close()


def test_openapi_still_documents_the_fields_as_text(server: str) -> None:
    schema = httpx.get(f"{server}/openapi.json").json()["components"]["schemas"]["CallRequest"]["properties"]
    for name in ("graph_type", "episode_id"):
        assert {"type": "string", "maxLength": 200} in schema[name]["anyOf"], schema[name]


def test_relative_paths(tmp_path: Path) -> None:
    from pipelines.agent.tools import relative_paths

    root = tmp_path / "proj"
    text = f"{root}/artifacts/kg/x: missing; also {root} and /elsewhere/artifacts/y"
    assert relative_paths(text, root, Path("/elsewhere/artifacts")) == (
        "artifacts/kg/x: missing; also . and <artifacts>/y")
    assert relative_paths("/a/b", Path("/")) == "/a/b"
