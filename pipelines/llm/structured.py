"""JSON replies, parsed strictly, with a repair round: small models and busy endpoints break JSON often
enough that one "that was not valid JSON because ..., reply with the object only" turn pays for itself.

Only replies that pass the check are kept by a cache: ``complete_json_many`` tells the client its verdict
on each reply through ``on_reply`` (``False``: not the JSON object asked for), so a disk cache neither
stores a bad reply nor replays one stored earlier (it drops it and asks again).
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


CHECK_ERRORS = (ValueError, TypeError, LookupError, AttributeError, RecursionError)
"""What a ``validate`` may raise on a value of an unexpected shape (a validator written for the happy path):
all of them mean "this reply is not usable", never an exception out of ``complete_json_many``."""


def check_reply(reply: ChatReply, validate: Validate | None = None) -> dict[str, Any]:
    """The reply's JSON object, or ``ValueError`` saying what is wrong, in words the model can act on."""
    try:
        value = json_object(reply.text)
    except ValueError as exc:
        if reply.finish_reason == "length":
            raise ValueError(f"{exc}; the reply was cut off at the token limit, so keep it shorter") from None
        raise
    if validate is not None:
        try:
            validate(value)
        except ValueError:
            raise
        except CHECK_ERRORS as exc:
            raise ValueError(f"the JSON object does not have the fields asked for ({type(exc).__name__}: "
                             f"{str(exc)[:200]})") from None
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

    Never raises for a bad reply or a failed request: those come back as ``JsonResult.error``. Each reply is
    checked as it arrives, and the verdict returned to the client (``on_reply``), so that a cache keeps only
    the replies that passed (``pipelines.llm.base.OnReply``).
    """
    results = [JsonResult() for _ in requests]
    current = list(requests)  # the request each pending item sends this round
    pending = list(range(len(requests)))
    checked: dict[int, tuple[ChatReply, dict[str, Any] | None, str]] = {}  # position in a round -> last verdict

    def vet(position: int, reply: ChatReply) -> bool:
        value, problem = _checked(reply, validate)
        checked[position] = (reply, value, problem)
        return value is not None

    for round_index in range(repair_rounds + 1):
        if not pending:
            break
        checked.clear()
        replies = client.complete_many([current[i] for i in pending], progress=progress, on_reply=vet,
                                       desc=desc if round_index == 0 else f"{desc} repair {round_index}")
        still_bad: list[int] = []
        for position, (index, reply) in enumerate(zip(pending, replies, strict=True)):
            result = results[index]
            if isinstance(reply, LLMError):
                result.error = f"request failed: {reply}"
                continue  # the client already retried; a repair turn cannot fix a dead endpoint
            result.rounds += 1
            result.raw.append(reply.text)
            seen = checked.get(position)
            value, problem = seen[1:] if seen is not None and seen[0] is reply else _checked(reply, validate)
            result.value, result.error = value, problem
            if value is None:
                current[index] = current[index].model_copy(
                    update={"messages": repair_messages(current[index], reply.text, problem)})
                still_bad.append(index)
        pending = still_bad
    return results


def _checked(reply: ChatReply, validate: Validate | None) -> tuple[dict[str, Any] | None, str]:
    """(the reply's checked JSON object, "") or (None, what is wrong with it)."""
    try:
        return check_reply(reply, validate), ""
    except ValueError as exc:
        return None, str(exc) or "the reply could not be used"
