"""The KG tools the agent calls, over every loaded domain, with the seed systems' signatures and outputs.

- Omne-R1: ``entity_matcher(node_name, graph_type)``, ``node_info(node_name, graph_type)``.
- KG-R1 (seed 003): ``get_head_relations / get_tail_relations(entity)``,
  ``get_head_entities / get_tail_entities(entity, relation)``: flat comma-separated lists.
- KG-Reasoner / KG-Hopper (seeds 001/002): ``search(entity, question, backtrack=False)``: the triples
  of the entity's predicates most relevant to the question, with per-episode backtracking.

Tools without a ``graph_type`` argument act on the episode's graph (given with the call). A
``KGToolbox.call`` never raises: any failure is a typed error the model can read and recover from. An episode's
scope is in :mod:`pipelines.agent.scope`, the request field checks in :mod:`pipelines.agent.fields`, the
toolbox's byte-bounded cache in :mod:`pipelines.agent.lru`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from pipelines.agent.calls import (
    ErrorType,
    Param,
    ToolCall,
    ToolError,
    ToolSpec,
    bind_call,
    is_valid_unicode,
    parse_call,
    printable,
)
from pipelines.agent.fields import checked_scope, field_error
from pipelines.agent.kg_view import DomainGraph, manifest_signature
from pipelines.agent.lru import ByteLRU
from pipelines.agent.output import cap_text
from pipelines.agent.scope import Allowed, ResolvedScope, Scope, scope_ids, scope_nbytes
from pipelines.config import Params
from pipelines.domains import load_registry
from pipelines.errors import ArtifactMissingError, RegistryError
from pipelines.kg.embed import Encoder
from pipelines.kg.model import TYPED_NAME, normalise_key, shown_type
from pipelines.layout import embeddings_cache_dir, kg_dir
from pipelines.manifest import MANIFEST_NAME
from pipelines.qa.template import indefinite

log = logging.getLogger(__name__)

GRAPH_TYPE = Param(name="graph_type", description="The knowledge graph (domain) to use.")
TOOL_SPECS: dict[str, ToolSpec] = {spec.name: spec for spec in [
    ToolSpec(name="entity_matcher", description="The entity names closest to node_name.",
             params=(Param(name="node_name", description="The entity name to look for."), GRAPH_TYPE)),
    ToolSpec(name="node_info", description="An entity's type and relations.",
             params=(Param(name="node_name", description="The exact entity name."), GRAPH_TYPE)),
    ToolSpec(name="get_head_relations", description="Get relations where the entity is the tail (object).",
             params=(Param(name="entity", description="The exact entity name."),)),
    ToolSpec(name="get_tail_relations", description="Get relations where the entity is the head (subject).",
             params=(Param(name="entity", description="The exact entity name."),)),
    ToolSpec(name="get_head_entities", description="Get the head entities of triples (head, relation, entity).",
             params=(Param(name="entity", description="The exact tail entity name."),
                     Param(name="relation", description="The exact relation name."))),
    ToolSpec(name="get_tail_entities", description="Get the tail entities of triples (entity, relation, tail).",
             params=(Param(name="entity", description="The exact head entity name."),
                     Param(name="relation", description="The exact relation name."))),
    ToolSpec(name="search", description="Search the knowledge graph for triples of an entity relevant to the "
             "question; backtrack=True returns to the previous entity and tries its next candidate.",
             params=(Param(name="entity", description="The entity to expand."),
                     Param(name="question", description="The question being answered."),
                     Param(name="backtrack", kind="boolean", required=False, default=False,
                           description="Return to the parent entity and take its next candidate."))),
]}
OMNE_TOOLS = ("entity_matcher", "node_info")
KG_R1_TOOLS = ("get_head_relations", "get_tail_relations", "get_head_entities", "get_tail_entities")
SEARCH_TOOLS = ("search",)


class ToolResult(BaseModel):
    """One executed (or refused) call: what the model sees (``content``) and what metrics need."""

    model_config = ConfigDict(frozen=True)
    name: str
    arguments: dict[str, Any]
    ok: bool
    error_type: ErrorType | None = None
    content: str
    graph_type: str | None = None


@dataclass
class Frame:
    """One step of a search path: the entity expanded and the candidates it offered."""

    entity: int
    question: str
    candidates: list[int]
    next: int = 0


SEARCH_PATH_FRAMES = 128  # search steps an episode remembers for backtracking (its memory stays bounded)
WALK_MEMORY = 16  # entities an episode remembers having listed with node_info (a walk is at most a few hops)


# bytes of Python objects around the data an episode holds, measured with tracemalloc (tests/test_tool_memory.py)
EPISODE_OVERHEAD = 350  # the state, its lists and dict
QUERY_OVERHEAD = 400  # a cached query vector: the array's header, the key, the LRU's entry (beside text and vector)
PHRASES_OVERHEAD = 400  # an entity's cached phrase vectors: the batch's array header, the key, the LRU's entry
PHRASE_OVERHEAD = 200  # each of its vectors: a view's header, its (direction, label) key


def text_nbytes(text: str | None) -> int:
    return sys.getsizeof(text) if isinstance(text, str) else 0


@dataclass
class EpisodeState:
    """Per-episode memory of the search tool (for backtracking) and the episode's scope; one per rollout.

    ``refused`` is set on an episode that could not be opened (an invalid id, graph_type or scope):
    every call of it then returns that typed error instead of running.
    """

    graph_type: str | None = None
    path: list[Frame] = field(default_factory=list)
    scope: Scope | None = None  # None: the whole graph
    refused: ToolError | None = None
    question: str | None = None  # what the episode answers: node_info lists the relations closest to it first
    walked: list[tuple[str, int]] = field(default_factory=list)  # (graph, entity) node_info listed, last WALK_MEMORY
    # the clause of the question each walked entity's relations were ranked by (index in question_clauses)
    clause_of: dict[tuple[str, int], int] = field(default_factory=dict)
    # the scope resolved on the graph last called: kept by the episode (not by a cache shared by every episode), so
    # that it is counted in the episode's bytes and freed with it (DELETE /v1/episodes/{id}, or dropped as LRU)
    resolved: ResolvedScope | None = None

    def set_scope(self, scope: Scope) -> None:
        """Give the episode ``scope``; one equal to its own keeps the one held (and its resolved entities)."""
        if self.scope is not None and self.scope.hops == scope.hops and self.scope.seeds == scope.seeds:
            return
        self.scope, self.resolved = scope, None

    def nbytes(self) -> int:
        """The memory the episode holds, in bytes: what a store of many episodes bounds (tools.episodes_max_bytes).
        Within ~20% of tracemalloc's measure (tests/test_tool_memory.py)."""
        size = EPISODE_OVERHEAD + text_nbytes(self.graph_type) + text_nbytes(self.question)
        if self.scope is not None:
            size += scope_nbytes(self.scope)
        if self.resolved is not None:
            size += self.resolved.allowed.nbytes()
            if self.resolved.scope is not self.scope:
                size += scope_nbytes(self.resolved.scope)
        for frame in self.path:
            size += 150 + sys.getsizeof(frame.question) + 36 * len(frame.candidates)
        return size + 100 * len(self.walked) + 150 * len(self.clause_of)


