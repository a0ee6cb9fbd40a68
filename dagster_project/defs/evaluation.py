"""Evaluation stage: `eval_report`, a model (or baseline) rolled out on the QA test split, scored and reported.

GPU work runs in the `gpu` pool (one step at a time per GPU by default, see resources.py) and carries
the op tags that dagster-k8s reads to request a GPU for the step's pod. The report's manifest.json
(hashes of the test split it read, the model, protocol and params) is the materialization's metadata.
"""

import dagster as dg

from dagster_project.defs.checks import report_check_result
from dagster_project.defs.factory import stage_asset
from dagster_project.defs.metadata import data_version, manifest_metadata
from dagster_project.defs.resources import GPU_POOL, GPU_TAGS, OmneResource
from pipelines.eval.report import METRICS_FILE, PLOTS_DIR
from pipelines.eval.runner import BASE_REPORT_MODEL, BASE_REPORT_NAME, evaluate, evaluate_cached, question_source
from pipelines.manifest import read_manifest


class EvalConfig(dg.Config):
    """Which model and protocol to evaluate (empty / 0: what params.yaml says)."""

    model: str = BASE_REPORT_MODEL  # base, a local transformers folder or PEFT adapter folder
    protocol: str = ""  # omne | kg_r1 | search
    baseline: str = ""  # direct | cot | tools | retrieval | graph | lightrag
    split: str = ""
    limit: int = 0  # questions per bucket


@stage_asset("eval_report", kinds={"pytorch", "html"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def eval_report(context: dg.AssetExecutionContext, config: EvalConfig, omne: OmneResource) -> dg.MaterializeResult:
    """EM / F1 / Hit@1 per bucket, hop and domain, efficiency and behaviour metrics, report.html."""
    params = omne.params()
    if config.model == BASE_REPORT_MODEL and not (config.split or config.limit or config.protocol or config.baseline):
        result = evaluate_cached(params, config.model, name=BASE_REPORT_NAME, progress=False)  # `omne run`'s and DVC's
    else:
        source = question_source(params, split=config.split or None, limit=config.limit or None)
        result = evaluate(params, config.model, source, protocol=config.protocol or None,
                          baseline=config.baseline or None, progress=False)
    metrics = result.metrics
    rows = ["| group | n | EM | F1 | Hit@1 |", "|---|---:|---:|---:|---:|"]
    for label, scores in [("all", metrics.overall), *((f"bucket {k}", v) for k, v in metrics.by_bucket.items()),
                          *((f"hops {k}", v) for k, v in metrics.by_hops.items()),
                          *((f"domain {k}", v) for k, v in metrics.by_domain.items())]:
        rows.append(f"| {label} | {scores.n} | {scores.em:.3f} | {scores.f1:.3f} | {scores.hit1:.3f} |")
    manifest = read_manifest(result.folder)
    return dg.MaterializeResult(
        data_version=data_version(manifest),
        metadata={**manifest_metadata(folder=result.folder, manifest=manifest),
                  "run": metrics.run, "model": metrics.model,
                  "em": metrics.overall.em, "f1": metrics.overall.f1, "hit1": metrics.overall.hit1,
                  "metrics_table": dg.MetadataValue.md("\n".join(rows)),
                  "outcomes": dg.MetadataValue.json(metrics.behaviour.outcomes),
                  "metrics": dg.MetadataValue.path(str(result.folder / METRICS_FILE)),
                  "plot_accuracy_by_bucket": dg.MetadataValue.path(
                      str(result.folder / PLOTS_DIR / "accuracy_by_bucket.png")),
                  "report": dg.MetadataValue.url(f"file://{result.folder / 'report.html'}")},
        check_results=[report_check_result(result.folder, metrics)],
    )
