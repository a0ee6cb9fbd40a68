"""Every bad field of a call, over HTTP against the real server (uvicorn on 127.0.0.1, the solar KG built in a temp
folder): that call's typed tool error, never a 4xx for the request or its batch (issue 50). Hypothesis draws the
values of each named field shape; each shape is also run through the in-process client, which must answer alike.

Was: 7 of 13 bad shapes (a scope of the wrong type, seeds nested or too many, a lone surrogate in a field pydantic
echoed back, a call that is neither text nor an object, a batch item that is not an object) failed the whole
request or batch with 422, or 400 with the JSON encoder's text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.agent.client import InProcessToolClient
from pipelines.agent.requests import CallRequest
from pipelines.agent.server import create_app
from pipelines.agent.tools import TOOL_SPECS, KGToolbox
from tests.tool_support import ServerThread

GOOD = {"call": 'get_tail_relations(entity="Io")', "graph_type": "solar"}
JSON = {"content-type": "application/json"}
REQUEST_FIELD = frozenset({"invalid_argument"})  # a bad graph_type, episode_id, question, scope, or a non-object item
CALL_FIELD = frozenset({"format_error", "invalid_argument", "invalid_action", "wrong_argument_count",
                        "missing_required_fields"})  # a bad call: the parser's typed errors
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ----- strategies: JSON values of every shape -----------------------------------------------------------------
surrogate = st.integers(0xD800, 0xDFFF).map(chr)
leaf = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=12))
json_value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
not_text = (st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
            | st.lists(json_value, max_size=4) | st.dictionaries(st.text(max_size=6), json_value, max_size=4))
not_object = json_value.filter(lambda v: not isinstance(v, dict))
with_surrogate = st.builds(lambda a, s, b: a + s + b, st.text(max_size=8), surrogate, st.text(max_size=8))


def longer_than(chars: int) -> st.SearchStrategy[str]:
    return st.builds(lambda n, fill: fill * (chars + n), st.integers(1, 3 * chars), st.sampled_from("gé😀"))


def nested(depth: int) -> st.SearchStrategy[Any]:
    """An object ``depth`` levels deep (lists and objects alternating)."""
    return st.integers(2, depth).map(lambda d: _nest(d))


def _nest(depth: int) -> Any:
    value: Any = "Io"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def scope(seeds: st.SearchStrategy[Any], hops: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[dict]:
    return st.builds(lambda s, h: {"seeds": s, "hops": h}, seeds, st.just(2) if hops is None else hops)


bad_hops = (st.integers(5, 2**40) | st.integers(-(2**40), -1) | st.booleans() | st.floats() | st.text(max_size=3)
            | st.none() | st.lists(st.integers(0, 4), max_size=2))
bad_call_object = st.fixed_dictionaries({"name": json_value.filter(lambda v: not (isinstance(v, str) and v in TOOL_SPECS)),
                                         "arguments": json_value})


@dataclass(frozen=True)
class Shape:
    """A bad field shape: the field it spoils (None: the whole request item), its values, the error types allowed."""

    name: str
    field: str | None
    values: st.SearchStrategy[Any]
    errors: frozenset[str] = REQUEST_FIELD

    def request(self, value: Any) -> Any:
        return value if self.field is None else {**GOOD, self.field: value}


SHAPES = [
    Shape("graph_type not text", "graph_type", not_text),
    Shape("graph_type with a lone surrogate", "graph_type", with_surrogate),
    Shape("graph_type too long", "graph_type", longer_than(200)),
    Shape("episode_id not text", "episode_id", not_text),
    Shape("episode_id with a lone surrogate", "episode_id", with_surrogate),
    Shape("episode_id too long", "episode_id", longer_than(200)),
    Shape("question not text", "question", not_text),
    Shape("question with a lone surrogate", "question", with_surrogate),
    Shape("question too long", "question", longer_than(4000)),
    Shape("scope not an object", "scope", json_value.filter(lambda v: v is not None and not isinstance(v, dict))),
    Shape("scope without seeds", "scope", st.dictionaries(st.text(max_size=6).filter(lambda k: k != "seeds"),
                                                          json_value, max_size=3)),
    Shape("scope seeds not a list", "scope", scope(json_value.filter(lambda v: not isinstance(v, list)))),
    Shape("scope seeds not text", "scope", scope(st.lists(not_text, min_size=1, max_size=5))),
    Shape("scope seeds nested objects", "scope", scope(st.lists(nested(40), min_size=1, max_size=3))),
    Shape("scope seeds a huge list", "scope", scope(st.integers(101, 3000).map(lambda n: ["Io"] * n))),
    Shape("scope seeds over the byte limit", "scope",
          scope(st.integers(17, 100).map(lambda n: [f"Io {i} ".ljust(1000, "x") for i in range(n)]))),
    Shape("scope seed with a lone surrogate", "scope", scope(st.lists(with_surrogate, min_size=1, max_size=3))),
    Shape("scope hops not 0-4", "scope", scope(st.just(["Io"]), bad_hops)),
    Shape("scope deeply nested", "scope", nested(60)),
    Shape("call neither text nor object", "call", not_text.filter(lambda v: not isinstance(v, dict)), CALL_FIELD),
    Shape("call object of a bad shape", "call", bad_call_object, CALL_FIELD),
    Shape("call text with a lone surrogate", "call",
          with_surrogate.map(lambda s: f'get_tail_relations(entity="{s}")'), CALL_FIELD),
    Shape("call text not a call", "call", st.text(max_size=40).filter(lambda t: "(" not in t), CALL_FIELD),
    Shape("call text too long", "call", longer_than(4000).map(lambda s: f'get_tail_relations(entity="{s}")'),
          CALL_FIELD),
    Shape("request not an object", None, not_object),
]


def body(value: Any) -> bytes:
    """JSON as a hostile client sends it: lone surrogates as \\udXXX escapes, NaN and Infinity as Python writes them."""
    return json.dumps(value, ensure_ascii=True).encode("ascii")


@pytest.fixture(scope="module")
def live(toolbox: KGToolbox) -> Iterator[tuple[httpx.Client, InProcessToolClient, dict]]:
    """An HTTP client of the real server, the in-process client, and the result of the good call."""
    with ServerThread(create_app(toolbox)) as running, httpx.Client(base_url=running.url, timeout=60) as client:
        good = client.post("/v1/tools/call", content=body(GOOD), headers=JSON).json()
        assert good["ok"] is True, good
        yield client, InProcessToolClient(toolbox), good


def test_the_catalogue_has_at_least_13_bad_field_shapes() -> None:
    assert len(SHAPES) >= 13 and len({s.name for s in SHAPES}) == len(SHAPES)
    assert {s.field for s in SHAPES} >= {"graph_type", "episode_id", "question", "scope", "call", None}


def check_alone(client: httpx.Client, local: InProcessToolClient, good: dict, shape: Shape, value: Any) -> dict:
    """``value`` in one call and in a batch between two good calls: its own typed error, the batch unharmed, and
    the in-process client's answer the same."""
    request = shape.request(value)
    single = client.post("/v1/tools/call", content=body(request), headers=JSON)
    assert single.status_code == 200, (shape.name, single.text[:300])
    result = single.json()
    assert result["ok"] is False and result["error_type"] in shape.errors, (shape.name, result)
    batch = client.post("/v1/tools/batch", content=body({"calls": [GOOD, request, GOOD]}), headers=JSON)
    assert batch.status_code == 200, (shape.name, batch.text[:300])
    assert batch.json()["results"] == [good, result, good], shape.name
    in_process = local.batch([CallRequest.model_validate(request)])[0].model_dump(mode="json")
    assert in_process == result, shape.name
    return result


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_a_bad_field_is_that_calls_typed_error(live: tuple, shape: Shape) -> None:
    client, local, good = live

    @SETTINGS
    @given(value=shape.values)
    def run(value: Any) -> None:
        check_alone(client, local, good, shape, value)

    run()


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), picks=st.lists(st.sampled_from(SHAPES) | st.none(), min_size=1, max_size=12))
def test_a_batch_of_bad_calls_fails_only_them(live: tuple, data: st.DataObject, picks: list[Shape | None]) -> None:
    """Bad items of several shapes mixed with good ones (None): 0 batch failures, each item its own answer."""
    client, local, good = live
    requests = [GOOD if shape is None else shape.request(data.draw(shape.values, label=shape.name)) for shape in picks]
    response = client.post("/v1/tools/batch", content=body({"calls": requests}), headers=JSON)
    assert response.status_code == 200, response.text[:300]
    results = response.json()["results"]
    assert len(results) == len(requests)
    for shape, result in zip(picks, results, strict=True):
        if shape is None:
            assert result == good
        else:
            assert result["ok"] is False and result["error_type"] in shape.errors, (shape.name, result)
    assert [r.model_dump(mode="json") for r in local.batch([CallRequest.model_validate(r) for r in requests])] == results


