"""Fuzzing the tool-call parser and the toolbox: any text in, a typed value out, never an exception,
and nothing the model writes is ever executed."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipelines.agent.calls import PYTHON_TYPES, ErrorType, ToolCall, ToolError, format_call, parse_call
from pipelines.agent.tools import TOOL_SPECS, EpisodeState, KGToolbox, ToolResult
from pipelines.config import Params
from tests.conftest import PROJECT_ROOT
from tests.tool_support import build_solar_project

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=list(HealthCheck))

NAMES = ["Io", "Jupiter", "Galileo Galilei", "Sun", "Pisa", "  jupiter ", "Ganymed", "Vulcan", ""]
QUESTIONS = ["Who discovered Io?", "", "Where was he born?", "Which moons orbit Jupiter?"]

# ----- strategies -------------------------------------------------------------------------------------------
HOSTILE_EXPRESSIONS = [
    "__import__('os').system('x')", "a.b()", 'node_info("x")', 'node_info(node_info("x"))', "lambda: 1",
    "(lambda x: x)(1)", 'f"{1+1}"', "f'{__import__(\"os\")}'", "[x for x in range(3)]", "{k: 1 for k in 'ab'}",
    "(x for x in [])", "globals()", "().__class__.__bases__[0].__subclasses__()", "1 if True else 2", "(x := 3)",
    "...", "b'bytes'", "1j", "1+2j", "-1", "+1", "~1", "not True", "1 + 2", "'a' 'b'", "'a' + 'b'", "{1, 2}",
    "set()", "(1,)", "()", "[]", "{}", "{'a': [1, {'b': None}]}", "0x10", "1_000", "1e309", "-1e309", "9" * 300,
    "None", "True", "False", "Ellipsis", "__builtins__", "breakpoint()", "exit()", "input()", "x", "x[0]",
    "'abc'[0]", "'%s' % 1", "'{}'.format(1)", "print", "open", "r'raw\\string'", "'''triple'''", "u'unicode'",
    "'\\x00'", "'\\N{BULLET}'", "'\\u2028'", "'\"quoted\"'", "\"'single'\"", "'“curly”'", "'🪐 Jupiter'",
    "[[[[[[1]]]]]]", "{'node_name': 'Io'}", "{[1]: 2}", "{{}}", "await x", "yield 1",
]
HOSTILE_TEXTS = [
    "node_info(", 'node_info("x"', "node_info('x)", ")))", "(((", '"' * 5, "'", "{", "}", '{"name": ',
    "\x00", "node_info(\x00)", 'node_info(node_name="a\x00b", graph_type="solar")', "\x00node_info()",
    "node_info(node_name='x'); import os", "node_info(node_name='x')\nimport os", "import os", "del x",
    "x = 1", "node_info(node_name='Io', graph_type='solar') or exec('1')", "@decorator", "#comment",
    "node_info() # comment", "\\", "\ufeffnode_info()", "node_info\u200b()", "ｎｏｄｅ_ｉｎｆｏ(node_name='Io', graph_type='solar')",
    "node_info(*['Io', 'solar'])", "node_info(**{'node_name': 'Io', 'graph_type': 'solar'})",
    "node_info(node_name='Io', node_name='Io', graph_type='solar')", "node_info('Io', 'solar', node_name='x')",
    "node_info(node_name='Io', graph_type='solar',)", "node_info(,)", "node_info()()", "node_info['x']",
    "node_info.__class__", "(node_info)('Io', 'solar')", "NODE_INFO('Io', 'solar')", "node_info ( 'Io' , 'solar' )",
    "__import__", "__import__('os')", "eval('1')", "exec('1')", "open('/etc/passwd').read()",
    "def f(): pass", "class A: pass", "if True: node_info('Io', 'solar')", "async def f(): pass",
    "node_info('Io', 'solar') if True else 0", "[node_info('Io', 'solar')]", "lambda: node_info('Io', 'solar')",
    "'node_info(\"Io\", \"solar\")'", "null", "true", "[]", '""', "0", "-0", "nan", "1e999",
    '{"name": null}', '{"name": 1, "arguments": {}}', '{"name": "node_info", "arguments": []}',
    '{"name": "node_info", "arguments": "not json"}', '{"name": "node_info", "arguments": "[1]"}',
    '{"name": "node_info", "arguments": {"node_name": null, "graph_type": "solar"}}',
    '{"name": "node_info", "arguments": {"node_name": "Io", "graph_type": "solar"}} trailing',
    '{"name": "node_info", "name": "search", "arguments": {}}', '{"arguments": {"node_name": "Io"}}',
    '{"name": ["node_info"], "arguments": {}}', '{"name": "node_info", "arguments": {"node_name": NaN}}',
    '{"name": "node_info", "arguments": {"node_name": Infinity, "graph_type": "solar"}}',
]
UNICODE_NAMES = st.text(st.characters(exclude_categories=("Cs",)) | st.sampled_from(
    ['"', "'", "\\", "\x00", "\n", "\t", "“", "”", "«", "»", "´", "\u200b", "\ufeff", "\u2028", "🪐"]), max_size=40)
LITERALS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | UNICODE_NAMES | st.sampled_from(NAMES),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
TOOL_NAMES = (st.sampled_from(list(TOOL_SPECS)) | st.sampled_from(
    ["foo", "__import__", "eval", "exec", "open", "print", "None", "True", "getattr", "node_info.x", "os.system"])
    | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True))
PARAM_NAMES = st.sampled_from(sorted({p.name for spec in TOOL_SPECS.values() for p in spec.params}
                                     | {"x", "name", "_", "__class__"}))
ARGUMENT_TEXTS = LITERALS.map(repr) | st.sampled_from(HOSTILE_EXPRESSIONS) | st.sampled_from(NAMES).map(json.dumps)


@st.composite
def python_calls(draw: st.DrawFn) -> str:
    """Calls in the python form, from well formed to hostile."""
    name = draw(TOOL_NAMES)
    positional = draw(st.lists(ARGUMENT_TEXTS, max_size=4))
    keywords = draw(st.lists(st.tuples(PARAM_NAMES, ARGUMENT_TEXTS), max_size=4))
    parts = positional + [f"{key}={value}" for key, value in keywords]
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(["*args", "**kwargs", "*['Io']",
                                                                              "**{'entity': 'Io'}"])))
    text = f"{name}({', '.join(parts)})"
    mutation = draw(st.sampled_from(["none", "none", "none", "drop_tail", "prefix", "suffix", "insert"]))
    if mutation == "drop_tail" and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif mutation == "prefix":
        text = draw(st.sampled_from(["", " ", "\n", "(", "[", "x.", "await ", "-", "\x00", "'"])) + text
    elif mutation == "suffix":
        text += draw(st.sampled_from(["", ")", "(", ".x", "[0]", "()", "; x", "\nimport os", "\x00", "'", " or 1"]))
    elif mutation == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["'", '"', "(", ")", "[", "]", "{", "}", "\\", "\x00", ",", "="])) + text[at:]
    return text


NESTED = st.tuples(st.integers(1, 3000), st.sampled_from([("(", ")"), ("[", "]"), ("{", "}"), ('{"a":', "}"),
                                                          ("[[", "]]"), ("-", ""), ("not ", ""), ("node_info(", ")")]),
                   st.booleans()).map(lambda t: ("node_info(node_name=" if t[2] else "")
                                      + t[1][0] * t[0] + "1" + t[1][1] * t[0] + (", graph_type='solar')" if t[2] else ""))
HUGE = st.tuples(st.integers(3950, 4050) | st.integers(0, 200_000), st.sampled_from(["x", "(", '"', "\x00", "é", " "]),
                 st.booleans()).map(lambda t: f'node_info(node_name="{t[1] * t[0]}", graph_type="solar")' if t[2]
                                    else t[1] * t[0])
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | UNICODE_NAMES,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=3), max_leaves=8)


@st.composite
def json_objects(draw: st.DrawFn) -> Any:
    """Values of the JSON form, right and wrong shapes."""
    shape = draw(st.sampled_from(["value", "name_value", "tool_args", "tool_args", "tool_args_string", "extra"]))
    if shape == "value":
        return draw(JSON_VALUES)
    if shape == "name_value":
        return {"name": draw(JSON_VALUES | TOOL_NAMES), "arguments": draw(JSON_VALUES)}
    arguments = draw(st.dictionaries(PARAM_NAMES, JSON_VALUES | st.sampled_from(NAMES + ["solar", "mars"]),
                                     max_size=4))
    if shape == "tool_args_string":
        return {"name": draw(TOOL_NAMES), "arguments": json.dumps(arguments) if draw(st.booleans())
                else draw(st.text(max_size=30))}
    data: dict[str, Any] = {"name": draw(TOOL_NAMES), "arguments": arguments}
    if shape == "extra":
        data[draw(st.text(max_size=8))] = draw(JSON_VALUES)
    return data


JSON_TEXTS = st.tuples(json_objects(), st.booleans()).map(lambda t: json.dumps(t[0], ensure_ascii=t[1]))
ANY_CALL_TEXT = (st.text(max_size=300) | python_calls() | JSON_TEXTS | st.sampled_from(HOSTILE_TEXTS)
                 | st.sampled_from(HOSTILE_EXPRESSIONS))

RELATIONS = ["orbits", "discovered by", "born in", " ORBITS ", "eats", ""]


@st.composite
def plausible_calls(draw: st.DrawFn) -> str:
    """Registered tools with well-typed arguments (so the handlers run), in either written form."""
    spec = draw(st.sampled_from(list(TOOL_SPECS.values())))
    arguments: dict[str, Any] = {}
    for param in spec.params:
        if param.kind == "boolean":
            if draw(st.booleans()):
                arguments[param.name] = draw(st.booleans())
        elif param.name == "graph_type":
            arguments[param.name] = draw(st.sampled_from(["solar", "solar", "solar", "mars", ""]) | UNICODE_NAMES)
        elif param.name == "relation":
            arguments[param.name] = draw(st.sampled_from(RELATIONS) | UNICODE_NAMES)
        else:
            arguments[param.name] = draw(st.sampled_from(NAMES) | UNICODE_NAMES)
    if draw(st.booleans()):
        return json.dumps({"name": spec.name, "arguments": arguments}, ensure_ascii=draw(st.booleans()))
    return f"{spec.name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


# valid calls, to check the canonical written forms
VALID_CALLS = st.one_of(
    st.builds(lambda n, g: ToolCall(name="node_info", arguments={"node_name": n, "graph_type": g}), UNICODE_NAMES,
              UNICODE_NAMES),
    st.builds(lambda e, r: ToolCall(name="get_tail_entities", arguments={"entity": e, "relation": r}), UNICODE_NAMES,
              UNICODE_NAMES),
    st.builds(lambda e, q, b: ToolCall(name="search", arguments={"entity": e, "question": q, "backtrack": b}),
              UNICODE_NAMES, UNICODE_NAMES, st.booleans()),
)


# ----- checks ---------------------------------------------------------------------------------------------
def has_surrogate(value: Any) -> bool:
    return isinstance(value, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)


def check_parsed(parsed: object, max_argument_chars: int = 1000) -> None:
    assert isinstance(parsed, ToolCall | ToolError), parsed
    if isinstance(parsed, ToolError):
        assert isinstance(parsed.type, ErrorType) and parsed.type != ErrorType.SERVER_ERROR
        assert parsed.render().startswith("<error>") and parsed.render().endswith("</error>")
        return
    spec = TOOL_SPECS[parsed.name]
    assert set(parsed.arguments) == {p.name for p in spec.params}
    for param in spec.params:
        value = parsed.arguments[param.name]
        assert type(value) is PYTHON_TYPES[param.kind]
        assert not isinstance(value, str) or len(value) <= max_argument_chars
    if not any(has_surrogate(v) for v in parsed.arguments.values()):  # surrogates: a known bug, test_tools.py
        for style in ("python", "json"):
            again = parse_call(format_call(parsed, style), TOOL_SPECS, max_call_chars=1_000_000,
                               max_argument_chars=max_argument_chars)
            assert again == parsed


def check_result(result: object) -> None:
    assert isinstance(result, ToolResult), result
    assert result.ok == (result.error_type is None)
    if not result.ok:
        assert result.content.startswith("<error>") and result.content.endswith("</error>")
    assert result.error_type != ErrorType.SERVER_ERROR, result  # a server error on any input is a bug
    if not any(has_surrogate(v) for v in result.arguments.values()):
        ToolResult.model_validate_json(result.model_dump_json())


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> KGToolbox:
    """The real toolbox: the solar KG and index, the real encoder."""
    params: Params = build_solar_project(tmp_path_factory.mktemp("fuzz") / "project")
    box = KGToolbox(params)
    box.load_all()
    box.call('entity_matcher(node_name="Io", graph_type="solar")')  # load the encoder once
    return box


class VocabularyEncoder:
    """The real encoder's vectors for a fixed vocabulary, a hash-seeded unit vector for any other text.

    Embedding one new text costs the real model tens of milliseconds (more on a loaded CPU); thousands of
    fuzzed names only need *some* vector, while names, relations and questions keep their real ones
    (so the index fallback and the relevance ranking still behave as in production)."""

    def __init__(self, real: Any, vocabulary: list[str]) -> None:
        self.known = dict(zip(vocabulary, real.encode(vocabulary), strict=True))
        self.dimension = next(iter(self.known.values())).shape[0]

    def encode(self, texts: list[str], **_: Any) -> np.ndarray:
        rows = []
        for text in texts:
            if text in self.known:
                rows.append(self.known[text])
                continue
            seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
            rows.append(vector / np.linalg.norm(vector))
        return np.stack(rows)


@pytest.fixture(scope="module")
def fast_toolbox(toolbox: KGToolbox) -> KGToolbox:
    graph = toolbox.graph("solar")
    vocabulary = sorted(set(graph.names) | set(graph.rel_keywords) | {n.strip() for n in NAMES} | set(QUESTIONS)
                        | {"Ganymed", "Titan!"})
    return KGToolbox(toolbox.params, encoder=VocabularyEncoder(toolbox.encoder, vocabulary))  # type: ignore[arg-type]


# ----- parse_call -----------------------------------------------------------------------------------------
@settings(FUZZ, max_examples=1200)
@given(st.text(max_size=400))
def test_parse_call_on_arbitrary_text(text: str) -> None:
    check_parsed(parse_call(text, TOOL_SPECS))


@settings(FUZZ, max_examples=1500)
@given(python_calls() | st.sampled_from(HOSTILE_TEXTS) | st.sampled_from(HOSTILE_EXPRESSIONS))
def test_parse_call_on_hostile_python_calls(text: str) -> None:
    check_parsed(parse_call(text, TOOL_SPECS))


@settings(FUZZ, max_examples=800)
@given(JSON_TEXTS)
def test_parse_call_on_json_of_any_shape(text: str) -> None:
    check_parsed(parse_call(text, TOOL_SPECS))


@settings(FUZZ, max_examples=200)
@given(NESTED | HUGE)
def test_parse_call_on_deep_nesting_and_huge_texts(text: str) -> None:
    check_parsed(parse_call(text, TOOL_SPECS))
    check_parsed(parse_call(text, TOOL_SPECS, max_call_chars=300_000, max_argument_chars=300_000), 300_000)


@settings(FUZZ, max_examples=400)
@given(VALID_CALLS)
def test_format_call_round_trips_any_valid_call(call: ToolCall) -> None:
    for style in ("python", "json"):
        text = format_call(call, style)
        again = parse_call(text, TOOL_SPECS, max_call_chars=10_000, max_argument_chars=10_000)
        assert again == call, (text, again)


@pytest.mark.parametrize("value", [None, 3, 1.5, b"node_info()", ["node_info"], {"name": "node_info"}, object()])
def test_parse_call_refuses_non_text(value: object) -> None:
    parsed = parse_call(value, TOOL_SPECS)
    assert isinstance(parsed, ToolError) and parsed.type == ErrorType.FORMAT_ERROR


# ----- KGToolbox.call -------------------------------------------------------------------------------------
@settings(FUZZ, max_examples=500)
@given(ANY_CALL_TEXT, st.sampled_from([None, None, "solar", "mars", ""]))
def test_toolbox_call_on_any_text(toolbox: KGToolbox, text: str, graph_type: str | None) -> None:
    check_result(toolbox.call(text, graph_type=graph_type))


@settings(FUZZ, max_examples=600)
@given(plausible_calls(), st.sampled_from([None, None, None, "solar", "mars"]))
def test_toolbox_call_on_well_typed_calls(fast_toolbox: KGToolbox, text: str, graph_type: str | None) -> None:
    result = fast_toolbox.call(text, graph_type=graph_type)
    check_result(result)
    assert result.name in TOOL_SPECS
    event(f"{result.name}: {result.error_type or 'ok'}")


@settings(FUZZ, max_examples=60)
@given(plausible_calls())
def test_toolbox_call_on_well_typed_calls_with_the_real_encoder(toolbox: KGToolbox, text: str) -> None:
    result = toolbox.call(text)
    check_result(result)
    assert result.name in TOOL_SPECS


@settings(FUZZ, max_examples=300)
@given(st.sampled_from(list(TOOL_SPECS)), st.dictionaries(PARAM_NAMES, LITERALS | st.sampled_from(NAMES), max_size=4),
       st.sampled_from([None, "solar", "mars", 3, "", "x" * 500]))
def test_toolbox_call_on_dicts_and_unknown_graphs(fast_toolbox: KGToolbox, name: str, arguments: dict,
                                                  graph: Any) -> None:
    toolbox = fast_toolbox
    call_graph = None
    if name in ("node_info", "entity_matcher"):
        arguments = {**arguments, "graph_type": graph}
    elif isinstance(graph, str):
        call_graph = graph
    check_result(toolbox.call({"name": name, "arguments": arguments}, graph_type=call_graph))
    check_result(toolbox.call({"name": name, "arguments": arguments, "junk": object()}))
    check_result(toolbox.call({"arguments": {"x": {1, 2}}}))  # not JSON-serialisable
    rendered = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    check_result(toolbox.call(f"{name}({rendered})"))


@settings(FUZZ, max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(NAMES + ["Galileo Galilei", "Io", "Titan", "Callisto"])
                          | UNICODE_NAMES, st.sampled_from(QUESTIONS)), max_size=12))
def test_search_episodes_survive_any_sequence_of_searches_and_backtracks(
        fast_toolbox: KGToolbox, steps: list[tuple[bool, str, str]]) -> None:
    toolbox = fast_toolbox
    episode = EpisodeState()
    for backtrack, entity, question in steps:
        result = toolbox.call({"name": "search", "arguments": {"entity": entity, "question": question,
                                                               "backtrack": backtrack}}, episode=episode)
        check_result(result)
        if backtrack and not result.ok:
            assert result.error_type == ErrorType.NO_RESULTS
        for frame in episode.path:
            assert 0 <= frame.next <= len(frame.candidates)


# ----- nothing is ever executed ---------------------------------------------------------------------------
_WATCH: dict[str, Any] = {"on": False, "events": []}
_SUSPICIOUS = ("exec", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
               "os.remove", "os.rename", "shutil.rmtree", "builtins.input", "ctypes.dlopen", "socket.connect")


def _audit(event: str, args: tuple) -> None:
    if not _WATCH["on"]:
        return
    if event in _SUSPICIOUS or (event == "open" and "pwned" in str(args[0] if args else "")):
        _WATCH["events"].append((event, repr(args)[:200]))


sys.addaudithook(_audit)  # audit hooks cannot be removed: this one only records while a test watches


def _payloads(target: Path) -> list[str]:
    path = repr(str(target))
    shell = f"touch {target}"
    return [
        f"open({path}, 'w')", f"__import__('pathlib').Path({path}).touch()", f"__import__('os').system({shell!r})",
        f"exec(\"open({path}, 'w')\")", f"eval(\"__import__('os').system({shell!r})\")",
        f"(lambda: open({path}, 'w'))()", f"[open({path}, 'w') for _ in [1]]", f"f'{{open({path}, \"w\")}}'",
        f"__import__('subprocess').run(['touch', {path}])", f"getattr(__import__('os'), 'system')({shell!r})",
        f"compile(\"open({path}, 'w')\", 'x', 'exec')", f"().__class__.__base__.__subclasses__() or open({path}, 'w')",
    ]


def _wrapped(payload: str) -> list[Any]:
    return [
        payload, f"node_info(node_name={payload}, graph_type='solar')", f"node_info({payload}, 'solar')",
        f"search(entity='Io', question='q', backtrack={payload})", f"node_info(node_name='Io', graph_type='solar', **{payload})",
        f"node_info(*{payload})", f"node_info(node_name='Io', graph_type='solar') or {payload}",
        f"{payload}; node_info('Io', 'solar')", f"node_info(node_name='Io', graph_type='solar')\n{payload}",
        f"node_info(node_name='Io', graph_type={payload})", f"{payload}(node_name='Io', graph_type='solar')",
        json.dumps({"name": payload, "arguments": {"node_name": payload, "graph_type": "solar"}}),
        json.dumps({"name": "node_info", "arguments": payload}),
        {"name": "node_info", "arguments": {"node_name": payload, "graph_type": "solar"}},
        {"name": payload, "arguments": {}},
    ]


def test_nothing_in_a_call_is_ever_executed(toolbox: KGToolbox, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    # the instrument works: an exec and an open of the target are recorded while watching
    _WATCH["on"] = True
    try:
        exec("1")  # noqa: S102 - checks the audit hook, on a constant
        open(target, "w").close()  # noqa: SIM115
    finally:
        _WATCH["on"] = False
    assert [event for event, _ in _WATCH["events"]] == ["exec", "open"]
    target.unlink()
    calls = [call for payload in _payloads(target) for call in _wrapped(payload)]
    for _ in range(2):  # the first pass also warms up any lazy import, so that the second sees no 'exec' at all
        _WATCH["events"].clear()
        _WATCH["on"] = True
        try:
            for call in calls:
                if isinstance(call, str):
                    check_parsed(parse_call(call, TOOL_SPECS))
                result = toolbox.call(call)
                assert isinstance(result, ToolResult)
                assert not result.ok or result.name in TOOL_SPECS
        finally:
            _WATCH["on"] = False
        assert not target.exists()
    assert _WATCH["events"] == []
    assert list(tmp_path.iterdir()) == []


def test_no_eval_or_exec_in_the_library_source() -> None:
    pattern = re.compile(r"(?<![\w.])(eval|exec)\s*\(")
    hits = []
    files = sorted((PROJECT_ROOT / "pipelines").rglob("*.py")) + sorted((PROJECT_ROOT / "dagster_project").rglob("*.py"))
    assert any(f.name == "calls.py" for f in files)
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if pattern.search(line):
                hits.append(f"{file.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}")
    assert hits == []
    calls_source = (PROJECT_ROOT / "pipelines" / "agent" / "calls.py").read_text(encoding="utf-8")
    assert "ast.literal_eval(" in calls_source and "compile(" not in calls_source
