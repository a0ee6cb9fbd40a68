"""The baselines and the knowledge-graph context the non-agent ones put into the prompt.

``direct`` / ``cot`` answer from the question alone, ``tools`` is the base model with the protocol's
tools, ``retrieval`` (LightRAG-style) gets the entities nearest the question with their neighbourhoods,
``graph`` (EoG's graph-in-prompt) the triples around the question's start or topic entities as a
JSON list, and ``lightrag`` the context the lightrag-hku library retrieves (built apart, in
:mod:`pipelines.eval.lightrag_baseline`: it needs the evaluated model). The contexts live here, in one
module, for both question sources (a QA split and an external KGQA set), so the two baselines are built
the same way whatever the questions are; the graph walk (:func:`neighbourhood`) exists once.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Iterator, Sequence

from pipelines.agent.kg_view import DomainGraph
from pipelines.agent.tools import KGToolbox
from pipelines.qa.models import QAPair

BASELINES = ("direct", "cot", "tools", "retrieval", "graph", "lightrag")
NO_TOOL_BASELINES = tuple(b for b in BASELINES if b != "tools")  # one answer, no tool call (DirectProtocol styles)
GRAPH_HEADER = "Knowledge-graph triples (head, relation, tail):\n"
FACTS_HEADER = "Knowledge-graph facts:\n"
PAIR_GRAPH_HOPS = 2  # the graph baseline on a QA pair: its start entity's 2-hop neighbourhood


def neighbourhood(graph: DomainGraph, seeds: Iterable[int], *, hops: int | None = None,
                  within: Container[int] | None = None) -> Iterator[int]:
    """The relations a breadth-first walk from ``seeds`` meets, each once, nearest first.

    The walk expands the entities fewer than ``hops`` steps from the seeds (all it reaches when None),
    following relations either way, and only relations whose other end is ``within`` (when given).
    A generator, so a caller that needs only the first few relations stops the walk early.
    """
    frontier = list(dict.fromkeys(seeds))
    seen, met = set(frontier), set()
    level = 0
    while frontier and (hops is None or level < hops):
        reached = []
        for node in frontier:
            for relation in graph.incident(node):
                relation = int(relation)
                other = graph.other_end(relation, node)
                if relation in met or (within is not None and other not in within):
                    continue
                met.add(relation)
                yield relation
                if other not in seen:
                    seen.add(other)
                    reached.append(other)
        frontier = reached
        level += 1


def graph_context(graph: DomainGraph, seeds: Iterable[int], max_triples: int, *, hops: int | None = None,
                  within: Container[int] | None = None, first: Sequence[Sequence[str]] = ()) -> str:
    """EoG's graph-in-prompt: ``first`` (a question's own path), then the distinct triples of the
    :func:`neighbourhood` of ``seeds``, at most ``max_triples`` in all, sorted so that the path's own
    triples do not stand out by position."""
    triples = [list(t) for t in first]
    known = {tuple(t) for t in triples}
    for relation in neighbourhood(graph, seeds, hops=hops, within=within):
        if len(triples) >= max_triples:
            break
        triple = [graph.names[graph.rel_src[relation]], graph.rel_keywords[relation],
                  graph.names[graph.rel_dst[relation]]]
        if tuple(triple) not in known:
            known.add(tuple(triple))
            triples.append(triple)
    return GRAPH_HEADER + json.dumps(sorted(triples[:max_triples]), ensure_ascii=False)


def pair_graph_context(toolbox: KGToolbox, pair: QAPair, max_triples: int) -> str:
    """The graph baseline on a QA pair of a split: the question's own path, then its start entity's
    2-hop neighbourhood."""
    graph = toolbox.graph(pair.domain)
    start = graph.lookup(pair.start_entity)
    return graph_context(graph, [start] if start is not None else [], max_triples, hops=PAIR_GRAPH_HOPS,
                         first=[[e.src, e.keywords, e.dst] for e in pair.path_edges])


def scoped_graph_context(graph: DomainGraph, topics: Iterable[str], subgraph: Container[int],
                         max_triples: int) -> str:
    """The graph baseline on an external KGQA question: the triples inside its subgraph (the tools' scope),
    nearest its topic entities first, so the prompt shows no more of the KG than the tools would."""
    seeds = (graph.lookup(name) for name in topics)
    return graph_context(graph, (s for s in seeds if s is not None), max_triples, within=subgraph)


def retrieval_context(toolbox: KGToolbox, question: str, domain: str, top_k: int) -> str:
    """LightRAG-style single-shot retrieval: the ``top_k`` entities nearest the question, with their
    neighbourhoods as ``node_info`` shows them."""
    graph = toolbox.graph(domain)
    vector = toolbox._embed(question)  # noqa: SLF001 - the toolbox's own cached encoder
    ids = [i for i, _ in graph.nearest(vector, top_k)] if graph.vectors is not None else []
    facts = [toolbox.call(json.dumps({"name": "node_info", "arguments": {"node_name": graph.names[i],
                                                                       "graph_type": domain}})).content
             for i in ids]
    return FACTS_HEADER + "\n\n".join(facts)
