"""What one episode may see of a KG: its :class:`Scope` (the entities within a few hops of seed entities), and that
scope resolved on a graph (:class:`Allowed`, the sorted ids inside it).

Apart from the tools (:mod:`pipelines.agent.tools`) because the request checks (:mod:`pipelines.agent.fields`), the
clients and the external KGQA sets (:mod:`pipelines.eval.kgqa`) use it without running a tool.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pipelines.agent.kg_view import DomainGraph


class Scope(BaseModel):
    """What one episode may see: the entities within ``hops`` of ``seeds`` (relations followed both ways).

    External KGQA sets (WebQSP, CWQ, ...) are answered on a per-question subgraph around the topic
    entities (2 hops, as the seed systems do); with a scope every tool hides what lies outside it:
    those entities are "not found", their relations are not listed, entity_matcher ranks only
    entities inside. Seeds are entity names (normalised look-up); ones the KG lacks are ignored.
    """

    model_config = ConfigDict(frozen=True, strict=True)  # no coercion: "2", 2.0 or true are not hops, 3 is no seed
    seeds: list[str] = Field(max_length=100)
    hops: int = Field(2, ge=0, le=4)


# bytes of Python objects around the data an episode holds, measured with tracemalloc (tests/test_tool_memory.py)
SCOPE_OVERHEAD = 500  # the Scope object around its list of seeds
ALLOWED_OVERHEAD = 400  # ResolvedScope, Allowed, the array's header


@dataclass(frozen=True, eq=False)
class Allowed:
    """A scope resolved on one graph: the sorted ids of the entities inside it, 4 bytes an entity (a Python set of
    them held ~60 bytes an entity: 1,000 scopes of a few thousand entities were over 100 MB)."""

    ids: np.ndarray  # sorted, unique

    def __contains__(self, entity: object) -> bool:
        at = int(np.searchsorted(self.ids, entity))
        return at < self.ids.size and int(self.ids[at]) == entity

    def mask(self, entities: np.ndarray) -> np.ndarray:
        """Which of ``entities`` are inside (a boolean array of their shape)."""
        if not self.ids.size:
            return np.zeros(np.shape(entities), dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, entities), self.ids.size - 1)
        return self.ids[at] == entities

    def nbytes(self) -> int:
        return self.ids.nbytes + ALLOWED_OVERHEAD


@dataclass(frozen=True, eq=False)
class ResolvedScope:
    """An episode's scope resolved on the graph it last called (the graph's name and version, the Scope object)."""

    graph: str
    signature: str
    scope: Scope
    allowed: Allowed


def scope_nbytes(scope: Scope) -> int:
    """The memory a Scope holds: the object, its list and its seed strings (a client sent them: nothing shares them)."""
    return SCOPE_OVERHEAD + sys.getsizeof(scope.seeds) + sum(sys.getsizeof(seed) for seed in scope.seeds)


def subgraph_entities(graph: DomainGraph, seeds: Iterable[int], hops: int) -> frozenset[int]:
    """The entity ids within ``hops`` of ``seeds`` in ``graph``, relations followed in both directions."""
    seen = set(seeds)
    frontier = list(seen)
    for _ in range(hops):
        reached = []
        for node in frontier:
            for relation in graph.incident(node):
                other = graph.other_end(int(relation), node)
                if other not in seen:
                    seen.add(other)
                    reached.append(other)
        if not reached:
            break
        frontier = reached
    return frozenset(seen)


def scope_ids(graph: DomainGraph, seeds: Iterable[int], hops: int) -> np.ndarray:
    """``subgraph_entities`` as a sorted array of ids (int32 when the graph allows), breadth first over the CSR
    arrays: no Python object per entity, so resolving a scope of thousands of entities leaves nothing behind."""
    inside = np.zeros(graph.num_entities, dtype=bool)
    frontier = np.unique(np.fromiter(seeds, dtype=np.int64))
    inside[frontier] = True
    for _ in range(hops):
        if not frontier.size:
            break
        reached = np.concatenate([_neighbours(graph.out_ptr, graph.out_idx, graph.rel_dst, frontier),
                                  _neighbours(graph.in_ptr, graph.in_idx, graph.rel_src, frontier)])
        frontier = np.unique(reached[~inside[reached]])
        inside[frontier] = True
    ids = np.flatnonzero(inside)
    return ids.astype(np.int32) if graph.num_entities < 2**31 else ids


def _neighbours(pointers: np.ndarray, relations: np.ndarray, ends: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The other ends of every relation of ``nodes`` in one CSR direction (``ends``: rel_dst for the outgoing ones)."""
    starts, lengths = pointers[nodes], pointers[nodes + 1] - pointers[nodes]
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    # position k of node j's run is starts[j] + k: each run's first position, repeated, plus a running count
    first = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return ends[relations[first + np.arange(total)]]
