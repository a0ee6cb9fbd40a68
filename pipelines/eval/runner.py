"""Evaluation: roll a model (or a baseline) out on a question source, score it, write the report.

The questions come from a :class:`~pipelines.eval.source.QuestionSource`: the project's QA split
(:class:`SplitSource`) or an external KGQA file (:class:`~pipelines.eval.kgqa.KGQASet`). The model
answers with tools under a protocol (``omne`` by default), or as one of the baselines
(:mod:`pipelines.eval.contexts`): ``direct`` / ``cot`` (no tools), ``tools`` (the base model with
tools: the protocol itself), ``retrieval`` (LightRAG-style: the entities nearest the question and their
neighbourhoods in the prompt, one answer), ``graph`` (the question's subgraph as a JSON list of
triples, as EoG did) and ``lightrag`` (the lightrag-hku library's context, its keywords written by the
evaluated model: :mod:`pipelines.eval.lightrag_baseline`). Greedy decoding by default; the prediction is
the last ``<answer>`` block.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipelines.agent.client import InProcessToolClient, ToolClient
from pipelines.agent.models import load_agent_model, resolve_model_folder
from pipelines.agent.protocols import PROMPT_VERSION, PROTOCOLS, DirectProtocol, Protocol
from pipelines.agent.rollout import RolloutParams, Task
from pipelines.agent.tools import KG_R1_TOOLS, OMNE_TOOLS, SEARCH_TOOLS, TOOL_SPECS, KGToolbox
from pipelines.agent.trajectory import Trajectory
from pipelines.config import Params
from pipelines.errors import ArtifactMissingError
from pipelines.eval.contexts import BASELINES, NO_TOOL_BASELINES, pair_graph_context, retrieval_context
from pipelines.eval.judge import judge_answers
from pipelines.eval.kgqa import prepare_kgqa
from pipelines.eval.lightrag_baseline import library_version as lightrag_version
from pipelines.eval.lightrag_baseline import with_lightrag_contexts
from pipelines.eval.metrics import evaluate_trajectories, repeats_summary
from pipelines.eval.report import REPORT_KIND, read_metrics, write_report
from pipelines.eval.source import QuestionSource
from pipelines.layout import kg_dir, qa_dir, report_dir
from pipelines.llm.base import ChatClient
from pipelines.llm.factory import build_chat_client
from pipelines.llm.generation import generation_work
from pipelines.manifest import ArtifactBuild, model_identity, read_manifest, relative_path
from pipelines.qa.build import GOLD_FILE, read_jsonl
from pipelines.qa.models import GoldPath, QAPair
from pipelines.qa.report import QAReport, qa_quality_report

log = logging.getLogger(__name__)

TOOLS_OF = {"omne": OMNE_TOOLS, "kg_r1": KG_R1_TOOLS, "search": SEARCH_TOOLS}


class EvalResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    folder: Path
    metrics: Any  # EvalMetrics
    trajectories: list[Trajectory]
    kgqa: dict[str, Any] | None = None  # an external KGQA set: its coverage summary (KGQASet.summary)
    lightrag: dict[str, Any] | None = None  # the lightrag baseline: how its retrieval went (LightRAGSummary)
    skipped: bool = False  # True: a current report reused (evaluate_cached), nothing rolled out


def load_split(params: Params, split: str, selection: str | None = None) -> list[QAPair]:
    """The split's pairs; with ``selection``, a params section with domains / exclude_domains (``sft_data``,
    ``rl.stage1``, ``eval``, ...), those of the domains it selects, and an error when none of the split's are."""
    path = qa_dir(params.artifacts_dir, "dataset") / f"{split}.jsonl"
    if not path.is_file():
        raise ArtifactMissingError(f"{path}: the QA dataset is not built (run `omne qa build` or `make run`)")
    pairs: list[QAPair] = read_jsonl(path, QAPair)
    if selection is None:
        return pairs
    chosen = domain_pairs(pairs, params, selection)
    if pairs and not chosen:
        raise ArtifactMissingError(
            f"{path}: no question of the domains {selection}.domains/exclude_domains select "
            f"({', '.join(params.selected_domains(selection))}); the split's domains: "
            f"{', '.join(sorted({p.domain for p in pairs}))} (qa.domains decides which domains the dataset holds)")
    return chosen


