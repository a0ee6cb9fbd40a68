"""PPO as the Omne-R1 paper runs it (section 3.3.1): several clipped updates over minibatches of each batch of
rollouts (TRL's num_iterations and steps_per_generation), and a critic that starts from the stage's start model (in
stage 3 the SFT model), a LoRA adapter with a value head when the policy is LoRA. Real tiny trainers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pipelines.config import Params, RLStageParams


@pytest.fixture(scope="module")
def sft_adapter(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for a LoRA SFT model: an adapter folder on the tiny base whose weights move every adapted layer."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.train.lora import lora_config

    base = AutoModelForCausalLM.from_pretrained(tiny)
    model = get_peft_model(base, lora_config(base, r=4, alpha=8))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.5)
    folder = tmp_path_factory.mktemp("sft") / "sft"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(folder)
    return folder


def _params(solar_qa: Params, tiny: Path, **stage: object) -> Params:
    settings = dict(algorithm="ppo", num_generations=2, questions_per_step=1, max_steps=1, max_new_tokens=12,
                    max_rounds=2, max_questions=4, val_questions=0, learning_rate=1e-3, backend="transformers")
    settings.update(stage)
    rl = solar_qa.rl.model_copy(update={"stage3": RLStageParams(**settings)})
    agent = solar_qa.agent.model_copy(update={"base_model": str(tiny), "device": "cpu"})
    return solar_qa.model_copy(update={"rl": rl, "agent": agent})


def _keep_trainer(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The PPO trainers built while the test runs (train_rl keeps its own to itself)."""
    from pipelines.train.rl.trainers import PPOToolTrainer

    made: list[Any] = []
    init = PPOToolTrainer.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(PPOToolTrainer, "__init__", keep)
    return made


def _trunk(model: Any) -> dict[str, torch.Tensor]:
    """The transformer trunk's weights of a causal LM or a (PEFT) critic, by the trunk's own names."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {k.replace(".base_layer", ""): v for k, v in inner.model.state_dict().items() if "lora_" not in k}


def test_ppo_epochs_reuse_each_batch_of_rollouts_and_the_clip_acts(solar_qa: Params, tiny: Path, sft_adapter: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage 3 from a LoRA SFT model with ppo_epochs 2 x ppo_minibatches 2: one batch of rollouts feeds 4 optimizer
    steps of the policy and of the critic; the first step's ratio is 1 (the policy that generated), later ones have
    moved and the log shows the clip act. The LoRA critic's adapter and head train, its trunk stays the SFT model's."""
    from pipelines.train.rl import train_rl
    from pipelines.train.rl.build import load_policy

    trainers = _keep_trainer(monkeypatch)
    params = _params(solar_qa, tiny, ppo_epochs=2, ppo_minibatches=2, max_steps=4, learning_rate=5e-2, epsilon=0.05,
                     value_learning_rate=1e-2)
    result = train_rl(params, 3, start=str(sft_adapter), name="ppo-epochs", progress=False)
    history = [h for h in json.loads((result.folder / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert [h["step"] for h in history if "reward" in h] == [1]  # generated once, at the first step
    assert all("value_loss" in h for h in history)  # the critic steps with the policy
    clipped = [h["clip_ratio/region_mean"] for h in history]
    assert clipped[0] == 0 and max(clipped[1:]) > 0
    assert result.manifest.params["rl"]["ppo_epochs"] == 2
    (trainer,) = trainers
    assert (trainer.args.num_iterations, trainer.args.steps_per_generation, trainer.args.gradient_accumulation_steps,
            trainer.args.per_device_train_batch_size) == (2, 2, 1, 1)
    critic, start = trainer.value_model, _trunk(load_policy(sft_adapter, params)[0])
    trunk = _trunk(critic)
    assert all(torch.equal(trunk[k], start[k]) for k in start)
    assert any(p.abs().sum() > 0 for name, p in critic.named_parameters() if "lora_B" in name)  # PEFT starts B at 0


@pytest.mark.parametrize("method", ["lora", "full"])
def test_the_critic_starts_from_the_stage_start_model(solar_qa: Params, tiny: Path, sft_adapter: Path,
                                                      method: str) -> None:
    """Stage 3 from a LoRA SFT model: the critic's trunk is the SFT model's (the adapter merged), not the base's,
    in its own copy; a LoRA policy gets a LoRA critic (adapter and value head train, the trunk stays), a full one a
    critic trained in full."""
    from transformers import AutoModelForCausalLM

    from pipelines.train.rl.build import load_policy, value_model

    params = _params(solar_qa, tiny, method=method)
    policy, tokenizer = load_policy(sft_adapter, params)
    critic = value_model(policy, params.rl.stage3, tokenizer)
    start, base = _trunk(policy), _trunk(AutoModelForCausalLM.from_pretrained(tiny))
    trunk = _trunk(critic)
    assert trunk.keys() == start.keys() and all(torch.equal(trunk[k], start[k]) for k in start)
    assert any(not torch.equal(start[k], base[k]) for k in start)  # the SFT model, not the base
    assert all(trunk[k].data_ptr() != start[k].data_ptr() for k in start)
    trained = {name for name, p in critic.named_parameters() if p.requires_grad}
    if method == "lora":
        assert trained and all("lora_" in name or ".score." in name for name in trained)
        assert any(".score." in name for name in trained) and any("lora_" in name for name in trained)
    else:
        assert trained == {name for name, _ in critic.named_parameters()}
    values = critic(input_ids=torch.tensor([[1, 5, 7]]), attention_mask=torch.ones(1, 3, dtype=torch.long)).logits
    assert values.shape == (1, 3, 1)


def test_ppo_minibatches_must_divide_a_batch_and_stay_out_of_grpo_fingerprints() -> None:
    with pytest.raises(ValueError, match="ppo_minibatches 3 does not divide"):
        RLStageParams(algorithm="ppo", num_generations=4, ppo_minibatches=3)
    assert "ppo_epochs" not in RLStageParams().result_settings()
    assert RLStageParams(algorithm="ppo", ppo_epochs=2).result_settings()["ppo_epochs"] == 2
