"""JSON replies, parsed strictly, with a repair round: small models and busy endpoints break JSON often
enough that one "that was not valid JSON because ..., reply with the object only" turn pays for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from pipelines.llm.base import ChatClient, ChatReply, ChatRequest, LLMError, json_object

Validate = Callable[[dict[str, Any]], None]  # raises ValueError saying what is wrong (e.g. a missing key)


class JsonResult(BaseModel):
    """The outcome of one JSON request: ``value`` when a round produced a valid object, else ``error``."""

    value: dict[str, Any] | None = None
    error: str = ""  # why there is no value (the last round's problem); "" when value is set
    raw: list[str] = Field(default_factory=list)  # the reply text of every round, in order
    rounds: int = 0  # requests this result took (1 = valid first time; 0 = never answered)

    @property
    def ok(self) -> bool:
        return self.value is not None


def check_reply(reply: ChatReply, validate: Validate | None = None) -> dict[str, Any]:
    """The reply's JSON object, or ``ValueError`` saying what is wrong, in words the model can act on."""
    try:
        value = json_object(reply.text)
    except ValueError as exc:
        if reply.finish_reason == "length":
            raise ValueError(f"{exc}; the reply was cut off at the token limit, so keep it shorter") from None
        raise
    if validate is not None:
        validate(value)
    return value


def repair_messages(request: ChatRequest, bad_reply: str, problem: str) -> list[dict[str, str]]:
    """The conversation so far plus the bad reply and what was wrong with it."""
    return [*request.messages, {"role": "assistant", "content": bad_reply},
            {"role": "user", "content": f"Your reply could not be used: {problem}. Reply again with the "
                                        f"corrected JSON object only, with no other text before or after it."}]


def complete_json_many(client: ChatClient, requests: list[ChatRequest], *, repair_rounds: int = 1,
                       validate: Validate | None = None, progress: bool = False,
                       desc: str = "llm") -> list[JsonResult]:
    """Send every request; parse each reply as one JSON object (and ``validate`` it); send the bad
    ones back with what was wrong, up to ``repair_rounds`` times, all of a round in one batch.

    Never raises for a bad reply or a failed request: those come back as ``JsonResult.error``.
    """
    results = [JsonResult() for _ in requests]
    current = list(requests)  # the request each pending item sends this round
    pending = list(range(len(requests)))
    for round_index in range(repair_rounds + 1):
        if not pending:
            break
        replies = client.complete_many([current[i] for i in pending], progress=progress,
                                       desc=desc if round_index == 0 else f"{desc} repair {round_index}")
        still_bad: list[int] = []
        for index, reply in zip(pending, replies, strict=True):
            result = results[index]
            if isinstance(reply, LLMError):
                result.error = f"request failed: {reply}"
                continue  # the client already retried; a repair turn cannot fix a dead endpoint
            result.rounds += 1
            result.raw.append(reply.text)
            try:
                result.value, result.error = check_reply(reply, validate), ""
            except ValueError as exc:
                result.error = str(exc)
                current[index] = current[index].model_copy(
                    update={"messages": repair_messages(current[index], reply.text, result.error)})
                still_bad.append(index)
        pending = still_bad
    return results
