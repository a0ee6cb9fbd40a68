"""Tool calls as the model writes them: parse, validate and format, without ever executing text.

Two written forms are accepted: python-call style, ``node_info(node_name="X", graph_type="cs")``
(parsed with ``ast``: one call of a registered name, literal arguments, positional or keyword),
and the JSON form ``{"name": ..., "arguments": {...}}``. Every failure is a typed ``ToolError``
value, so a bad call becomes an error message for the model and never an exception in a rollout.
"""

from __future__ import annotations

import ast
import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class ErrorType(StrEnum):
    """KG-R1's typed errors, plus the ones a multi-graph, free-text setting adds."""

    ENTITY_NOT_FOUND = "entity_not_found"
    RELATION_NOT_FOUND = "relation_not_found"
    NO_RESULTS = "no_results"
    MISSING_FIELDS = "missing_required_fields"
    WRONG_ARGUMENT_COUNT = "wrong_argument_count"
    INVALID_ACTION = "invalid_action"
    INVALID_ARGUMENT = "invalid_argument"
    FORMAT_ERROR = "format_error"
    UNKNOWN_GRAPH = "unknown_graph"
    SERVER_ERROR = "server_error"
    REPEATED_CALL = "repeated_call"  # the rollout engine's, not a tool's: the same call as the one just made


class ToolError(BaseModel):
    model_config = ConfigDict(frozen=True)
    type: ErrorType
    message: str

    def render(self) -> str:
        return f"<error>{self.message}</error>"


PYTHON_TYPES = {"string": str, "boolean": bool, "integer": int}


class Param(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    kind: Literal["string", "boolean", "integer"] = "string"
    description: str = ""
    required: bool = True
    default: Any = None

    def json_type(self) -> str:
        return self.kind


class ToolSpec(BaseModel):
    """A tool's name, ordered parameters and description: what the parser binds and the prompt shows."""

    model_config = ConfigDict(frozen=True)
    name: str
    description: str
    params: tuple[Param, ...]

    def json_schema(self) -> dict[str, Any]:
        """OpenAI function schema, as the Omne-R1 paper's prompt lists tools inside <tools></tools>."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object",
                           "properties": {p.name: {"type": p.json_type(), "description": p.description}
                                          for p in self.params},
                           "required": [p.name for p in self.params if p.required]}}}

    def signature(self) -> str:
        """One prompt line, ``name(a, b): description``: the schema's content in a tenth of its tokens."""
        return f"{self.name}({', '.join(p.name for p in self.params)}): {self.description}"


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    arguments: dict[str, Any]


_PARSE_FAILURES = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError)


