"""Paths in a KG as QA synthesis needs them: random walks for questions, the relation chain a
question follows (and whether it leads to one answer only), and every simple path between two
entities for gold paths.

Paths ignore edge direction for connectivity (a question may walk a relation either way) but keep
it for meaning: a step is a relation plus the direction it is walked in.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import csgraph

from pipelines.kg.model import KnowledgeGraph, normalise_key
from pipelines.qa.models import PathEdge
from pipelines.text.names import generic_words, usable_name, written_name
from pipelines.text.phrases import Phrasebook, PhraseLexicon


@dataclass(frozen=True)
class Step:
    relation: int  # row of the relations table
    forward: bool  # walked src -> dst (True) or dst -> src (False)


class RelationGraph:
    """Incident relations of every entity, for walks, chain following and path enumeration."""

    def __init__(self, kg: KnowledgeGraph, lexicon: PhraseLexicon | None = None, *,
                 shared_labels: bool = True) -> None:
        """``lexicon``: the domain's phrases file (pipelines/text/phrases.py); ``shared_labels``: whether the
        relation labels name relations shared by many edges (a triples source) rather than per-edge keyword
        lists (LightRAG graphs, text extraction), which are phrased from each edge's own sentence."""
        self.kg = kg
        self.lexicon = lexicon or PhraseLexicon()
        self.shared_labels = shared_labels
        self.names: list[str] = kg.entities["name"].to_list()
        self.types: list[str] = kg.entities["type"].to_list()
        self.descriptions: list[str] = kg.entities["description"].to_list()
        self.key_to_id = dict(zip(kg.entities["key"].to_list(), range(kg.num_entities), strict=True))
        self.src = kg.relations["src"].to_numpy().astype(np.int64)
        self.dst = kg.relations["dst"].to_numpy().astype(np.int64)
        self.keywords: list[str] = kg.relations["keywords"].to_list()
        self.rel_descriptions: list[str] = kg.relations["description"].to_list()
        self.adjacency = kg.adjacency()
        self.usable = [usable_name(name) for name in self.names]  # may be named in a question
        self._written: dict[int, str] = {}  # written_name, per node asked for
        n = kg.num_entities
        # incident[v] = [(relation, other end, forward)], in relation order (deterministic walks)
        self.incident: list[list[tuple[int, int, bool]]] = [[] for _ in range(n)]
        for rel, (s, d) in enumerate(zip(self.src.tolist(), self.dst.tolist(), strict=True)):
            if s == d:
                continue
            self.incident[s].append((rel, d, True))
            self.incident[d].append((rel, s, False))

    @cached_property
    def phrasebook(self) -> Phrasebook:
        """How questions say each relation: the lexicon's phrases, else the rules'."""
        return Phrasebook(self.names, self.types, self.src.tolist(), self.dst.tolist(), self.keywords,
                          self.rel_descriptions, self.lexicon, shared_labels=self.shared_labels)

    @cached_property
    def generic_words(self) -> frozenset[str]:
        """Words that never give an entity away in this graph (the leak rules' exceptions)."""
        return generic_words(self.names, self.phrasebook.words())

    def written_name(self, node: int) -> str:
        """How a question names ``node``: as stored in a graph of shared labels (a triples export keeps its names'
        case); in a LightRAG or text graph an upper-case name as its descriptions write it (``written_name``)."""
        name = self.names[node]
        if self.shared_labels:
            return name
        if node not in self._written:
            texts = [self.descriptions[node], *(self.rel_descriptions[r] for r, _, _ in self.incident[node])]
            self._written[node] = written_name(name, texts)
        return self._written[node]

    def phraseable(self, relation: int) -> bool:
        return self.phrasebook.relation(relation) is not None

    def entity_id(self, name: str) -> int | None:
        return self.key_to_id.get(normalise_key(name))

    def other_end(self, step: Step) -> int:
        return int(self.dst[step.relation] if step.forward else self.src[step.relation])

    def path_nodes(self, start: int, steps: list[Step]) -> list[int]:
        nodes = [start]
        for step in steps:
            nodes.append(self.other_end(step))
        return nodes

    def path_edges(self, steps: list[Step]) -> list[PathEdge]:
        return [PathEdge(src=self.names[self.src[s.relation]], keywords=self.keywords[s.relation],
                         dst=self.names[self.dst[s.relation]]) for s in steps]

    def follow(self, start: int, chain: list[tuple[str, bool]], cap: int = 10_000) -> set[int]:
        """Entities reached from ``start`` by walking the relation chain ((keywords, forward), ...).

        The question "what is the <r2> of the <r1> of X" has a single answer only when this set has
        one element; the walk stops early (returning the large set) once it exceeds ``cap``.
        """
        frontier = {start}
        for keyword, forward in chain:
            reached: set[int] = set()
            for node in frontier:
                for rel, other, fwd in self.incident[node]:
                    if fwd == forward and self.keywords[rel] == keyword:
                        reached.add(other)
            frontier = reached
            if not frontier or len(frontier) > cap:
                break
        return frontier

    def chain(self, steps: list[Step]) -> list[tuple[str, bool]]:
        return [(self.keywords[s.relation], s.forward) for s in steps]

    def random_walk(self, start: int, hops: int, rng: np.random.Generator,
                    allowed: set[int] | None = None) -> list[Step] | None:
        """A simple path of exactly ``hops`` steps from ``start`` inside ``allowed`` (None: anywhere), through
        entities a question can name and relations it can phrase only."""
        if not self.usable[start]:
            return None
        visited, node, steps = {start}, start, []
        for _ in range(hops):
            options = [(rel, other, fwd) for rel, other, fwd in self.incident[node]
                       if other not in visited and (allowed is None or other in allowed) and self.usable[other]
                       and self.phraseable(rel)]
            if not options:
                return None
            rel, other, fwd = options[int(rng.integers(len(options)))]
            steps.append(Step(rel, fwd))
            visited.add(other)
            node = other
        return steps

    def steps_between(self, a: int, b: int) -> list[Step]:
        """Every relation joining ``a`` and ``b``, as steps walked from ``a``."""
        return [Step(rel, fwd) for rel, other, fwd in self.incident[a] if other == b]

    def hop_distances(self, target: int, limit: int) -> np.ndarray:
        """Undirected hop distance of every entity to ``target`` (inf beyond ``limit``)."""
        return csgraph.dijkstra(self.adjacency, directed=False, unweighted=True, indices=target,
                                     limit=limit)

    def simple_paths(self, start: int, target: int, max_hops: int, limit: int) -> tuple[list[list[int]], bool]:
        """Every simple node path start -> target of at most ``max_hops`` hops, shortest first.

        Paths are enumerated length by length with a depth-first search that only enters nodes
        from which the target is still reachable in the hops left (distances from one BFS of the
        target), so no dead branch is explored; it stops once more than ``limit`` paths are found.
        Returns at most ``limit`` paths and whether more existed.
        """
        distance = self.hop_distances(target, max_hops)
        if start == target or not np.isfinite(distance[start]):
            return [], False
        neighbours = {}
        found: list[list[int]] = []
        path, on_path = [start], {start}

        def extend(node: int, left: int) -> None:
            if len(found) > limit:
                return
            if left == 0:
                if node == target:
                    found.append(list(path))
                return
            if node == target:
                return
            if node not in neighbours:
                neighbours[node] = sorted({o for _, o, _ in self.incident[node]})
            for other in neighbours[node]:
                if other in on_path or distance[other] > left - 1:
                    continue
                path.append(other)
                on_path.add(other)
                extend(other, left - 1)
                path.pop()
                on_path.discard(other)

        for length in range(int(distance[start]), max_hops + 1):
            extend(start, length)
            if len(found) > limit:
                break
        return found[:limit], len(found) > limit
