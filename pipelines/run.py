"""The main job of `make run` (`omne run`): every domain's KG, entity index, seed subgraphs, QA pairs and
gold paths, the merged QA dataset and its checks, the base model evaluated with tools, then a short RL stage 1
(whose correct rollouts the SFT data may mix in), stage 2 (SFT conversations, the SFT model, its evaluation) and
a short RL stage 3 (evaluated).

Every step is the same library build that the Dagster asset and the DVC stage of that name call, and is
skipped when its manifest says it is up to date, so a rerun (or a resumed run) only does what is missing.
The heavy steps (evaluations, SFT, RL) each run in a child process of their own, as under DVC and Dagster, so
that none inherits the memory and threads an earlier one left in a long-lived process. At the end the job tells
the project's other entry points what it built or found current (the `omne.recorders` entry points: Dagster's
instance and DVC's lock file), so that neither rebuilds it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from tqdm.auto import tqdm

from pipelines.config import Params
from pipelines.domains import Domain
from pipelines.errors import ConfigError
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.checks import CheckOutcome
from pipelines.kg.graph import GraphStats
from pipelines.layout import RUN_TIMINGS_FILE, reports_dir
from pipelines.manifest import BuildResult
from pipelines.qa.build import (
    DatasetResult,
    build_gold_paths,
    build_qa_dataset,
    build_qa_pairs,
    build_seed_subgraphs,
)
from pipelines.stage_process import read_status_kib, reset_peak_rss, run_in_child, stages_inline

log = logging.getLogger(__name__)

RECORDERS_GROUP = "omne.recorders"
T = TypeVar("T")


class DomainRow(BaseModel):
    domain: str
    stats: GraphStats
    recall_at_1: float
    kg_state: str
    index_state: str
    qa_state: str = ""
    seconds: float


class BuiltArtifact(BaseModel):
    """One artifact the job built or found up to date: its stage (the Dagster asset and DVC stage of the same
    name), its domain partition, and its folder."""

    stage: str
    partition: str | None = None
    folder: Path

    @property
    def dvc_stage(self) -> str:
        """The stage's address in dvc.yaml (`foreach` stages are `<name>@<domain>`)."""
        return f"{self.stage}@{self.partition}" if self.partition else self.stage


class Recorder(Protocol):
    """What an `omne.recorders` entry point is: told what a run made current, it records it where another
    entry point looks (returns one line for the user)."""

    def __call__(self, params: Params, params_file: Path | None, built: list[BuiltArtifact]) -> str: ...


