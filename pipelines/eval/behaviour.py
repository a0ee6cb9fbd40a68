"""Behaviour statistics of agent trajectories (docs/evaluation.md, "Behaviour"): format errors, repeated and
invalid calls, calls to an unknown or another graph, tool distributions, finish reasons, retrieval rate, answers
copied from the tools, how each episode ended, and EoG's exploration metrics.

Apart from the answer scores of :mod:`pipelines.eval.metrics`: these read an episode's tool calls, not only its
answer, and RL uses some of them on its own (graph_name_misses in rollouts, the repeat key in rewards).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from difflib import SequenceMatcher

import numpy as np

from pipelines.agent.trajectory import Trajectory, exact_name, shown_by_tools
from pipelines.eval.answers import _SPACES, exact_match
from pipelines.eval.schema import Behaviour
from pipelines.eval.triples import Triple, _triple_alternatives, exploration_scores, gold_triples
from pipelines.kg.model import normalise_key
from pipelines.qa.models import GoldPath
from pipelines.text.names import mentions

__all__ = ["OUTCOMES", "answer_from_tools", "behaviour", "episode_outcome", "graph_name_misses"]


def _call_key(name: str | None, arguments: dict, text: str) -> tuple:
    if name is None:  # unparsed: the same text written again is the same call
        return ("", _SPACES.sub(" ", text.strip()))
    args = tuple(sorted((k, normalise_key(v) if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))
                        for k, v in arguments.items()))
    return (name, args)


def _repeats(t: Trajectory) -> int:
    """Calls that repeat an earlier call of the episode (same tool, same arguments up to case/space)."""
    seen: set[tuple] = set()
    repeats = 0
    for call in t.tool_calls:
        key = _call_key(call.name, call.arguments, call.text)
        if key in seen:
            repeats += 1
        seen.add(key)
    return repeats


def _retrieved(t: Trajectory) -> bool:
    """A gold answer is named in a successful tool response (errors only echo what the model typed)."""
    golds = [g for g in t.gold_answers if g.strip()]
    return any(mentions(call.response, g) for call in t.tool_calls if call.ok for g in golds)


def graph_name_misses(t: Trajectory) -> tuple[int, int]:
    """(calls to a graph no server knows, calls to a known graph other than the question's): the two ways a
    model that memorised its training graphs' names fails on a graph it never saw by name."""
    unknown = sum(1 for c in t.tool_calls if c.error_type == "unknown_graph")
    other = sum(1 for c in t.tool_calls if c.error_type != "unknown_graph"
                and isinstance(c.arguments.get("graph_type"), str) and c.arguments["graph_type"] != t.domain)
    return unknown, other


def answer_from_tools(t: Trajectory) -> bool:
    """The episode's answer, exactly as written, is a whole name in one of its successful tool responses."""
    return shown_by_tools(t.answer, t.tool_calls)


def answer_in_last_thought(t: Trajectory) -> bool:
    """The answer, exactly as written, is a whole name in the thought just before it: the thinking names what it
    answers, so an answer that differs was respelled on the way into ``<answer>`` (a tokenizer that splits the
    name otherwise there; TEMPLATE_VERSION 9, CHANGELOG.md)."""
    answer = (t.answer or "").strip()
    last = next((m.get("content", "") for m in reversed(t.messages) if m.get("role") == "assistant"), "")
    thought = re.findall(r"<think>(.*?)</think>", last, flags=re.S)
    if not answer or not thought:
        return False
    return exact_name(answer).search(thought[-1]) is not None


OUTCOMES = ("correct", "stopped_on_path", "misspelled_answer", "start_not_reached", "no_answer", "wrong_answer")
_MISSPELLED_RATIO = 0.8  # difflib similarity of a wrong answer to a gold answer above which it counts as retyped


def episode_outcome(t: Trajectory, gold: GoldPath | None) -> str | None:
    """How an episode ended, the first of ``OUTCOMES`` that holds: right; answered an entity of a
    validated gold path short of its end (stopped early, e.g. the country of a "capital of the country"
    question); a near miss of a gold answer's spelling; never called a tool successfully on a path's start
    entity (a retyped or wrong start name); no answer; another wrong answer. None without validated paths
    (nothing to compare with) — what stage-2 training needs to fix differs by outcome."""
    paths = [p.nodes for p in (gold.paths if gold else []) if p.valid]
    if not paths:
        return None
    if exact_match(t.answer, t.gold_answers):
        return "correct"
    answer = normalise_key(t.answer or "")
    if answer and any(answer == normalise_key(node) for nodes in paths for node in nodes[:-1]):
        return "stopped_on_path"
    if answer and any(_similarity(answer, normalise_key(g)) >= _MISSPELLED_RATIO for g in t.gold_answers):
        return "misspelled_answer"
    starts = {normalise_key(nodes[0]) for nodes in paths}
    named = {normalise_key(v) for c in t.tool_calls if c.ok for v in c.arguments.values() if isinstance(v, str)}
    if t.tool_calls and not starts & named:
        return "start_not_reached"
    return "no_answer" if not answer else "wrong_answer"


def _similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b).ratio()


