"""The weighted think-loss (Omne-R1 paper, Algorithm 1) and the SFT trainer built on TRL's SFTTrainer.

Tiny random llamas (tests/model_support.py) keep this fast: the loss is checked against a by-hand
token loop, against TRL's own assistant-only loss at weight 1.0, across gradient accumulation, and a
few LoRA / full fine-tuning steps run end to end through ``train_sft``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from pipelines.config import SFTParams
from pipelines.llm.checkpoints import load_trained_model
from pipelines.train.precision import use_bf16
from pipelines.train.sft import (
    NO_THINK_PREFIX,
    TRAINING_TEMPLATES,
    prepare_tokenizer,
    resize_for_tokens,
    sft_dataset,
    sharegpt_to_messages,
    train_sft,
    training_chat_template,
)
from pipelines.train.think_loss import (
    ThinkWeightCollator,
    ThinkWeightedSFTTrainer,
    think_spans,
    think_weights,
    weighted_causal_lm_loss,
)
from tests.model_support import build_tiny_llama

O, C = 100, 101  # noqa: E741 - <think>, </think> ids in the hand cases
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def conversation(i: int, *, think: bool = True) -> dict:
    """A ShareGPT SFT conversation as docs/architecture.md has it (two rounds: a tool call, then the answer)."""
    first = "<think>I look up Mars first.</think>\n" if think else ""
    second = "<think>Phobos orbits Mars.</think>\n" if think else ""
    return {"id": f"c{i}", "graph_type": "solar", "question": "Which moon orbits Mars?", "golden_answer": "Phobos",
            "system": "Answer the question with the tools. Reason inside <think> </think>.", "tools": "",
            "conversations": [
                {"from": "human", "value": f"Knowledge graph: solar\nQuestion {i}: Which moon orbits the planet "
                                           "that orbits the Sun?"},
                {"from": "gpt", "value": first + '<tool_call>node_info(node_name="Mars", graph_type="solar")'
                                                 "</tool_call>"},
                {"from": "observation", "value": "<tool_response>\nPhobos and Deimos orbit Mars. <think> is "
                                                 "text here </think>\n</tool_response>"},
                {"from": "gpt", "value": second + "<answer>Phobos</answer>"}]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tiny_tied(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama with tied input/output embeddings, as SmolLM2 has them."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_pretrained(tiny)
    config.tie_word_embeddings = True
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tied") / "model"
    LlamaForCausalLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer(tiny: Path):
    return prepare_tokenizer(tiny)[0]


def load_model(folder: Path, tokenizer):  # noqa: ANN001, ANN201
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    _, new_tokens = prepare_tokenizer(folder)
    resize_for_tokens(model, tokenizer, new_tokens)
    return model.eval()


def make_trainer(folder: Path, tokenizer, tmp: Path, *, think_weight: float | None = 0.1, n: int = 4,  # noqa: ANN001
                 grad_accumulation: int = 1, think: bool = True, padding_free: bool = False):  # noqa: ANN201
    """ThinkWeightedSFTTrainer (or, with think_weight None, TRL's plain SFTTrainer) on tiny conversations;
    ``padding_free``: a batch's conversations end to end in one row (TRL then takes them whole: no max_length)."""
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(output_dir=str(tmp), assistant_only_loss=True, report_to="none", bf16=False,
                       activation_checkpointing=False, max_length=None if padding_free else 512,
                       padding_free=padding_free, per_device_train_batch_size=2,
                       gradient_accumulation_steps=grad_accumulation, dataloader_pin_memory=False)
    dataset = sft_dataset([conversation(i, think=think) for i in range(n)])
    model = load_model(folder, tokenizer)
    if think_weight is None:
        trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    else:
        trainer = ThinkWeightedSFTTrainer(model=model, args=config, train_dataset=dataset,
                                          processing_class=tokenizer, think_weight=think_weight)
    trainer.model.eval()
    return trainer


def collate(trainer, rows: range) -> dict:  # noqa: ANN001
    examples = [{k: trainer.train_dataset[i][k] for k in ("input_ids", "labels")} for i in rows]
    return trainer.data_collator(examples)


# ------------------------------------------------------------------------------------------ weights


def test_think_weights_closed_span_includes_both_tags() -> None:
    ids = torch.tensor([[5, 6, O, 7, 8, C, 9, 2]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    w = think_weights(ids, mask, O, C, 0.25)
    assert w.dtype == torch.float32
    assert w.tolist() == [[0, 0, 0.25, 0.25, 0.25, 0.25, 1, 1]]


def test_think_weights_unclosed_think_keeps_weight_one() -> None:
    ids = torch.tensor([5, O, 7, 8, 9, 2])
    mask = torch.tensor([0, 1, 1, 1, 1, 1])
    assert think_weights(ids, mask, O, C, 0.001).tolist() == [0, 1, 1, 1, 1, 1]
    # a stray close, and a re-opened think: only the last opener before the close starts the span
    ids = torch.tensor([C, 7, O, 8, O, 9, C, 3])
    assert think_weights(ids, torch.ones(8), O, C, 0.5).tolist() == [1, 1, 1, 1, 0.5, 0.5, 0.5, 1]


def test_think_weights_zero_on_prompt_tool_response_and_padding_two_turns() -> None:
    P = 0  # noqa: N806 - padding id
    #        sys  user | asst: <think> x </think> call eos | tool: <think> r </think> eos | asst: <think> y </think> ans eos | pad pad
    ids = [11, 12, O, 21, C, 22, 2, O, 31, C, 2, O, 41, C, 42, 2, P, P]
    mask = [0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0]
    want = [0, 0, .1, .1, .1, 1, 1, 0, 0, 0, 0, .1, .1, .1, 1, 1, 0, 0]
    got = think_weights(torch.tensor([ids]), torch.tensor([mask]), O, C, 0.1)[0].tolist()
    assert got == pytest.approx(want)
    # an opener left open in turn 1 is not closed by turn 2's tag: spans never cross a tool response
    ids2 = [11, O, 21, 22, 2, 31, 2, 41, C, 42, 2, P]
    mask2 = [0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0]
    assert think_weights(torch.tensor(ids2), torch.tensor(mask2), O, C, 0.1).tolist() == \
        [0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0]
    # batched == row by row (rows of one length; the second row is the first one's prefix, padded)
    batch = torch.tensor([ids, ids[:12] + [P] * 6])
    masks = torch.tensor([mask, mask[:12] + [0] * 6])
    rows = [think_weights(batch[i], masks[i], O, C, 0.1) for i in range(2)]
    assert torch.equal(think_weights(batch, masks, O, C, 0.1), torch.stack(rows))
    assert think_spans(batch, masks, O, C).sum().item() == 6 + 3 + 0


def test_sharegpt_to_messages_roles_and_no_think() -> None:
    from pipelines.agent.protocols import NO_THINK_PREFIX as PROTOCOL_PREFIX

    record = conversation(0)
    messages = sharegpt_to_messages(record)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[0]["content"] == record["system"]
    assert messages[3]["content"].startswith("<tool_response>")
    assert NO_THINK_PREFIX == PROTOCOL_PREFIX
    plain = sharegpt_to_messages(record, mode="no_think")
    assert plain[2]["content"] == NO_THINK_PREFIX + '<tool_call>node_info(node_name="Mars", graph_type="solar")' \
                                                    "</tool_call>"
    assert plain[4]["content"] == NO_THINK_PREFIX + "<answer>Phobos</answer>"
    assert sharegpt_to_messages(conversation(0, think=False), mode="no_think") == plain
    with pytest.raises(ValueError, match="unknown 'from'"):
        sharegpt_to_messages({"system": "s", "conversations": [{"from": "tool", "value": "x"}]})
    dataset = sft_dataset([record, conversation(1)])
    assert dataset.column_names == ["id", "messages"] and len(dataset) == 2


# ------------------------------------------------------------------------------------------ tokenizer


def test_think_tokens_are_single_and_decoding_round_trips(tiny: Path, tokenizer) -> None:  # noqa: ANN001
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(tiny).encode("<think>", add_special_tokens=False)) > 1  # before
    open_id, close_id = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert tokenizer.encode("<think>", add_special_tokens=False) == [open_id]
    assert tokenizer.encode("</think>", add_special_tokens=False) == [close_id]
    ids = tokenizer.encode("so<think>x </think>\n<answer>", add_special_tokens=False)
    assert open_id in ids and close_id in ids
    assert "<think>" not in tokenizer.all_special_tokens  # non-special: decoding keeps the tags
    messages = sharegpt_to_messages(conversation(3))
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    encoded = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
    assert tokenizer.decode(encoded["input_ids"]) == text
    assert "<think>I look up Mars first.</think>" in tokenizer.decode(encoded["input_ids"], skip_special_tokens=True)
    # the assistant mask covers exactly the two assistant contents and their <|im_end|>
    masked = [t for t, m in zip(encoded["input_ids"], encoded["assistant_masks"], strict=True) if m]
    assert tokenizer.decode(masked) == "".join(m["content"] + "<|im_end|>" for m in messages
                                               if m["role"] == "assistant")
    assert masked.count(open_id) == 2 and masked.count(close_id) == 2


def test_an_untrained_turn_is_context_not_a_target(tiny: Path, tokenizer, tmp_path: Path) -> None:  # noqa: ANN001
    """A gpt turn marked "train": "false" (a loop-recovery conversation's repeated call) renders as before but
    carries no label, also beside conversations without the flag (the dataset then holds None for it)."""
    from trl import SFTConfig

    looped = conversation(9)
    call, response, answer = looped["conversations"][1:]
    note = {"from": "observation", "value": "<tool_response>\n<error>The same call as the last one</error>\n"
                                            "</tool_response>"}
    looped["conversations"] = [looped["conversations"][0], call, response, {**call, "train": "false"}, note, answer]
    messages = sharegpt_to_messages(looped)
    assert messages[4] == {"role": "assistant", "content": call["value"], "train": False}
    plain = [{k: v for k, v in m.items() if k != "train"} for m in messages]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == tokenizer.apply_chat_template(plain,
                                                                                                      tokenize=False)
    config = SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, report_to="none", bf16=False,
                       activation_checkpointing=False, max_length=512, per_device_train_batch_size=2,
                       dataloader_pin_memory=False)
    trainer = ThinkWeightedSFTTrainer(model=load_model(tiny, tokenizer), args=config,
                                      train_dataset=sft_dataset([conversation(0), looped]), processing_class=tokenizer,
                                      think_weight=0.1)
    batch = collate(trainer, range(2))
    for row, conv in enumerate((conversation(0), looped)):
        ids, labels = batch["input_ids"][row], batch["labels"][row]
        trained = tokenizer.decode(ids[labels != -100])
        assert trained == call_text(conv) + answer_text(conv)  # the repeated call is in the input, not trained
    assert tokenizer.decode(batch["input_ids"][1]).count(call["value"]) == 2
    with pytest.raises(ValueError, match="no gpt turn to train on"):
        sharegpt_to_messages({"system": "s", "conversations": [{"from": "human", "value": "q"},
                                                               {"from": "gpt", "value": "a", "train": "false"}]})


def call_text(record: dict) -> str:
    return record["conversations"][1]["value"] + "<|im_end|>"


def answer_text(record: dict) -> str:
    return record["conversations"][-1]["value"] + "<|im_end|>"


def test_training_templates_render_like_the_originals(tiny: Path) -> None:
    from transformers import AutoTokenizer

    for template, expected in ((SMOLLM2_TEMPLATE, "smollm2-chatml"), (None, "chatml")):
        tok = AutoTokenizer.from_pretrained(tiny)
        if template:
            tok.chat_template = template
        assert training_chat_template(tok) == TRAINING_TEMPLATES[expected]
        for messages in (sharegpt_to_messages(conversation(0)), sharegpt_to_messages(conversation(0))[1:]):
            for prompt in (False, True):
                assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt) == \
                    tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt,
                                            chat_template=TRAINING_TEMPLATES[expected])
    tok.chat_template = "{{ messages[0]['content'] }}"
    with pytest.raises(ValueError, match="generation"):
        training_chat_template(tok)