_CLAUSE_BREAK = re.compile(r"(?<=[.?!])\s+|,\s+|\s+(?=(?:which|whose)\s)")
CLAUSE_QUESTION_WEIGHT = 0.1  # the whole question's share of node_info's ranking, beside the walk's clause


def question_clauses(question: str) -> list[str]:
    """The question cut where a sentence, a comma or a relative "which"/"whose" starts a new clause ("Yukon Territory
    is a state or province of a country" | "which shares a land border with a second country" | "Which currency does
    the second country use?"); a piece of one or two words joins the next ("In which ...")."""
    clauses: list[str] = []
    carry = ""
    for piece in filter(None, (p.strip() for p in _CLAUSE_BREAK.split(question))):
        piece = f"{carry} {piece}".strip()
        carry = piece if len(piece.split()) <= 2 else ""
        if not carry:
            clauses.append(piece)
    if carry:
        clauses[-1:] = [f"{clauses[-1]} {carry}" if clauses else carry]
    return clauses


def walk_clause(episode: EpisodeState, graph: str, entity: int, name: str) -> str | None:
    """The clause of the episode's question that says the hop from ``entity``: the first clause not yet walked
    that names it (the start), else the one nearest to the clause of the entity walked last, a question ("...?")
    only when no statement is left (a template question's bridges read outward from the start, its question comes
    last). Each entity keeps its clause, so a repeated call lists the same; None when every clause is walked (the
    whole question ranks alone)."""
    clauses = question_clauses(episode.question or "")
    here = (graph, entity)
    if here not in episode.clause_of:
        walked = set(episode.clause_of.values())
        free = [i for i in range(len(clauses)) if i not in walked]
        if not free:
            return None
        named = [i for i in free if name and name in clauses[i]]
        last = next(reversed(episode.clause_of.values()), 0)
        statements = [i for i in free if not clauses[i].endswith("?")] or free
        episode.clause_of[here] = named[0] if named else min(statements, key=lambda i: (abs(i - last), i))
    return clauses[episode.clause_of[here]]


def relation_kind(graph: DomainGraph, relation: int, entity: int) -> tuple[bool, str]:
    """What node_info's question order groups ``relation`` of ``entity`` by: (incoming, label)."""
    return int(graph.rel_src[relation]) != entity, graph.rel_keywords[relation]


