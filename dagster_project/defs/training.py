"""Training stages: stage-2 SFT data and model, the think-weight sweep, RL stages 1 and 3, and the
evaluations of the trained models. Training runs in the `gpu` pool with the GPU op tags; each asset
body calls one library function (pipelines.train) and reports the artifact's manifest as metadata.
"""

import dagster as dg

from dagster_project.defs.checks import report_check_result
from dagster_project.defs.factory import stage_asset
from dagster_project.defs.metadata import data_version, manifest_metadata
from dagster_project.defs.resources import GPU_POOL, GPU_TAGS, OmneResource
from pipelines.stages import STAGES, evaluated_model
from pipelines.train.sft_data import build_sft_conversations, format_problems, read_sft_conversations


def _model_metadata(result) -> dict:
    meta = result.manifest.metadata
    return {**manifest_metadata(folder=result.folder, manifest=result.manifest, reused=result.skipped),
            **{key: meta[key] for key in ("final_loss", "steps", "tokens_per_second", "assistant_tokens_per_second",
                                          "trained_assistant_tokens", "reward_first_third_mean",
                                          "reward_last_third_mean") if meta.get(key) is not None}}


@stage_asset("stage1_rl_model", kinds={"pytorch", "trl"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def stage1_rl_model(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """RL stage 1 from the base model on QA pairs (rl.stage1: rewards, GRPO or PPO, rollouts with the tools)."""
    from pipelines.train.rl import train_rl

    result = train_rl(omne.params(), 1, progress=False)
    return dg.MaterializeResult(data_version=data_version(result.manifest), metadata={
        **_model_metadata(result), "curves": dg.MetadataValue.path(str(result.folder / "training_curves.png"))})


# stage 1's correct rollouts are the `agent` source of the SFT data: always a dep (the graph is static; without the
# agent source the build finds the conversations current and skips, so a retrained stage 1 costs nothing there)
@stage_asset("sft_conversations", kinds={"jsonl"},
             check_specs=[dg.AssetCheckSpec("conversation_format", asset="sft_conversations", blocking=True,
                                         description="human/observation turns at even positions, gpt at odd; each "
                                                     "gpt turn one <think> and one tool call or answer; ends with the "
                                                     "answer")])
def sft_conversations(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """ShareGPT conversations from the train split: gold paths walked with the real tools (and RL stage 1's
    correct rollouts when sft_data.sources has `agent`)."""
    params = omne.params()
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    bad = {r.id: p for r in records if (p := format_problems(r))}
    stats = result.manifest.metadata["stats"]
    return dg.MaterializeResult(
        data_version=data_version(result.manifest),
        metadata={**manifest_metadata(result), "by_source": dg.MetadataValue.json(stats["by_source"]),
                  "by_bucket": dg.MetadataValue.json(stats["by_bucket"]), "tool_calls_mean": stats["tool_calls_mean"]},
        check_results=[dg.AssetCheckResult(check_name="conversation_format", passed=bool(records) and not bad,
                                           metadata={"conversations": len(records), "malformed": len(bad),
                                                     "examples": dg.MetadataValue.json(dict(list(bad.items())[:5]))})],
    )


@stage_asset("sft_model", kinds={"pytorch", "peft"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def sft_model(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The stage-2 model: LoRA (or full) SFT with the weighted think-loss, saved in HF/PEFT format."""
    from pipelines.train.stage2 import build_sft_model

    result = build_sft_model(omne.params(), progress=False)
    return dg.MaterializeResult(data_version=data_version(result.manifest), metadata={**_model_metadata(result),
                                          "loss_curve": dg.MetadataValue.path(str(result.folder / "loss_curve.png"))})


@stage_asset("think_weight_sweep", kinds={"pytorch", "png"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def think_weight_sweep(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """Seed paper Table 5: one SFT model per think-loss weight, each evaluated; EM and loss against the weight."""
    from pipelines.manifest import read_manifest
    from pipelines.train.sweep import run_think_sweep

    result = run_think_sweep(omne.params(), progress=False)
    table = ["| think weight | final loss | EM | F1 |", "|---:|---:|---:|---:|"]
    table += [f"| {p.think_weight:g} | {p.final_loss if p.final_loss is not None else '-'} | {p.em:.3f} | {p.f1:.3f} |"
              for p in result.points]
    manifest = read_manifest(result.folder)
    return dg.MaterializeResult(data_version=data_version(manifest), metadata={
        **manifest_metadata(folder=result.folder, manifest=manifest),
        "sweep": dg.MetadataValue.md("\n".join(table)),
        "plot": dg.MetadataValue.path(str(result.folder / "sweep.png"))})


@stage_asset("stage3_rl_model", kinds={"pytorch", "trl"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def stage3_rl_model(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """RL stage 3 from the SFT model (rl.stage3)."""
    from pipelines.train.rl import train_rl

    result = train_rl(omne.params(), 3, progress=False)
    return dg.MaterializeResult(data_version=data_version(result.manifest), metadata={
        **_model_metadata(result), "curves": dg.MetadataValue.path(str(result.folder / "training_curves.png"))})


def _evaluation(params, stage: str) -> dg.MaterializeResult:
    """The report of a report stage (its name and model from the registry), with its completeness check."""
    from pipelines.eval.runner import evaluate_cached
    from pipelines.manifest import read_manifest

    declared = STAGES.get(stage)
    result = evaluate_cached(params, evaluated_model(declared, params.artifacts_dir), name=declared.report)
    metrics = result.metrics
    by_bucket = {bucket: round(scores.em, 4) for bucket, scores in metrics.by_bucket.items()}
    manifest = read_manifest(result.folder)
    return dg.MaterializeResult(data_version=data_version(manifest), metadata={
        **manifest_metadata(folder=result.folder, manifest=manifest),
        "em": metrics.overall.em, "f1": metrics.overall.f1, "hit1": metrics.overall.hit1,
        "em_by_bucket": dg.MetadataValue.json(by_bucket),
        "outcomes": dg.MetadataValue.json(metrics.behaviour.outcomes),
        "report": dg.MetadataValue.path(str(result.folder / "report.html"))},
        check_results=[report_check_result(result.folder, metrics)])


@stage_asset("sft_eval_report", kinds={"pytorch", "html"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def sft_eval_report(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The SFT model with tools on the same test sample as the base model's report."""
    return _evaluation(omne.params(), "sft_eval_report")


@stage_asset("stage3_eval_report", kinds={"pytorch", "html"}, pool=GPU_POOL, op_tags=GPU_TAGS)
def stage3_eval_report(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The stage-3 RL model with tools on the same test sample (Omne-R1 paper Table 6: against the SFT model)."""
    return _evaluation(omne.params(), "stage3_eval_report")
