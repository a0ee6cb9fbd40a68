"""Agent protocols: the tags, prompts and turn parsing of each seed system, so that one rollout
engine serves them all (docs/architecture.md, "The agent protocol").

- ``omne`` (Omne-R1): numbered rules and the tools' JSON schemas in the system prompt; each round
  ``<think>…</think>`` then ``<tool_call>node_info(...)</tool_call>`` or ``<answer>…</answer>``; tool
  results come back as a user message in ``<tool_response>…</tool_response>``.
- ``kg_r1`` (seed 003): ``<kg-query>get_tail_relations("X")</kg-query>`` -> ``<information>…</information>``,
  at most H queries, answers as a list.
- ``search`` (seeds 001/002): ``<search>entity</search>`` inside the reasoning; generation stops, the
  environment injects ``<searched_triples>…</searched_triples>`` and the same reasoning continues.
- baselines: one round, no tools (direct, CoT, retrieval context, graph in the prompt, LightRAG's context).

Generation stops at the end of a call, so the model cannot write past it; text in which the model
imitates a tool response is cut off there and never executed, counted or rewarded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal

from pipelines.agent.calls import ToolSpec

Mode = Literal["think", "no_think"]
SpecStyle = Literal["json", "signatures"]
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # the reasoning span of a turn (what the think weight scales)
NO_THINK_PREFIX = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n"
# The version of the system prompts' text: part of the fingerprints of what is built from or scored with them
# (SFT conversations, evaluation reports, RL models), so that changing a prompt rebuilds them. Bump it with any
# change to a system_prompt below (or to the tool specs they list, or to the text the tools answer with).
PROMPT_VERSION = 9  # 2: omne's call example names no real graph (it was graph_type="chemistry"), only placeholders;
# 3: the tools listed as JSON schemas or as one-line signatures (tools.prompt_specs, in the fingerprints too);
# 4: node_info writes each neighbour's type after its name, "Russia [territory]" (tools.neighbor_types);
# 5: omne's rules in one paragraph, not a numbered list, and shorter tool descriptions; entity_matcher lists names
# without descriptions (tools.matcher_descriptions); 6: node_info's question order ranks each kind of relation,
# read as a phrase with the entity and the other end's type, by the clause of the question the walk is at;
# 7: omne's rules in three sentences (~135 tokens with the tools, was ~200) and node_info's relation lines read from
# the entity (tools.node_info_lines: from_entity), "-[in chapter]-> B", without its name on every line; 8: node_info's
# Description line only with tools.node_info_descriptions (off in the quick profile), its spec "type and relations";
# 9: a merged keyword list shown as its gist (at most four) and a call repeating the last one answered with a note


@dataclass
class TurnAction:
    """What a model turn asks for: a tool call, a final answer, or nothing usable."""

    kind: Literal["tool_call", "answer", "none"]
    text: str  # the turn as kept in the conversation (cut at a fake tool response)
    call: str = ""  # the call text inside the call tags
    answer: str = ""  # the answer text, whitespace-stripped
    think: str = ""  # the think blocks of this turn
    errors: list[str] = field(default_factory=list)


def _blocks(text: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.S)


def _think_text(text: str) -> tuple[str, list[str]]:
    """The turn's think blocks; an opened and never closed <think> keeps the rest as thinking."""
    errors = []
    closed = _blocks(text, "think")
    tail = text.rsplit("</think>", 1)[-1] if "</think>" in text else text
    if "<think>" in tail:
        errors.append("unterminated_think")
        closed.append(tail.split("<think>", 1)[1])
    return "\n".join(part.strip() for part in closed), errors


class Protocol:
    """Base of the protocols: subclasses say their tags, their prompts and how a tool result returns."""

    name = "protocol"
    call_tag = "tool_call"
    response_tag = "tool_response"
    fake_markers: tuple[str, ...] = ("<tool_response>",)
    uses_tools = True
    inline_responses = False  # search: the response is injected into the same assistant message

    def __init__(self, tools: list[ToolSpec], *, max_rounds: int, mode: Mode = "think",
                 specs: SpecStyle = "json") -> None:
        self.tools = tools
        self.max_rounds = max_rounds
        self.mode = mode
        self.specs = specs  # how the system prompt lists the tools (tools.prompt_specs)

    def tools_listing(self) -> str:
        """The tools as the system prompt lists them inside <tools></tools>: JSON schemas (the papers') or one
        signature line each (fewer tokens for a small model's context)."""
        if self.specs == "signatures":
            return "\n".join(spec.signature() for spec in self.tools)
        return tool_schemas(self.tools)

    @property
    def stop(self) -> list[str]:
        return [f"</{self.call_tag}>", "</answer>"]

    def system_prompt(self) -> str:
        raise NotImplementedError

    def user_prompt(self, question: str, graph_type: str, topic_entities: list[str] | None = None) -> str:
        topic = f"\nTopic entities: {', '.join(topic_entities)}" if topic_entities else ""
        return f"Knowledge graph: {graph_type}\nQuestion: {question}{topic}"

    def assistant_prefix(self) -> str:
        """Text put before the model's first generated token of each turn (no-think mode)."""
        return NO_THINK_PREFIX if self.mode == "no_think" else ""

    def response_message(self, content: str) -> str:
        return f"<{self.response_tag}>\n{content}\n</{self.response_tag}>"

    def parse(self, generated: str) -> TurnAction:
        """Read one turn: cut at an imitated tool response, then take the first complete call or answer."""
        text, errors = generated, []
        cut = min((text.find(m) for m in self.fake_markers if m in text), default=-1)
        if cut >= 0:
            text, errors = text[:cut], ["fake_tool_response"]
        think, think_errors = _think_text(text)
        errors += think_errors
        call = re.search(rf"<{self.call_tag}>(.*?)</{self.call_tag}>", text, flags=re.S)
        answer = re.search(r"<answer>(.*?)</answer>", text, flags=re.S)
        if call and (not answer or call.start() < answer.start()):
            if len(_blocks(text, self.call_tag)) > 1:
                errors.append("several_calls")
            if self.mode == "think" and not think and self.name == "omne":
                errors.append("call_without_think")
            return TurnAction("tool_call", text[:call.end()], call=call.group(1).strip(), think=think, errors=errors)
        if answer:
            value = answer.group(1).strip()
            if not value:
                errors.append("empty_answer")
            return TurnAction("answer", text[:answer.end()], answer=value, think=think, errors=errors)
        errors.append("no_action")
        return TurnAction("none", text, think=think, errors=errors)


