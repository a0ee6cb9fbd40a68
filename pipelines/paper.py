"""`omne paper tables`: the Omne-R1 paper's Tables 1-8 and Figures 2-4 rebuilt from this project's runs, in the
paper's layout (docs/paper.md).

Each table names the models and reports it needs; each is built by the stage functions every entry point uses
(``build_sft_model``, ``train_rl``, ``evaluate_cached``, the think-weight sweep), so whatever is current is reused,
and what `omne run` builds (base-tools, sft, sft-tools, rl-stage1, rl-stage3, rl-stage3-tools) is shared with it.
A variant is the profile's params with a few values overridden (``with_overrides``): e.g. ``sft.method: full`` and
``sft.mode`` / ``agent.mode: no_think`` (Table 4), ``rl.stage1.data_mix`` (Table 3). Its model and report get a
name of their own (``paper-...``), unless the variant is the profile itself, whose run artifacts it then is.

Writes artifacts/reports/paper/table<N>.md and .json (the JSON: every cell's correct / n / accuracy and Wilson 95%
interval, the report it comes from, the paper's figure for the same cell) and figure<N>.png and .json (the
plotted series, read from the models' trainer_state.json).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pipelines.atomic import atomic_write_text
from pipelines.config import Params, with_overrides
from pipelines.domains import load_registry
from pipelines.eval.report import read_metrics
from pipelines.eval.stats import wilson_interval
from pipelines.layout import SFT_MODEL, model_dir, qa_dir, reports_dir, rl_model_name
from pipelines.manifest import BuildResult, read_manifest, relative_path
from pipelines.run import (
    QAChecksFailed,
    StageTimes,
    build_domain_artifacts,
    build_stage,
    qa_dataset_checks,
    run_qa_domains,
)
from pipelines.stages import BASE_MODEL, RL_STAGE3_REPORT, SFT_REPORT, STAGES
from pipelines.train.rl.data import rl_questions
from pipelines.train.sweep import run_think_sweep, weight_label

TABLES = (1, 2, 3, 4, 5, 6, 7, 8)
FIGURES = (2, 3, 4)
BUCKETS = ("1-2", "3+")
HOP_COLUMNS = ("1/2 Hop (%)", "3+ Hop (%)")
PLAIN_SFT_WEIGHT = 1.0  # Table 4's models: plain SFT (the paper brings in the think-loss weight after it, 4.2.3)
MIX_SLUGS = {"1-2": "1-2hop", "3+": "3plus", "mixed": "mixed"}

# The paper's figures (percent; None: a cell the paper leaves empty), by table and row key, for the comparison in
# each table's JSON and docs/paper.md. Tables 2 and 7 were scored by an LLM judge (DeepSeek-R1) except the tools row.
PAPER: dict[int, dict[str, tuple[float | None, float | None]]] = {
    2: {"direct-think": (26.0, 26.3), "direct-no-think": (23.8, 26.2), "lightrag-think": (62.5, 49.5),
        "lightrag-no-think": (59.2, 46.8), "base-tools": (34.9, 15.6)},
    3: {"1-2": (71.2, None), "3+": (None, 28.9), "mixed": (57.5, 32.1)},
    4: {"base": (34.9, 15.6), "lora-no_think": (92.4, 60.0), "lora-think": (83.8, 47.2),
        "full-no_think": (94.1, 68.4), "full-think": (89.2, 57.1)},
    5: {"1": (87.9, 52.8), "0.8": (88.0, 53.8), "0.2": (88.4, 54.2), "0.1": (87.9, 53.4), "0.05": (88.6, 54.4),
        "0.01": (88.6, 55.6), "0.001": (89.2, 60.5), "0": (83.0, 43.8)},
    6: {"sft-lora": (89.2, 60.5), "rl-lora": (92.7, 63.5), "sft-full": (94.1, 68.4), "rl-full": (94.0, 69.3)},
    7: {"direct": (26.0, 26.3), "lightrag": (62.5, 49.5)},
    8: {"base": (34.9, 15.6), "stage1": (57.5, 32.1), "sft-lora": (89.2, 60.5), "sft-full": (94.1, 68.4),
        "stage3": (94.0, 69.3)},
}


class Score(BaseModel):
    """One cell: accuracy on one bucket of one report, with its Wilson 95% interval."""

    correct: int
    n: int
    accuracy: float
    low: float
    high: float
    method: str = Field(description="`EM` (exact match) or `judge` (the LLM judge's verdicts, eval.judge)")

    def cell(self) -> str:
        return f"{100 * self.accuracy:.1f} [{100 * self.low:.1f}, {100 * self.high:.1f}]"


class Row(BaseModel):
    key: str
    label: list[str] = Field(description="the row's leading cells, as the paper's")
    cells: list[str] = Field(description="the rest of the row, in the paper's column order")
    scores: dict[str, Score | None] = Field({}, description="bucket -> our score (None: not run)")
    counts: dict[str, int] = Field({}, description="Table 1: bucket -> questions")
    paper: dict[str, float | None] = Field({}, description="bucket -> the paper's figure (percent)")
    model: str | None = None
    report: str | None = None
    note: str | None = None


class PaperTable(BaseModel):
    number: int
    title: str
    columns: list[str]
    rows: list[Row]
    notes: list[str] = []
    profile: str

    def markdown(self) -> str:
        lines = [f"# Table {self.number}: {self.title}", "", f"Profile `{self.profile}`; the Omne-R1 paper, "
                 f"Table {self.number}.", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join([*row.label, *row.cells]) + " |" for row in self.rows]
        notes = [*self.notes, *(f"{' '.join(row.label)}: {row.note}." for row in self.rows if row.note)]
        return "\n".join([*lines, "", *(f"- {note}" for note in notes)]).rstrip() + "\n"


# --- reading reports -----------------------------------------------------------------------------------------------

def report_scores(folder: Path, *, judge: bool = False) -> dict[str, Score | None]:
    """Bucket -> score of the report in ``folder``: EM (its metrics.json), or with ``judge`` the LLM judge's verdicts
    (its predictions.jsonl) when the report has them."""

    metrics = read_metrics(folder)
    if judge and metrics.judge is not None:
        right: dict[str, dict[str, bool]] = {}
        with (folder / "predictions.jsonl").open(encoding="utf-8") as lines:
            for line in lines:
                record = json.loads(line)
                verdict = bool((record["trajectory"].get("judge") or {}).get("verdict"))
                seen = right.setdefault(record["bucket"], {})
                seen[record["qa_id"]] = seen.get(record["qa_id"], False) or verdict  # N samples: any right
        counts = {b: (sum(v.values()), len(v)) for b, v in right.items()}
        method = "judge"
    else:
        counts = {b: (round(s.em * s.n), s.n) for b, s in metrics.by_bucket.items()}
        method = "EM"
    scores: dict[str, Score | None] = {}
    for bucket in BUCKETS:
        correct, n = counts.get(bucket, (0, 0))
        if n == 0:
            scores[bucket] = None
            continue
        low, high = wilson_interval(correct, n)
        scores[bucket] = Score(correct=correct, n=n, accuracy=correct / n, low=low, high=high, method=method)
    return scores


def score_row(key: str, label: list[str], folder: Path | None, params: Params, table: int, *,
              judge: bool = False, method_column: bool = False, model: Path | None = None,
              note: str | None = None) -> Row:
    """A row of accuracies per bucket from the report in ``folder`` (None: not run, with ``note`` saying why)."""
    scores = report_scores(folder, judge=judge) if folder is not None else dict.fromkeys(BUCKETS)
    cells = [s.cell() if s is not None else ("not run" if folder is None else "-") for s in scores.values()]
    if method_column:
        methods = {s.method for s in scores.values() if s is not None}
        cells.append(" / ".join(sorted(methods)) or "-")
    paper = PAPER.get(table, {}).get(key, (None, None))
    return Row(key=key, label=label, cells=cells, scores=scores, paper=dict(zip(BUCKETS, paper, strict=True)),
               model=relative_path(model, params.root) if model is not None else None,
               report=relative_path(folder, params.root) if folder is not None else None, note=note)


def questions_note(rows: list[Row]) -> str:
    """How many questions the cells are over, and what the brackets are."""
    sizes = {b: sorted({s.n for r in rows if (s := r.scores.get(b)) is not None}) for b in BUCKETS}
    told = ", ".join(f"{'/'.join(map(str, n))} ({'1/2' if b == '1-2' else '3+'} hop)" for b, n in sizes.items() if n)
    return (f"Accuracy in percent with its Wilson 95% interval in brackets, over {told or 'no'} test questions per "
            f"row; `-`: no question of that bucket was evaluated.")


# --- builds ----------------------------------------------------------------------------------------------------------

def evaluate_report(params: Params, model: str, name: str, force: bool, baseline: str | None = None,
                    progress: bool = True) -> Any:
    """``evaluate_cached`` without the trajectories (they stay in the report's files): what a child returns."""
    from pipelines.eval.runner import evaluate_cached

    result = evaluate_cached(params, model, name=name, force=force, baseline=baseline, progress=progress)
    return result.model_copy(update={"trajectories": []})


def _train_rl(params: Params, stage: int, start: str | None, name: str, force: bool, progress: bool) -> BuildResult:
    from pipelines.train.rl import train_rl

    return train_rl(params, stage, start=start, name=name, force=force, progress=progress)


def _train_sft(params: Params, name: str, force: bool, progress: bool) -> BuildResult:
    from pipelines.train.stage2 import build_sft_model

    return build_sft_model(params, name=name, force=force, progress=progress)


def _sweep(params: Params, force: bool, progress: bool) -> Any:

    return run_think_sweep(params, force=force, progress=progress)


class PaperBuilds:
    """The models and reports of the paper's tables, each built once per command (and reused when current): the
    training and evaluation builds in a child process of their own, as `omne run` runs them, unless ``inline``."""

    def __init__(self, params: Params, *, force: bool = False, inline: bool | None = None,
                 progress: bool = True) -> None:
        self.params = params
        self.force = force
        self.progress = progress
        self.times = StageTimes(inline=inline)
        self._built: dict[str, Any] = {}

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._built:
            self._built[key] = make()
        return self._built[key]

    def variant(self, **sections: dict[str, Any]) -> Params:
        """The profile's params with ``sections``' values overridden (validated as params.yaml is)."""
        return with_overrides(self.params, sections, source="paper variant")

    def dataset(self) -> BuildResult:
        """Every domain's KG, index and QA pairs and the merged QA dataset, checked, as `omne run` builds them."""
        def make() -> BuildResult:
            domains = load_registry(self.params.registry_path).domains
            build_domain_artifacts(self.params, domains, force=self.force, times=self.times)
            stage = STAGES.get("qa_dataset")
            with self.times.timed(stage.label):
                result = stage.function(self.params, run_qa_domains(self.params, domains), force=self.force)
            failed = [o.spec.name for o in qa_dataset_checks(self.params) if not o.passed]
            if failed:
                raise QAChecksFailed(f"the QA dataset failed {', '.join(failed)} (`omne qa build` shows why); "
                                     "nothing was trained on it")
            return result
        return self._once("dataset", make)

    def stage1(self, mix: str) -> tuple[Params, BuildResult | None]:
        """RL stage 1 from the base model trained on ``mix`` (rl.stage1.data_mix; None when the train split has no
        question of it); the profile's own mix is the run's stage-1 model (artifacts/models/rl-stage1)."""

        self.dataset()
        variant = self.variant(rl={"stage1": {"data_mix": mix}})
        if not rl_questions(variant, 1):
            return variant, None
        name = rl_model_name(1) if variant == self.params else f"paper-rl-stage1-{MIX_SLUGS[mix]}"
        result = self._once(f"model:{name}", lambda: self.times.run(
            f"RL stage 1 ({mix})", _train_rl, variant, 1, None, name, self.force, self.progress))
        return variant, result

    def conversations(self) -> BuildResult:
        self.dataset()
        if "agent" in self.params.sft_data.sources:  # the stage-1 rollouts the SFT data mixes in
            self.stage1(self.params.rl.stage1.data_mix)
        return self._once("conversations", lambda: build_stage(STAGES.get("sft_conversations"), self.times,
                                                               self.params, force=self.force))

    def sft(self, method: str, mode: str, think_weight: float | None = None) -> tuple[Params, BuildResult]:
        """A stage-2 model (``sft.method``, ``sft.mode`` and the evaluation's ``agent.mode``, ``sft.think_weight``:
        None keeps the profile's); the profile's own is the run's (artifacts/models/sft)."""
        self.conversations()
        sft: dict[str, Any] = {"method": method, "mode": mode}
        if think_weight is not None:
            sft["think_weight"] = think_weight
        variant = self.variant(sft=sft, agent={"mode": mode})
        name = (SFT_MODEL if variant.sft == self.params.sft else
                f"paper-sft-{method}-{mode.replace('_', '-')}-w{variant.sft.think_weight:g}")
        result = self._once(f"model:{name}", lambda: self.times.run(
            f"SFT model ({method}, {mode})", _train_sft, variant, name, self.force, self.progress))
        return variant, result

    def stage3(self, variant: Params, sft: BuildResult, key: str) -> BuildResult:
        """RL stage 3 from the SFT model ``sft`` (rolled out in ``variant``'s agent.mode); from the profile's own SFT
        model under the profile's params, the run's stage-3 model (artifacts/models/rl-stage3)."""
        run_model = variant == self.params and sft.folder == model_dir(self.params.artifacts_dir, SFT_MODEL)
        name = rl_model_name(3) if run_model else f"paper-rl-stage3-{key}"
        return self._once(f"model:{name}", lambda: self.times.run(
            f"RL stage 3 ({key})", _train_rl, variant, 3, str(sft.folder), name, self.force, self.progress))

    def report(self, variant: Params, model: str | Path, name: str, *, run_name: str | None = None,
               baseline: str | None = None) -> Path:
        """The report folder of ``model`` evaluated under ``variant``: the run's ``run_name`` report when the variant is
        the profile itself."""
        self.dataset()
        if run_name is not None and variant == self.params:
            name = run_name
        result = self._once(f"report:{name}", lambda: self.times.run(
            f"evaluate {name}", evaluate_report, variant, str(model), name, self.force, baseline, self.progress))
        return result.folder

    def base_report(self, mode: str = "think", baseline: str | None = None) -> Path:
        variant = self.variant(agent={"mode": mode})
        label = baseline or "tools"
        return self.report(variant, BASE_MODEL, f"paper-base-{label}-{mode.replace('_', '-')}",
                           run_name="base-tools" if baseline is None else None, baseline=baseline)

    def sweep(self) -> Any:
        self.conversations()
        return self._once("sweep", lambda: self.times.run("think-weight sweep", _sweep, self.params, self.force,
                                                          self.progress))


# --- the tables ------------------------------------------------------------------------------------------------------

def table1(b: PaperBuilds) -> PaperTable:
    """QA pairs per domain and bucket (the dataset's manifest, as `omne qa stats`)."""
    b.dataset()
    manifest = read_manifest(qa_dir(b.params.artifacts_dir, "dataset"))
    domains = manifest.metadata["stats"].get("domains", {}) if manifest is not None else {}
    rows = [Row(key=name, label=[name], counts={"1-2": d["1-2"], "3+": d["3+"]},
                cells=[f"{d['1-2']:,}", f"{d['3+']:,}", f"{d['total']:,}"]) for name, d in domains.items()]
    totals = {b_: sum(r.counts[b_] for r in rows) for b_ in BUCKETS}
    rows.append(Row(key="total", label=["Total"], counts=totals,
                    cells=[f"{totals['1-2']:,}", f"{totals['3+']:,}", f"{sum(totals.values()):,}"]))
    return PaperTable(number=1, title="QA pairs per domain and hop bucket", profile=b.params.profile,
                      columns=["Graph Type", "1/2 hop", "3+ hop", "Total"], rows=rows,
                      notes=["The paper's 20 LightRAG domains (about 21.5k 1/2-hop and 52k 3+ pairs) are not this "
                             "project's domains; the counts are the merged dataset's (all splits)."])


def lightrag_row(b: PaperBuilds, key: str, label: list[str], table: int, mode: str = "think") -> Row:
    """A LightRAG baseline row (Tables 2 and 7): the base model answering from the context the lightrag-hku library
    retrieves with its keywords (``--baseline lightrag``), in ``mode``, scored as the free-form rows are."""
    return score_row(key, label, b.base_report(mode, "lightrag"), b.params, table, judge=b.params.eval.judge,
                     method_column=True)


def table2(b: PaperBuilds) -> PaperTable:
    judge = b.params.eval.judge
    rows = [score_row("direct-think", ["Direct answer (w think)"], b.base_report("think", "direct"), b.params, 2,
                      judge=judge, method_column=True),
            score_row("direct-no-think", ["Direct answer (w/o think)"], b.base_report("no_think", "direct"), b.params,
                      2, judge=judge, method_column=True),
            lightrag_row(b, "lightrag-think", ["LightRAG (w think)"], 2),
            lightrag_row(b, "lightrag-no-think", ["LightRAG (w/o think)"], 2, "no_think"),
            score_row("base-tools", ["Base model (w think) reasoning with KG tools"], b.base_report("think"),
                      b.params, 2, method_column=True)]
    return PaperTable(number=2, title="baselines of the base model", profile=b.params.profile,
                      columns=["Model/Agent", *HOP_COLUMNS, "Evaluation method"], rows=rows,
                      notes=[questions_note(rows), _judge_note(judge)])


def _judge_note(judge: bool) -> str:
    if judge:
        return "Free-form rows (direct answer, LightRAG) are scored by the LLM judge of `llm:` (eval.judge), as the " \
               "paper scores them with DeepSeek-R1; the tools row by exact match."
    return "eval.judge is off: every row is scored by exact match (the paper judges the free-form rows with an LLM, " \
           "DeepSeek-R1; `eval.judge: true` with an `llm:` endpoint does the same)."


def table3(b: PaperBuilds) -> PaperTable:
    rows = []
    for mix, label in (("1-2", "1/2 Hop"), ("3+", "3+ Hop"), ("mixed", "mix")):
        rows.append(stage1_row(b, mix, ["Rule-based RL", label], 3))
    return PaperTable(number=3, title="RL stage 1 (from the base model) by training data", profile=b.params.profile,
                      columns=["Method", "Train Data", *HOP_COLUMNS], rows=rows,
                      notes=[questions_note(rows), "Each model is evaluated on both buckets (the paper leaves the "
                             "bucket a model was not trained on empty)."])


def stage1_row(b: PaperBuilds, mix: str, label: list[str], table: int, *, method_column: bool = False) -> Row:
    """RL stage 1 trained on ``mix``, evaluated (not run when the train split has no question of that bucket)."""
    variant, model = b.stage1(mix)
    if model is None:
        return score_row(mix if table == 3 else "stage1", label, None, b.params, table, method_column=method_column,
                         note=f"no training question of bucket {mix} in the train split")
    folder = b.report(variant, model.folder, f"paper-rl-stage1-{MIX_SLUGS[mix]}")
    return score_row(mix if table == 3 else "stage1", label, folder, b.params, table, model=model.folder,
                     method_column=method_column)


def table4_models(b: PaperBuilds) -> list[tuple[str, str, str, Params, BuildResult]]:
    """(key, method, deepthink, variant, model) of Table 4's four SFT models, in the paper's row order."""
    models = []
    for method in ("lora", "full"):
        for mode in ("no_think", "think"):
            variant, model = b.sft(method, mode, PLAIN_SFT_WEIGHT)
            models.append((f"{method}-{mode}", method, mode, variant, model))
    return models


def table4(b: PaperBuilds) -> PaperTable:
    rows = [score_row("base", ["No SFT", "Yes"], b.base_report("think"), b.params, 4)]
    for key, method, mode, variant, model in table4_models(b):
        folder = b.report(variant, model.folder, f"paper-{model.folder.name.removeprefix('paper-')}-tools",
                          run_name=SFT_REPORT)
        rows.append(score_row(key, ["LoRA" if method == "lora" else "Full", "No" if mode == "no_think" else "Yes"],
                              folder, b.params, 4, model=model.folder))
    return PaperTable(number=4, title="SFT: LoRA or full fine-tuning, with or without thinking",
                      profile=b.params.profile, columns=["Method", "Deepthink", *HOP_COLUMNS], rows=rows,
                      notes=[questions_note(rows), f"Plain SFT (think-loss weight {PLAIN_SFT_WEIGHT:g}): the paper "
                             "brings in the weight after this table. Deepthink No: trained and evaluated with empty "
                             "thinking (sft.mode, agent.mode: no_think)."])


def table5(b: PaperBuilds) -> PaperTable:

    rows = [score_row(weight_label(p.think_weight), [f"{p.think_weight:g}"], b.params.root / p.report, b.params, 5,
                      model=b.params.root / p.model) for p in b.sweep().points]
    return PaperTable(number=5, title="accuracy by think-loss weight", profile=b.params.profile,
                      columns=["Weighted Loss Mask", *HOP_COLUMNS], rows=rows,
                      notes=[questions_note(rows), "The weights are sft.sweep_weights, each model trained "
                             "sft.sweep_max_steps steps (the same sweep as `dvc repro sweeps/dvc.yaml`)."])


def lora_sft(b: PaperBuilds) -> tuple[Params, BuildResult]:
    """The profile's stage-2 model as LoRA with thinking (the run's sft, on the profile's think weight)."""
    return b.sft("lora", "think")


def full_sft(b: PaperBuilds) -> tuple[Params, BuildResult]:
    """Full fine-tuning without thinking: the SFT model the paper takes on to stage 3 besides the LoRA one (4.2.4)."""
    return b.sft("full", "no_think", PLAIN_SFT_WEIGHT)


def table6_rows(b: PaperBuilds) -> dict[str, tuple[Path, Path]]:
    """Row key -> (model, report) of Table 6."""
    lora_variant, lora = lora_sft(b)
    full_variant, full = full_sft(b)
    rl_lora = b.stage3(lora_variant, lora, "lora")
    rl_full = b.stage3(full_variant, full, "full")
    return {
        "sft-lora": (lora.folder, b.report(lora_variant, lora.folder, "paper-sft-lora-tools", run_name=SFT_REPORT)),
        "rl-lora": (rl_lora.folder, b.report(lora_variant, rl_lora.folder, "paper-rl-stage3-lora-tools",
                                             run_name=RL_STAGE3_REPORT)),
        "sft-full": (full.folder, b.report(full_variant, full.folder,
                                           f"paper-{full.folder.name.removeprefix('paper-')}-tools")),
        "rl-full": (rl_full.folder, b.report(full_variant, rl_full.folder, "paper-rl-stage3-full-tools")),
    }


def table6(b: PaperBuilds) -> PaperTable:
    labels = {"sft-lora": "SFT (LoRA)", "rl-lora": "+ RL (LoRA)", "sft-full": "SFT (Full)", "rl-full": "+ RL (Full)"}
    rows = [score_row(key, [labels[key]], report, b.params, 6, model=model)
            for key, (model, report) in table6_rows(b).items()]
    return PaperTable(number=6, title="RL stage 3 after each SFT model", profile=b.params.profile,
                      columns=["Model", *HOP_COLUMNS], rows=rows,
                      notes=[questions_note(rows), f"LoRA: the stage-2 model with thinking and think-loss weight "
                             f"{b.params.sft.think_weight:g} (sft.think_weight); Full: full fine-tuning without "
                             "thinking. RL: rl.stage3 from each, rolled out in its mode."])


def table7(b: PaperBuilds) -> PaperTable:
    judge = b.params.eval.judge
    rows = [score_row("direct", ["Direct answer"], b.base_report("think", "direct"), b.params, 7, judge=judge,
                      method_column=True),
            lightrag_row(b, "lightrag", ["LightRAG"], 7)]
    return PaperTable(number=7, title="free-form answers of the base model", profile=b.params.profile,
                      columns=["Model/Agent", *HOP_COLUMNS, "Evaluation method"], rows=rows,
                      notes=[questions_note(rows), _judge_note(judge)])


def table8(b: PaperBuilds) -> PaperTable:
    rows6 = table6_rows(b)
    rows = [score_row("base", ["Base model (before training)"], b.base_report("think"), b.params, 8,
                      method_column=True),
            stage1_row(b, "mixed", ["Rule-based RL (Stage 1, mix data)"], 8, method_column=True),
            score_row("sft-lora", [f"SFT (Stage 2, LoRA, loss weight mask={b.params.sft.think_weight:g})"],
                      rows6["sft-lora"][1], b.params, 8, method_column=True, model=rows6["sft-lora"][0]),
            score_row("sft-full", ["SFT (Stage 2, Full, no think)"], rows6["sft-full"][1], b.params, 8,
                      method_column=True, model=rows6["sft-full"][0]),
            score_row("stage3", ["Post-SFT RL (Stage 3)"], rows6["rl-full"][1], b.params, 8, method_column=True,
                      model=rows6["rl-full"][0])]
    return PaperTable(number=8, title="the agent with KG tools before and after each stage", profile=b.params.profile,
                      columns=["Model/Agent", *HOP_COLUMNS, "Evaluation method"], rows=rows,
                      notes=[questions_note(rows), "Stage 3: RL after the full no-think SFT model (the paper's "
                             "figures here are Table 6's + RL (Full)); Table 6 has RL after the LoRA model too."])


BUILDERS: dict[int, Callable[[PaperBuilds], PaperTable]] = {
    1: table1, 2: table2, 3: table3, 4: table4, 5: table5, 6: table6, 7: table7, 8: table8}


# --- the figures -----------------------------------------------------------------------------------------------------

def log_history(model: Path) -> list[dict[str, Any]]:
    """A trained model's log history (its trainer_state.json)."""
    path = model / "trainer_state.json"
    return json.loads(path.read_text(encoding="utf-8")).get("log_history", []) if path.is_file() else []


def series(history: list[dict[str, Any]], key: str) -> list[list[float]]:
    return [[h["step"], h[key]] for h in history if key in h and "step" in h]


def figure2(b: PaperBuilds) -> dict[str, Any]:
    curves = {f"{'LoRA' if method == 'lora' else 'Full'}, {'think' if mode == 'think' else 'no think'}":
              {"model": relative_path(model.folder, b.params.root), "loss": series(log_history(model.folder), "loss")}
              for _, method, mode, _, model in table4_models(b)}
    return {"number": 2, "title": "SFT loss per step under different SFT settings", "y": "loss", "curves": curves}


def figure3(b: PaperBuilds) -> dict[str, Any]:
    curves = {f"weight {p.think_weight:g}": {"model": p.model, "loss": series(log_history(b.params.root / p.model),
                                                                                "loss")}
              for p in b.sweep().points}
    return {"number": 3, "title": "SFT loss per step by think-loss weight", "y": "loss", "curves": curves}


def figure4(b: PaperBuilds) -> dict[str, Any]:
    variant, lora = lora_sft(b)
    model = b.stage3(variant, lora, "lora").folder
    history = log_history(model)
    key = "val_em" if series(history, "val_em") else "reward"
    title = ("validation EM during RL stage 3 (after the LoRA SFT model)" if key == "val_em" else
             "reward during RL stage 3 (after the LoRA SFT model; rl.stage3.val_questions: 0, no validation EM)")
    return {"number": 4, "title": title, "y": key,
            "curves": {"RL stage 3": {"model": relative_path(model, b.params.root), key: series(history, key)}}}


FIGURE_BUILDERS: dict[int, Callable[[PaperBuilds], dict[str, Any]]] = {2: figure2, 3: figure3, 4: figure4}


def plot_figure(figure: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
    for label, curve in figure["curves"].items():
        points = curve[figure["y"]]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o" if len(points) < 30 else None, ms=3, label=label)
    ax.set(xlabel="optimizer step", ylabel=figure["y"], title=f"Figure {figure['number']}: {figure['title']}")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    if any(curve[figure["y"]] for curve in figure["curves"].values()):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- the command -----------------------------------------------------------------------------------------------------

def paper_dir(params: Params) -> Path:
    return reports_dir(params.artifacts_dir) / "paper"


class PaperResult(BaseModel):
    folder: Path
    tables: list[PaperTable]
    figures: list[dict[str, Any]]
    files: list[Path]
    seconds: dict[str, float] = Field(description="wall seconds per build (StageTimes' rows)")


def build_paper_tables(params: Params, tables: tuple[int, ...] | list[int] = TABLES,
                       figures: tuple[int, ...] | list[int] = FIGURES, *, force: bool = False,
                       inline: bool | None = None, progress: bool = True) -> PaperResult:
    """Build what ``tables`` and ``figures`` need and write each into artifacts/reports/paper/."""
    unknown = sorted(set(tables) - set(BUILDERS)) + sorted(set(figures) - set(FIGURE_BUILDERS))
    if unknown:
        raise ValueError(f"no such table or figure: {unknown} (tables {TABLES}, figures {FIGURES})")
    builds = PaperBuilds(params, force=force, inline=inline, progress=progress)
    folder = paper_dir(params)
    folder.mkdir(parents=True, exist_ok=True)
    made, drawn, files = [], [], []
    for number in sorted(set(tables)):
        table = BUILDERS[number](builds)
        for suffix, text in (("md", table.markdown()), ("json", table.model_dump_json(indent=2) + "\n")):
            atomic_write_text(folder / f"table{number}.{suffix}", text)
            files.append(folder / f"table{number}.{suffix}")
        made.append(table)
    for number in sorted(set(figures)):
        figure = FIGURE_BUILDERS[number](builds)
        atomic_write_text(folder / f"figure{number}.json", json.dumps(figure, indent=2) + "\n")
        plot_figure(figure, folder / f"figure{number}.png")
        files += [folder / f"figure{number}.json", folder / f"figure{number}.png"]
        drawn.append(figure)
    return PaperResult(folder=folder, tables=made, figures=drawn, files=files, seconds=builds.times.seconds)
