"""Stage 2 as a build step: SFT conversations + base model -> artifacts/models/<name>/ (adapter or full model).

One function shared by `omne sft train`, the Dagster asset `sft_model` and the DVC stage; the think
weight can be overridden for the Table-5 sweep (each weight its own model folder).
"""

from __future__ import annotations

from pathlib import Path

from pipelines.config import Params
from pipelines.lineage import manifest_inputs
from pipelines.train.sft import SFTResult, train_sft
from pipelines.train.sft_data import read_sft_conversations


def sft_model_dir(params: Params, name: str = "sft") -> Path:
    return params.artifacts_dir / "models" / name


def build_sft_model(params: Params, *, name: str = "sft", think_weight: float | None = None, force: bool = False,
                    progress: bool = True, max_steps: int | None = None) -> SFTResult:
    """Train (or reuse, when conversations, base model and sft params are unchanged) the stage-2 model;
    ``think_weight`` and ``max_steps`` override params.sft (the sweep trains one model per weight)."""
    from pipelines.agent.models import BASE, resolve_model_folder

    conversations_dir = params.artifacts_dir / "sft" / "conversations"
    inputs = manifest_inputs(conversations_dir, params.root, "SFT conversations (run `omne sft data`)")
    overrides = {"think_weight": think_weight, "max_steps": max_steps}
    sft = params.sft.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    return train_sft(read_sft_conversations(params), resolve_model_folder(BASE, params),
                     sft_model_dir(params, name), sft, progress=progress, force=force, inputs=inputs)
