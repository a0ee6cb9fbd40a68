"""The record of one agent episode (docs/architecture.md, "Data contracts"): what evaluation scores, what RL rewards
and what SFT data is built from. Messages use OpenAI chat roles; tool responses keep the role the
protocol gives them (the omne protocol sends them back as a user message) plus ``tool_calls``
entries that say what was called and whether it worked.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Finish = Literal["answer", "max_rounds", "max_tokens", "no_action", "repeated_call"]


class ToolCallRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    round: int  # 0-based round of the episode in which the call was made
    text: str  # the call as the model wrote it (inside the protocol's call tags)
    name: str | None = None  # parsed tool name (None when the call could not be parsed)
    arguments: dict = Field(default_factory=dict)
    ok: bool
    error_type: str | None = None  # calls.ErrorType value when ok is False
    response: str  # what the environment sent back (inside the protocol's response tags)
    latency_s: float = 0.0


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")
    qa_id: str
    domain: str
    question: str
    gold_answers: list[str]
    bucket: str | None = None  # "1-2" | "3+" for our QA pairs; None for external sets
    hops: int | None = None
    protocol: str  # omne | kg_r1 | search | a baseline's name
    mode: Literal["think", "no_think"] = "think"
    model: str = ""  # model identity (folder name + content hash, or endpoint model)
    messages: list[dict[str, str]]  # system, user, assistant, ... as the model saw them
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    answer: str | None = None  # the last <answer> block, whitespace-stripped (None: never answered)
    finish: Finish = "no_action"
    rounds: int = 0  # model turns taken
    generated_tokens: int = 0  # completion tokens summed over turns (the backend's tokenizer)
    prompt_tokens: int = 0  # prompt tokens summed over turns (so total = prompt + generated)
    latency_s: float = 0.0  # wall time of the episode
    turn_latency_s: list[float] = Field(default_factory=list)
    format_errors: list[str] = Field(default_factory=list)  # e.g. "no_action", "fake_tool_response"
    think_text: str = ""  # every <think> block of the episode joined (exploration metrics)
    correct: bool | None = None  # EM, filled in by evaluation
    judge: dict | None = None  # the optional LLM judge's {"verdict": bool, "reasoning": str}
    sample: int = 0  # index of the rollout for N-run union / repeats
    # answers the rollout engine sent back once because no tool response showed them (agent.unshown_answer_note)
    unshown_answers: list[str] = Field(default_factory=list)


def exact_name(name: str) -> re.Pattern[str]:
    """``name`` as written, case included, not inside a longer name (``mentions`` ignores case: a respelling in
    another case must count here)."""
    return re.compile(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])")


def shown_by_tools(answer: str | None, calls: list[ToolCallRecord]) -> bool:
    """``answer``, exactly as written (case included: EM is exact), is a whole name in one of ``calls``' successful
    responses: copied from what the tools showed, not retyped or made up."""
    answer = (answer or "").strip()
    if not answer:
        return False
    pattern = exact_name(answer)
    return any(c.ok and pattern.search(c.response or "") for c in calls)

