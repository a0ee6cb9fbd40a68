"""Evaluation: roll a model (or a baseline) out on a QA split, score it, write the report.

The model answers with tools under a protocol (``omne`` by default), or as one of the baselines:
``direct`` / ``cot`` (no tools), ``tools`` (the base model with tools: the protocol itself),
``retrieval`` (LightRAG-style: the entities nearest the question and their neighbourhoods in the
prompt, one answer) and ``graph`` (the question's subgraph as a JSON list of triples, as EoG did).
Greedy decoding by default; the prediction is the last ``<answer>`` block.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipelines.agent.client import InProcessToolClient, ToolClient
from pipelines.agent.protocols import PROTOCOLS, DirectProtocol, Protocol
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.tools import KG_R1_TOOLS, OMNE_TOOLS, SEARCH_TOOLS, TOOL_SPECS, KGToolbox
from pipelines.agent.trajectory import Trajectory
from pipelines.config import Params
from pipelines.errors import ArtifactMissingError
from pipelines.layout import qa_dir, report_dir
from pipelines.llm.base import ChatClient
from pipelines.manifest import read_manifest, relative_path
from pipelines.qa.build import GOLD_FILE, read_jsonl
from pipelines.qa.models import GoldPath, QAPair

log = logging.getLogger(__name__)

BASELINES = ("direct", "cot", "tools", "retrieval", "graph")
TOOLS_OF = {"omne": OMNE_TOOLS, "kg_r1": KG_R1_TOOLS, "search": SEARCH_TOOLS}


class EvalResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    folder: Path
    metrics: Any  # EvalMetrics
    trajectories: list[Trajectory]
    kgqa: dict[str, Any] | None = None  # an external KGQA set: its coverage summary (KGQASet.summary)


def load_split(params: Params, split: str) -> list[QAPair]:
    path = qa_dir(params.artifacts_dir, "dataset") / f"{split}.jsonl"
    if not path.is_file():
        raise ArtifactMissingError(f"{path}: the QA dataset is not built (run `omne qa build` or `make run`)")
    return read_jsonl(path, QAPair)


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
    if baseline in ("direct", "cot", "retrieval", "graph"):
        return DirectProtocol(mode=agent.mode, style=baseline)
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    rounds = agent.kg_r1_max_queries + 1 if protocol == "kg_r1" else agent.max_rounds
    return PROTOCOLS[protocol]([TOOL_SPECS[n] for n in TOOLS_OF[protocol]], max_rounds=rounds, mode=agent.mode)


def retrieval_context(toolbox: KGToolbox, pair: QAPair, top_k: int) -> str:
    """LightRAG-style single-shot retrieval: the entities nearest the question, with their neighbourhoods."""
    return retrieval_facts(toolbox, pair.question, pair.domain, top_k)


def retrieval_facts(toolbox: KGToolbox, question: str, domain: str, top_k: int) -> str:
    """``retrieval_context`` for any question of a domain (external KGQA sets have no QAPair)."""
    graph = toolbox.graph(domain)
    vector = toolbox._embed(question)  # noqa: SLF001 - the toolbox's own cached encoder
    ids = [i for i, _ in graph.nearest(vector, top_k)] if graph.vectors is not None else []
    facts = [toolbox.call(json.dumps({"name": "node_info", "arguments": {"node_name": graph.names[i],
                                                                       "graph_type": domain}})).content
             for i in ids]
    return "Knowledge-graph facts:\n" + "\n\n".join(facts)


def graph_context(toolbox: KGToolbox, pair: QAPair, max_triples: int) -> str:
    """EoG's graph-in-prompt: the start entity's 2-hop neighbourhood as a JSON list of triples."""
    graph = toolbox.graph(pair.domain)
    start = graph.lookup(pair.start_entity)
    triples: list[list[str]] = [[e.src, e.keywords, e.dst] for e in pair.path_edges]  # the question's own path
    if start is not None:
        frontier, seen = [start], {start}
        for _ in range(2):
            nxt = []
            for node in frontier:
                for rel in graph.incident(node):
                    src, dst = int(graph.rel_src[rel]), int(graph.rel_dst[rel])
                    triple = [graph.names[src], graph.rel_keywords[rel], graph.names[dst]]
                    if triple not in triples:
                        triples.append(triple)
                    other = dst if src == node else src
                    if other not in seen:
                        seen.add(other)
                        nxt.append(other)
            frontier = nxt
    kept = triples[:max_triples]
    kept.sort()  # the path's own triples must not stand out by position
    return "Knowledge-graph triples (head, relation, tail):\n" + json.dumps(kept, ensure_ascii=False)


def make_tasks(pairs: list[QAPair], toolbox: KGToolbox | None, params: Params, baseline: str | None,
               samples: int) -> list[Task]:
    tasks = []
    for pair in pairs:
        context = ""
        if baseline == "retrieval" and toolbox is not None:
            context = retrieval_context(toolbox, pair, params.eval.retrieval_top_k)
        elif baseline == "graph" and toolbox is not None:
            context = graph_context(toolbox, pair, params.eval.graph_max_triples)
        for sample in range(samples):
            tasks.append(Task(qa_id=pair.id, domain=pair.domain, question=pair.question, gold_answers=pair.answers,
                              bucket=pair.bucket, hops=pair.hops, context=context, sample=sample))
    return tasks


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


def evaluate(params: Params, model: str = "base", *, split: str | None = None, limit: int | None = None,
             protocol: str | None = None, baseline: str | None = None, endpoint: str | None = None,
             tools: ToolClient | None = None, client: ChatClient | None = None, name: str | None = None,
             progress: bool = True, kgqa: str | Path | None = None, triples: str | Path | None = None,
             kgqa_domain: str | None = None, kgqa_hops: int = 2) -> EvalResult:
    """Roll out, score and report; the report folder is artifacts/reports/<run>/.

    With ``kgqa`` (a WebQSP/CWQ/GrailQA/QALD-style file) the questions come from that file instead of
    a split, on the KG of ``triples`` (domain ``kgqa_domain``), each episode's tools restricted to the
    ``kgqa_hops`` subgraph around its topic entities (pipelines.eval.kgqa); ``limit`` is then the number
    of questions (a stable sample).
    """
    from pipelines.agent.models import load_agent_model
    from pipelines.eval.metrics import evaluate_trajectories, repeats_summary
    from pipelines.eval.report import write_report

    protocol = protocol or params.agent.protocol
    if baseline is not None and baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}: use one of {', '.join(BASELINES)}")
    limit = limit if limit is not None else params.eval.limit
    external = None
    if kgqa is not None:
        from pipelines.eval.kgqa import prepare_kgqa

        external = prepare_kgqa(params, kgqa, triples=triples, domain=kgqa_domain, hops=kgqa_hops, limit=limit,
                                seed=params.eval.seed)
        split, toolbox, pairs = external.split, external.toolbox, []
    else:
        split = split or params.eval.split
        pairs = stable_sample(load_split(params, split), limit, params.eval.seed)
        if not pairs:
            raise ArtifactMissingError(f"the {split} split has no questions")
        toolbox = KGToolbox(params, sorted({p.domain for p in pairs}))
        toolbox.load_all()
    chat = client or load_agent_model(model, params, endpoint=endpoint)
    if client is None and hasattr(chat, "prefix_store"):  # the local backend: its prefix store sized by params
        chat.prefix_store.max_bytes = params.agent.prefix_cache_mb << 20
    the_protocol = make_protocol(params, protocol, baseline)
    tool_client = tools or InProcessToolClient(toolbox) if the_protocol.uses_tools else None
    engine_params = RolloutParams(max_new_tokens=params.agent.max_new_tokens,
                                  temperature=params.agent.temperature, batch_size=params.agent.batch_size,
                                  seed=params.eval.seed)
    label = baseline or protocol
    if external is not None:
        engine = external.engine(chat, the_protocol, tool_client, engine_params, name=label)
        tasks = external.tasks(params, baseline, params.eval.samples)
    else:
        engine = RolloutEngine(chat, the_protocol, tool_client, engine_params, name=label)
        tasks = make_tasks(pairs, toolbox, params, baseline, params.eval.samples)
    runs, trajectories = [], []
    resolve = entity_resolver(toolbox)
    gold = load_gold_paths(params) if external is None else {}
    run = name or run_name(chat.model, protocol, baseline, split)
    started = time.perf_counter()
    for repeat in range(params.eval.repeats):
        engine.params = engine_params.model_copy(update={"seed": params.eval.seed + repeat * 1000})
        repeat_start = time.perf_counter()
        batch = engine.run(tasks, progress=progress)
        runs.append(evaluate_trajectories(batch, run=run, model=chat.model, protocol=protocol, split=split,
                                          baseline=baseline, wall_time_s=time.perf_counter() - repeat_start,
                                          resolve=resolve, gold_paths=gold))
        trajectories += batch
    metrics = runs[0]
    if len(runs) > 1:
        metrics.repeats = repeats_summary(runs)
    if params.eval.judge:  # the Omne-R1 paper's LLM judge for free-form answers, beside EM
        from pipelines.eval.judge import judge_answers
        from pipelines.llm.factory import build_chat_client

        metrics.judge = judge_answers(trajectories, build_chat_client(params), params.llm,
                                      progress=progress).model_dump()
    if external is not None:
        inputs = external.inputs(params.root)
    else:
        dataset = read_manifest(qa_dir(params.artifacts_dir, "dataset"))
        inputs = {relative_path(qa_dir(params.artifacts_dir, "dataset") / f, params.root): sha
                  for f, sha in (dataset.files.items() if dataset else []) if f in (f"{split}.jsonl", GOLD_FILE)}
    shaping = {"model": chat.model, "protocol": protocol, "baseline": baseline, "split": split, "limit": limit,
               "agent": _agent_settings(params), "eval": params.section("eval"), "profile": params.profile,
               "wall_time_s": round(time.perf_counter() - started, 2)}
    summary = external.summary(params.root) if external is not None else None
    if summary is not None:
        shaping["kgqa"] = summary
    folder = write_report(report_dir(params.artifacts_dir, run), metrics, trajectories, gold_paths=gold,
                          inputs=inputs, params=shaping)
    return EvalResult(folder=folder, metrics=metrics, trajectories=trajectories, kgqa=summary)


def evaluate_cached(params: Params, model: str = "base", *, name: str, force: bool = False, progress: bool = True,
                    **options: Any) -> EvalResult:
    """``evaluate`` unless the report ``name`` was already made from the same inputs and settings (make run's
    rerun stays fast); the model's identity is part of the settings, so a new checkpoint re-evaluates."""
    from pipelines.agent.models import resolve_model_folder
    from pipelines.eval.report import read_metrics
    from pipelines.manifest import model_identity

    folder = report_dir(params.artifacts_dir, name)
    manifest = read_manifest(folder)
    identity = model_identity(resolve_model_folder(model, params)) if not options.get("endpoint") else model
    wanted = {"agent": _agent_settings(params), "eval": params.section("eval"), "tools": params.section("tools"),
              "profile": params.profile,
              "model": identity, **{k: v for k, v in options.items() if isinstance(v, str | int | None)}}
    dataset = read_manifest(qa_dir(params.artifacts_dir, "dataset"))
    if (not force and manifest is not None and dataset is not None
            and manifest.metadata.get("cache_key") == _cache_key(wanted, dataset.files)):
        return EvalResult(folder=folder, metrics=read_metrics(folder), trajectories=[])
    result = evaluate(params, model, name=name, progress=progress, **options)
    manifest = read_manifest(folder)
    if manifest is not None and dataset is not None:
        from pipelines.manifest import write_manifest

        manifest.metadata["cache_key"] = _cache_key(wanted, dataset.files)
        write_manifest(folder, manifest)
    return result


def _agent_settings(params: Params) -> dict[str, Any]:
    """The agent section as it shapes a report: without prefix_cache_mb (memory only; replies are the same)."""
    return params.agent.model_dump(mode="json", exclude={"prefix_cache_mb"})


def _cache_key(settings: dict[str, Any], dataset_files: dict[str, str]) -> str:
    blob = json.dumps({"settings": settings, "dataset": dataset_files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