def is_valid_unicode(text: str) -> bool:
    """False for strings with lone surrogates, which cannot be encoded, embedded or sent as JSON."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """``text`` with anything that cannot be encoded as UTF-8 replaced, safe to echo in a message."""
    return text if is_valid_unicode(text) else text.encode("utf-8", "replace").decode("utf-8")


def _error(kind: ErrorType, message: str) -> ToolError:
    return ToolError(type=kind, message=printable(message))


def _python_form(text: str) -> tuple[str, list[Any], dict[str, Any]] | ToolError:
    try:
        tree = ast.parse(text, mode="eval")
    except _PARSE_FAILURES as exc:
        return _error(ErrorType.FORMAT_ERROR, f"could not parse the call: {type(exc).__name__}; write one call "
                      'like node_info(node_name="X", graph_type="domain")')
    call = tree.body
    if not isinstance(call, ast.Call):
        return _error(ErrorType.FORMAT_ERROR, "expected a single function call, "
                      'like node_info(node_name="X", graph_type="domain")')
    if not isinstance(call.func, ast.Name):
        return _error(ErrorType.FORMAT_ERROR, "the called tool must be a plain name (no attributes or expressions)")
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    try:
        for node in call.args:
            if isinstance(node, ast.Starred):
                return _error(ErrorType.FORMAT_ERROR, "*arguments are not allowed")
            positional.append(ast.literal_eval(node))
        for keyword in call.keywords:
            if keyword.arg is None:
                return _error(ErrorType.FORMAT_ERROR, "**arguments are not allowed")
            if keyword.arg in keywords:
                return _error(ErrorType.FORMAT_ERROR, f"argument '{keyword.arg}' given twice")
            keywords[keyword.arg] = ast.literal_eval(keyword.value)
    except _PARSE_FAILURES:
        return _error(ErrorType.INVALID_ARGUMENT, "arguments must be literal values such as \"text\", 3 or True")
    return call.func.id, positional, keywords


def _json_form(text: str) -> tuple[str, list[Any], dict[str, Any]] | ToolError:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return _error(ErrorType.FORMAT_ERROR, f"invalid JSON tool call: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return _error(ErrorType.FORMAT_ERROR, 'a JSON tool call is {"name": "...", "arguments": {...}}')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI-style: arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return _error(ErrorType.FORMAT_ERROR, "'arguments' is a string that is not a JSON object")
    if not isinstance(arguments, dict):
        return _error(ErrorType.FORMAT_ERROR, "'arguments' must be a JSON object")
    return data["name"], [], arguments


def bind_call(name: str, positional: list[Any], keywords: dict[str, Any], specs: dict[str, ToolSpec],
              max_argument_chars: int) -> ToolCall | ToolError:
    """Match arguments to a tool's parameters, with the typed error a model can act on."""
    spec = specs.get(name) if isinstance(name, str) else None
    if spec is None:
        return _error(ErrorType.INVALID_ACTION,
                      f'invalid action "{str(name)[:80]}"; valid actions: {", ".join(specs)}')
    names = [p.name for p in spec.params]
    if len(positional) > len(names):
        return _error(ErrorType.WRONG_ARGUMENT_COUNT, f"{name} takes at most {len(names)} argument(s) "
                      f"({', '.join(names)}), got {len(positional) + len(keywords)}")
    bound = dict(zip(names, positional, strict=False))
    for key, value in keywords.items():
        if not isinstance(key, str) or key not in names:
            return _error(ErrorType.WRONG_ARGUMENT_COUNT,
                          f"{name} got an unexpected argument '{str(key)[:80]}'; its arguments are: {', '.join(names)}")
        if key in bound:
            return _error(ErrorType.FORMAT_ERROR, f"{name} got argument '{key}' twice")
        bound[key] = value
    missing = [p.name for p in spec.params if p.required and p.name not in bound]
    if missing:
        return _error(ErrorType.MISSING_FIELDS, f"{name} is missing required argument(s): {', '.join(missing)}")
    for param in spec.params:
        if param.name not in bound:
            bound[param.name] = param.default
            continue
        value = bound[param.name]
        if type(value) is not PYTHON_TYPES[param.kind]:  # bool is not an int here, and no coercion
            return _error(ErrorType.INVALID_ARGUMENT, f"{name}: argument '{param.name}' must be a "
                          f"{param.json_type()}, got {type(value).__name__}")
        if isinstance(value, str) and len(value) > max_argument_chars:
            return _error(ErrorType.INVALID_ARGUMENT, f"{name}: argument '{param.name}' is longer than "
                          f"{max_argument_chars} characters")
        if isinstance(value, str) and not is_valid_unicode(value):
            return _error(ErrorType.INVALID_ARGUMENT, f"{name}: argument '{param.name}' is not valid Unicode "
                          "(it contains a lone surrogate)")
    return ToolCall(name=name, arguments=bound)


def parse_call(text: object, specs: dict[str, ToolSpec], *, max_call_chars: int = 4000,
               max_argument_chars: int = 1000) -> ToolCall | ToolError:
    """Parse one written tool call (python-call or JSON form) against the registered tools."""
    if not isinstance(text, str):
        return _error(ErrorType.FORMAT_ERROR, "the tool call must be text")
    text = text.strip()
    if not text:
        return _error(ErrorType.FORMAT_ERROR, "empty tool call")
    if len(text) > max_call_chars:
        return _error(ErrorType.FORMAT_ERROR, f"the tool call is longer than {max_call_chars} characters")
    parsed = _json_form(text) if text.startswith("{") else _python_form(text)
    if isinstance(parsed, ToolError):
        return parsed
    return bind_call(*parsed, specs, max_argument_chars)


def format_call(call: ToolCall, style: str = "python") -> str:
    """The canonical written form of a call (what SFT trajectories contain)."""
    if style == "json":
        return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False) if isinstance(v, str) else repr(v)}"
                          for k, v in call.arguments.items())
    return f"{call.name}({arguments})"
