"""The optional LLM judge of evaluation (the Omne-R1 paper's answer check for free-form answers): the
question, the gold answer(s) and the prediction go in, a verdict with its reasoning comes out.

Exact match stays the headline metric; the judge's accuracy is reported beside it, and each verdict is
kept on its trajectory so that a reader can audit it in the report.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from pipelines.agent.trajectory import Trajectory
from pipelines.config import LLMParams
from pipelines.eval.answers import exact_match
from pipelines.llm.base import ChatClient, ChatRequest
from pipelines.llm.structured import complete_json_many

JUDGE_SYSTEM = "You grade answers to questions about a knowledge graph. You reply with JSON only."


class JudgeSummary(BaseModel):
    accuracy: float  # share of episodes judged correct (EM-correct ones count as correct without asking)
    asked: int  # episodes sent to the judge (answered, not EM-correct)
    failed: int  # judge replies that were not the JSON asked for (counted as incorrect)


def judge_messages(question: str, golds: list[str], prediction: str) -> list[dict[str, str]]:
    content = "\n".join([
        f"Question: {question}",
        f"Gold answer(s): {'; '.join(golds)}",
        f"Predicted answer: {prediction}",
        "",
        "Does the predicted answer name the same entity (or the same set of entities) as the gold answer? "
        "Spelling variants, aliases and extra words around the right name count as correct; a different "
        "entity, a partial set or no answer does not.",
        'Reply with JSON only: {"reasoning": "<one or two sentences>", "verdict": true or false}.',
    ])
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": content}]


def _verdict(value: dict[str, Any]) -> None:
    if not isinstance(value.get("verdict"), bool):
        raise ValueError('"verdict" must be true or false')


def judge_answers(trajectories: list[Trajectory], client: ChatClient, llm: LLMParams, *,
                  progress: bool = False) -> JudgeSummary:
    """Ask the judge about every answered, not exactly matching episode; record verdicts on the trajectories."""

    pending = [t for t in trajectories if t.answer and not exact_match(t.answer, t.gold_answers)]
    requests = [ChatRequest(messages=judge_messages(t.question, t.gold_answers, t.answer or ""), temperature=0.0,
                            max_tokens=llm.max_tokens, json_mode=True, tag="eval.judge") for t in pending]
    results = complete_json_many(client, requests, repair_rounds=llm.json_repair_rounds, validate=_verdict,
                                 progress=progress, desc="judge") if requests else []
    failed = 0
    for trajectory, result in zip(pending, results, strict=True):
        if result.value is None:
            failed += 1
            trajectory.judge = {"verdict": False, "reasoning": f"no verdict: {result.error}"}
        else:
            trajectory.judge = {"verdict": bool(result.value["verdict"]),
                                "reasoning": str(result.value.get("reasoning", ""))}
    for trajectory in trajectories:
        if trajectory.judge is None:
            correct = bool(trajectory.answer) and exact_match(trajectory.answer, trajectory.gold_answers)
            trajectory.judge = {"verdict": correct, "reasoning": "exact match" if correct else "no answer"}
    right = sum(bool(t.judge and t.judge["verdict"]) for t in trajectories)
    return JudgeSummary(accuracy=round(right / len(trajectories), 4) if trajectories else 0.0, asked=len(pending),
                        failed=failed)
