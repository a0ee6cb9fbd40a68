"""Stage 2 as a build step: SFT conversations + base model (sft.base_model, else agent.base_model) ->
artifacts/models/<name>/ (adapter or full model).

One function shared by `omne sft train`, the Dagster asset `sft_model` and the DVC stage; the think
weight can be overridden for the Table-5 sweep (each weight its own model folder).
"""

from __future__ import annotations

from pipelines.agent.models import BASE, resolve_model_folder
from pipelines.config import Params
from pipelines.layout import model_dir, sft_conversations_dir
from pipelines.manifest import BuildResult, manifest_inputs
from pipelines.train.sft import train_sft
from pipelines.train.sft_data import read_sft_conversations


def build_sft_model(params: Params, *, name: str = "sft", think_weight: float | None = None, force: bool = False,
                    progress: bool = True, max_steps: int | None = None) -> BuildResult:
    """Train (or reuse, when conversations, base model and sft params are unchanged) the stage-2 model;
    ``think_weight`` and ``max_steps`` override params.sft (the sweep trains one model per weight)."""

    conversations_dir = sft_conversations_dir(params.artifacts_dir)
    inputs = manifest_inputs(conversations_dir, params.root, "SFT conversations (run `omne sft data`)")
    overrides = {"think_weight": think_weight, "max_steps": max_steps}
    sft = params.sft.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    return train_sft(read_sft_conversations(params), resolve_model_folder(params.sft.base_model or BASE, params),
                     model_dir(params.artifacts_dir, name), sft, progress=progress, force=force, inputs=inputs)
