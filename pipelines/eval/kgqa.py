"""External KGQA question sets (WebQSP, CWQ, GrailQA, QALD, ...): load them, build their KG, roll the
agent out on a per-question 2-hop subgraph around the topic entities, as the seed systems evaluate.

A KGQA file holds questions with their topic entities and one or more answers; a triple file (any
format of :mod:`pipelines.kg.importers`) holds the KG they are asked about. ``omne eval --kgqa FILE
--triples FILE`` then:

1. reads the questions (:mod:`pipelines.eval.kgqa_formats`: the documented simple form, one JSON object per
   line, ``{"id": "q1", "question": "...", "topic_entities": ["..."], "answers": ["...", "..."]}``, and the
   layouts of the common sets, see :func:`~pipelines.eval.kgqa_formats.read_kgqa`);
2. builds the triple file into a KG domain (:mod:`pipelines.eval.kgqa_workspace`) with the ordinary
   import/build steps (KG + entity index, skipped when unchanged), in a workspace of its own,
   ``artifacts/kgqa/`` (its own registry ``artifacts/kgqa/domains.yaml``, KGs and indexes): an external
   evaluation KG never joins the training pipeline (``omne run``, DVC, Dagster read only
   ``kg_assets/domains.yaml``), so no QA data is generated from the KG of a test set;
3. resolves each question's topic entities and answers to KG entities (trying aliases and ids such
   as Freebase mids), and restricts every tool of its episode to the entities within 2 hops of the
   topic entities (:class:`~pipelines.agent.scope.Scope`, carried by each tool call of the
   episode): the rest of the KG is "not found";
4. puts the topic entities in the prompt and scores answer sets: Hit@1 and F1 are the headline
   numbers for these sets (bucket and hops are None, so those groups stay empty).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.agent.client import ToolClient
from pipelines.agent.kg_view import DomainGraph
from pipelines.agent.protocols import Protocol
from pipelines.agent.requests import CallRequest
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.scope import Scope, subgraph_entities
from pipelines.agent.tools import KGToolbox, ToolCall, ToolResult
from pipelines.config import Params
from pipelines.eval.contexts import retrieval_context, scoped_graph_context
from pipelines.eval.kgqa_formats import KGQAItem, read_kgqa
from pipelines.eval.kgqa_workspace import build_kgqa_domain, slug
from pipelines.eval.source import QuestionSource
from pipelines.layout import kg_dir
from pipelines.llm.base import ChatClient
from pipelines.manifest import read_manifest, relative_path, sha256_file

log = logging.getLogger(__name__)

DEFAULT_HOPS = 2
MAX_SEEDS = 100  # Scope.seeds limit


# ----- questions on the KG ------------------------------------------------------------------------------

@dataclass
class KGQAQuestion:
    """A question resolved on the KG: the topic entities and answers as KG names, and its subgraph."""

    item: KGQAItem
    topics: list[str]  # resolved topic entities (KG names): the scope's seeds
    prompt_topics: list[str]  # what the prompt names: KG names, or the file's names when not in the KG
    answers: list[str]  # gold answers, as KG names where they are KG entities
    subgraph: frozenset[int]
    answer_in_kg: bool
    answer_in_subgraph: bool
    hops: int = DEFAULT_HOPS

    @property
    def scope(self) -> Scope:
        return Scope(seeds=self.topics[:MAX_SEEDS], hops=self.hops)


def _find(graph: DomainGraph, item: KGQAItem, name: str) -> int | None:
    for candidate in (name, *item.alternatives.get(name, [])):
        found = graph.lookup(candidate)
        if found is not None:
            return found
    return None


def resolve_question(graph: DomainGraph, item: KGQAItem, hops: int = DEFAULT_HOPS) -> KGQAQuestion:
    """Map a question's topic entities and answers to KG entities and compute its ``hops`` subgraph."""
    topic_ids = [_find(graph, item, name) for name in item.topic_entities]
    topics = list(dict.fromkeys(graph.names[i] for i in topic_ids if i is not None))
    prompt = list(dict.fromkeys(graph.names[i] if i is not None else name
                                for name, i in zip(item.topic_entities, topic_ids, strict=True)))
    subgraph = subgraph_entities(graph, (i for i in topic_ids if i is not None), hops)
    answer_ids = [_find(graph, item, name) for name in item.answers]
    answers = list(dict.fromkeys(graph.names[i] if i is not None else name
                                 for name, i in zip(item.answers, answer_ids, strict=True)))
    found = [i for i in answer_ids if i is not None]
    return KGQAQuestion(item=item, topics=topics, prompt_topics=prompt, answers=answers, subgraph=subgraph,
                        answer_in_kg=bool(found), answer_in_subgraph=any(i in subgraph for i in found),
                        hops=hops)


