"""Each training stage starts from its own base model, as in the Omne-R1 paper (Qwen2.5-14B-Instruct for stage 1,
Qwen3-14B for SFT and so stage 3; section 4.2.2, section 3.4.2): tiny random Qwen2 and Qwen3 models, built from
their config classes, stand in for them, and the agent's base model is a tiny llama."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipelines.config import Params
from pipelines.train.rl.build import train_rl
from pipelines.train.sft_data import build_sft_conversations
from pipelines.train.stage2 import build_sft_model
from tests.model_support import build_tiny_model


@pytest.fixture(scope="module")
def qwen_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("qwen")
    return build_tiny_model(root / "qwen2", "qwen2"), build_tiny_model(root / "qwen3", "qwen3")


def architecture(folder: Path) -> str:
    """The model type a model folder holds: its own config's, or its adapter's base model's."""
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())["model_type"]
    base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    return json.loads((Path(base) / "config.json").read_text())["model_type"]


def test_each_stage_starts_from_its_own_base_model(solar_qa: Params, tiny: Path, qwen_models: tuple[Path, Path]) -> None:
    qwen2, qwen3 = qwen_models
    stage = dict(num_generations=2, questions_per_step=1, max_steps=1, max_new_tokens=8, max_rounds=2,
                 max_questions=2, val_questions=0, backend="transformers")
    rl = solar_qa.rl.model_copy(update={
        "stage1": solar_qa.rl.stage1.model_copy(update={**stage, "base_model": str(qwen2)}),
        "stage3": solar_qa.rl.stage3.model_copy(update=stage)})
    params = solar_qa.model_copy(update={
        "agent": solar_qa.agent.model_copy(update={"base_model": str(tiny), "device": "cpu"}),
        "sft": solar_qa.sft.model_copy(update={"base_model": str(qwen3), "max_steps": 1, "max_length": 16384}),
        "rl": rl})
    stage1 = train_rl(params, 1, progress=False)
    assert architecture(stage1.folder) == "qwen2" and stage1.manifest.metadata["start_model"] == str(qwen2)
    build_sft_conversations(params, progress=False)
    sft = build_sft_model(params, progress=False)
    assert architecture(sft.folder) == "qwen3" and sft.manifest.metadata["base_model"] == str(qwen3)
    stage3 = train_rl(params, 3, progress=False)
    assert architecture(stage3.folder) == "qwen3"
    assert stage3.manifest.metadata["start_model"] == str(sft.folder.relative_to(params.root))
    # another SFT base is another model: the SFT model is retrained, not reused
    again = params.model_copy(update={"sft": params.sft.model_copy(update={"base_model": str(tiny)})})
    assert not build_sft_model(again, progress=False).skipped
    assert architecture(sft.folder) == "llama"
    # null is agent.base_model: the same start model, so the same fingerprint (the setting itself is not in it)
    unset = params.model_copy(update={"sft": params.sft.model_copy(update={"base_model": None})})
    assert build_sft_model(unset, progress=False).skipped


def test_stage3_refuses_a_base_model_of_its_own(solar_qa: Params) -> None:
    values = solar_qa.rl.model_dump()
    values["stage3"]["base_model"] = "smollm2"
    with pytest.raises(ValidationError, match="stage 3 starts from the SFT model"):
        type(solar_qa.rl).model_validate(values)