def relation_phrase(incoming: bool, label: str, name: str, other_type: str) -> str:
    """A kind of relation as the question would say it, with the entity on its side and the other end's type on the
    other ("Jupiter orbits a star", "a moon orbits Jupiter"): the label alone reads the same both ways and says
    nothing of what it leads to, and a question's clause says both ("Which star does Jupiter orbit?")."""
    other = indefinite(shown_type(other_type) or "entity")
    return f"{other} {label} {name}" if incoming else f"{name} {label} {other}"


def relative_paths(text: str, root: Path, artifacts: Path | None = None) -> str:
    """``text`` with the project root's absolute path taken out (paths relative to it), and an artifacts
    folder outside the root shown as ``<artifacts>``: error texts go to clients, not only to logs."""
    prefixes: dict[str, str] = {}
    if artifacts is not None:
        for folder in (artifacts, artifacts.resolve()):
            if not folder.resolve().is_relative_to(root.resolve()):
                prefixes[str(folder)] = "<artifacts>"
    for folder in (root, root.resolve()):
        if folder.parent != folder:  # never the filesystem root itself
            prefixes[str(folder)] = "."
    for prefix in sorted(prefixes, key=len, reverse=True):
        text = text.replace(prefix + os.sep, "" if prefixes[prefix] == "." else prefixes[prefix] + os.sep)
        text = text.replace(prefix, prefixes[prefix])
    return text


def _error(kind: ErrorType, message: str) -> ToolError:
    return ToolError(type=kind, message=printable(message))


def _clip(text: str, limit: int | None = 300) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1].rstrip() + "…"


_TOOLBOXES: weakref.WeakSet[KGToolbox] = weakref.WeakSet()  # for _clear_query_caches


def relation_line(label: str, other: str, *, outgoing: bool, directed: bool) -> str:
    """A node_info relation read from the entity at the top of the response (tools.node_info_lines: from_entity):
    "-[label]-> other" out of it, "<-[label]- other" into it, "-[label]-- other" in an undirected graph."""
    if not directed:
        return f"-[{label}]-- {other}"
    return f"-[{label}]-> {other}" if outgoing else f"<-[{label}]- {other}"


