"""The main job of `make run` (`omne run`): every domain's KG, entity index, seed subgraphs, QA pairs and
gold paths, the merged QA dataset and its checks, the base model evaluated with tools, then a short RL stage 1
(whose correct rollouts the SFT data may mix in), stage 2 (SFT conversations, the SFT model, its evaluation) and
a short RL stage 3 (evaluated): the stages of the registry (pipelines/stages.py) that are ``in_run``, in its order.

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
from pipelines.kg.checks import CheckOutcome
from pipelines.kg.graph import GraphStats
from pipelines.layout import RUN_TIMINGS_FILE, reports_dir
from pipelines.manifest import BuildResult
from pipelines.qa.build import read_generic_words, read_qa_dataset
from pipelines.qa.expectations import validate_qa_table
from pipelines.stage_process import read_status_kib, reset_peak_rss, run_in_child, stages_inline
from pipelines.stages import EVALUATION, STAGES, TRAINING, BuiltArtifact, Stage, evaluated_model
from pipelines.tables import (
    print_domain_sources,
    print_domain_table,
    print_eval_table,
    print_qa_stats,
    print_stage_table,
)
from pipelines.train.sft import training_summary

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
    """The per-domain stages of the registry, in its order, for each domain: its KG and entity index, and the seed
    subgraphs, QA pairs and gold paths of those qa.domains / qa.exclude_domains select (a stage's ``domains_from``;
    the others' tools are built, their questions not), with one table row each."""
    times = times or StageTimes()
    built = built if built is not None else []
    stages = [s for s in STAGES.run_stages() if s.per_domain]
    selected = {s.domains_from: set(params.selected_domains(s.domains_from)) for s in stages if s.domains_from}
    rows = []
    for domain in tqdm(domains, desc="domains", unit="domain"):
        start = time.perf_counter()
        results: dict[str, BuildResult] = {}
        for stage in stages:
            if stage.domains_from is None or domain.name in selected[stage.domains_from]:
                target = domain if stage.domain_arg == "domain" else domain.name
                results[stage.name] = build_stage(stage, times, target, params, force=force)
        built += [BuiltArtifact(stage=name, partition=domain.name, folder=result.folder)
                  for name, result in results.items()]
        kg, index = results["knowledge_graph"], results["entity_index"]
        qa_steps = [result for name, result in results.items() if STAGES.get(name).domains_from == "qa"]
        rows.append(DomainRow(
            domain=domain.name,
            stats=GraphStats.model_validate(kg.manifest.metadata["stats"]),
            recall_at_1=index.manifest.metadata["self_retrieval"]["recall_at_1"],
            kg_state="cached" if kg.skipped else "built",
            index_state="cached" if index.skipped else "built",
            qa_state="-" if not qa_steps else "cached" if all(r.skipped for r in qa_steps) else "built",
            seconds=round(time.perf_counter() - start, 2),
        ))
    return rows


def build_stage(stage: Stage, times: StageTimes, /, *args: Any, **kwargs: Any) -> Any:
    """``stage``'s build function called with ``args`` (after which the stage's own ``args``) and ``kwargs``, timed as
    the stage's row of the timing table: in this process, or in a child process of its own (``stage.process``)."""
    args = (*args, *stage.args)
    if stage.process == "main":
        with times.timed(stage.label):
            return stage.function(*args, **kwargs)
    return times.run(stage.label, stage.function, *args, **kwargs)


def left_out(stage: Stage, *, skip_eval: bool, skip_train: bool) -> bool:
    """Whether `omne run --skip-eval` (every training and evaluation stage) or `--skip-train` (the training stages
    and what reads a trained model) leaves ``stage`` out."""
    if stage.group not in (TRAINING, EVALUATION):
        return False
    trained = stage.group == TRAINING or any(STAGES.get(a).group == TRAINING for a in STAGES.ancestors(stage.name))
    return skip_eval or (skip_train and trained)


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

    return validate_qa_table(read_qa_dataset(params), params.qa.max_hops, strict_path=params.qa.strict_path,
                             generic_words=read_generic_words(params), name_rules=params.qa.name_rules)


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


def stage_line(stage: Stage, result: Any) -> str:
    """The line `omne run` prints after a training stage."""

    done = "up to date" if result.skipped else "trained"
    if stage.function.__name__ == "train_rl":
        return f"rl stage {stage.args[0]}: {done}, {rl_summary_line(result.manifest)} -> {result.folder}"
    if stage.name == "sft_model":
        return f"sft model: {done}, {training_summary(result.manifest)} -> {result.folder}"
    rows = result.manifest.rows
    count = rows.get("conversations", sum(rows.values()))
    return f"{stage.label.lower()}: {'up to date' if result.skipped else 'built'}, {count}"


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

    times = StageTimes(inline=inline)
    built: list[BuiltArtifact] = []
    print_domain_sources(domains)
    try:
        print_domain_table(build_domain_artifacts(params, domains, force=force, times=times, built=built))
        results: dict[str, Any] = {}
        runs = []
        for stage in STAGES.run_stages():  # the cross-domain stages, in the registry's (topological) order
            if stage.per_domain or left_out(stage, skip_eval=skip_eval, skip_train=skip_train):
                continue
            if stage.report:  # an evaluation (the trajectories stay behind in the report's files)
                model = (str(results[stage.evaluates].folder) if stage.evaluates in results
                         else evaluated_model(stage, params.artifacts_dir))
                result = times.run(stage.label, evaluate_stage, params, model, stage.report, force)
                runs.append(result)
            elif stage.process == "main":  # the QA dataset, checked before anything trains on it
                with times.timed(stage.label):
                    result = stage.function(params, run_qa_domains(params, domains), force=force)
                    print_qa_stats(result.stats)
                    if not print_check_outcomes(qa_dataset_checks(params)):
                        raise QAChecksFailed("the QA dataset failed a blocking check (above); nothing was trained "
                                             "on it")
                if not all_domains:
                    continue
            else:
                result = build_stage(stage, times, params, force=force)
                print(stage_line(stage, result), flush=True)
            results[stage.name] = result
            built.append(BuiltArtifact(stage=stage.name, folder=result.folder))
        if runs:
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
