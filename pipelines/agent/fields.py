"""Checks of a tool request's own fields (``graph_type``, ``episode_id``, the question, the scope), which come from
a client, not from the model's text: a bad one is a typed tool error, never an exception or broken JSON.

Apart from the tools (:mod:`pipelines.agent.tools`) because the tool server checks a request with them before any
tool runs, and the toolbox checks an in-process request the same way.
"""

from __future__ import annotations

from pydantic import ValidationError

from pipelines.agent.calls import ErrorType, ToolError, is_valid_unicode, printable
from pipelines.agent.scope import Scope

REQUEST_FIELD_MAX_CHARS = 200  # graph_type and episode_id are names, never text
QUESTION_MAX_CHARS = 4000  # an episode's question (a request field): longer is refused with a typed error


def _error(kind: ErrorType, message: str) -> ToolError:
    return ToolError(type=kind, message=printable(message))


def field_error(name: str, value: object, max_chars: int = REQUEST_FIELD_MAX_CHARS) -> ToolError | None:
    """Why a request-level text field (graph_type, episode_id) cannot be used, as a typed tool error:
    such a field comes from a client, not from the model's text, yet must never raise or reach JSON."""
    if value is None:
        return None
    if not isinstance(value, str):
        return _error(ErrorType.INVALID_ARGUMENT, f"{name} must be a string or null, got {type(value).__name__}")
    if len(value) > max_chars:
        return _error(ErrorType.INVALID_ARGUMENT, f"{name} is longer than {max_chars} characters")
    if not is_valid_unicode(value):
        return _error(ErrorType.INVALID_ARGUMENT, f"{name} is not valid Unicode (it contains a lone surrogate)")
    return None


def checked_scope(scope: object, max_bytes: int) -> Scope | ToolError | None:
    """``scope`` as a Scope (a dict is validated), or why it is refused. Its size is bounded in bytes,
    not only in seeds: an episode keeps its scope, so a client could otherwise grow server memory at will."""
    if scope is None:
        return None
    if not isinstance(scope, Scope):
        try:
            scope = Scope.model_validate(scope)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'scope'}: {e['msg']}" for e in exc.errors()[:3])
            return _error(ErrorType.INVALID_ARGUMENT, f"invalid scope: {problems}")
    size = 0
    for seed in scope.seeds:
        if not is_valid_unicode(seed):
            return _error(ErrorType.INVALID_ARGUMENT,
                          "a scope seed is not valid Unicode (it contains a lone surrogate)")
        size += len(seed.encode("utf-8"))
    if size > max_bytes:
        return _error(ErrorType.INVALID_ARGUMENT, f"the scope's seeds total {size} bytes, more than the "
                      f"{max_bytes} allowed (tools.scope_max_bytes)")
    return scope
