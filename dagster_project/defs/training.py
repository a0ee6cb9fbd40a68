"""Training stage: `sft_conversations` (stage-2 data) with its conversation-format check."""

import dagster as dg

from dagster_project.defs.metadata import manifest_metadata
from dagster_project.defs.qa import qa_dataset
from dagster_project.defs.resources import OmneResource
from pipelines.train.sft_data import build_sft_conversations, format_problems, read_sft_conversations


@dg.asset(group_name="training", kinds={"jsonl"}, deps=[qa_dataset],
          check_specs=[dg.AssetCheckSpec("conversation_format", asset="sft_conversations", blocking=True,
                                         description="human/observation turns at even positions, gpt at odd; each gpt "
                                                     "turn one <think> and one tool call or answer; ends with the answer")])
def sft_conversations(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """ShareGPT conversations from the train split: gold paths walked with the real tools."""
    params = omne.params()
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    bad = {r.id: p for r in records if (p := format_problems(r))}
    stats = result.manifest.metadata["stats"]
    return dg.MaterializeResult(
        metadata={**manifest_metadata(result), "by_source": dg.MetadataValue.json(stats["by_source"]),
                  "by_bucket": dg.MetadataValue.json(stats["by_bucket"]), "tool_calls_mean": stats["tool_calls_mean"]},
        check_results=[dg.AssetCheckResult(check_name="conversation_format", passed=bool(records) and not bad,
                                           metadata={"conversations": len(records), "malformed": len(bad),
                                                     "examples": dg.MetadataValue.json(dict(list(bad.items())[:5]))})],
    )


GPU_TAGS = {"dagster-k8s/config": {"container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}}


@dg.asset(group_name="training", kinds={"pytorch", "peft"}, deps=[sft_conversations], pool="gpu", op_tags=GPU_TAGS)
def sft_model(context: dg.AssetExecutionContext, omne: OmneResource) -> dg.MaterializeResult:
    """The stage-2 model: LoRA (or full) SFT with the weighted think-loss, saved in HF/PEFT format."""
    from pipelines.train.stage2 import build_sft_model

    result = build_sft_model(omne.params(), progress=False)
    meta = result.manifest.metadata
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(result.folder)), "reused_existing": result.skipped,
        "final_loss": meta.get("final_loss"), "steps": meta.get("steps"), "tokens_per_s": meta.get("tokens_per_s"),
        "loss_curve": dg.MetadataValue.path(str(result.folder / "loss_curve.png")),
        "manifest": dg.MetadataValue.json(result.manifest.model_dump(mode="json"))})
