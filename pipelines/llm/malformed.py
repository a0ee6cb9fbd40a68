"""A catalogue of broken chat-completion replies, as gateways and proxies really send them, for the
scripted OpenAI-compatible server (``scripted_openai_app``: each shape is a handler reply spec).

``OpenAIChatClient`` must turn every ``error`` shape into an ``LLMError`` result naming what was wrong
and every ``usable`` shape into a ``ChatReply``; tests/test_llm_malformed.py checks that, and
bench/_reliability_llm.py counts it. ``named_shapes`` are the hand-written cases (an HTML login
page, an empty 200, a 204, ``choices`` as strings, a null ``message``, ...); ``grid_shapes`` are
generated deterministically: every field the client reads, replaced by values of every JSON type
or removed, plus statuses x content types x bodies. ``hostile_shapes`` (bodies too big or absurd:
20x the reply limit, 100,000 choices, 2^70 tokens) and ``hostile_json_texts`` (usable replies that are
not the JSON object asked for) are issue 50's cases, played by tests/test_llm_hostile.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipelines.llm.openai_client import MAX_CHOICES, MAX_FIELD_CHARS, MAX_TOKEN_COUNT, json_path

Expect = Literal["error", "usable"]
FieldPath = tuple[str | int, ...]


class ReplyShape(BaseModel):
    """One reply the scripted server sends: ``spec`` is its handler dict (``body``/``json``/``status``...).

    ``mentions`` is text the ``LLMError`` must contain (the field path, "not JSON", "HTTP 503"...),
    ``retried`` whether the SDK retries it (a 5xx, a 429, a dropped connection).
    """

    model_config = ConfigDict(frozen=True)
    name: str
    family: str
    spec: dict[str, Any]
    expect: Expect = "error"
    mentions: str = ""
    retried: bool = False


def valid_completion(text: str = "ok", model: str = "scripted-model") -> dict[str, Any]:
    """A well-formed ``chat.completion`` body: what the grid mutates one field at a time."""
    return {"id": "chatcmpl-probe", "object": "chat.completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


DELETE = object()  # "remove this field" in ``mutate``


def mutate(document: dict[str, Any], path: FieldPath, value: Any) -> dict[str, Any]:
    """A deep copy of ``document`` with the field at ``path`` set to ``value`` (or removed: ``DELETE``)."""
    result = copy.deepcopy(document)
    parent: Any = result
    for part in path[:-1]:
        parent = parent[part]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return result


def _completion(**changes: Any) -> dict[str, Any]:
    return {**valid_completion(), **changes}


def _choice(**changes: Any) -> dict[str, Any]:
    return {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}, **changes}


def named_shapes() -> list[ReplyShape]:
    """The hand-written shapes: the hostile-input probe's 27 and a few more each side."""
    html = "<!DOCTYPE html><html><head><title>Sign in</title></head><body><form>...</form></body></html>"
    error = [
        ("html_login_page", "body", {"body": html, "content_type": "text/html"}, "not JSON: text/html body"),
        ("html_as_json", "body", {"body": html}, "not JSON: application/json body"),
        ("empty_200", "body", {"body": ""}, "empty body"),
        ("whitespace_200", "body", {"body": " \r\n\t "}, "empty body"),
        ("no_content_204", "status", {"status": 204, "body": ""}, "empty body (HTTP 204"),
        ("plain_text", "body", {"body": "upstream said ok", "content_type": "text/plain"}, "not JSON"),
        ("truncated_json", "body", {"body": '{"choices": [{"message": {"content": "o'}, "not JSON"),
        ("invalid_utf8", "body", {"body": b"\xff\xfe\x00\x80garbage\xc3"}, "not JSON"),
        ("nested_too_deep", "body", {"body": "[" * 100_000}, "nested too deeply"),
        ("nan_tokens", "usage", {"body": '{"choices": [{"message": {"content": "x"}}], '
                                         '"usage": {"prompt_tokens": NaN}}'}, "usage.prompt_tokens"),
        ("json_null", "document", {"json": None}, "reply is a JSON null"),
        ("json_array", "document", {"json": [valid_completion()]}, "reply is a JSON array"),
        ("json_string", "document", {"json": "ok"}, "reply is a JSON string"),
        ("json_number", "document", {"json": 200}, "reply is a JSON number"),
        ("empty_object", "document", {"json": {}}, "choices is missing"),
        ("error_object_200", "document", {"json": {"error": {"message": "upstream overloaded", "code": 503}}},
         "error object, not a completion: 'upstream overloaded'"),
        ("choices_missing", "choices", {"json": mutate(valid_completion(), ("choices",), DELETE)},
         "choices is missing"),
        ("choices_null", "choices", {"json": _completion(choices=None)}, "choices is null"),
        ("choices_empty", "choices", {"json": _completion(choices=[])}, "choices is an empty array"),
        ("choices_string", "choices", {"json": _completion(choices="ok")}, "choices is string"),
        ("choices_of_strings", "choices", {"json": _completion(choices=["ok", "ok"])}, "choices[0] is string"),
        ("choice_null", "choices", {"json": _completion(choices=[None])}, "choices[0] is null"),
        ("message_missing", "message", {"json": _completion(choices=[{"index": 0, "finish_reason": "stop"}])},
         "choices[0].message is missing"),
        ("message_null", "message", {"json": _completion(choices=[_choice(message=None)])},
         "choices[0].message is null"),
        ("message_string", "message", {"json": _completion(choices=[_choice(message="ok")])},
         "choices[0].message is string"),
        ("content_null", "content", {"json": _completion(choices=[_choice(message={"role": "assistant",
                                                                                   "content": None})])},
         "choices[0].message.content is null"),
        ("content_missing", "content", {"json": _completion(choices=[_choice(message={"role": "assistant"})])},
         "choices[0].message.content is missing"),
        ("content_number", "content", {"json": _completion(choices=[_choice(message={"content": 42})])},
         "choices[0].message.content is number"),
        ("content_parts", "content", {"json": _completion(choices=[_choice(
            message={"content": [{"type": "text", "text": "ok"}]})])}, "choices[0].message.content is array"),
        ("finish_reason_number", "finish_reason", {"json": _completion(choices=[_choice(finish_reason=1)])},
         "choices[0].finish_reason is number"),
        ("finish_reason_object", "finish_reason", {"json": _completion(choices=[_choice(
            finish_reason={"type": "stop"})])}, "choices[0].finish_reason is object"),
        ("usage_string", "usage", {"json": _completion(usage="12 tokens")}, "usage is string"),
        ("usage_array", "usage", {"json": _completion(usage=[3, 1])}, "usage is array"),
        ("usage_tokens_string", "usage", {"json": _completion(usage={"prompt_tokens": "3",
                                                                     "completion_tokens": 1})},
         "usage.prompt_tokens is string"),
        ("usage_tokens_negative", "usage", {"json": _completion(usage={"prompt_tokens": -3})},
         "usage.prompt_tokens is number"),
        ("usage_tokens_float", "usage", {"json": _completion(usage={"completion_tokens": 1.5})},
         "usage.completion_tokens is number"),
        ("model_number", "model", {"json": _completion(model=7)}, "model is number"),
        ("tokens_2_pow_70", "usage", {"json": _completion(usage={"prompt_tokens": 2**70, "completion_tokens": 1})},
         "usage.prompt_tokens is number"),
        ("too_many_choices", "choices", {"json": _completion(choices=[_choice()] * (MAX_CHOICES + 1))},
         f"choices has {MAX_CHOICES + 1} items"),
        ("model_name_too_long", "model", {"json": _completion(model="m" * (MAX_FIELD_CHARS + 1))},
         "model is string"),
    ]
    transport = [
        ("html_502", "status", {"status": 502, "body": html, "content_type": "text/html"},
         "HTTP 502", True),
        ("empty_503", "status", {"status": 503, "body": ""}, "HTTP 503", True),
        ("rate_limited_429", "status", {"status": 429, "json": {"error": {"message": "slow down"}}},
         "HTTP 429", True),
        ("bad_request_400_html", "status", {"status": 400, "body": html, "content_type": "text/html"},
         "HTTP 400", False),
        ("redirect_to_missing_page", "status", {"status": 302, "body": "", "headers": {"location": "/signin"}},
         "HTTP 404", False),
        ("body_shorter_than_length", "transport", {"body": '{"choices": [', "headers": {"content-length": "4096"}},
         "connection failed", True),
    ]
    usable = [
        ("lone_surrogate", "usable", {"json": _completion(choices=[_choice(
            message={"role": "assistant", "content": "before \ud800 after"})])}),
        ("surrogate_pair_escaped", "usable", {"json": _completion(choices=[_choice(
            message={"content": "smile \ud83d\ude00"})])}),
        ("bom_then_json", "usable", {"body": "\ufeff" + _json(valid_completion())}),
        ("json_as_text_plain", "usable", {"json": valid_completion(), "content_type": "text/plain"}),
        ("usage_missing", "usable", {"json": mutate(valid_completion(), ("usage",), DELETE)}),
        ("usage_null", "usable", {"json": _completion(usage=None)}),
        ("model_missing", "usable", {"json": mutate(valid_completion(), ("model",), DELETE)}),
        ("finish_reason_null", "usable", {"json": _completion(choices=[_choice(finish_reason=None)])}),
        ("empty_content", "usable", {"json": _completion(choices=[_choice(message={"content": ""})])}),
        ("extra_fields", "usable", {"json": {**valid_completion(), "system_fingerprint": None,
                                             "choices": [_choice(logprobs=None, message={
                                                 "content": "ok", "tool_calls": [], "refusal": None,
                                                 "reasoning_content": "hmm"})]}}),
        ("status_201", "usable", {"status": 201, "json": valid_completion()}),
    ]
    return ([ReplyShape(name=n, family=f, spec=s, mentions=m) for n, f, s, m in error]
            + [ReplyShape(name=n, family=f, spec=s, mentions=m, retried=r) for n, f, s, m, r in transport]
            + [ReplyShape(name=n, family=f, spec=s, expect="usable") for n, f, s in usable])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)