class KGToolbox:
    """Loads each domain once (reloading it when its manifests change) and executes tool calls."""

    def __init__(self, params: Params, domains: list[str] | None = None, encoder: Encoder | None = None,
                 reload_check_seconds: float = 1.0) -> None:
        self.params = params
        self.tool_params = params.tools
        registry = load_registry(params.registry_path)
        self.domain_names = [registry.get(d).name for d in domains] if domains else registry.names
        self._graphs: dict[str, DomainGraph] = {}
        self._checked_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._encoder = encoder
        self._reload_check_seconds = reload_check_seconds
        # query vectors ("query", text) and node_info's relation-phrase vectors ("phrases", graph, entity), least
        # recently used dropped first; resolved scopes are kept by their episodes, shared here while one lives
        self._cache = ByteLRU(self.tool_params.cache_max_bytes)
        self._scopes: weakref.WeakValueDictionary[tuple[str, str, bytes, int], Allowed] = weakref.WeakValueDictionary()
        self._scopes_lock = threading.Lock()
        _TOOLBOXES.add(self)
        self._handlers: dict[str, Callable[[DomainGraph, dict[str, Any], EpisodeState], str | ToolError]] = {
            "entity_matcher": self._entity_matcher, "node_info": self._node_info,
            "get_head_relations": self._head_relations, "get_tail_relations": self._tail_relations,
            "get_head_entities": self._head_entities, "get_tail_entities": self._tail_entities,
            "search": self._search,
        }
        self.specs = TOOL_SPECS

    # ----- loading -------------------------------------------------------------------------------------
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:  # the entity indexes' disk cache, for the texts of the graph and the dataset
            self._encoder = Encoder(self.params.index, cache_dir=embeddings_cache_dir(self.params.artifacts_dir))
        return self._encoder

    def _embed(self, text: str, *, stored: bool = False) -> np.ndarray:
        """The text's vector, cached in memory (queries repeat a lot in RL) within tools.cache_max_bytes.
        ``stored``: a text of the graph or the dataset (a question, its clauses, a relation label), bounded, so
        also kept in the disk cache that every stage's process shares (an evaluation after another, an RL stage
        after the SFT data); a text the model wrote (``stored`` False) stays in memory only."""
        key = ("query", text)
        vector = self._cache.get(key)
        if vector is None:
            vector = self.encoder.encode([text], cache=stored)[0].copy()  # a view would hold its batch's array
            self._cache.put(key, vector, sys.getsizeof(text) + vector.nbytes + QUERY_OVERHEAD)
        return vector

    def public(self, text: str) -> str:
        """An error text fit for a client: paths relative to the project root."""
        return relative_paths(text, self.params.root, self.params.artifacts_dir)

    def built_domains(self) -> list[str]:
        return [name for name in self.domain_names
                if (kg_dir(self.params.artifacts_dir, name) / MANIFEST_NAME).is_file()]

    def load_all(self) -> list[str]:
        """Load every built domain now (the others load when first called, once built); return the loaded."""
        loaded = []
        for name in self.domain_names:
            try:
                self.graph(name)
                loaded.append(name)
            except ArtifactMissingError as exc:
                log.warning("not loading %s: %s", name, exc)
        return loaded

    def graph(self, name: str) -> DomainGraph:
        """The domain's view, loaded on first use and reloaded when a manifest changed on disk."""
        now = time.monotonic()
        graph = self._graphs.get(name)
        if graph is not None and now - self._checked_at.get(name, 0.0) < self._reload_check_seconds:
            return graph
        with self._lock:
            graph = self._graphs.get(name)
            signature = manifest_signature(self.params.artifacts_dir, name)
            if graph is None or graph.signature != signature:
                log.info("loading domain %s", name)
                graph = DomainGraph.load(self.params.artifacts_dir, name,
                                         relation_phrases=self.tool_params.unlabelled_relations == "phrase")
                self._graphs[name] = graph
            self._checked_at[name] = now
            return graph

    # ----- entry points --------------------------------------------------------------------------------
    def call(self, call: object, *, graph_type: str | None = None,
             episode: EpisodeState | None = None) -> ToolResult:
        """Parse/validate and execute one call (text, JSON-like dict or ToolCall); never raises.

        The request's own fields (graph_type, the episode's id and scope) are checked first: a bad one
        is a typed error result like a bad call, whether it came over HTTP or in-process."""
        parsed = self.parse(call)
        refusal = self.request_error(graph_type, episode)
        if refusal is None and not isinstance(parsed, ToolError):
            return self.execute(parsed, graph_type=graph_type, episode=episode)
        error = refusal or parsed
        assert isinstance(error, ToolError)
        name, arguments = (parsed.name, parsed.arguments) if isinstance(parsed, ToolCall) else ("", {})
        return ToolResult(name=name, arguments=arguments, ok=False, error_type=error.type,
                          content=self._capped(error.render()), graph_type=None if refusal else graph_type)

    def request_error(self, graph_type: object, episode: EpisodeState | None) -> ToolError | None:
        """Why the request around a call cannot be served (None: it can); a dict scope becomes a Scope."""
        if episode is not None and episode.refused is not None:
            return episode.refused
        refusal = field_error("graph_type", graph_type)
        if refusal is None and episode is not None:
            refusal = field_error("graph_type", episode.graph_type)
        if refusal is None and episode is not None and episode.scope is not None:
            scope = checked_scope(episode.scope, self.tool_params.scope_max_bytes)
            if isinstance(scope, ToolError):
                return scope
            if scope is not episode.scope:  # a dict given in-process, now validated: nothing resolved from it yet
                episode.scope, episode.resolved = scope, None
        return refusal

    def parse(self, call: object) -> ToolCall | ToolError:
        """Any form of call, checked against the tool specs exactly as a written call is."""
        limits = {"max_argument_chars": self.tool_params.max_argument_chars}
        if isinstance(call, ToolCall):
            return bind_call(call.name, [], dict(call.arguments), self.specs, **limits)
        if isinstance(call, dict):
            arguments = call.get("arguments", {})
            if not isinstance(arguments, dict):
                return ToolError(type=ErrorType.FORMAT_ERROR, message="'arguments' must be an object")
            return bind_call(call.get("name"), [], arguments, self.specs, **limits)
        if isinstance(call, str):
            return parse_call(call, self.specs, max_call_chars=self.tool_params.max_call_chars, **limits)
        if call is None:
            return ToolError(type=ErrorType.FORMAT_ERROR, message="no tool call given (the request's call is missing)")
        return ToolError(type=ErrorType.FORMAT_ERROR, message="the tool call must be text or a JSON object")

    def execute(self, call: ToolCall, *, graph_type: str | None = None,
                episode: EpisodeState | None = None) -> ToolResult:
        episode = episode or EpisodeState(graph_type=graph_type)
        target = call.arguments.get("graph_type") or graph_type or episode.graph_type
        if target is None and len(self.domain_names) == 1:
            target = self.domain_names[0]
        try:
            outcome = self._run(call, target, episode)
        except Exception as exc:  # a bug must not crash a rollout: report it as a typed error
            log.exception("tool %s failed", call.name)
            outcome = _error(ErrorType.SERVER_ERROR, f"the tool failed: {type(exc).__name__}")
        if not (isinstance(target, str) and is_valid_unicode(target)):
            target = None  # only a name can be echoed back (call() refuses the rest before this)
        if isinstance(outcome, ToolError):
            return ToolResult(name=call.name, arguments=call.arguments, ok=False, error_type=outcome.type,
                              content=self._capped(self.public(outcome.render())), graph_type=target)
        return ToolResult(name=call.name, arguments=call.arguments, ok=True, content=self._capped(outcome),
                          graph_type=target)

    def _capped(self, text: str) -> str:
        """A result's text within tools.max_result_bytes (a hub's relations, a huge description): the one place the
        bound is kept, for in-process callers and the tool server alike."""
        return cap_text(text, self.tool_params.max_result_bytes)

    def _run(self, call: ToolCall, target: str | None, episode: EpisodeState) -> str | ToolError:
        if target is None:
            return _error(ErrorType.UNKNOWN_GRAPH, f"no graph_type given; known graphs: {', '.join(self.domain_names)}")
        if target not in self.domain_names:
            known = ", ".join(self.domain_names)
            return _error(ErrorType.UNKNOWN_GRAPH,
                          f'unknown graph_type "{_clip(str(target), 80)}"; known graphs: {known}')
        try:
            graph = self.graph(target)
        except (ArtifactMissingError, RegistryError) as exc:
            return _error(ErrorType.SERVER_ERROR, f'graph "{target}" is not available: {exc}')
        try:
            return self._handlers[call.name](graph, call.arguments, episode)
        except ArtifactMissingError as exc:  # e.g. the index is older than the KG: say so, do not guess
            return _error(ErrorType.SERVER_ERROR, str(exc))

    # ----- scopes ---------------------------------------------------------------------------------------
    def allowed(self, graph: DomainGraph, episode: EpisodeState) -> Allowed | None:
        """The entities of ``graph`` inside the episode's scope (None: no scope, everything). Kept by the episode
        (``EpisodeState.resolved``: counted in its bytes, freed with it) and shared by the live episodes of the same
        scope (a weak map: a GRPO group's rollouts of one question resolve it once), never by a cache of its own."""
        scope = episode.scope
        if scope is None:
            return None
        held = episode.resolved
        if held is not None and (held.graph, held.signature) == (graph.name, graph.signature) and held.scope is scope:
            return held.allowed
        digest = hashlib.sha256(json.dumps(scope.seeds, ensure_ascii=False).encode("utf-8", "replace")).digest()
        key = (graph.name, graph.signature, digest, scope.hops)
        with self._scopes_lock:
            found = self._scopes.get(key)
        if found is None:
            seeds = [i for i in (graph.lookup(name) for name in scope.seeds) if i is not None]
            resolved = Allowed(ids=scope_ids(graph, seeds, scope.hops))
            with self._scopes_lock:
                found = self._scopes.setdefault(key, resolved)
        episode.resolved = ResolvedScope(graph=graph.name, signature=graph.signature, scope=scope, allowed=found)
        return found

    def _nearest(self, graph: DomainGraph, vector: np.ndarray, k: int,
                 allowed: Allowed | None) -> list[tuple[int, float]]:
        """``graph.nearest`` over the allowed entities only (the same ordering: score, then id)."""
        if allowed is None or graph.vectors is None:  # (without vectors, nearest raises its clear error)
            return graph.nearest(vector, k)
        scores = graph.vectors[allowed.ids] @ vector.astype(np.float32)
        order = np.lexsort((allowed.ids, -scores))[:k]
        return [(int(allowed.ids[i]), float(scores[i])) for i in order]

    @staticmethod
    def _inside(graph: DomainGraph, relations: np.ndarray, entity: int, allowed: Allowed | None) -> Sequence[int]:
        """The relations of ``entity`` whose other end is allowed (``relations`` itself without a scope)."""
        if allowed is None:
            return relations
        src, dst = graph.rel_src[relations], graph.rel_dst[relations]
        return relations[allowed.mask(np.where(src == entity, dst, src))]

    # ----- shared look-ups -----------------------------------------------------------------------------
    def _resolve(self, graph: DomainGraph, name: str, *, fuzzy: bool, allowed: Allowed | None = None) -> int | None:
        """Exact normalised-key match; with ``fuzzy``, else the nearest name in the entity index.

        With a scope, an entity outside it is not found, and the fallback looks among those inside.
        """
        found = graph.lookup(name)
        if found is None and (typed := TYPED_NAME.match(name)):  # a neighbour copied with its type, "Sun [star]"
            found = graph.lookup(typed["name"])
            if found is not None and shown_type(graph.types[found]) != typed["type"].strip():
                found = None
        if found is not None and allowed is not None and found not in allowed:
            found = None
        if found is not None or not fuzzy or graph.vectors is None or not name.strip():
            return found  # a stale or missing index gives no fallback
        hits = self._nearest(graph, self._embed(name), 1, allowed)
        if not hits:
            return None
        best, score = hits[0]
        return best if score >= self.tool_params.fuzzy_min_score else None

    @staticmethod
    def _not_found(name: str, closest: Sequence[str] = ()) -> ToolError:
        """``closest``: the names the index finds nearest (node_info's): the next call copies one of them instead of
        retrying the name that failed (a garbled copy of an upper-case LightRAG name looped until the episode ended)."""
        message = f'Entity "{_clip(name.strip(), 120)}" not found in KG'
        if closest:
            message += "; the closest names are " + ", ".join(f'"{n}"' for n in closest)
        return _error(ErrorType.ENTITY_NOT_FOUND, message)

    def _closest_names(self, graph: DomainGraph, name: str, allowed: Allowed | None) -> list[str]:
        """The entity_matcher's names for ``name`` (none without an index or a name)."""
        if graph.vectors is None or not name.strip():
            return []
        hits = self._nearest(graph, self._embed(name), self.tool_params.entity_matcher_top_k, allowed)
        return [graph.names[i] for i, _score in hits]

    # ----- Omne-R1 tools -------------------------------------------------------------------------------
    def _entity_matcher(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        query = args["node_name"].strip()
        if not query:
            return _error(ErrorType.INVALID_ARGUMENT, "entity_matcher: node_name is empty")
        hits = self._nearest(graph, self._embed(query), self.tool_params.entity_matcher_top_k,
                             self.allowed(graph, episode))
        lines = [f"Found {len(hits)} entities matching '{_clip(query, 120)}':"]
        if self.tool_params.matcher_descriptions:
            lines += [f"{rank}. Entity: {graph.names[i]} Description: {self._describe(graph.descriptions[i])}"
                      for rank, (i, _score) in enumerate(hits, start=1)]
        else:
            lines += [f"{rank}. {self._listed_entity(graph, i)}" for rank, (i, _score) in enumerate(hits, start=1)]
        return "\n".join(lines)

    def _describe(self, description: str) -> str:
        """Descriptions are most of a tool response's tokens: clipped by params (tools.description_max_chars)."""
        return _clip(description, self.tool_params.description_max_chars) or "none"

    def _node_info(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        name = args["node_name"]
        allowed = self.allowed(graph, episode)
        entity = self._resolve(graph, name, fuzzy=True, allowed=allowed)
        if entity is None:
            return self._not_found(name, self._closest_names(graph, name, allowed))
        relations = list(self._inside(graph, graph.incident(entity), entity, allowed))
        by_question = self.tool_params.node_info_order == "question" and bool(episode.question)
        if by_question:
            relations = self._question_order(graph, entity, relations, episode)
        here = (graph.name, entity)
        episode.walked = [*(seen for seen in episode.walked if seen != here), here][-WALK_MEMORY:]
        episode.clause_of = {seen: c for seen, c in episode.clause_of.items() if seen in episode.walked}
        lines = []
        if graph.lookup(name) != entity:
            lines.append(f'No entity is named "{_clip(name.strip(), 120)}"; the closest is "{graph.names[entity]}".')
        order = ", closest to the question first" if by_question and len(relations) > 1 else ""
        lines += [f"Entity: {graph.names[entity]}", f"Type: {graph.types[entity] or 'unknown'}"]
        if self.tool_params.node_info_descriptions:
            lines.append(f"Description: {self._describe(graph.descriptions[entity])}")
        lines.append(f"Relations ({len(relations)}{order}):")
        cap = self.tool_params.node_info_max_neighbors
        shown = relations if cap is None else relations[:cap]
        for rank, r in enumerate(shown, start=1):
            description = (_clip(graph.rel_descriptions[r], self.tool_params.description_max_chars)
                           if self.tool_params.relation_descriptions else "")
            line = f"{rank}. {self._relation_line(graph, entity, r)}"
            lines.append(f"{line}: {description}" if description else line)
        if len(shown) < len(relations):
            lines.append(f"… {len(relations) - len(shown)} more relations not shown")
        return "\n".join(lines)

    def _relation_line(self, graph: DomainGraph, entity: int, r: int) -> str:
        """One of node_info's relations: read from ``entity`` ("-[label]-> B", "<-[label]- A"; "-[label]-- B" in an
        undirected graph) or, with tools.node_info_lines: triples, as a triple naming both ends ("A -[label]-> B")."""
        label, src, dst = graph.rel_keywords[r], int(graph.rel_src[r]), int(graph.rel_dst[r])
        if self.tool_params.node_info_lines == "triples":
            head, tail = (self._listed_entity(graph, end) if end != entity else graph.names[end] for end in (src, dst))
            return f"{head} -[{label}]{'->' if graph.directed or graph.rel_phrased[r] else '--'} {tail}"
        outgoing = src == entity
        return relation_line(label, self._listed_entity(graph, dst if outgoing else src), outgoing=outgoing,
                             directed=graph.directed or bool(graph.rel_phrased[r]))

    def _question_order(self, graph: DomainGraph, entity: int, relations: list[int],
                        episode: EpisodeState) -> list[int]:
        """``relations`` grouped by direction and label, the groups ranked by how close each group reads
        (``relation_phrase``: "Barium-129 decays to an isotope", "an isotope decays to Barium-129") to the clause of
        the episode's question the walk is at (``walk_clause``), plus a tenth of its closeness to the whole question
        (cosines of the index encoder's vectors; tools.node_info_order: question), then listed in turns: the first
        relation of every group in rank order, then every group's second, and so on (each group in the graph's
        order), so that a group of many relations (a country's 40 subdivisions) hides no other kind under the cap. A
        group holding a relation back to an entity the episode already listed ranks after the rest: a walk seldom
        means to go back the way it came, and the question names that relation too."""
        groups: dict[tuple[bool, str], list[int]] = {}
        for r in relations:
            groups.setdefault(relation_kind(graph, r, entity), []).append(r)
        walked = {seen for name, seen in episode.walked if name == graph.name} - {entity}
        name = graph.names[entity]
        clause = walk_clause(episode, graph.name, entity, name)
        target = self._embed(episode.question or "", stored=True) * CLAUSE_QUESTION_WEIGHT
        if clause is not None:
            target = target + self._embed(clause, stored=True)
        phrases = self._phrase_vectors(graph, entity)
        labels = [phrases[key] for key in groups]

        def rank(item: tuple[int, tuple[bool, str]]) -> tuple[bool, float, int]:
            position, key = item
            back = any(graph.other_end(r, entity) in walked for r in groups[key])
            return back, -float(labels[position] @ target), position

        ranked = [groups[key] for _, key in sorted(enumerate(groups), key=rank)]
        turns = max(map(len, ranked), default=0)
        return [group[turn] for turn in range(turns) for group in ranked if turn < len(group)]

    def _phrase_vectors(self, graph: DomainGraph, entity: int) -> dict[tuple[bool, str], np.ndarray]:
        """The vector of each kind of relation of ``entity`` (direction, label) read as ``relation_phrase``, cached.
        All of the entity's kinds are encoded in one batch, whatever the episode's scope: one encoder call per entity
        instead of one per kind (the cold cost of the question's order), and always the same batch, so that a vector
        never depends on what else was asked. They are the graph's texts, so the disk cache keeps them for the next
        stage's process (the SFT data, RL, each evaluation), which reads them instead of encoding."""
        key = ("phrases", graph.name, entity)
        vectors = self._cache.get(key)
        if vectors is None:
            first: dict[tuple[bool, str], int] = {}
            for r in graph.incident(entity):
                first.setdefault(relation_kind(graph, r, entity), int(r))
            kinds = sorted(first)
            texts = [relation_phrase(incoming, label, graph.names[entity],
                                     graph.types[graph.other_end(first[(incoming, label)], entity)])
                     for incoming, label in kinds]
            encoded = self.encoder.encode(texts)
            vectors = dict(zip(kinds, encoded, strict=True))
            # the labels are the graph's strings; each vector is a view (an array header) of the batch's array
            self._cache.put(key, vectors, sys.getsizeof(vectors) + encoded.nbytes + PHRASES_OVERHEAD
                            + PHRASE_OVERHEAD * len(kinds))
        return vectors

    def _listed_entity(self, graph: DomainGraph, entity: int) -> str:
        """An entity as node_info lists a neighbour and entity_matcher a hit without its description: its name, then
        with tools.neighbor_types its type in square brackets (round ones end many names, "Latakia (subdivision of
        Syria)"; square ones almost none)."""
        kind = shown_type(graph.types[entity]) if self.tool_params.neighbor_types else None
        return graph.names[entity] if kind is None else f"{graph.names[entity]} [{kind}]"

    # ----- KG-R1 actions -------------------------------------------------------------------------------
    def _listed(self, items: list[str]) -> str:
        cap = self.tool_params.kg_r1_max_items
        if cap is not None and len(items) > cap:
            return ", ".join(items[:cap]) + f", … {len(items) - cap} more"
        return ", ".join(items)

    def _relations(self, graph: DomainGraph, args: dict[str, Any], side: str, episode: EpisodeState) -> str | ToolError:
        name = args["entity"]
        allowed = self.allowed(graph, episode)
        entity = self._resolve(graph, name, fuzzy=False, allowed=allowed)
        if entity is None:
            return self._not_found(name)
        relations = self._inside(graph, graph.outgoing(entity) if side == "Tail" else graph.incoming(entity),
                                 entity, allowed)
        labels = sorted({graph.rel_keywords[r] for r in relations})
        if not labels:
            return _error(ErrorType.NO_RESULTS,
                          f'No {side.lower()} relations found for entity "{graph.names[entity]}" in knowledge graph')
        return f'{side} relations for entity "{graph.names[entity]}": {self._listed(labels)}'

    def _head_relations(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        return self._relations(graph, args, "Head", episode)

    def _tail_relations(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        return self._relations(graph, args, "Tail", episode)

    def _entities(self, graph: DomainGraph, args: dict[str, Any], side: str, episode: EpisodeState) -> str | ToolError:
        name, relation = args["entity"], args["relation"]
        allowed = self.allowed(graph, episode)
        entity = self._resolve(graph, name, fuzzy=False, allowed=allowed)
        if entity is None:
            return self._not_found(name)
        key = normalise_key(relation)
        candidates = self._inside(graph, graph.outgoing(entity) if side == "Tail" else graph.incoming(entity),
                                  entity, allowed)
        matching = [r for r in candidates if graph.rel_keys[r] == key]
        if not matching:
            if key not in graph.relation_key_set:
                return _error(ErrorType.RELATION_NOT_FOUND,
                              f'Relation "{_clip(relation.strip(), 120)}" not found in KG')
            return _error(ErrorType.NO_RESULTS, f'No {side.lower()} entities found for entity "{graph.names[entity]}" '
                          f'with relation "{_clip(relation.strip(), 120)}"')
        others = sorted({graph.names[graph.other_end(r, entity)] for r in matching})
        return (f'{side} entities for entity "{graph.names[entity]}" with relation '
                f'"{graph.rel_keywords[matching[0]]}": {self._listed(others)}')

    def _head_entities(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        return self._entities(graph, args, "Head", episode)

    def _tail_entities(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        return self._entities(graph, args, "Tail", episode)

    # ----- KG-Reasoner / KG-Hopper search ---------------------------------------------------------------
    def _relevant_triples(self, graph: DomainGraph, entity: int, question: str,
                          allowed: Allowed | None = None) -> list[int]:
        """Stage 1: the entity's predicates, ranked by similarity to the question; stage 2: their triples."""
        incident = self._inside(graph, graph.incident(entity), entity, allowed)
        labels = sorted({graph.rel_keywords[r] for r in incident})
        if not labels:
            return []
        query = self._embed(question)
        scores = {label: float(self._embed(label, stored=True) @ query) for label in labels}
        kept = set(sorted(labels, key=lambda lab: (-scores[lab], lab))[: self.tool_params.search_top_relations])
        ranked = sorted((r for r in incident if graph.rel_keywords[r] in kept),
                        key=lambda r: (-scores[graph.rel_keywords[r]], graph.rel_keywords[r], int(r)))
        return ranked[: self.tool_params.search_max_triples]

    def _expand(self, graph: DomainGraph, entity: int, question: str, episode: EpisodeState, header: str) -> str:
        triples = self._relevant_triples(graph, entity, question, self.allowed(graph, episode))
        visited = {frame.entity for frame in episode.path} | {entity}
        candidates = list(dict.fromkeys(graph.other_end(r, entity) for r in triples))
        episode.path.append(Frame(entity=entity, question=question,
                                  candidates=[c for c in candidates if c not in visited]))
        del episode.path[:-SEARCH_PATH_FRAMES]  # backtracking reaches this far back at most
        if not triples:
            return f'{header}No triples found for "{graph.names[entity]}".'
        lines = [f'{header}Triples of "{graph.names[entity]}" relevant to the question:']
        lines += [f"({graph.names[graph.rel_src[r]]}, {graph.rel_keywords[r]}, {graph.names[graph.rel_dst[r]]})"
                  for r in triples]
        return "\n".join(lines)

    def _search(self, graph: DomainGraph, args: dict[str, Any], episode: EpisodeState) -> str | ToolError:
        question = args["question"].strip()
        if args.get("backtrack"):
            if len(episode.path) < 2:
                return _error(ErrorType.NO_RESULTS, "there is no previous entity to backtrack to")
            left = episode.path.pop()
            parent = episode.path[-1]
            while parent.next < len(parent.candidates):
                candidate = parent.candidates[parent.next]
                parent.next += 1
                if candidate != left.entity and all(f.entity != candidate for f in episode.path):
                    header = (f'Backtracked from "{graph.names[left.entity]}" to "{graph.names[parent.entity]}"; '
                              f'next candidate: "{graph.names[candidate]}".\n')
                    return self._expand(graph, candidate, question or parent.question, episode, header)
            return _error(ErrorType.NO_RESULTS, f'"{graph.names[parent.entity]}" has no more candidates to try')
        entity = self._resolve(graph, args["entity"], fuzzy=True, allowed=self.allowed(graph, episode))
        if entity is None:
            return self._not_found(args["entity"])
        if episode.path and entity in episode.path[-1].candidates:  # following a candidate of the last step
            parent = episode.path[-1]
            parent.next = max(parent.next, parent.candidates.index(entity) + 1)
        return self._expand(graph, entity, question, episode, "")


def _clear_query_caches() -> None:
    """Empty every toolbox's query-vector cache, as ``KGToolbox._embed.cache_clear()`` did when it was an
    lru_cache (benchmarks start each run cold with it)."""
    for toolbox in list(_TOOLBOXES):
        toolbox._cache.clear(keep=lambda key: key[0] != "query")  # noqa: SLF001


KGToolbox._embed.cache_clear = _clear_query_caches  # type: ignore[attr-defined]
