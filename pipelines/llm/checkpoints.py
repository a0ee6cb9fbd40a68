"""Trained models read back from their folders: a full model, or a PEFT adapter on its base.

What SFT and RL write (``pipelines/train/``) and what rollouts, evaluation and the ONNX export read
(``pipelines/agent/models.py``, ``pipelines/train/rl/build.py``): here, below both, so that the agent does not import
the trainers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.manifest import read_manifest


def load_trained_model(folder: Path | str, *, base_model_folder: Path | str | None = None, dtype: Any = None,
                       device: str = "cpu", merge: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) of a trained model's folder (SFT's, RL's): a full model, or the base (from
    ``base_model_folder``, else the manifest / adapter config) with its embeddings grown to the saved tokenizer and
    the adapter on top (merged into the weights when ``merge``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    dtype = dtype or torch.float32
    if (folder / "config.json").is_file():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        return model.to(device).eval(), tokenizer
    from peft import PeftModel

    if base_model_folder is None:
        manifest = read_manifest(folder)
        base_model_folder = (manifest.metadata.get("base_model") if manifest else None) or json.loads(
            (folder / "adapter_config.json").read_text(encoding="utf-8"))["base_model_name_or_path"]
    base = AutoModelForCausalLM.from_pretrained(base_model_folder, dtype=dtype)
    if len(tokenizer) > base.get_input_embeddings().num_embeddings:
        base.resize_token_embeddings(len(tokenizer), mean_resizing=False)  # the adapter restores the new rows
    model = PeftModel.from_pretrained(base, folder)
    if merge:
        model = model.merge_and_unload()
    return model.to(device).eval(), tokenizer