def _tool_label(name: str | None) -> str:
    return name if name is not None else "invalid"


def behaviour(trajs: Sequence[Trajectory], gold_paths: Mapping[str, GoldPath] | None = None,
              kg_triples: Mapping[str, Iterable[Triple]] | None = None) -> Behaviour:
    """How the agent behaved: format errors, repeated / invalid calls, tool distributions, finish
    reasons, retrieval rate, and EoG's exploration metrics.

    ``gold_paths`` (qa_id -> GoldPath) enables the exploration metrics, averaged over episodes whose
    question has validated gold triples. ``kg_triples`` (qa_id -> triples) adds KG triples the model
    saw outside tool responses (e.g. the graph-in-prompt baseline's subgraph) to those parsed from
    its tool responses.
    """
    n = len(trajs)
    if n == 0:
        return Behaviour()
    format_types: Counter[str] = Counter()
    first_tool: Counter[str] = Counter()
    sequences: Counter[str] = Counter()
    histogram: Counter[int] = Counter()
    finish: Counter[str] = Counter()
    repeated = invalid = retrieved = unknown_graph = other_graph = 0
    answered = from_tools = in_thought = missing_entity = noted = fixed = 0
    coverage: list[float] = []
    efficiency_values: list[float] = []
    outcomes: Counter[str] = Counter()
    for t in trajs:
        format_types.update(t.format_errors)
        names = [_tool_label(c.name) for c in t.tool_calls]
        first_tool[names[0] if names else "none"] += 1
        sequences[">".join(names) if names else "none"] += 1
        histogram[len(names)] += 1
        finish[t.finish] += 1
        repeated += _repeats(t)
        invalid += sum(1 for c in t.tool_calls if not c.ok)
        unknown, other = graph_name_misses(t)
        unknown_graph += unknown
        other_graph += other
        retrieved += _retrieved(t)
        shown = answer_from_tools(t)  # False without an answer
        if (t.answer or "").strip():
            answered += 1
            from_tools += shown
            in_thought += answer_in_last_thought(t)
        missing_entity += sum(1 for c in t.tool_calls if c.error_type == "entity_not_found")
        if t.unshown_answers:
            noted += 1
            fixed += shown
        gold_path = gold_paths.get(t.qa_id) if gold_paths else None
        if (outcome := episode_outcome(t, gold_path)) is not None:
            outcomes[outcome] += 1
        gold = gold_triples(gold_path)
        if gold:
            seen = [alt for c in t.tool_calls if c.ok for alt in _triple_alternatives(c.response)]
            if kg_triples and t.qa_id in kg_triples:
                seen += [(tuple(x),) for x in kg_triples[t.qa_id]]
            cov, eff = exploration_scores(t.think_text, gold, seen)
            coverage.append(cov)
            efficiency_values.append(eff)
    top = sorted(sequences.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
    return Behaviour(
        format_errors_per_sample=sum(format_types.values()) / n,
        format_error_types=dict(sorted(format_types.items())),
        repeated_tool_calls_per_sample=repeated / n,
        invalid_tool_calls_per_sample=invalid / n,
        unknown_graph_calls_per_sample=unknown_graph / n,
        other_graph_calls_per_sample=other_graph / n,
        unknown_graph_call_share=unknown_graph / max(1, sum(len(t.tool_calls) for t in trajs)),
        first_tool=dict(sorted(first_tool.items(), key=lambda kv: (-kv[1], kv[0]))),
        tool_sequences=dict(top),
        tool_calls_histogram={str(k): histogram[k] for k in sorted(histogram)},
        finish=dict(sorted(finish.items())),
        retrieval_rate=retrieved / n,
        answered_episodes=answered,
        answer_from_tools_share=from_tools / answered if answered else 0.0,
        answer_in_last_thought_share=in_thought / answered if answered else 0.0,
        missing_entity_calls_per_sample=missing_entity / n,
        missing_entity_call_share=missing_entity / max(1, sum(len(t.tool_calls) for t in trajs)),
        repeated_call_finish_share=finish["repeated_call"] / n,
        unshown_answer_notes=noted,
        unshown_answer_fixed=fixed,
        gold_triple_coverage=float(np.mean(coverage)) if coverage else 0.0,
        exploration_efficiency=float(np.mean(efficiency_values)) if efficiency_values else 0.0,
        exploration_episodes=len(coverage),
        outcomes={k: outcomes[k] for k in OUTCOMES if outcomes[k]},
    )
