"""The tool server's memory (issue 50): the bytes the episode store and the toolbox's cache count are what they hold
(tracemalloc's measure), resolved scopes are compact arrays kept by their episodes, and an ended episode frees them.

RSS figures are noisy on a shared machine: they are bench/reliability.py's (server section), not asserted here."""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from pipelines.agent import server as server_module
from pipelines.agent.client import InProcessToolClient
from pipelines.agent.requests import CallRequest
from pipelines.agent.scope import Allowed, ResolvedScope, Scope, scope_ids, subgraph_entities
from pipelines.agent.server import EpisodeStore, create_app, run_request
from pipelines.agent.tools import KGToolbox
from pipelines.config import Params, ToolParams
from tests.tool_support import ServerThread, traced_growth, with_tools

CALL = 'get_tail_relations(entity="Io")'
MiB = 1024 * 1024


def fresh(text: str) -> str:
    """A copy of ``text`` that shares nothing with it (what a JSON body gives the server)."""
    return (text + " ")[:-1]


def scopes(names: list[str], count: int, seed: int = 0, size: int = 60) -> list[dict]:
    """``count`` scopes of ``size`` names of the graph (with repeats: the solar graph has 28), each made distinct by
    one name it lacks, as fresh strings."""
    rng = random.Random(seed)
    return [{"seeds": [fresh(rng.choice(names)) for _ in range(size - 1)] + [f"Vulcan {i}"], "hops": 2}
            for i in range(count)]


class StubEncoder:
    """Random unit vectors of the index's dimension: the accounting, not the encoding, is under test (MiniLM under
    tracemalloc took a minute for 150 texts on the loaded test machine)."""

    dimension = 384

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def encode(self, texts: list[str], **_: Any) -> np.ndarray:
        vectors = self.rng.standard_normal((len(texts), self.dimension)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture()
def box(solar: Params) -> KGToolbox:
    """A toolbox of its own (empty caches) with a stub encoder."""
    own = KGToolbox(solar, encoder=StubEncoder())  # type: ignore[arg-type]
    own.load_all()
    return own


# ----- resolved scopes: arrays, not sets of Python ints -------------------------------------------------------
def test_scope_ids_are_the_subgraph_entities(toolbox: KGToolbox) -> None:
    graph = toolbox.graph("solar")
    rng = random.Random(0)
    for _ in range(300):
        seeds = rng.sample(range(graph.num_entities), rng.randint(0, 6))
        hops = rng.randint(0, 4)
        ids = scope_ids(graph, seeds, hops)
        assert ids.dtype == np.int32 and list(ids) == sorted(subgraph_entities(graph, seeds, hops)), (seeds, hops)


def test_allowed_answers_membership_like_a_set() -> None:
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 500):
        members = np.unique(rng.integers(0, 1000, size)).astype(np.int32)
        allowed, inside = Allowed(ids=members), set(members.tolist())
        probe = rng.integers(-5, 1100, 300)
        assert allowed.mask(probe).tolist() == [int(p) in inside for p in probe]
        assert [int(p) in allowed for p in probe] == [int(p) in inside for p in probe]


def test_episodes_of_one_scope_share_its_entities_and_free_them_when_ended(box: KGToolbox) -> None:
    client = InProcessToolClient(box)
    scope = Scope(seeds=["Jupiter"], hops=1)
    for episode in ("a", "b"):
        assert client.call(CALL, episode_id=episode, scope=scope).content == 'Tail relations for entity "Io": orbits'
    a, b = (client.episodes._states[e][0].resolved for e in ("a", "b"))  # noqa: SLF001
    assert a is not None and b is not None and a.allowed is b.allowed  # resolved once for both
    client.call(CALL, episode_id="a", scope=Scope(seeds=["Jupiter"], hops=1))  # an equal scope: kept, not resolved
    assert client.episodes._states["a"][0].resolved is a  # noqa: SLF001
    assert len(box._scopes) == 1 and len(box._cache) == 0  # noqa: SLF001 - no cache of scopes besides the episodes
    assert client.end_episode("a") and len(box._scopes) == 1  # noqa: SLF001 - b still holds it
    assert client.end_episode("b") and not client.end_episode("b")
    del a, b
    gc.collect()
    assert len(box._scopes) == 0 and client.episodes.nbytes == 0  # noqa: SLF001


# ----- the bytes counted are the bytes held -------------------------------------------------------------------
def test_the_episode_stores_bytes_are_what_its_episodes_hold(box: KGToolbox) -> None:
    """Resolved scopes were cached beside the episodes, counted at a third of what a set of ints holds."""
    store = EpisodeStore()
    names = box.graph("solar").names

    def run() -> None:  # the requests made here and let go, as the server's are: only what the store keeps stays
        for i, scope in enumerate(scopes(names, 300)):
            request = CallRequest(call=CALL, graph_type="solar", episode_id=f"e{i}", scope=scope,
                                  question=fresh(f"Which moon is number {i}?"))
            assert run_request(box, store, request).ok

    held = traced_growth(run)
    assert len(store) == 300 and all(state.resolved is not None for state, _ in store._states.values())  # noqa: SLF001
    assert 0.8 < store.nbytes / held < 1.25, (store.nbytes, held)