# ------------------------------------------------------------------------------------------ loss


def by_hand(model, batch: dict) -> float:  # noqa: ANN001
    """sum(w * nll) / sum(w) with a manual log-softmax, one token at a time (float64)."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.double()
    numerator = denominator = 0.0
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1] - 1):
            target = int(batch["labels"][b, t + 1])
            if target == -100:
                continue
            row = logits[b, t]
            top = float(row.max())
            log_z = top + math.log(sum(math.exp(float(x) - top) for x in row))
            weight = float(batch["loss_weights"][b, t + 1])
            numerator += weight * (log_z - float(row[target]))
            denominator += weight
    return numerator / denominator if denominator > 1e-8 else 0.0


def test_weighted_loss_equals_by_hand_computation(tiny: Path, tokenizer, tmp_path: Path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny, tokenizer, tmp_path, think_weight=0.1)
    batch = collate(trainer, range(2))
    assert isinstance(trainer.data_collator, ThinkWeightCollator)
    weights = batch["loss_weights"]
    assert sorted(weights.unique().tolist()) == pytest.approx([0.0, 0.1, 1.0])
    assert torch.equal(weights == 0, batch["labels"] == -100)
    expected = by_hand(trainer.model, batch)
    with torch.no_grad():
        got = trainer.compute_loss(trainer.model, dict(batch)).item()
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert got == pytest.approx(expected, abs=1e-5)
    assert weighted_causal_lm_loss(logits, batch["labels"], weights).item() == pytest.approx(expected, abs=1e-5)
    # the weights matter: the plain assistant-only mean differs
    plain = weighted_causal_lm_loss(logits, batch["labels"], (batch["labels"] != -100).float()).item()
    assert abs(plain - expected) > 1e-3
    assert trainer._metrics["eval"]["assistant_loss"][-1] == pytest.approx(plain, abs=1e-5)


def test_weight_one_equals_trl_assistant_only_loss(tiny: Path, tokenizer, tmp_path: Path) -> None:  # noqa: ANN001
    ours = make_trainer(tiny, tokenizer, tmp_path / "ours", think_weight=1.0)
    plain = make_trainer(tiny, tokenizer, tmp_path / "plain", think_weight=None)
    batch = collate(ours, range(1, 4))
    plain_batch = collate(plain, range(1, 4))
    assert torch.equal(batch["labels"], plain_batch["labels"]) and "loss_weights" not in plain_batch
    with torch.no_grad():
        a = ours.compute_loss(ours.model, dict(batch)).item()
        b = plain.compute_loss(plain.model, dict(plain_batch)).item()
    assert a == pytest.approx(b, abs=1e-6)


def test_zero_total_weight_gives_zero_loss(tiny: Path, tokenizer, tmp_path: Path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny, tokenizer, tmp_path, think_weight=0.0)
    batch = collate(trainer, range(2))
    # train on the think spans only: with think_weight 0 every weight is 0
    spans = think_spans(batch["input_ids"], batch["labels"] != -100, trainer.think_open_id, trainer.think_close_id)
    batch["labels"] = batch["labels"].masked_fill(~spans, -100)
    batch = ThinkWeightCollator(lambda _: batch, trainer.think_open_id, trainer.think_close_id, 0.0)([])
    assert batch["loss_weights"].sum() == 0 and (batch["labels"] != -100).any()
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, dict(batch))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()  # a batch with nothing to learn still backpropagates (zero gradients)
    assert all(p.grad is None or not p.grad.any() for p in trainer.model.parameters())
    logits = torch.randn(1, 4, 7)
    assert weighted_causal_lm_loss(logits, torch.full((1, 4), -100), torch.zeros(1, 4)).item() == 0.0


def test_gradient_accumulation_normalises_by_the_total_weight(tiny: Path, tokenizer, tmp_path: Path) -> None:  # noqa: ANN001
    trainer = make_trainer(tiny, tokenizer, tmp_path, think_weight=0.05, grad_accumulation=2)
    # different lengths and different weight sums in the two micro-batches
    first, second = collate(trainer, range(2)), collate(trainer, range(2, 3))
    batches, _ = trainer.get_batch_samples(iter([first, second]), 2, torch.device("cpu"))
    totals = [b["loss_weight_total"] for b in batches]
    sums = [float((b["loss_weights"][:, 1:] * (b["labels"][:, 1:] != -100)).sum()) for b in (first, second)]
    assert float(totals[0]) == float(totals[1]) == pytest.approx(sum(sums))
    with torch.no_grad():
        step_loss = sum(trainer.compute_loss(trainer.model, dict(b)).item() for b in batches)
        means = [weighted_causal_lm_loss(trainer.model(input_ids=b["input_ids"],
                                                       attention_mask=b["attention_mask"]).logits,
                                         b["labels"], b["loss_weights"]).item() for b in (first, second)]
    assert step_loss == pytest.approx((means[0] * sums[0] + means[1] * sums[1]) / sum(sums), abs=1e-5)


def test_padding_free_batch_loss_is_the_sum_of_per_conversation_losses(tiny: Path, tokenizer,  # noqa: ANN001
                                                                         tmp_path: Path) -> None:
    """Three conversations end to end in one row (position ids restart per conversation): the weights are each
    conversation's own (think spans found per conversation, none across the seams), attention stays within each
    conversation, so the row's loss is sum_i(w_i * loss_i) / sum_i(w_i) over the conversations trained alone."""
    packed_trainer = make_trainer(tiny, tokenizer, tmp_path / "packed", think_weight=0.1, padding_free=True)
    alone_trainer = make_trainer(tiny, tokenizer, tmp_path / "alone", think_weight=0.1)
    packed = collate(packed_trainer, range(3))
    assert packed["input_ids"].shape[0] == 1 and "attention_mask" not in packed
    alone = [collate(alone_trainer, range(i, i + 1)) for i in range(3)]
    # the packed weights are the conversations' own weights, end to end (each first token is a prompt token: 0)
    assert torch.equal(packed["loss_weights"][0], torch.cat([a["loss_weights"][0] for a in alone]))
    assert sorted(packed["loss_weights"].unique().tolist()) == pytest.approx([0.0, 0.1, 1.0])
    totals = [float((a["loss_weights"][:, 1:] * (a["labels"][:, 1:] != -100)).sum()) for a in alone]
    with torch.no_grad():
        losses = [alone_trainer.compute_loss(alone_trainer.model, dict(a)).item() for a in alone]
        got = packed_trainer.compute_loss(packed_trainer.model, dict(packed)).item()
    assert got == pytest.approx(sum(loss * w for loss, w in zip(losses, totals, strict=True)) / sum(totals), abs=1e-5)
    # the trained-token count: the conversations' assistant tokens, not the row's length
    packed_trainer.model.train()
    packed_trainer.compute_loss(packed_trainer.model, dict(packed))
    assert packed_trainer.trained_assistant_tokens == sum(int((a["labels"][:, 1:] != -100).sum()) for a in alone)