REFUSED_WHOLE: list[tuple[str, str, bytes, dict[str, str], int]] = [
    ("call", "not JSON", b"{not json", JSON, 400),
    ("call", "empty", b"", JSON, 400),
    ("call", "not sent as JSON", body(GOOD), {"content-type": "text/plain"}, 400),
    ("call", "JSON nested deeper than the parser goes", b'{"call": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", JSON,
     400),
    ("batch", "not JSON", b'{"calls": [', JSON, 400),
    ("batch", "calls not a list", body({"calls": {"call": GOOD["call"]}}), JSON, 422),
    ("batch", "no calls", body({"call": GOOD["call"]}), JSON, 422),
    ("batch", "not an object", body([GOOD]), JSON, 422),
    ("batch", "over 4,096 calls", body({"calls": [GOOD] * 4097}), JSON, 422),
]


@pytest.mark.parametrize(("endpoint", "what", "content", "headers", "status"), REFUSED_WHOLE,
                         ids=[f"{e}: {w}" for e, w, *_ in REFUSED_WHOLE])
def test_only_a_body_that_is_no_request_is_refused_whole(live: tuple, endpoint: str, what: str, content: bytes,
                                                        headers: dict[str, str], status: int) -> None:
    """What docs/tools.md says stays a 4xx: a body that is not JSON (400), a batch body that is not a list of at most
    4,096 calls (422); the reply is short, encodable and echoes none of the body."""
    client, _, _ = live
    response = client.post(f"/v1/tools/{endpoint}", content=content, headers=headers)
    assert response.status_code == status, response.text[:300]
    assert len(response.content) < 2000 and "Io" not in response.text