def test_large_resolved_scopes_are_counted_at_their_size() -> None:
    """Scopes of thousands of entities (a 2-hop scope of 60 names on a real graph): the array dominates."""
    store = EpisodeStore(max_bytes=10**9)
    rng = np.random.default_rng(0)

    def run() -> None:
        for i in range(200):
            scope = Scope(seeds=[f"Entity {i} {j} name" for j in range(60)], hops=2)
            state = store.get(f"e{i}", "big", scope)
            ids = np.unique(rng.integers(0, 50_000, 3000)).astype(np.int32)
            state.resolved = ResolvedScope(graph="big", signature="v1", scope=scope, allowed=Allowed(ids=ids))
            store.settle(f"e{i}", state)

    held = traced_growth(run)
    assert 0.8 < store.nbytes / held < 1.25, (store.nbytes, held)
    for i in range(200):
        assert store.drop(f"e{i}")
    assert store.nbytes == 0 and store.freed > 0


def test_the_query_and_phrase_caches_count_what_they_hold(box: KGToolbox) -> None:
    box._embed("warm the encoder up")  # noqa: SLF001
    graph = box.graph("solar")
    before = box._cache.nbytes  # noqa: SLF001
    held = traced_growth(lambda: [box._embed(fresh(f"what does moon number {i} orbit?")) for i in range(150)])  # noqa: SLF001
    assert 0.8 < (box._cache.nbytes - before) / held < 1.25, (box._cache.nbytes - before, held)  # noqa: SLF001
    before = box._cache.nbytes  # noqa: SLF001
    held = traced_growth(lambda: [box._phrase_vectors(graph, e) for e in range(graph.num_entities)])  # noqa: SLF001
    assert 0.8 < (box._cache.nbytes - before) / held < 1.25, (box._cache.nbytes - before, held)  # noqa: SLF001


def test_the_store_stays_within_its_bytes_as_calls_grow_episodes(box: KGToolbox) -> None:
    """An episode is measured again after each call (its resolved scope, its search path): the bound holds."""
    client = InProcessToolClient(KGToolbox(with_tools(box.params, episodes_max_bytes=60_000), encoder=box.encoder))
    for i, scope in enumerate(scopes(box.graph("solar").names, 40)):
        client.call(CALL, graph_type="solar", episode_id=f"e{i}", scope=Scope(**scope))
        client.call('search(entity="Jupiter", question="Which moons orbit Jupiter?")', graph_type="solar",
                    episode_id=f"e{i}")
        assert client.episodes.nbytes <= 60_000
        assert client.episodes.nbytes == sum(size for _, size in client.episodes._states.values())  # noqa: SLF001
    assert 0 < len(client.episodes) < 40


def test_default_budgets_are_tens_of_mib() -> None:
    defaults = ToolParams()
    assert (defaults.cache_max_bytes, defaults.episodes_max_bytes) == (32 * MiB, 16 * MiB)


# ----- over HTTP: an ended episode gives its memory back ------------------------------------------------------
@pytest.fixture()
def served(box: KGToolbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[httpx.Client, Any, list[int]]]:
    """An HTTP client of a server on ``box``, the app, and a list counting the server's heap trims."""
    trims: list[int] = []
    monkeypatch.setattr(server_module, "trim_heap", lambda: trims.append(1))
    monkeypatch.setattr(server_module, "TRIM_AFTER_BYTES", 200_000)
    app = create_app(box)
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        yield client, app, trims


def test_ended_episodes_leave_nothing_behind(served: tuple, box: KGToolbox) -> None:
    """Was: 2,550 episodes ended gave back 0 MB (their resolved scopes stayed in the toolbox's cache)."""
    client, app, trims = served
    names = box.graph("solar").names

    def open_and_end(tag: str, count: int) -> None:
        for i, scope in enumerate(scopes(names, count, seed=len(tag))):
            response = client.post("/v1/tools/call", json={"call": CALL, "graph_type": "solar",
                                                           "episode_id": f"{tag}{i}", "scope": scope})
            assert response.status_code == 200 and response.json()["ok"], response.text
        for i in range(count):
            assert client.delete(f"/v1/episodes/{tag}{i}").json() == {"dropped": True}

    open_and_end("warm", 20)
    grown = traced_growth(lambda: open_and_end("ended", 200))  # ~10 KB each while it lives
    assert grown < 300_000, grown
    assert len(app.state.episodes) == 0 and app.state.episodes.nbytes == 0
    assert len(box._scopes) == 0  # noqa: SLF001
    assert trims  # the freed heap was handed back to the OS (glibc) at least once


def test_live_episodes_are_counted_at_what_they_hold(served: tuple, box: KGToolbox) -> None:
    client, app, _ = served
    names = box.graph("solar").names

    def open_many() -> None:
        for i, scope in enumerate(scopes(names, 200, seed=7)):
            body = {"call": CALL, "graph_type": "solar", "episode_id": f"kept{i}", "scope": scope}
            assert client.post("/v1/tools/call", json=body).json()["ok"]

    held = traced_growth(open_many)
    counted = app.state.episodes.nbytes
    assert len(app.state.episodes) == 200 and 0.7 < counted / held < 1.3, (counted, held)