def domain_pairs(pairs: list[QAPair], params: Params, selection: str) -> list[QAPair]:
    """The pairs of the domains that params section ``selection`` selects (all of them when it selects every one)."""
    chosen = params.domain_selection(selection)
    if chosen.domains is None and chosen.exclude_domains is None:
        return pairs
    kept = set(params.selected_domains(selection))
    return [p for p in pairs if p.domain in kept]


def stable_sample(pairs: list[QAPair], per_bucket: int | None, seed: int) -> list[QAPair]:
    """Up to ``per_bucket`` pairs of each bucket, chosen by a seeded hash of their ids (same in every run)."""
    if per_bucket is None:
        return pairs
    def rank(pair: QAPair) -> str:
        return hashlib.sha256(f"{seed}:{pair.id}".encode()).hexdigest()
    chosen: list[QAPair] = []
    for bucket in sorted({p.bucket for p in pairs}):
        chosen += sorted((p for p in pairs if p.bucket == bucket), key=rank)[:per_bucket]
    return chosen


def load_gold_paths(params: Params) -> dict[str, GoldPath]:
    path = qa_dir(params.artifacts_dir, "dataset") / GOLD_FILE
    return {g.qa_id: g for g in read_jsonl(path, GoldPath)} if path.is_file() else {}


def make_protocol(params: Params, protocol: str, baseline: str | None) -> Protocol:
    agent = params.agent
    if baseline in NO_TOOL_BASELINES:
        return DirectProtocol(mode=agent.mode, style=baseline)
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    rounds = agent.kg_r1_max_queries + 1 if protocol == "kg_r1" else agent.max_rounds
    return PROTOCOLS[protocol]([TOOL_SPECS[n] for n in TOOLS_OF[protocol]], max_rounds=rounds, mode=agent.mode,
                               specs=params.tools.prompt_specs)


def make_tasks(pairs: list[QAPair], toolbox: KGToolbox | None, params: Params, baseline: str | None,
               samples: int) -> list[Task]:
    """One task per pair and sample, with the baseline's KG context (none without a toolbox)."""
    tasks = []
    for pair in pairs:
        context = ""
        if baseline == "retrieval" and toolbox is not None:
            context = retrieval_context(toolbox, pair.question, pair.domain, params.eval.retrieval_top_k)
        elif baseline == "graph" and toolbox is not None:
            context = pair_graph_context(toolbox, pair, params.eval.graph_max_triples)
        for sample in range(samples):
            tasks.append(Task(qa_id=pair.id, domain=pair.domain, question=pair.question, gold_answers=pair.answers,
                              bucket=pair.bucket, hops=pair.hops, context=context, sample=sample))
    return tasks


@dataclass
class SplitSource(QuestionSource):
    """The project's own QA split: a stable sample of its pairs (``limit`` per bucket), their gold paths,
    and a toolbox over their domains; the report's inputs are the QA dataset's files and the KGs of its domains."""

    params: Params
    split: str
    limit: int | None
    pairs: list[QAPair]
    toolbox: KGToolbox

    @classmethod
    def load(cls, params: Params, split: str, limit: int | None) -> SplitSource:
        """Sample the split (an error when it has no questions); the KG of its domains loads with the tasks,
        so that a current report is found without loading it (``evaluate_cached``)."""
        pairs = stable_sample(load_split(params, split, "eval"), limit, params.eval.seed)
        if not pairs:
            raise ArtifactMissingError(f"the {split} split has no questions")
        toolbox = KGToolbox(params, sorted({p.domain for p in pairs}))
        return cls(params=params, split=split, limit=limit, pairs=pairs, toolbox=toolbox)

    def tasks(self, params: Params, baseline: str | None, samples: int) -> list[Task]:
        self.toolbox.load_all()  # before the rollouts: loading is not their latency
        return make_tasks(self.pairs, self.toolbox, params, baseline, samples)

    def gold_paths(self) -> dict[str, GoldPath]:
        return load_gold_paths(self.params)

    def qa_quality(self) -> QAReport | None:
        """The dataset's quality figures for the evaluated domains (docs/qa.md, "Quality report"), no samples."""
        try:
            return qa_quality_report(self.params, sorted({p.domain for p in self.pairs}), samples=0)
        except ArtifactMissingError:  # split files without the dataset's table (a hand-made project)
            return None

    def inputs(self, root: Path) -> dict[str, str]:
        """The QA dataset's files (the questions, gold paths and the quality figures) and the KG files of the
        questions' domains (what the tools answer from), as their manifests list them."""
        folders = [qa_dir(self.params.artifacts_dir, "dataset"),
                   *(kg_dir(self.params.artifacts_dir, d) for d in sorted({p.domain for p in self.pairs}))]
        inputs: dict[str, str] = {}
        for folder in folders:
            manifest = read_manifest(folder)
            inputs |= {relative_path(folder / f, root): sha for f, sha in (manifest.files.items() if manifest else [])}
        return inputs


