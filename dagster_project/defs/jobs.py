"""The jobs: `build_data`, `train`, `evaluate` (and `train_and_evaluate` for the weekly schedule).

They select asset groups, so an asset added to a group later joins its job without an edit here:
- `build_data`: the `kg` and `qa` groups, KG -> entity index -> seed subgraphs -> QA pairs -> gold
  paths (for the run's domain partition) -> qa_dataset (all domains merged). A run needs a
  partition: the UI's launchpad, or `dagster job execute -m dagster_project.definitions -j build_data
  --tags '{"dagster/partition": "chemistry"}'`.
- `train`: the `training` group (sft_conversations, sft_model, and the RL stages as they join).
- `evaluate`: the `evaluation` group (eval_report, ...).
"""

from __future__ import annotations

import dagster as dg

DATA_GROUPS = ("kg", "qa")
TRAIN_GROUPS = ("training",)
EVAL_GROUPS = ("evaluation",)

build_data = dg.define_asset_job(
    "build_data", selection=dg.AssetSelection.groups(*DATA_GROUPS),
    description="One domain's KG, entity index, seed subgraphs, QA pairs and gold paths, then the merged "
                "QA dataset (pick the domain partition when launching).")

train = dg.define_asset_job(
    "train", selection=dg.AssetSelection.groups(*TRAIN_GROUPS),
    description="SFT conversations from the QA train split, then the training stages (gpu pool).")

evaluate = dg.define_asset_job(
    "evaluate", selection=dg.AssetSelection.groups(*EVAL_GROUPS),
    description="Evaluation reports on the QA test split (gpu pool).")

train_and_evaluate = dg.define_asset_job(
    "train_and_evaluate", selection=dg.AssetSelection.groups(*TRAIN_GROUPS, *EVAL_GROUPS),
    description="`train` then `evaluate` in one run (what the weekly schedule launches); steps wait on "
                "their upstream assets and share the gpu pool.")