def stable_subset(items: list[KGQAItem], limit: int | None, seed: int) -> list[KGQAItem]:
    """Up to ``limit`` questions chosen by a seeded hash of their ids (the same in every run), in file order."""
    if limit is None or limit >= len(items):
        return items
    rank = sorted(items, key=lambda item: hashlib.sha256(f"{seed}:{item.id}".encode()).hexdigest())
    chosen = {item.id for item in rank[:limit]}
    return [item for item in items if item.id in chosen]


@dataclass
class KGQASet(QuestionSource):
    """A KGQA file prepared for evaluation: its domain loaded, its questions resolved and scoped.

    As a :class:`QuestionSource` its tasks name the topic entities in the prompt, its engine restricts
    each episode's tools to the question's subgraph, and the report's params gain its coverage summary.
    """

    path: Path
    domain: str
    params: Params  # where the domain lives (the KGQA workspace, or the main project)
    toolbox: KGToolbox
    questions: list[KGQAQuestion]
    hops: int
    skipped: list[str] = field(default_factory=list)
    total: int = 0  # questions in the file (before --limit)
    limit: int | None = None  # the number of questions asked for (a stable sample of the file)

    @property
    def split(self) -> str:
        """The label that stands for the split in metrics and the report name."""
        return f"kgqa-{slug(self.path.stem)}"

    @property
    def scopes(self) -> dict[str, Scope]:
        return {q.item.id: q.scope for q in self.questions}

    def summary(self, root: Path) -> dict[str, Any]:
        """What the report records about the set: coverage of topic entities and answers by the KG."""
        n = len(self.questions) or 1
        return {
            "file": relative_path(self.path, root), "domain": self.domain, "hops": self.hops,
            "questions": len(self.questions), "questions_in_file": self.total, "skipped": len(self.skipped),
            "topic_found": round(sum(bool(q.topics) for q in self.questions) / n, 4),
            "answer_in_kg": round(sum(q.answer_in_kg for q in self.questions) / n, 4),
            # the share of questions answerable inside the scope: an upper bound on Hit@1
            "answer_in_subgraph": round(sum(q.answer_in_subgraph for q in self.questions) / n, 4),
            "subgraph_entities_mean": round(sum(len(q.subgraph) for q in self.questions) / n, 1),
        }

    def inputs(self, root: Path) -> dict[str, str]:
        """path -> sha256 of what the evaluation read: the KGQA file and the KG's data files."""
        inputs = {relative_path(self.path, root): sha256_file(self.path)}
        folder = kg_dir(self.params.artifacts_dir, self.domain)
        manifest = read_manifest(folder)
        for name, sha in (manifest.files.items() if manifest else []):
            inputs[relative_path(folder / name, root)] = sha
        return inputs

    def report_params(self, root: Path) -> dict[str, Any]:
        """The report records the set's coverage summary under ``kgqa``."""
        return {"kgqa": self.summary(root)}

    def tasks(self, params: Params, baseline: str | None, samples: int) -> list[Task]:
        """One task per question and sample: the topic entities in the prompt, the gold answers from the file."""
        graph = self.toolbox.graph(self.domain)
        tasks = []
        for question in self.questions:
            item, context = question.item, ""
            if baseline == "retrieval":
                context = retrieval_context(self.toolbox, item.question, self.domain, params.eval.retrieval_top_k)
            elif baseline == "graph":
                context = scoped_graph_context(graph, question.topics, question.subgraph,
                                               params.eval.graph_max_triples)
            for sample in range(samples):
                tasks.append(Task(qa_id=item.id, domain=self.domain, question=item.question,
                                  gold_answers=question.answers, topic_entities=question.prompt_topics or None,
                                  context=context, sample=sample))
        return tasks

    def engine(self, client: ChatClient, protocol: Protocol, tools: ToolClient | None, params: RolloutParams,
               *, name: str | None = None) -> ScopedRolloutEngine:
        """The engine that restricts each episode's tools to its question's subgraph."""
        return ScopedRolloutEngine(client, protocol, tools, params, scopes=self.scopes, name=name)


