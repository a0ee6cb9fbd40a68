"""Tiny random models for tests: a 2-layer llama and a BPE tokenizer trained on a few KB of text,
built from a config (no files, no hub). Greedy output is deterministic, so batching can be compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TEXT = ("The planet Mars orbits the Sun. Phobos and Deimos orbit Mars. Which moon orbits the planet "
        "that orbits the Sun? Answer with the entity name only. <think> </think> <tool_call> </tool_call> "
        "<answer> </answer> node_info(node_name=\"Mars\", graph_type=\"solar\") entity_matcher ") * 20


def build_tiny_llama(folder: Path, text: str = TEXT, vocab_size: int = 300) -> Path:
    return build_tiny_model(folder, "llama", text=text, vocab_size=vocab_size)


def build_tiny_model(folder: Path, architecture: str = "llama", *, text: str = TEXT, vocab_size: int = 300) -> Path:
    """A tiny random model of ``architecture`` (``llama``, ``qwen2`` or ``qwen3``), built from its config class, with
    a BPE tokenizer trained on ``text``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    raw = Tokenizer(models.BPE(unk_token=None))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator([text, json.dumps({"question": "q", "answer": "a"})],
                            trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    raw.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="<|im_end|>",
                                        bos_token="<|im_start|>")
    tokenizer.chat_template = CHATML
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
                                 "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[architecture]
    config = config_class(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
                          pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                          bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    model = model_class(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def use_tiny_models(params_path: Path, model: Path, **sections: dict) -> None:
    """Point a test project's params.yaml at a tiny model with tiny training runs (the mechanics are under test,
    not SmolLM2): 2 SFT steps, a 2-weight sweep of 1 step each, 1-step RL stages with 2 short rollouts, a max
    length the char-level tokenizer fits in.
    ``sections`` merges further values, e.g. qa={"test_share": 0.5}."""
    import yaml

    params = yaml.safe_load(params_path.read_text(encoding="utf-8"))
    params["agent"]["base_model"] = str(model)
    params["sft"].update(max_steps=2, max_length=16384, sweep_max_steps=1, sweep_weights=[1.0, 0.0])
    for stage in ("stage1", "stage3"):
        params["rl"][stage].update(num_generations=2, questions_per_step=1, max_steps=1, max_new_tokens=8,
                                   max_rounds=1, max_questions=2, val_questions=1, max_length=16384)
    for name, values in sections.items():
        params[name].update(values)
    params_path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def same_replies(a: list[Any], b: list[Any]) -> None:
    """Two backends' (or paths') replies are the same: text, token counts and finish reason, row by row."""
    from pipelines.llm.base import ChatReply

    assert all(isinstance(r, ChatReply) for r in a + b)
    assert [(r.text, r.completion_tokens, r.finish_reason, r.prompt_tokens) for r in a] == \
        [(r.text, r.completion_tokens, r.finish_reason, r.prompt_tokens) for r in b]