# --- the generated grid -----------------------------------------------------------------------------

FIELDS: list[FieldPath] = [("choices",), ("choices", 0), ("choices", 0, "message"),
                           ("choices", 0, "message", "content"), ("choices", 0, "finish_reason"), ("usage",),
                           ("usage", "prompt_tokens"), ("usage", "completion_tokens"), ("model",)]
"""Every field of a completion that the client reads."""

VALUES: list[Any] = [None, 0, -1, 2.5, True, "", "12", "stop", [], ["ok"], [None], {}, {"content": "ok"},
                     [{"type": "text", "text": "ok"}], {"a": {"b": [1, {"c": None}]}}, DELETE]
"""A value of every JSON type (and removal), each put at every field."""


def field_accepts(path: FieldPath, value: Any) -> bool:
    """Whether a completion with ``value`` at ``path`` (the rest valid) is usable: the contract of the
    client, written out per field (independently of its pydantic models)."""
    field = path[-1]
    if value is DELETE:
        return field in ("finish_reason", "usage", "prompt_tokens", "completion_tokens", "model")
    if field == "content":
        return isinstance(value, str)
    if field in ("finish_reason", "model"):
        return value is None or (isinstance(value, str) and len(value) <= MAX_FIELD_CHARS)
    if field in ("prompt_tokens", "completion_tokens"):
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT
    if field == "usage":
        return value is None or (isinstance(value, dict) and all(
            field_accepts(("usage", k), value[k]) for k in ("prompt_tokens", "completion_tokens") if k in value))
    if field == "message":
        return isinstance(value, dict) and "content" in value and field_accepts((*path, "content"), value["content"])
    if field == 0:  # a choice
        return isinstance(value, dict) and "message" in value and field_accepts(("message",), value["message"]) \
            and ("finish_reason" not in value or field_accepts(("finish_reason",), value["finish_reason"]))
    if field == "choices":
        return isinstance(value, list) and 0 < len(value) <= MAX_CHOICES and all(field_accepts((0,), v) for v in value)
    raise ValueError(f"no rule for field {path}")


