"""The jobs: `build_data`, `build_domains`, `train`, `evaluate` (and `train_and_evaluate` for the weekly schedule).

They select asset groups (`build_domains` the per-domain stages of two), so an asset added to a group later
joins its job without an edit here:
- `build_data`: the `kg` and `qa` groups, KG -> entity index -> seed subgraphs -> QA pairs -> gold
  paths (for the run's domain partition) -> qa_dataset (all domains merged). A run needs a
  partition: the UI's launchpad, or `dagster job execute -m dagster_project.definitions -j build_data
  --tags '{"dagster/partition": "chemistry"}'`.
- `build_domains`: the per-domain assets of those groups (all but `qa_dataset`), to build several domains at
  once: a backfill (`dagster job backfill -m dagster_project.definitions -j build_domains --partitions a,b
  --noprompt`) queues one run per domain, and the daemon (`dagster dev` runs one) launches up to the
  instance's `concurrency.runs.max_concurrent_runs` of them together. `qa_dataset` is left out so that the
  runs do not each rebuild it: materialize it once after. A run is one process (in-process executor): the
  domains are what runs in parallel, and a domain's steps are a chain that a process per step would only
  slow down, each process loading the code location again (4 s on a 2-core machine).
- `train`: the `training` group (sft_conversations, sft_model, and the RL stages as they join).
- `evaluate`: the `evaluation` group (eval_report, ...).
"""

from __future__ import annotations

import dagster as dg

from pipelines.stages import STAGES

DATA_GROUPS = ("kg", "qa")
TRAIN_GROUPS = ("training",)
EVAL_GROUPS = ("evaluation",)

build_data = dg.define_asset_job(
    "build_data", selection=dg.AssetSelection.groups(*DATA_GROUPS),
    description="One domain's KG, entity index, seed subgraphs, QA pairs and gold paths, then the merged "
                "QA dataset (pick the domain partition when launching).")

# the per-domain stages of the data groups, from the stage registry: a per-domain stage added later joins the job
DOMAIN_STAGES = tuple(s.name for s in STAGES if s.group in DATA_GROUPS and s.per_domain)

build_domains = dg.define_asset_job(
    "build_domains", selection=dg.AssetSelection.assets(*DOMAIN_STAGES), executor_def=dg.in_process_executor,
    description="The chosen domains' KGs, entity indexes, seed subgraphs, QA pairs and gold paths, one run per "
                "domain (backfill it over several to build them in parallel), without the merged QA dataset.")

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