def question_source(params: Params, *, split: str | None = None, limit: int | None = None,
                    kgqa: str | Path | None = None, triples: str | Path | None = None, kgqa_domain: str | None = None,
                    kgqa_hops: int = 2) -> QuestionSource:
    """The questions an evaluation asks: those of a KGQA file (``kgqa``; ``limit`` questions, a stable sample) or
    else of a split (default params.eval.split; ``limit`` per bucket); ``limit`` defaults to params.eval.limit."""
    limit = limit if limit is not None else params.eval.limit
    if kgqa is not None:
        return prepare_kgqa(params, kgqa, triples=triples, domain=kgqa_domain, hops=kgqa_hops, limit=limit,
                            seed=params.eval.seed)
    return SplitSource.load(params, split or params.eval.split, limit)


def entity_resolver(toolbox: KGToolbox | None) -> Callable[[str], str | None] | None:
    """text -> the canonical name of the KG entity with that normalised key (in any loaded domain)."""
    if toolbox is None:
        return None
    graphs = [toolbox.graph(d) for d in toolbox.built_domains()]

    def resolve(text: str) -> str | None:
        for graph in graphs:
            index = graph.lookup(text)
            if index is not None:
                return graph.names[index]
        return None

    return resolve


BASE_REPORT_MODEL = "base"
BASE_REPORT_NAME = "base-tools"  # the base model with tools: the report `omne run`, DVC and Dagster share


def run_name(model: str, protocol: str, baseline: str | None, split: str) -> str:
    label = baseline if baseline and baseline != "tools" else protocol
    return re.sub(r"[^a-z0-9_.-]+", "-", f"{Path(model).name}-{label}-{split}".lower()).strip("-")


def evaluate(params: Params, model: str, source: QuestionSource, *, protocol: str | None = None,
             baseline: str | None = None, endpoint: str | None = None, tools: ToolClient | None = None,
             client: ChatClient | None = None, name: str | None = None, progress: bool = True,
             build: ArtifactBuild | None = None) -> EvalResult:
    """Roll ``model`` out on ``source``'s questions (:func:`question_source` builds one from a split or a KGQA
    file), score and report; the report folder is artifacts/reports/<run>/. Always evaluates:
    :func:`evaluate_cached` reuses a current report instead (and passes the ``build`` it has already
    fingerprinted, so that a miss does not hash its inputs twice)."""
    protocol = protocol or params.agent.protocol
    if baseline is not None and baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}: use one of {', '.join(BASELINES)}")
    identity = model_key(params, model, endpoint=endpoint, client=client) if build is None else ""
    chat = client or load_agent_model(model, params, endpoint=endpoint)
    the_protocol = make_protocol(params, protocol, baseline)
    tool_client = tools or InProcessToolClient(source.toolbox) if the_protocol.uses_tools else None
    engine_params = RolloutParams.of_agent(params.agent, seed=params.eval.seed)
    engine = source.engine(chat, the_protocol, tool_client, engine_params, name=baseline or protocol)
    tasks = source.tasks(params, baseline, params.eval.samples)
    lightrag = None
    if baseline == "lightrag":  # LightRAG's context, its keywords written by the evaluated model
        tasks, lightrag = with_lightrag_contexts(params, source.toolbox, chat, tasks, progress=progress)
    runs, trajectories = [], []
    resolve = entity_resolver(source.toolbox)
    gold = source.gold_paths()
    run = name or run_name(chat.model, protocol, baseline, source.split)
    backend = getattr(chat, "backend", None)  # a LocalChatClient's: its counters say where the time went
    work_before = dict(backend.stats) if backend is not None else {}
    started = time.perf_counter()
    for repeat in range(params.eval.repeats):
        engine.params = engine_params.model_copy(update={"seed": params.eval.seed + repeat * 1000})
        repeat_start = time.perf_counter()
        batch = engine.run(tasks, progress=progress)
        runs.append(evaluate_trajectories(batch, run=run, model=chat.model, protocol=protocol, split=source.split,
                                          baseline=baseline, wall_time_s=time.perf_counter() - repeat_start,
                                          resolve=resolve, gold_paths=gold))
        trajectories += batch
    metrics = runs[0]
    if len(runs) > 1:
        metrics.repeats = repeats_summary(runs)
    if backend is not None and backend.stats:
        metrics.efficiency.generation = generation_work(backend.name, work_before, backend.stats)
    if params.eval.judge:  # the Omne-R1 paper's LLM judge for free-form answers, beside EM

        metrics.judge = judge_answers(trajectories, build_chat_client(params), params.llm,
                                      progress=progress).model_dump()
    build = build or report_build(params, report_dir(params.artifacts_dir, run), identity, source, protocol=protocol,
                                  baseline=baseline, endpoint=endpoint)
    folder = write_report(build.folder, metrics, trajectories, gold_paths=gold, inputs=build.inputs,
                          params=build.params, qa_quality=source.qa_quality(),
                          metadata={"wall_time_s": round(time.perf_counter() - started, 2),
                                    **({"lightrag": lightrag} if lightrag else {})})
    return EvalResult(folder=folder, metrics=metrics, trajectories=trajectories, kgqa=source.summary(params.root),
                      lightrag=lightrag)