def test_a_surrogate_in_a_refused_batch_is_not_echoed(live: tuple) -> None:
    """Was a 400 with the encoder's text: the 422 reply echoed the input, and a lone surrogate cannot be encoded."""
    client, _, _ = live
    response = client.post("/v1/tools/batch", content=body({"calls": "\ud800" * 3}), headers=JSON)
    assert response.status_code == 422
    assert response.json() == {"detail": [{"loc": ["body", "calls"], "msg": "Input should be a valid list",
                                           "type": "list_type"}]}


def _shape(name: str) -> Shape:
    return next(s for s in SHAPES if s.name == name)


EXAMPLES: list[tuple[str, Any, str]] = [  # what the probe of issue 50 sent, with the messages a client reads
    ("scope not an object", "everything", "invalid scope: scope: Input should be a valid dictionary or instance of "
     "Scope"),
    ("scope seeds not a list", {"seeds": "\ud800"}, "invalid scope: seeds: Input should be a valid list"),
    ("scope seeds nested objects", {"seeds": [{"a": {"b": [1]}}]}, "invalid scope: seeds.0: Input should be a valid "
     "string"),
    ("scope seeds a huge list", {"seeds": ["x"] * 5000}, "invalid scope: seeds: List should have at most 100 items "
     "after validation, not 5000"),
    ("scope hops not 0-4", {"seeds": ["Io"], "hops": "2"}, "invalid scope: hops: Input should be a valid integer"),
    ("request not an object", ["Io"], 'a call request must be a JSON object {"call": ..., "graph_type": ..., ...}, '
     "got an array"),
]


@pytest.mark.parametrize(("name", "value", "message"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_the_probes_shapes_read_well(live: tuple, name: str, value: Any, message: str) -> None:
    client, local, good = live
    result = check_alone(client, local, good, _shape(name), value)
    assert result["content"] == f"<error>{message}</error>"


def test_the_schema_still_documents_each_field(live: tuple) -> None:
    client, _, _ = live
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    fields: dict[str, Any] = schemas["CallRequest"]["properties"]
    assert schemas["CallRequest"]["required"] == ["call"]
    assert {"type": "string", "maxLength": 4000} in fields["question"]["anyOf"]
    assert any(option.get("title") == "Scope" and option["required"] == ["seeds"] for option in fields["scope"]["anyOf"])
    assert {"anyOf": [{"type": "string"}, {"type": "object"}]} in fields["call"]["anyOf"]