def _value_name(value: Any) -> str:
    return "removed" if value is DELETE else _json(value)[:24]


def field_shapes() -> list[ReplyShape]:
    """Every field of ``FIELDS`` set to every value of ``VALUES``: 144 shapes, the unusable ones
    expected to be named by their path in the error (a removed list item by its list's path)."""
    shapes = []
    for path in FIELDS:
        for value in VALUES:
            ok = field_accepts(path, value)
            named = path[:-1] if value is DELETE and isinstance(path[-1], int) else path
            shapes.append(ReplyShape(name=f"{json_path(path)}={_value_name(value)}", family=str(path[-1]),
                                     spec={"json": mutate(valid_completion(), path, value)},
                                     expect="usable" if ok else "error", mentions="" if ok else json_path(named)))
    return shapes


STATUSES = [200, 201, 202, 203, 204, 206]
CONTENT_TYPES = ["application/json", "text/html; charset=utf-8", "text/plain", "application/octet-stream"]
BODIES: list[tuple[str, str | bytes]] = [
    ("empty", ""), ("html", "<html><body>502 Bad Gateway</body></html>"), ("null", "null"), ("array", "[]"),
    ("string", '"ok"'), ("object", "{}"), ("choices_string", '{"choices": "ok"}'), ("cut", '{"choices": [{"mess'),
    ("binary", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff"), ("sse", 'data: {"choices": []}\n\ndata: [DONE]\n\n'),
]


def body_shapes() -> list[ReplyShape]:
    """2xx statuses x content types x bodies that are never a completion: 240 shapes, all errors."""
    return [ReplyShape(name=f"{status} {ctype.split(';')[0]} {label}", family="body",
                       spec={"status": status, "body": body, "content_type": ctype},
                       mentions="empty body" if status == 204 or label == "empty" else "malformed reply")
            for status in STATUSES for ctype in CONTENT_TYPES for label, body in BODIES]


def grid_shapes() -> list[ReplyShape]:
    """All generated shapes, fields first, interleaved so that any prefix mixes the families."""
    fields, bodies = field_shapes(), body_shapes()
    mixed: list[ReplyShape] = []
    for index in range(max(len(fields), len(bodies))):
        mixed.extend(group[index] for group in (fields, bodies) if index < len(group))
    return mixed


def probe_shapes(n_errors: int) -> list[ReplyShape]:
    """The named shapes, then generated ones until there are at least ``n_errors`` error shapes."""
    shapes = named_shapes()
    grid = iter(grid_shapes())
    while sum(s.expect == "error" for s in shapes) < n_errors:
        try:
            shapes.append(next(grid))
        except StopIteration:
            raise ValueError(f"the grid has fewer than {n_errors} error shapes") from None
    return shapes


# --- hostile replies (issue 50): sizes, counts and nesting, at the HTTP level and inside JSON replies -----------

def hostile_shapes(max_reply_chars: int) -> list[ReplyShape]:
    """Replies that are too big or absurd for a client with ``llm.max_reply_chars = max_reply_chars``: a content
    field of 20 x the limit (its body is over the body limit, not read whole), content just over the limit,
    100,000 choices, a token count of 2^70, a body nested 100,000 deep. All are errors."""
    return [
        ReplyShape(name="content_20x_limit", family="size", mentions="reply too large",
                   spec={"json": _completion(choices=[_choice(message={"content": "a" * (20 * max_reply_chars)})])}),
        ReplyShape(name="content_over_limit", family="size", mentions="over llm.max_reply_chars",
                   spec={"json": _completion(choices=[_choice(message={"content": "b" * (max_reply_chars + 1)})])}),
        ReplyShape(name="choices_100000", family="choices", mentions="choices has 100,000 items",
                   spec={"body": '{"choices": [' + ",".join(['{"message": {"content": "c"}}'] * 100_000) + "]}"}),
        ReplyShape(name="prompt_tokens_2_pow_70", family="usage", mentions="usage.prompt_tokens",
                   spec={"json": _completion(usage={"prompt_tokens": 2**70})}),
        ReplyShape(name="body_nested_100000", family="body", mentions="nested too deeply",
                   spec={"body": "[" * 100_000}),
    ]


def hostile_json_texts() -> list[tuple[str, str, str | None]]:
    """(name, reply text, finish_reason) of usable replies whose text is not the JSON object a JSON request asked
    for: each must come out of ``complete_json_many`` as an error, never an exception."""
    return [
        ("open_brackets_100000", "[" * 100_000, "stop"),
        ("open_braces_100000", '{"a": ' * 100_000, "stop"),
        ("nested_500_deep", '{"a": ' * 500 + "1" + "}" * 500, "stop"),
        ("array_not_object", "[1, 2, 3]", "stop"),
        ("prose", "Sure! Here is the JSON you asked for: the answer is Mars.", "stop"),
        ("cut_at_length", '{"question": "Which moon orbits Ma', "length"),
        ("number_of_5000_digits", '{"a": ' + "9" * 5000 + "}", "stop"),
        ("empty", "", "stop"),
        ("fence_only", "```json\n```", "stop"),
        ("html", "<html><body>Bad gateway</body></html>", "stop"),
    ]