def model_key(params: Params, model: str, *, endpoint: str | None = None, client: ChatClient | None = None) -> str:
    """The evaluated model as the report's params name it, known before it loads: a local folder's weights
    identity (``manifest.model_identity``: a new checkpoint is a new model), else the endpoint's or client's name."""
    if client is not None:
        return client.model
    if endpoint:
        return model
    return model_identity(resolve_model_folder(model, params))


def report_build(params: Params, folder: Path, model: str, source: QuestionSource, *, protocol: str,
                 baseline: str | None, endpoint: str | None = None) -> ArtifactBuild:
    """The report as an artifact: its inputs are what the source read, its params what shapes its numbers (the
    model's identity, prompt version, agent / eval / tools settings, the source's split, limit and params). Time
    figures are not among them (``evaluate`` puts them in the manifest's metadata), so a rerun can reuse it."""
    shaping = {"model": model, "protocol": protocol, "baseline": baseline, "split": source.split,
               "limit": source.limit, "agent": params.agent.result_settings(), "eval": params.section("eval"),
               "tools": params.section("tools"), "profile": params.profile, "prompt_version": PROMPT_VERSION,
               **({"endpoint": endpoint} if endpoint else {}), **source.report_params(params.root),
               **({"lightrag": {**params.section("lightrag"), "library": lightrag_version()}}
                  if baseline == "lightrag" else {})}
    return ArtifactBuild(folder, REPORT_KIND, source.inputs(params.root), shaping)


def evaluate_cached(params: Params, model: str = "base", *, name: str, force: bool = False, progress: bool = True,
                    source: QuestionSource | None = None, split: str | None = None, limit: int | None = None,
                    protocol: str | None = None, baseline: str | None = None,
                    endpoint: str | None = None) -> EvalResult:
    """``evaluate`` unless the report ``name`` was already made from the same inputs and params (make run's rerun
    stays fast); the model's identity is among the params, so a new checkpoint re-evaluates. The questions:
    ``source``, else those of ``split`` (default eval.split) and ``limit``."""
    source = source or question_source(params, split=split, limit=limit)
    protocol = protocol or params.agent.protocol
    build = report_build(params, report_dir(params.artifacts_dir, name), model_key(params, model, endpoint=endpoint),
                         source, protocol=protocol, baseline=baseline, endpoint=endpoint)
    if build.reusable(force):
        return EvalResult(folder=build.folder, metrics=read_metrics(build.folder), trajectories=[], skipped=True)
    return evaluate(params, model, source, protocol=protocol, baseline=baseline, endpoint=endpoint, name=name,
                    progress=progress, build=build)
