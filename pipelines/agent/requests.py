"""A tool call request as clients send it and the tool server (pipelines.agent.server) reads it: one call and the
fields of its episode. Kept apart from the FastAPI app so that the in-process clients, the rollouts and the KGQA
evaluation build requests without importing the web framework."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pipelines.agent.calls import ErrorType, ToolError
from pipelines.agent.fields import QUESTION_MAX_CHARS, REQUEST_FIELD_MAX_CHARS
from pipelines.agent.scope import Scope


def lenient(schema: dict[str, Any]) -> Any:
    """A request field documented by ``schema`` but accepted as any JSON value, so that a wrong one becomes a typed
    tool error for that call (as in-process) rather than a 422 for the whole request or batch."""
    return Annotated[Any, WithJsonSchema({"anyOf": [schema, {"type": "null"}]})]


def lenient_text(max_chars: int) -> Any:
    """A request field typed as text (at most ``max_chars``) in the schema, accepted as anything (``lenient``)."""
    return lenient({"type": "string", "maxLength": max_chars})


NameField = lenient_text(REQUEST_FIELD_MAX_CHARS)
QuestionField = lenient_text(QUESTION_MAX_CHARS)
CallField = lenient({"anyOf": [{"type": "string"}, {"type": "object"}]})
ScopeField = lenient(Scope.model_json_schema())


class CallRequest(BaseModel):
    """One call and the fields of its episode. Any JSON value is accepted for each field, and any JSON value for the
    request itself: what cannot be used is that call's typed tool error (``refusal``), never a 422 of the batch."""

    model_config = ConfigDict(json_schema_extra={"required": ["call"]})
    call: CallField = Field(None, description='Written call, e.g. node_info(node_name="X", graph_type="d"), '
                            'or {"name": ..., "arguments": {...}}')
    graph_type: NameField = Field(None, description="The episode's graph, for tools without a graph_type argument.")
    episode_id: NameField = Field(None, description="Keeps per-episode tool state (search backtracking) across "
                                  "calls; end it with DELETE /v1/episodes/{episode_id} to free that state.")
    scope: ScopeField = Field(None, description="Restrict the episode's tools to the entities within `hops` of "
                              "`seeds` (external KGQA sets); kept by the episode for its later calls.")
    question: QuestionField = Field(
        None, description="The question the episode answers; kept by the episode for its later calls. With "
        "tools.node_info_order: question, node_info lists the relations closest to it first.")
    _not_an_object: str | None = PrivateAttr(None)  # the JSON type of a request that was not an object

    @model_validator(mode="wrap")
    @classmethod
    def _any_json(cls, data: Any, handler: ModelWrapValidatorHandler[CallRequest]) -> CallRequest:
        if isinstance(data, dict | cls):
            return handler(data)
        if isinstance(data, bytes | bytearray):  # a body FastAPI did not parse: not sent as JSON
            raise PydanticCustomError("not_json", "send the request body as JSON (content-type: application/json)")
        request = handler({})
        request._not_an_object = _json_type(data)
        return request

    def refusal(self) -> ToolError | None:
        """Why this request is not a call at all (a batch item or body that is not a JSON object), else None."""
        if self._not_an_object is None:
            return None
        return ToolError(type=ErrorType.INVALID_ARGUMENT, message='a call request must be a JSON object '
                         f'{{"call": ..., "graph_type": ..., ...}}, got {self._not_an_object}')


def _json_type(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
