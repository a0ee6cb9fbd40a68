"""The think-weight sweep (Omne-R1 paper, Table 5): one SFT model per think-loss weight, each evaluated
on the same test sample, so accuracy and training loss can be read against the weight.

Writes artifacts/reports/think_sweep/ (sweep.json for `dvc metrics`/`dvc plots`, sweep.png, manifest.json);
the models are artifacts/models/sft-w<weight>/ (the stage-2 model artifacts/models/sft/ itself for the point
with its weight and steps) and their reports artifacts/reports/think-sweep-w<weight>/.
Every model and report is reused when its inputs are unchanged, so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from pipelines.config import Params
from pipelines.layout import report_dir
from pipelines.manifest import ArtifactBuild, relative_path, sha256_file


class SweepPoint(BaseModel):
    """One weight of the sweep: its model, its final training loss and its accuracy."""

    think_weight: float
    model: str
    report: str
    steps: int | None
    final_loss: float | None
    em: float
    f1: float
    em_by_bucket: dict[str, float]
    generated_tokens_mean: float


class SweepResult(BaseModel):
    folder: Path
    points: list[SweepPoint]


def sweep_dir(params: Params) -> Path:
    return report_dir(params.artifacts_dir, "think_sweep")


def weight_label(weight: float) -> str:
    """A folder-safe, stable label: 0.001 -> '0.001', 1.0 -> '1'."""
    return f"{weight:g}"


def sweep_model_name(params: Params, weight: float, steps: int) -> str:
    """The model folder of one weight. The point that trains exactly the stage-2 model (params.sft's weight
    and steps) is that model, reused rather than trained twice (~21 min on a CPU)."""
    if weight == params.sft.think_weight and steps == params.sft.max_steps:
        return "sft"
    return f"sft-w{weight_label(weight)}"


def run_think_sweep(params: Params, *, weights: list[float] | None = None, force: bool = False,
                    progress: bool = True) -> SweepResult:
    """Train and evaluate one model per weight (params.sft.sweep_weights), then write the sweep report."""
    from tqdm.auto import tqdm

    from pipelines.eval.runner import evaluate_cached
    from pipelines.train.stage2 import build_sft_model

    steps = params.sft.sweep_max_steps or params.sft.max_steps
    points, manifests = [], []
    for weight in tqdm(weights or params.sft.sweep_weights, desc="think-weight sweep", unit="model",
                       disable=not progress):
        model = build_sft_model(params, name=sweep_model_name(params, weight, steps), think_weight=weight,
                                max_steps=steps, force=force, progress=progress)
        report = evaluate_cached(params, str(model.folder), name=f"think-sweep-w{weight_label(weight)}", force=force)
        metrics = report.metrics
        points.append(SweepPoint(
            think_weight=weight, model=relative_path(model.folder, params.root),
            report=relative_path(report.folder, params.root), steps=model.manifest.metadata.get("steps"),
            final_loss=model.manifest.metadata.get("final_loss"), em=metrics.overall.em, f1=metrics.overall.f1,
            em_by_bucket={bucket: scores.em for bucket, scores in metrics.by_bucket.items()},
            generated_tokens_mean=metrics.efficiency.generated_tokens_mean))
        manifests += [model.folder / "manifest.json", report.folder / "metrics.json"]
    build = ArtifactBuild(sweep_dir(params), "think_sweep",
                          {relative_path(path, params.root): sha256_file(path) for path in manifests},
                          {"sft": params.section("sft"), "eval": params.section("eval")})
    if not build.reusable(force):  # (its models and reports were reused or built above)
        with build.writing() as draft:
            (draft.folder / "sweep.json").write_text(json.dumps([p.model_dump() for p in points], indent=2),
                                                     encoding="utf-8")
            plot_sweep(points, draft.folder / "sweep.png")
            draft.record(files=[draft.folder / "sweep.json", draft.folder / "sweep.png"], rows={"models": len(points)},
                         metadata={"best_weight": max(points, key=lambda p: (p.em, p.f1)).think_weight})
    return SweepResult(folder=build.folder, points=points)


def plot_sweep(points: list[SweepPoint], path: Path) -> None:
    """EM (overall and per bucket) and final training loss against the weight, in the grid's order (the
    weights span four decades and include 0, so the x axis is categorical like the paper's table)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [weight_label(p.think_weight) for p in points]
    fig, (acc, loss) = plt.subplots(1, 2, figsize=(10, 3.8))
    acc.plot(labels, [p.em for p in points], marker="o", label="all")
    for bucket in sorted({b for p in points for b in p.em_by_bucket}):
        acc.plot(labels, [p.em_by_bucket.get(bucket, float("nan")) for p in points], marker=".", linestyle="--",
                 label=f"bucket {bucket}")
    acc.set(xlabel="think-loss weight", ylabel="EM", title="accuracy vs think weight", ylim=(-0.02, 1.02))
    acc.legend()
    loss.plot(labels, [p.final_loss if p.final_loss is not None else float("nan") for p in points], marker="o",
              color="tab:red")
    loss.set(xlabel="think-loss weight", ylabel="final training loss", title="training loss vs think weight")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