# ------------------------------------------------------------------------------------------ training


def test_bf16_auto_follows_the_hardware() -> None:
    """``auto`` trains in bf16 on a CPU whose flags say it multiplies bf16 natively (and on CUDA)."""
    from pipelines.train.precision import cpu_has_native_bf16

    assert use_bf16(True) is True and use_bf16(False) is False
    assert use_bf16("auto", cuda=False) == cpu_has_native_bf16()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        flags = set(cpuinfo.read_text().split())
        assert cpu_has_native_bf16() == bool(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})


def test_train_sft_lora_end_to_end(tiny_tied: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    params = SFTParams(max_steps=5, learning_rate=5e-3, warmup_ratio=0.0, per_device_batch=2, grad_accumulation=1,
                       max_length=512, think_weight=0.001, seed=0)
    out = tmp_path / "sft"
    result = train_sft([conversation(i) for i in range(8)], tiny_tied, out, params, progress=False)
    assert not result.skipped
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "manifest.json", "loss_curve.png", "trainer_state.json"} <= names
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "sft_model" and manifest["params"]["think_weight"] == 0.001
    assert manifest["rows"]["conversations"] == 8 and manifest["rows"]["train_examples"] == 8
    assert set(manifest["files"]) >= {"adapter_model.safetensors", "tokenizer.json", "loss_curve.png"}
    meta = manifest["metadata"]
    assert meta["steps"] == 5 and meta["tokens_per_second"] > 0 and manifest["rows"]["overlong_examples"] == 0
    # what the training time bought: 5 steps x 2 conversations, each with the same assistant turns (only the
    # question differs), so 10/8 of the dataset's assistant tokens; a rate over the training seconds
    rows = manifest["rows"]
    assert rows["dropped_examples"] == rows["truncated_examples"] == 0
    assert rows["trained_assistant_tokens"] == meta["trained_assistant_tokens"] == rows["assistant_tokens"] * 10 // 8
    assert 0 < meta["trained_assistant_tokens"] < meta["tokens"] and meta["train_runtime_s"] > 0
    assert meta["assistant_tokens_per_second"] == pytest.approx(meta["trained_assistant_tokens"]
                                                                / meta["train_runtime_s"], rel=1e-3)
    assert meta["bf16"] == use_bf16("auto")  # SFTParams.bf16 defaults to auto: bf16 where the hardware has it
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 5 and losses[-1] < losses[0] and meta["final_loss"] == losses[-1]
    assert all("assistant_loss" in h and "think_token_share" in h for h in history if "loss" in h)
    # the new token rows are in the adapter (PEFT trainable tokens; the tied LM head follows them)
    saved = load_file(out / "adapter_model.safetensors")
    deltas = [k for k in saved if "trainable_tokens_delta" in k]
    assert deltas and all(saved[k].shape[0] == 2 for k in deltas)
    # reload on the base: grow the embeddings to the saved tokenizer, then the adapter
    model, tok = load_trained_model(out)
    ids = tok.convert_tokens_to_ids(["<think>", "</think>"])
    assert torch.equal(model.get_input_embeddings().weight[ids], saved[deltas[0]])
    base = AutoModelForCausalLM.from_pretrained(tiny_tied)
    base.resize_token_embeddings(len(tok), mean_resizing=False)
    again = PeftModel.from_pretrained(base, out).eval()
    prompt = tok.apply_chat_template(sharegpt_to_messages(conversation(9))[:2], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    with torch.no_grad():
        generated = again.generate(**prompt, max_new_tokens=6, do_sample=False)
        assert torch.allclose(again(**prompt).logits, model(**prompt).logits, atol=1e-5)
    assert generated.shape[1] > prompt["input_ids"].shape[1]
    # same inputs and params: reused, not retrained
    assert train_sft([conversation(i) for i in range(8)], tiny_tied, out, params, force=False).skipped


KILLED_SFT = """
import json, sys
from pipelines.config import SFTParams
from pipelines.train.sft import train_sft
conversations, params, base, out = json.loads(open(sys.argv[1]).read())
train_sft(conversations, base, out, SFTParams(**params), progress=False)
"""


def test_a_killed_sft_resumes_from_its_last_checkpoint(tiny_tied: Path, tmp_path: Path) -> None:
    """SIGKILL right after the step-2 checkpoint; the rerun trains steps 3-4 only and ends with the weights of an
    uninterrupted run (optimizer, schedule, data order and RNG all restored)."""
    import os
    import signal
    import subprocess
    import sys

    from safetensors.torch import load_file

    conversations = [conversation(i) for i in range(8)]
    settings = {"max_steps": 4, "save_steps": 2, "learning_rate": 5e-3, "warmup_ratio": 0.0, "per_device_batch": 2,
                "grad_accumulation": 1, "max_length": 512, "seed": 0}
    params = SFTParams(**settings)
    whole = train_sft(conversations, tiny_tied, tmp_path / "whole", params, progress=False)
    assert whole.manifest.metadata["resumed_from_step"] is None
    assert not list(tmp_path.glob(".whole.checkpoints-*"))  # a finished SFT leaves no checkpoint behind

    out = tmp_path / "sft"
    job = tmp_path / "job.json"
    job.write_text(json.dumps([conversations, settings, str(tiny_tied), str(out)]))
    env = {**os.environ, "OMNE_PAUSE_AT": "sft_checkpoint_saved", "OMNE_PAUSE_S": "300"}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SFT, str(job)], env=env, stderr=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        for line in proc.stderr:
            if "paused at sft_checkpoint_saved" in line:
                break
        else:
            pytest.fail(f"the SFT subprocess ended (rc {proc.wait()}) before saving a checkpoint")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not out.exists()
    (checkpoints,) = tmp_path.glob(".sft.checkpoints-*")
    assert [p.name for p in checkpoints.glob("checkpoint-*")] == ["checkpoint-2"]

    resumed = train_sft(conversations, tiny_tied, out, params, progress=False)
    meta = resumed.manifest.metadata
    assert meta["resumed_from_step"] == 2 and meta["steps"] == 4
    assert not checkpoints.exists()
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [h["step"] for h in history if "loss" in h] == [1, 2, 3, 4]  # the killed run's log kept
    expected, got = load_file(tmp_path / "whole" / "adapter_model.safetensors"), load_file(
        out / "adapter_model.safetensors")
    assert expected.keys() == got.keys()
    assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected)
    # a different setting does not resume from another run's checkpoints: they are dropped
    stale = tmp_path / ".sft.checkpoints-0123456789abcdef"
    (stale / "checkpoint-2").mkdir(parents=True)
    train_sft(conversations, tiny_tied, out, SFTParams(**{**settings, "seed": 1}), progress=False)
    assert not stale.exists()