class StageTimes:
    """Wall seconds and peak resident memory per stage of one `omne run` (summed / maxed over domains), in the
    order the stages ran, and the process each ran in: printed at its end and kept in
    artifacts/reports/run_timings.json.

    ``timed`` measures a block of this process (its high-water mark reset at the start); ``run`` runs a heavy
    stage in a child process of its own (``pipelines.stage_process``) and records the child's peak, unless
    ``inline`` (``$OMNE_STAGES_INLINE``) keeps it here.
    """

    def __init__(self, *, inline: bool | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.peak_rss_mb: dict[str, float] = {}
        self.pids: dict[str, int] = {}
        self.inline = stages_inline() if inline is None else inline
        self.started = time.perf_counter()

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        resettable = reset_peak_rss()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start
            self.pids[stage] = os.getpid()
            peak_kib = read_status_kib("VmHWM") if resettable else None
            if peak_kib is not None:
                self._peak(stage, peak_kib)

    def run(self, stage: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` as ``stage``: in a child process of its own (a module-level ``fn``, picklable
        arguments and result), whose peak RSS is the stage's; in this process when ``inline``."""
        if self.inline:
            with self.timed(stage):
                return fn(*args, **kwargs)
        start = time.perf_counter()
        try:
            child = run_in_child(fn, *args, **kwargs)
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start
        self.pids[stage] = child.pid
        if child.peak_rss_kib is not None:
            self._peak(stage, child.peak_rss_kib)
        return child.value()

    def _peak(self, stage: str, kib: int) -> None:
        self.peak_rss_mb[stage] = max(self.peak_rss_mb.get(stage, 0.0), kib / 1024)

    def process(self, stage: str) -> str:
        """Where the stage ran: ``main`` (the `omne run` process) or ``child`` (a process of its own)."""
        return "main" if self.pids.get(stage, os.getpid()) == os.getpid() else "child"

    def total(self) -> float:
        return time.perf_counter() - self.started

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"stages_s": {k: round(v, 2) for k, v in self.seconds.items()},
                                    "peak_rss_mb": {k: round(v, 1) for k, v in self.peak_rss_mb.items()},
                                    "process": {k: self.process(k) for k in self.seconds},
                                    "pid": dict(self.pids), "main_pid": os.getpid(),
                                    "total_s": round(self.total(), 2)}, indent=2) + "\n", encoding="utf-8")


class QAChecksFailed(RuntimeError):
    """The QA dataset failed a blocking check: training on it would learn from broken data."""


def build_domain_artifacts(params: Params, domains: list[Domain], *, force: bool = False,
                           times: StageTimes | None = None, built: list[BuiltArtifact] | None = None,
                           ) -> list[DomainRow]:
    """KG and entity index of each domain, and the seed subgraphs, QA pairs and gold paths of those qa.domains /
    qa.exclude_domains select (the others' tools are built, their questions not), with one table row each."""
    times = times or StageTimes()
    built = built if built is not None else []
    with_qa = set(params.selected_domains("qa"))
    rows = []
    for domain in tqdm(domains, desc="domains", unit="domain"):
        start = time.perf_counter()
        with times.timed("knowledge graphs"):
            kg = build_knowledge_graph(domain, params, force=force)
        with times.timed("entity indexes"):
            index = build_entity_index(domain.name, params, force=force)
        qa_steps: list[tuple[str, BuildResult]] = []
        if domain.name in with_qa:
            with times.timed("seed subgraphs"):
                qa_steps.append(("seed_subgraphs", build_seed_subgraphs(domain.name, params, force=force)))
            with times.timed("QA pairs"):
                qa_steps.append(("qa_pairs", build_qa_pairs(domain.name, params, force=force)))
            with times.timed("gold paths"):
                qa_steps.append(("gold_paths", build_gold_paths(domain.name, params, force=force)))
        built += [BuiltArtifact(stage=stage, partition=domain.name, folder=result.folder)
                  for stage, result in (("knowledge_graph", kg), ("entity_index", index), *qa_steps)]
        rows.append(DomainRow(
            domain=domain.name,
            stats=GraphStats.model_validate(kg.manifest.metadata["stats"]),
            recall_at_1=index.manifest.metadata["self_retrieval"]["recall_at_1"],
            kg_state="cached" if kg.skipped else "built",
            index_state="cached" if index.skipped else "built",
            qa_state="-" if not qa_steps else "cached" if all(r.skipped for _, r in qa_steps) else "built",
            seconds=round(time.perf_counter() - start, 2),
        ))
    return rows


def run_qa_domains(params: Params, domains: list[Domain]) -> list[str]:
    """The run's domains that qa.domains / qa.exclude_domains select: what its QA dataset merges."""
    with_qa = params.selected_domains("qa")
    names = [d.name for d in domains if d.name in with_qa]
    if not names:
        raise ConfigError(f"none of the run's domains ({', '.join(d.name for d in domains)}) is selected by "
                          f"qa.domains / qa.exclude_domains (they select {', '.join(with_qa)})")
    return names


def qa_dataset_checks(params: Params) -> list[CheckOutcome]:
    """The QA dataset's blocking checks (the Great Expectations suite, split leakage), as its asset runs them."""
    from pipelines.qa.build import read_generic_words, read_qa_dataset
    from pipelines.qa.expectations import validate_qa_table

    return validate_qa_table(read_qa_dataset(params), params.qa.max_hops, strict_path=params.qa.strict_path,
                             generic_words=read_generic_words(params))


def print_check_outcomes(outcomes: list[CheckOutcome]) -> bool:
    """One line per check (and the failing check's metadata); True when all passed."""
    for outcome in outcomes:
        print(f"check {outcome.spec.name}: {'passed' if outcome.passed else 'FAILED'}", flush=True)
        if not outcome.passed:
            print(json.dumps(outcome.metadata, indent=2, default=str), flush=True)
    return all(o.passed for o in outcomes)


def evaluate_stage(params: Params, model: str, name: str, force: bool) -> Any:
    """``evaluate_cached`` as a stage of `omne run` (in a child process: the trajectories, which the job does not
    need, stay behind in the report's files)."""
    from pipelines.eval.runner import evaluate_cached

    return evaluate_cached(params, model, name=name, force=force).model_copy(update={"trajectories": []})


def _evaluation(params: Params, model: str, name: str, stage: str, force: bool, times: StageTimes,
                label: str, built: list[BuiltArtifact]) -> Any:
    result = times.run(label, evaluate_stage, params, model, name, force)
    built.append(BuiltArtifact(stage=stage, folder=result.folder))
    return result


def train_and_evaluate(params: Params, *, force: bool, times: StageTimes, built: list[BuiltArtifact]) -> list[Any]:
    """RL stage 1 (from the base model), stage 2 (SFT conversations, the SFT model, its evaluation), then RL stage 3
    from the SFT model and its evaluation, on the same test sample as the base model's; each in a process of its
    own (``StageTimes.run``). Stage 1 comes first because the SFT conversations may mix in its correct rollouts
    (``sft_data.sources: [template, agent]``), as Dagster's and DVC's graphs say; it needs nothing of stage 2."""
    from pipelines.train.sft import training_summary
    from pipelines.train.sft_data import build_sft_conversations
    from pipelines.train.stage2 import build_sft_model

    rl_stage(params, 1, force=force, times=times, built=built)
    data = times.run("SFT conversations", build_sft_conversations, params, force=force)
    built.append(BuiltArtifact(stage="sft_conversations", folder=data.folder))
    print(f"sft conversations: {'up to date' if data.skipped else 'built'}, {data.manifest.rows['conversations']}")
    model = times.run("SFT model", build_sft_model, params, force=force)
    built.append(BuiltArtifact(stage="sft_model", folder=model.folder))
    print(f"sft model: {'up to date' if model.skipped else 'trained'}, {training_summary(model.manifest)} "
          f"-> {model.folder}", flush=True)
    runs = [_evaluation(params, str(model.folder), "sft-tools", "sft_eval_report", force, times,
                        "evaluate SFT model", built)]
    result = rl_stage(params, 3, force=force, times=times, built=built)
    runs.append(_evaluation(params, str(result.folder), "rl-stage3-tools", "stage3_eval_report", force, times,
                            "evaluate RL stage 3", built))
    return runs


def rl_stage(params: Params, stage: int, *, force: bool, times: StageTimes, built: list[BuiltArtifact]) -> Any:
    """One RL stage as a step of `omne run` (a process of its own), with its line of output."""
    from pipelines.train.rl import train_rl

    result = times.run(f"RL stage {stage}", train_rl, params, stage, force=force)
    built.append(BuiltArtifact(stage=f"stage{stage}_rl_model", folder=result.folder))
    print(f"rl stage {stage}: {'up to date' if result.skipped else 'trained'}, {rl_summary_line(result.manifest)} -> "
          f"{result.folder}", flush=True)
    return result


def rl_summary_line(manifest: Any) -> str:
    """One line on an RL model's training (the CLI and `omne run` print it): steps, the mean reward of the first
    and last third of them, validation EM, the correct rollouts kept."""
    meta, rows = manifest.metadata, manifest.rows
    validation = f"validation EM {meta['val_em']}" if meta.get("val_em") else "no validation (val_questions: 0)"
    return (f"{rows.get('steps')} steps, mean reward {fmt_score(meta.get('reward_first_third_mean'))} (first third) "
            f"-> {fmt_score(meta.get('reward_last_third_mean'))} (last third), {validation}, "
            f"{rows.get('correct_rollouts', 0)} correct rollouts kept")


def fmt_score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def run_main_job(params: Params, domains: list[Domain], *, all_domains: bool, force: bool = False,
                 skip_eval: bool = False, skip_train: bool = False, params_file: Path | None = None,
                 record: bool = True, inline: bool | None = None) -> StageTimes:
    """The whole job, printing a table per stage; raises QAChecksFailed when the dataset fails a blocking check.

    The evaluations and the training stages each run in a child process of their own (their memory and threads
    go back to the OS when they end), unless ``inline`` (default: ``$OMNE_STAGES_INLINE``) keeps them here.

    The cross-domain stages (dataset, training, evaluation) are recorded for the other entry points only when
    every registered domain took part (``all_domains``): a dataset of some domains is not the one DVC and
    Dagster describe.
    """
    from pipelines.tables import (
        print_domain_sources,
        print_domain_table,
        print_eval_table,
        print_qa_stats,
        print_stage_table,
    )

    times = StageTimes(inline=inline)
    built: list[BuiltArtifact] = []
    print_domain_sources(domains)
    try:
        print_domain_table(build_domain_artifacts(params, domains, force=force, times=times, built=built))
        with times.timed("QA dataset + checks"):
            dataset: DatasetResult = build_qa_dataset(params, run_qa_domains(params, domains), force=force)
            print_qa_stats(dataset.stats)
            if not print_check_outcomes(qa_dataset_checks(params)):
                raise QAChecksFailed("the QA dataset failed a blocking check (above); nothing was trained on it")
        if all_domains:
            built.append(BuiltArtifact(stage="qa_dataset", folder=dataset.folder))
        if not skip_eval:
            from pipelines.eval.runner import BASE_REPORT_MODEL, BASE_REPORT_NAME

            runs = [_evaluation(params, BASE_REPORT_MODEL, BASE_REPORT_NAME, "eval_report", force, times,
                                "evaluate base model", built)]
            if not skip_train:
                runs += train_and_evaluate(params, force=force, times=times, built=built)
            print_eval_table([r.metrics for r in runs])
            for result in runs:
                print(f"report: {result.folder / 'report.html'}")
    finally:  # what finished is recorded even when a later stage fails or the run is interrupted
        if record:
            kept = built if all_domains else [b for b in built if b.partition is not None]
            with times.timed("record (Dagster, DVC)"):
                for line in record_builds(params, params_file, kept):
                    print(line, flush=True)
    print_stage_table(times)
    times.write(reports_dir(params.artifacts_dir) / RUN_TIMINGS_FILE)
    return times


def record_builds(params: Params, params_file: Path | None, built: list[BuiltArtifact]) -> list[str]:
    """Hand what was built to every installed recorder (entry points of group `omne.recorders`); a recorder
    that fails is reported, never fatal: the artifacts are complete whatever it says."""
    if not built:
        return []
    lines = []
    for entry in sorted(entry_points(group=RECORDERS_GROUP), key=lambda e: e.name):
        try:
            recorder: Recorder = entry.load()
            lines.append(recorder(params, params_file, built))
        except Exception as exc:  # noqa: BLE001 - recording is bookkeeping; the build itself succeeded
            log.debug("recorder %s failed", entry.name, exc_info=True)
            lines.append(f"record {entry.name}: skipped ({type(exc).__name__}: {exc})")
    return [line for line in lines if line]
