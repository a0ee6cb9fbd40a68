"""``sft_data.thinking: llm``: the template conversations' thinking rewritten by the LLM endpoint (``params.llm``).

The template thinking (``remaining_question``) is deterministic: every conversation reasons in the same words. With
``llm`` each template conversation's thoughts go to the LLM as a draft, with the calls and the question, and come
back in its own words (cached by the LLM client's disk cache: a rebuild costs no tokens). A reply is used only if it
has one thought per gpt turn, no protocol tags, and no thought before the last names the final answer (the agent
cannot know it before the last tool response); otherwise the conversation keeps its template thinking, counted by
reason in the manifest (``metadata.llm_thinking``).
"""

from __future__ import annotations

import re
from typing import Any

from pipelines.llm.base import ChatClient, ChatRequest
from pipelines.llm.structured import complete_json_many
from pipelines.text.names import mentions

THINK = re.compile(r"<think>(.*?)</think>", re.S)
TAGS = re.compile(r"</?(think|tool_call|tool_response|answer)>")

SYSTEM = ("You write the private reasoning of an agent that answers a question by calling knowledge-graph tools. "
          "Reply with one JSON object only.")


def thinking_request(record: Any, llm: Any) -> ChatRequest:
    """Ask for the conversation's thoughts in other words: one per gpt turn, each written before that turn's action."""
    gpt = [t["value"] for t in record.conversations if t["from"] == "gpt"]
    steps = [f"{i + 1}. draft thought: {THINK.search(v).group(1).strip()}\n   then the agent writes: "  # type: ignore[union-attr]
             f"{v.split('</think>', 1)[1].strip()}" for i, v in enumerate(gpt)]
    prompt = (f"Question: {record.question}\n\nThe agent's {len(gpt)} turns, each a thought then an action:\n"
              + "\n".join(steps)
              + f"\n\nRewrite each draft thought in your own words, as the agent thinking before its action: keep "
                f"every fact it uses, add none. The agent learns the answer only from the last tool response, so "
                f"no thought but the last may name the answer ({record.golden_answer}). Reply as "
                f'{{"thoughts": [{len(gpt)} strings, in order]}}.')
    return ChatRequest(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                       temperature=llm.temperature, max_tokens=llm.max_tokens, json_mode=True, tag="sft.thinking")


def _thoughts_field(value: dict[str, Any]) -> None:
    thoughts = value.get("thoughts")
    if not isinstance(thoughts, list) or not thoughts or not all(isinstance(t, str) and t.strip() for t in thoughts):
        raise ValueError('"thoughts" must be a list of non-empty strings')
    if any(TAGS.search(t) for t in thoughts):
        raise ValueError("a thought holds a <think>, <tool_call>, <tool_response> or <answer> tag")


def thoughts_problem(thoughts: list[str], record: Any) -> str | None:
    """Why these thoughts cannot replace the record's (None when they can)."""
    turns = sum(t["from"] == "gpt" for t in record.conversations)
    if len(thoughts) != turns:
        return "wrong_count"
    if any(mentions(t, record.golden_answer) for t in thoughts[:-1]) and not mentions(record.question,
                                                                                        record.golden_answer):
        return "states_answer_early"
    return None


def with_thoughts(record: Any, thoughts: list[str]) -> Any:
    """The record with each gpt turn's thinking replaced, in order (actions and observations unchanged)."""
    written = iter(thoughts)
    turns = [{**t, "value": THINK.sub(lambda _: f"<think>{next(written).strip()}</think>", t["value"], count=1)}
             if t["from"] == "gpt" else t for t in record.conversations]
    return record.model_copy(update={"conversations": turns})


def llm_thinking(records: list[Any], client: ChatClient, llm: Any, *, progress: bool = True
                 ) -> tuple[list[Any], dict[str, Any]]:
    """The template records with the LLM's thinking where it passes ``thoughts_problem`` (the others as they were);
    the counts: rewritten, and kept as templates by reason (``bad_reply``, ``wrong_count``, ``states_answer_early``)."""

    template = [i for i, r in enumerate(records) if r.source == "template"]
    results = complete_json_many(client, [thinking_request(records[i], llm) for i in template],
                                 repair_rounds=llm.json_repair_rounds, validate=_thoughts_field, progress=progress,
                                 desc="sft thinking")
    out, kept = list(records), {}
    for index, result in zip(template, results, strict=True):
        problem = "bad_reply" if result.value is None else thoughts_problem(result.value["thoughts"], records[index])
        if problem is None:
            out[index] = with_thoughts(records[index], result.value["thoughts"])  # type: ignore[index]
        else:
            kept[problem] = kept.get(problem, 0) + 1
    return out, {"model": getattr(client, "model", ""), "rewritten": len(template) - sum(kept.values()),
                 "template_kept": dict(sorted(kept.items()))}