def prepare_kgqa(params: Params, kgqa: str | Path, *, triples: str | Path | None = None, domain: str | None = None,
                 hops: int = DEFAULT_HOPS, limit: int | None = None, seed: int = 0) -> KGQASet:
    """Read a KGQA file, build (or reuse) the KG of its triple file, resolve and scope its questions."""
    if not 0 <= hops <= 4:
        raise ValueError(f"hops must be between 0 and 4, not {hops}")
    read = read_kgqa(kgqa)
    where, name = build_kgqa_domain(params, triples, domain)
    toolbox = KGToolbox(where, [name])
    graph = toolbox.graph(name)
    items = stable_subset(read.items, limit, seed)
    questions = [resolve_question(graph, item, hops) for item in items]
    missing = sum(not q.topics for q in questions)
    if missing:
        log.warning("%s: %d of %d questions have no topic entity in the KG %r", kgqa, missing, len(questions), name)
    return KGQASet(path=Path(kgqa), domain=name, params=where, toolbox=toolbox, questions=questions, hops=hops,
                   skipped=read.skipped, total=len(read.items), limit=limit)


# ----- rollouts restricted to each question's subgraph --------------------------------------------------------

class ScopedToolClient:
    """A tool client whose calls carry their episode's :class:`Scope` (in-process or over HTTP alike)."""

    def __init__(self, inner: ToolClient) -> None:
        self.inner = inner
        self.scopes: dict[str, Scope] = {}  # episode id -> scope

    def call(self, call: str | dict[str, Any] | ToolCall, *, graph_type: str | None = None,
             episode_id: str | None = None, question: str | None = None) -> ToolResult:
        scope = self.scopes.get(episode_id) if episode_id is not None else None
        return self.batch([CallRequest(call=call.model_dump() if isinstance(call, ToolCall) else call,
                                       graph_type=graph_type, episode_id=episode_id, scope=scope,
                                       question=question)])[0]

    def batch(self, requests: list[CallRequest]) -> list[ToolResult]:
        scoped = [r.model_copy(update={"scope": self.scopes[r.episode_id]})
                  if r.episode_id is not None and r.episode_id in self.scopes else r for r in requests]
        return self.inner.batch(scoped)


class ScopedRolloutEngine(RolloutEngine):
    """The rollout engine with each task's tools restricted to a scope (``scopes``: qa_id -> Scope).

    Only the episode's start differs: it registers the episode's scope with a :class:`ScopedToolClient`
    around the tool client, which adds it to every call of that episode. Tasks without a scope see the
    whole graph; the ordinary engine is untouched (no cost on the normal path).
    """

    def __init__(self, client: ChatClient, protocol: Protocol, tools: ToolClient | None, params: RolloutParams,
                 *, scopes: Mapping[str, Scope], name: str | None = None) -> None:
        super().__init__(client, protocol, ScopedToolClient(tools) if tools is not None else None, params, name=name)
        self.scopes = dict(scopes)

    def _start(self, task: Task):  # noqa: ANN202 - the engine's private episode type
        episode = super()._start(task)
        scope = self.scopes.get(task.qa_id)
        if scope is not None and isinstance(self.tools, ScopedToolClient):
            self.tools.scopes[episode.episode_id] = scope
        return episode

    def run(self, tasks: list[Task], *, progress: bool = True) -> list:  # noqa: D102
        try:
            return super().run(tasks, progress=progress)
        finally:
            if isinstance(self.tools, ScopedToolClient):
                self.tools.scopes.clear()