def test_train_sft_lora_on_the_last_blocks_only(tiny_tied: Path, tmp_path: Path) -> None:
    """sft.lora_layers: adapters in the last block only (of 2); the new token rows still learn (from the output side,
    the tied LM head), the adapter reloads, and the setting is part of the model's identity."""
    from peft import PeftConfig
    from safetensors.torch import load_file

    params = SFTParams(max_steps=4, learning_rate=5e-3, warmup_ratio=0.0, per_device_batch=2, grad_accumulation=1,
                       max_length=512, lora_layers=1, seed=0)
    out = tmp_path / "last"
    manifest = train_sft([conversation(i) for i in range(8)], tiny_tied, out, params, progress=False).manifest
    assert manifest.params["lora_layers"] == 1
    assert PeftConfig.from_pretrained(out).layers_to_transform == [1]
    saved = load_file(out / "adapter_model.safetensors")
    lora = [k for k in saved if "lora_" in k]
    assert lora and all(".layers.1." in k for k in lora)
    losses = [h["loss"] for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    assert len(losses) == 4 and losses[-1] < losses[0]
    tokenizer, new_tokens = prepare_tokenizer(tiny_tied)
    start = load_model(tiny_tied, tokenizer).get_input_embeddings().weight[sorted(new_tokens)]
    delta = next(saved[k] for k in saved if "trainable_tokens_delta" in k)
    assert not torch.allclose(delta, start)  # trained through the LM head alone
    model, _ = load_trained_model(out)
    assert torch.equal(model.get_input_embeddings().weight[sorted(new_tokens)], delta)
    # another number of blocks is another model: retrained, not reused
    every = params.model_copy(update={"lora_layers": None})
    assert not train_sft([conversation(i) for i in range(8)], tiny_tied, out, every, progress=False).skipped


def test_train_sft_full_fine_tuning(tiny: Path, tmp_path: Path) -> None:
    params = SFTParams(method="full", max_steps=2, per_device_batch=2, grad_accumulation=2, max_length=400,
                       mode="no_think", overlong="drop", learning_rate=None)  # None: the method's (full: 1e-5)
    out = tmp_path / "full"
    long = conversation(4)
    long["conversations"][2]["value"] = "<tool_response>\n" + "Phobos orbits Mars. " * 80 + "\n</tool_response>"
    result = train_sft([conversation(i) for i in range(4)] + [long], tiny, out, params, progress=False)
    assert result.manifest.metadata["learning_rate"] == 1e-5 and result.manifest.metadata["warmup_ratio"] == 0.01
    rows = result.manifest.rows
    assert rows["overlong_examples"] == rows["dropped_examples"] == 1 and rows["train_examples"] == 4
    assert rows["truncated_examples"] == 0 and rows["trained_assistant_tokens"] > 0
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    model, tok = load_trained_model(out)
    assert model.get_input_embeddings().num_embeddings == len(tok) == 302
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    # no-think data: each assistant turn is an empty think (weighted) plus the action
    assert all(0 < h["think_token_share"] < 0.5 for h in history if "loss" in h)


def test_train_sft_padding_free_trains_like_padded_batches(tiny: Path, tmp_path: Path) -> None:
    """sft.padding_free: the same conversations per step give the same first loss and the same trained tokens as
    padded batches, and an overlong conversation is cut to max_length by train_sft itself (TRL cuts nothing when
    padding-free)."""
    long = conversation(4)
    long["conversations"][2]["value"] = "<tool_response>\n" + "Phobos orbits Mars. " * 80 + "\n</tool_response>"
    data = [conversation(i) for i in range(4)] + [long]
    common = {"max_steps": 2, "per_device_batch": 2, "grad_accumulation": 1, "max_length": 400,
              "overlong": "truncate", "bf16": False, "warmup_ratio": 0.0, "think_weight": 0.1, "seed": 0}
    free = train_sft(data, tiny, tmp_path / "free", SFTParams(padding_free=True, **common), progress=False).manifest
    padded = train_sft(data, tiny, tmp_path / "padded", SFTParams(padding_free=False, **common),
                       progress=False).manifest
    for manifest in (free, padded):
        assert manifest.rows["truncated_examples"] == manifest.rows["overlong_examples"] == 1
        assert manifest.rows["train_examples"] == 5 and manifest.rows["dropped_examples"] == 0
        assert manifest.metadata["max_length_seen"] == 400
    assert free.rows["train_tokens"] == padded.rows["train_tokens"]
    assert free.rows["trained_assistant_tokens"] == padded.rows["trained_assistant_tokens"] > 0
    assert free.metadata["first_loss"] == pytest.approx(padded.metadata["first_loss"], abs=1e-4)
    assert free.metadata["final_loss"] == pytest.approx(padded.metadata["final_loss"], abs=1e-3)