def tool_schemas(tools: list[ToolSpec]) -> str:
    """The tools' OpenAI function schemas, one JSON line each (the papers' prompt listing, ShareGPT's ``tools``)."""
    return "\n".join(json.dumps(spec.json_schema(), ensure_ascii=False) for spec in tools)


class OmneProtocol(Protocol):
    name = "omne"

    def system_prompt(self) -> str:
        """The rules in three sentences, then the tools: a 135M model reads every token of it in every conversation
        it trains on and every round it generates (~135 tokens with the tools as signatures; a numbered list of six
        rules took ~290, one paragraph of them ~200). What the tags hold, the SFT conversations teach."""
        rules = ("Answer the question with the tools of its knowledge graph. Think inside <think> </think>, then call "
                 'one tool, e.g. <tool_call>node_info(node_name="<entity>", graph_type="<graph>")</tool_call>, or '
                 "give an entity's name inside <answer> </answer>. Find the question's entity with entity_matcher, "
                 "then follow relations with node_info.")
        return f"{rules}\n<tools>\n{self.tools_listing()}\n</tools>"


class KGR1Protocol(Protocol):
    name = "kg_r1"
    call_tag = "kg-query"
    response_tag = "information"
    fake_markers = ("<information>",)

    def system_prompt(self) -> str:
        names = ", ".join(spec.name for spec in self.tools)
        return (
            "Answer the question by querying the knowledge graph. Reason inside <think> </think>. To query, "
            'write one action inside <kg-query> </kg-query>, e.g. <kg-query>get_tail_relations("Iron")</kg-query>; '
            "the result comes back inside <information> </information>. "
            f"You can query knowledge up to {self.max_rounds - 1} times. Available actions: {names}.\n"
            f"<tools>\n{self.tools_listing()}\n</tools>\n"
            'When you know the answer, give it as a list inside <answer> </answer>, e.g. <answer>["A", "B"]</answer>.'
        )


class SearchProtocol(Protocol):
    name = "search"
    call_tag = "search"
    response_tag = "searched_triples"
    fake_markers = ("<searched_triples>",)
    inline_responses = True

    def system_prompt(self) -> str:
        return (
            "Answer the question by reasoning over a knowledge graph. Reason inside <think> </think>. Whenever "
            "you need facts about an entity, write <search>the entity name</search> inside your reasoning: the "
            "matching triples are inserted as <searched_triples> </searched_triples> and you continue reasoning. "
            "Write <search>backtrack</search> to return to the previous entity and take its next candidate. "
            "Finish with the answer inside <answer> </answer>."
        )

    def search_call(self, text: str, question: str) -> str:
        """The search tool call for ``<search>text</search>`` (the question guides relation selection)."""
        target = text.strip()
        if target.casefold() == "backtrack":
            return json.dumps({"name": "search", "arguments": {"entity": "", "question": question, "backtrack": True}})
        return json.dumps({"name": "search", "arguments": {"entity": target, "question": question}})


class DirectProtocol(Protocol):
    """Baselines without tools: one round, the answer in <answer> tags (optionally after a context)."""

    name = "direct"
    uses_tools = False

    def __init__(self, *, mode: Mode = "think", style: str = "direct") -> None:
        super().__init__([], max_rounds=1, mode=mode)
        self.style = style
        self.name = style

    @property
    def stop(self) -> list[str]:
        return ["</answer>"]

    def system_prompt(self) -> str:
        how = {
            "direct": "Answer the question with the name of the entity only.",
            "cot": "Think step by step inside <think> </think>, then answer with the name of the entity only.",
            "retrieval": "Use the knowledge-graph facts given with the question. Answer with the name of the "
                         "entity only.",
            "graph": "The question's knowledge-graph neighbourhood is given as a JSON list of triples. Reason "
                     "over it, then answer with the name of the entity only.",
            "lightrag": "Use the knowledge-graph context retrieved for the question (entities and relationships). "
                        "Answer with the name of the entity only.",
        }[self.style]
        think = " Reason inside <think> </think> first." if self.mode == "think" and self.style != "cot" else ""
        return f"{how}{think} Write the answer inside <answer> </answer>."


PROTOCOLS = {"omne": OmneProtocol, "kg_r1": KGR1Protocol, "search": SearchProtocol}
