"""Gold paths (EoG): every simple start->answer path of a QA pair within ``gold_max_hops``, each with a
verdict on whether it follows the question's intent. High recall first (all paths, not only the
shortest), precision from the verdict: offline, the rules say the generator's own path is valid and
another path is valid when it walks the same relation chain; with ``gold_verify: llm`` the LLM decides.
Only valid paths feed path rewards and exploration metrics downstream.
"""

from __future__ import annotations

import itertools
from typing import Any

from tqdm.auto import tqdm

from pipelines.config import LLMParams, QAParams
from pipelines.llm.base import ChatClient, ChatRequest
from pipelines.llm.structured import complete_json_many
from pipelines.qa import prompts
from pipelines.qa.models import GoldPath, GoldPathItem, PathEdge, QAPair
from pipelines.qa.paths import RelationGraph, Step

MAX_EDGE_VARIANTS = 8  # parallel relations between two nodes multiply paths; keep a few per node path


def _edge_paths(graph: RelationGraph, nodes: list[int]) -> list[list[Step]]:
    options = [graph.steps_between(a, b) for a, b in zip(nodes, nodes[1:], strict=False)]
    return list(itertools.islice(itertools.product(*options), MAX_EDGE_VARIANTS))


def _chain(edges: list[PathEdge]) -> list[str]:
    """The relation chain of a path: its relation labels in order. Direction is left out on purpose:
    symmetric relations (borders) are stored once in one direction, and LightRAG graphs are undirected."""
    return [e.keywords.casefold() for e in edges]


def candidate_paths(graph: RelationGraph, pair: QAPair, qa: QAParams) -> tuple[list[GoldPathItem], bool]:
    """All simple paths start -> answer (unverified), the generator's own path first."""
    start, answer = graph.entity_id(pair.start_entity), graph.entity_id(pair.answer)
    own = GoldPathItem(nodes=pair.path, edges=pair.path_edges, valid=True, reason="the generator's path")
    if start is None or answer is None:
        return [own], False
    node_paths, truncated = graph.simple_paths(start, answer, qa.gold_max_hops, qa.gold_max_paths)
    items, seen = [own], {(tuple(pair.path), tuple(pair.path_edges))}
    for nodes in node_paths:
        names = [graph.names[n] for n in nodes]
        for steps in _edge_paths(graph, nodes):
            edges = graph.path_edges(list(steps))
            key = (tuple(names), tuple(edges))
            if key in seen:
                continue
            seen.add(key)
            items.append(GoldPathItem(nodes=names, edges=edges, valid=False))
            if len(items) >= qa.gold_max_paths:
                return items, True
    return items, truncated


def verify_by_rules(pair: QAPair, items: list[GoldPathItem]) -> None:
    """The offline verdict: a path is valid when it walks the question's relation chain (same labels,
    same order), which is how another bridge entity can satisfy the same question."""
    wanted = _chain(pair.path_edges)
    for item in items[1:]:
        same = _chain(item.edges) == wanted
        item.valid = same
        item.reason = "same relation chain as the question's path" if same else "a different relation chain"


def _verdict(value: dict[str, Any]) -> None:
    if not isinstance(value.get("valid"), bool):
        raise ValueError('"valid" must be true or false')


def verify_by_llm(pairs: list[QAPair], candidates: list[list[GoldPathItem]], client: ChatClient, llm: LLMParams,
                  progress: bool = True) -> None:
    """EoG's verification: the LLM judges each non-generator path against the question's intent."""

    jobs = [(item, pair) for pair, items in zip(pairs, candidates, strict=True) for item in items[1:]]
    requests = [ChatRequest(messages=prompts.gold_path_messages(pair.question, pair.answer,
                                                                [(e.src, e.keywords, e.dst) for e in item.edges]),
                            temperature=0.0, max_tokens=llm.max_tokens, json_mode=True, tag="qa.gold")
                for item, pair in jobs]
    results = complete_json_many(client, requests, repair_rounds=llm.json_repair_rounds, validate=_verdict,
                                 progress=progress, desc="gold paths")
    for (item, _), result in zip(jobs, results, strict=True):
        if result.value is None:
            item.valid, item.reason = False, f"no verdict: {result.error}"
        else:
            item.valid, item.reason = bool(result.value["valid"]), str(result.value.get("reason", ""))


def gold_paths(graph: RelationGraph, pairs: list[QAPair], qa: QAParams, *, client: ChatClient | None = None,
               llm: LLMParams | None = None, progress: bool = True) -> list[GoldPath]:
    candidates, truncated = [], []
    for pair in tqdm(pairs, desc="gold paths", unit="qa", disable=not progress, leave=False):
        items, more = candidate_paths(graph, pair, qa)
        candidates.append(items)
        truncated.append(more)
    if qa.gold_verify == "llm":
        if client is None or llm is None:
            raise ValueError("gold_verify: llm needs an LLM client")
        verify_by_llm(pairs, candidates, client, llm, progress)
    else:
        for pair, items in zip(pairs, candidates, strict=True):
            verify_by_rules(pair, items)
    return [GoldPath(qa_id=pair.id, domain=pair.domain, paths=items, truncated=more)
            for pair, items, more in zip(pairs, candidates, truncated, strict=True)]
