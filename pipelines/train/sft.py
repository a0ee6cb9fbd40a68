"""Stage-2 SFT (Omne-R1 paper, section 3.4): multi-turn tool conversations -> a LoRA adapter or a
fully fine-tuned model, trained with the weighted think-loss (``pipelines.train.think_loss``).

The SFT conversations are ShareGPT records (docs/architecture.md, "Data contracts"): ``system`` plus
``conversations`` of ``human`` / ``gpt`` / ``observation`` turns. They become TRL's conversational ``messages`` (system,
then human -> user, gpt -> assistant, observation -> user: tool responses come back to the agent as
user messages holding ``<tool_response>``), rendered by the base model's own chat template with
``{% generation %}`` blocks around the assistant output (rendering unchanged), so that TRL's
``assistant_only_loss`` masks prompts and tool responses. ``<think>`` / ``</think>`` are made single
tokens (added as non-special tokens, so ``decode(..., skip_special_tokens=True)`` keeps them for the
protocol parser), with their new embedding rows initialised to the mean of the pieces they used to
be split into. With LoRA those rows are trained and saved through PEFT ``trainable_token_indices``
(tied LM head: PEFT ties the row adapter to the output side; untied: the LM head's rows are targeted
too), so the adapter folder holds them (a few KB) rather than the whole embedding matrix.

The output folder (written whole or not at all): the adapter (``adapter_config.json``,
``adapter_model.safetensors``) or the full model, the tokenizer (with the two tokens and the
training chat template), ``trainer_state.json`` (the log history), ``loss_curve.png`` and
``manifest.json`` (kind ``sft_model``). ``pipelines.llm.checkpoints.load_trained_model`` loads it back (resizing
the base's embeddings before the adapter goes on).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.agent.protocols import THINK_CLOSE, THINK_OPEN
from pipelines.crashsafe import pause_point
from pipelines.manifest import ArtifactBuild, BuildResult, model_identity, read_manifest
from pipelines.train.lora import cut_gradient_below, lora_config
from pipelines.train.memory import (
    SFT_MMAP_THRESHOLD_BYTES,
    fused_logprob_tokens,
    heap_trim_callback,
    labelled_positions_only,
    mmap_large_allocations,
    release_memory,
)
from pipelines.train.precision import use_bf16

if TYPE_CHECKING:
    import datasets

    from pipelines.config import SFTParams

log = logging.getLogger(__name__)

ROLES = {"human": "user", "gpt": "assistant", "observation": "user"}
NO_THINK_PREFIX = "<think>\n\n</think>\n"  # = pipelines.agent.protocols.NO_THINK_PREFIX (asserted in tests)
THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.S)
DEFAULTS = {"lora": {"learning_rate": 1e-4, "warmup_ratio": 0.1}, "full": {"learning_rate": 1e-5, "warmup_ratio": 0.01}}

# ------------------------------------------------------------------------------------------ data


def _record(record: Any) -> Mapping[str, Any]:
    return record.model_dump() if hasattr(record, "model_dump") else record


def no_think_value(value: str) -> str:
    """A gpt turn in no-think form: its think blocks dropped, the empty think of no-think mode in front
    (what the rollout puts before the model's first token of each turn)."""
    return NO_THINK_PREFIX + THINK_BLOCK.sub("", value).lstrip()


def sharegpt_to_messages(record: Mapping[str, Any] | Any, *, mode: str = "think") -> list[dict[str, Any]]:
    """A ShareGPT SFT conversation -> chat messages: the system prompt, then human -> user,
    gpt -> assistant, observation -> user (its value already holds ``<tool_response>…</tool_response>``).
    ``mode="no_think"`` replaces every gpt turn's thinking with the empty ``<think>\\n\\n</think>``. A gpt turn
    marked ``"train": "false"`` becomes an assistant message with ``"train": False``: context, not trained on
    (the training chat templates render it outside the ``{% generation %}`` markers)."""
    record = _record(record)
    messages = [{"role": "system", "content": record["system"]}] if record.get("system") else []
    for index, turn in enumerate(record["conversations"]):
        role = ROLES.get(turn.get("from", ""))
        if role is None:
            raise ValueError(f"{record.get('id', '?')}: turn {index} has an unknown 'from' {turn.get('from')!r} "
                             f"(expected one of {sorted(ROLES)})")
        value = turn["value"]
        if role == "assistant" and mode == "no_think":
            value = no_think_value(value)
        message = {"role": role, "content": value}
        if role == "assistant" and turn.get("train") == "false":  # context only: a repeated call it recovers from
            message["train"] = False
        messages.append(message)
    if not any(m["role"] == "assistant" and m.get("train", True) for m in messages):
        raise ValueError(f"{record.get('id', '?')}: no gpt turn to train on")
    return messages


def sft_dataset(conversations: Iterable[Mapping[str, Any] | Any], *, mode: str = "think") -> datasets.Dataset:
    """TRL's conversational language-modeling dataset: one row per conversation, ``{id, messages}``."""
    from datasets import Dataset

    rows = [{"id": str(_record(r).get("id", i)), "messages": sharegpt_to_messages(r, mode=mode)}
            for i, r in enumerate(conversations)]
    if not rows:
        raise ValueError("no SFT conversations to train on")
    return Dataset.from_list(rows)


# ------------------------------------------------------------------------------------------ tokenizer

_SMOLLM_SYSTEM = ("{%- if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a "
                  "helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{%- endif %}")
_CHATML_TRAINING = (
    "{%- for message in messages %}{SYSTEM}"
    "{%- if message['role'] == 'assistant' and message.get('train', true) is not false %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")
# ChatML with {% generation %} around each assistant turn's content and its <|im_end|> (the stop token
# is trained; the newline after it is not): SmolLM2's (with its default system prompt) and plain ChatML. An
# assistant message with "train": false renders the same, outside the markers: context, not a target.
TRAINING_TEMPLATES = {
    "smollm2-chatml": _CHATML_TRAINING.replace("{SYSTEM}", _SMOLLM_SYSTEM),
    "chatml": _CHATML_TRAINING.replace("{SYSTEM}", ""),
}
_PROBES = [
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
     {"role": "assistant", "content": "<think>t</think>\n<tool_call>f(x=\"a\")</tool_call>"},
     {"role": "user", "content": "<tool_response>\nr\n</tool_response>"},
     {"role": "assistant", "content": "<think>u</think>\n<answer>A</answer>"}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "B"}],
]


def _renders_like(tokenizer: Any, template: str) -> bool:
    from jinja2 import TemplateError

    try:
        return all(
            tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=g, chat_template=template)
            == tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=g)
            for p in _PROBES for g in (False, True))
    except (TemplateError, TypeError, ValueError):
        return False


def training_chat_template(tokenizer: Any) -> str:
    """The tokenizer's chat template with ``{% generation %}`` blocks around the assistant output,
    rendering exactly like the original (checked on probe conversations): the template itself when
    it has the markers, one of ``TRAINING_TEMPLATES`` (ChatML, SmolLM2's ChatML), or TRL's training
    template for the model families TRL knows."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if not template:
        raise ValueError("the tokenizer has no chat template")
    if isinstance(template, str) and has_generation_markers(template):
        return template
    for candidate in TRAINING_TEMPLATES.values():
        if _renders_like(tokenizer, candidate):
            return candidate
    try:
        patched = get_training_chat_template(tokenizer)
    except ValueError as exc:
        raise ValueError(f"no training chat template with {{% generation %}} markers for this tokenizer: {exc}") \
            from None
    return patched or template


def add_think_tokens(tokenizer: Any) -> dict[int, list[int]]:
    """Make ``<think>`` and ``</think>`` single tokens: added (non-special, so decoding keeps them) unless
    the tokenizer already has them as added tokens. Returns {new token id: the ids the tag used to be
    split into} for the ids beyond the old vocabulary (empty when nothing new was added)."""
    from tokenizers import AddedToken

    before = len(tokenizer)
    added = tokenizer.get_added_vocab()
    pieces = {tag: tokenizer.encode(tag, add_special_tokens=False) for tag in (THINK_OPEN, THINK_CLOSE)}
    missing = [tag for tag in (THINK_OPEN, THINK_CLOSE) if tag not in added]
    if missing:
        tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False, single_word=False, lstrip=False,
                                         rstrip=False) for tag in missing])
    new: dict[int, list[int]] = {}
    for tag in missing:
        token_id = tokenizer.convert_tokens_to_ids(tag)
        if token_id >= before:
            new[int(token_id)] = pieces[tag]
    return new


def prepare_tokenizer(folder: Path | str) -> tuple[Any, dict[int, list[int]]]:
    """The base model's tokenizer with the think tokens, the training chat template and a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    new_tokens = add_think_tokens(tokenizer)
    tokenizer.chat_template = training_chat_template(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, new_tokens


def _embedding_names(model: Any) -> tuple[str, str, bool]:
    """(input embedding module name, output embedding module name, tied?)."""
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    names = {id(m): n for n, m in model.named_modules()}
    tied = out is not None and out.weight.data_ptr() == inp.weight.data_ptr()
    return names[id(inp)].rsplit(".", 1)[-1], names.get(id(out), "lm_head").rsplit(".", 1)[-1], tied


def trainable_token_rows(model: Any, new_tokens: Mapping[int, list[int]]) -> dict[str, list[int]] | None:
    """PEFT ``trainable_token_indices`` for the new tokens' rows: the input embedding (a tied LM head follows it),
    and the LM head too when untied; None when no token was added."""
    token_ids = sorted(new_tokens)
    if not token_ids:
        return None
    embed_name, head_name, tied = _embedding_names(model)
    return {embed_name: token_ids} if tied else {embed_name: token_ids, head_name: token_ids}


def resize_for_tokens(model: Any, tokenizer: Any, new_tokens: Mapping[int, list[int]]) -> None:
    """Grow the embeddings to the tokenizer and start each new row at the mean of its old pieces
    (input and, when untied, output side), which is deterministic and close to what the model knew."""
    import torch

    if len(tokenizer) <= model.get_input_embeddings().num_embeddings:
        return
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    _, _, tied = _embedding_names(model)
    with torch.no_grad():
        sides = [model.get_input_embeddings().weight] + ([] if tied else [model.get_output_embeddings().weight])
        for weight in sides:
            for token_id, pieces in new_tokens.items():
                weight[token_id] = weight[list(pieces)].mean(dim=0)


# ------------------------------------------------------------------------------------------ training


def resolved_hyperparameters(params: SFTParams) -> dict[str, float]:
    """learning_rate and warmup_ratio: as given, else the paper's for the method (LoRA 1e-4 / 0.1,
    full 1e-5 / 0.01)."""
    base = DEFAULTS[params.method]
    return {"learning_rate": params.learning_rate if params.learning_rate is not None else base["learning_rate"],
            "warmup_ratio": params.warmup_ratio if params.warmup_ratio is not None else base["warmup_ratio"]}


def conversations_sha256(conversations: list[Any]) -> str:
    blob = json.dumps([_record(r) for r in conversations], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def plot_loss_curve(log_history: list[dict[str, Any]], path: Path, title: str = "SFT loss") -> None:
    """loss (the weighted think-loss) and the plain assistant-only loss per optimizer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for key, label in (("loss", "weighted think-loss"), ("assistant_loss", "assistant-only loss (unweighted)")):
        points = [(h["step"], h[key]) for h in log_history if key in h and "step" in h]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o" if len(points) < 30 else None, ms=3, label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def train_sft(conversations: list[Any], base_model_folder: Path | str, output_folder: Path | str,
              params: SFTParams, *, progress: bool = True, force: bool = False,
              inputs: Mapping[str, str] | None = None) -> BuildResult:
    """Train the stage-2 SFT model on ShareGPT conversations and write ``output_folder`` atomically.

    ``params.method``: ``lora`` (r / alpha on every linear layer of the blocks, the new token rows
    through ``trainable_token_indices``) or ``full``; learning rate and warmup default by method;
    cosine schedule; ``think_weight`` on the think spans. ``inputs`` (path -> sha256) is recorded in
    the manifest beside the conversations' content hash and the base model's identity. With
    ``force=False`` an output built from the same inputs and params is reused.
    """

    base_model_folder, output_folder = Path(base_model_folder), Path(output_folder)
    conversations = list(conversations)
    all_inputs = {**(inputs or {}), "conversations": conversations_sha256(conversations),
                  "base_model": model_identity(base_model_folder)}
    # the sweep's settings are not this model's; memory-only settings leave the model as it is
    shaping = params.result_settings(exclude={"sweep_weights", "sweep_max_steps"})
    build = ArtifactBuild(output_folder, "sft_model", all_inputs, shaping)
    # before importing the trainer (~4 s of torch, transformers and TRL): a rerun only checks this
    if manifest := build.reusable(force):
        return build.result(manifest, skipped=True)
    checkpoints = checkpoint_folder(output_folder, build.fingerprint)
    drop_stale_checkpoints(output_folder, keep=None if force else checkpoints)  # force: start over

    import torch
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    from pipelines.train.think_loss import ThinkWeightedSFTTrainer

    mmap_large_allocations(SFT_MMAP_THRESHOLD_BYTES)  # step after step, activations would otherwise fragment the heap
    hyper = resolved_hyperparameters(params)
    bf16 = use_bf16(params.bf16)
    dataset = sft_dataset(conversations, mode=params.mode)
    tokenizer, new_tokens = prepare_tokenizer(base_model_folder)
    model = AutoModelForCausalLM.from_pretrained(base_model_folder, dtype=torch.float32)
    resize_for_tokens(model, tokenizer, new_tokens)
    peft_config = None
    if params.method == "lora":
        peft_config = lora_config(model, r=params.lora_r, alpha=params.lora_alpha, dropout=params.lora_dropout,
                                  layers=params.lora_layers, trainable_tokens=trainable_token_rows(model, new_tokens))
        cut_gradient_below(model, params.lora_layers)  # backward ends at the first adapted block

    config = SFTConfig(
        output_dir=str(checkpoints), seed=params.seed, data_seed=params.seed,
        num_train_epochs=params.epochs, max_steps=params.max_steps,
        per_device_train_batch_size=params.per_device_batch,
        gradient_accumulation_steps=params.grad_accumulation,
        learning_rate=hyper["learning_rate"], lr_scheduler_type=params.lr_scheduler,
        warmup_steps=hyper["warmup_ratio"], weight_decay=0.0,
        bf16=bf16, fp16=False, activation_checkpointing=params.gradient_checkpointing,
        # padding-free: TRL takes the conversations whole (overlong ones are dropped or cut below)
        max_length=None if params.padding_free else params.max_length, packing=False,
        padding_free=params.padding_free, assistant_only_loss=True,
        logging_steps=params.logging_steps, report_to="none",
        # a resumable checkpoint (weights, optimizer, schedule, RNG) every save_steps; the last one only
        save_strategy="steps" if params.save_steps else "no", save_steps=params.save_steps or None,
        save_total_limit=1,
        disable_tqdm=not progress, dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(),  # transformers allows bf16 without a GPU only when told
    )
    trainer = ThinkWeightedSFTTrainer(model=model, args=config, train_dataset=dataset,
                                      processing_class=tokenizer, peft_config=peft_config,
                                      think_weight=params.think_weight)
    trainer.add_callback(heap_trim_callback())  # the heap's freed holes back to the OS after every step
    trainer.add_callback(checkpoint_pause_callback())
    if not progress:
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # the per-step log dicts printed when tqdm is off
    lengths, assistant_tokens = _token_counts(trainer.train_dataset)
    overlong = sum(1 for n in lengths if n >= params.max_length)
    if overlong and params.overlong == "drop":
        trainer.train_dataset = trainer.train_dataset.filter(lambda ex: len(ex["input_ids"]) < params.max_length)
        lengths, assistant_tokens = _token_counts(trainer.train_dataset)
    elif overlong and params.padding_free:
        trainer.train_dataset = truncated(trainer.train_dataset, params.max_length)
        lengths, assistant_tokens = _token_counts(trainer.train_dataset)
    if overlong:
        log.warning("%d of %d SFT conversations reach max_length=%d: %s", overlong, len(conversations),
                    params.max_length, "dropped" if params.overlong == "drop" else "their ends are cut off")
    prepared = trainer.train_dataset
    if len(prepared) == 0:
        raise ValueError(f"no SFT conversation fits max_length={params.max_length} (overlong=drop)")
    trainable_params = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    resume = last_checkpoint(checkpoints)
    if resume is not None:
        log.info("SFT resumes from %s (a killed run's last checkpoint)", resume)
    with fused_logprob_tokens(params.logprob_chunk_tokens), labelled_positions_only():
        output = trainer.train(resume_from_checkpoint=resume)
    history = list(trainer.state.log_history)

    # under several processes (accelerate launch, data parallel) the main process writes the model
    main = trainer.accelerator.is_main_process
    if main:
        with build.writing() as draft:
            tmp = draft.folder
            if params.method == "lora":
                # the new token rows are in the adapter (trainable tokens); the rest of the embedding
                # matrix is the base's, so it is not copied into the adapter
                trainer.model.save_pretrained(tmp, save_embedding_layers=False)
            else:
                trainer.save_model(str(tmp))
            tokenizer.save_pretrained(tmp)
            trainer.state.save_to_json(str(tmp / "trainer_state.json"))
            plot_loss_curve(history, tmp / "loss_curve.png",
                            title=f"SFT ({params.method}, think_weight={params.think_weight:g}, {params.mode})")

            steps = [h for h in history if "loss" in h]
            runtime = float(output.metrics.get("train_runtime", 0.0)) or None
            tokens = int(trainer._total_train_tokens)
            trained = int(trainer.trained_assistant_tokens)
            metrics = {
                "final_loss": steps[-1]["loss"] if steps else None,
                "first_loss": steps[0]["loss"] if steps else None,
                "final_assistant_loss": next((h["assistant_loss"] for h in reversed(history) if "assistant_loss" in h),
                                             None),
                "train_loss": output.metrics.get("train_loss"),
                "steps": int(trainer.state.global_step),
                "epochs": float(trainer.state.epoch or 0.0),
                "train_runtime_s": runtime,
                "tokens": tokens,  # every token of the trained batches (prompts and tool responses too)
                "tokens_per_second": round(tokens / runtime, 2) if runtime else None,
                # the loss-bearing (assistant) tokens of the trained batches: what the SFT time buys
                "trained_assistant_tokens": trained,
                "assistant_tokens_per_second": round(trained / runtime, 2) if runtime else None,
                "learning_rate": hyper["learning_rate"], "warmup_ratio": hyper["warmup_ratio"],
                "bf16": bf16, "device": str(trainer.args.device),
                "think_token_ids": [trainer.think_open_id, trainer.think_close_id],
                "added_token_ids": sorted(new_tokens),
                "base_model": str(base_model_folder),
                "max_length_seen": max(lengths) if lengths else 0,
                # tokens and runtime above count from here: the steps before it ran in a killed process
                "resumed_from_step": checkpoint_step(resume) if resume is not None else None,
            }
            draft.record(  # files: every file written
                rows={"conversations": len(conversations), "train_examples": len(prepared),
                      "dropped_examples": len(conversations) - len(prepared),
                      "overlong_examples": overlong,
                      "truncated_examples": overlong if params.overlong == "truncate" else 0,
                      "trained_assistant_tokens": trained,
                      "train_tokens": sum(lengths), "assistant_tokens": assistant_tokens,
                      "trainable_parameters": trainable_params, "steps": int(trainer.state.global_step)},
                metadata=metrics)
    trainer.accelerator.wait_for_everyone()  # the other processes go on once it is written
    shutil.rmtree(checkpoints, ignore_errors=True)  # the model is written: nothing left to resume
    del trainer, model
    release_memory()  # the next stage of the same process (make run) starts without this trainer and model
    if not main:
        return build.result(read_manifest(output_folder))
    log.info("SFT model written to %s (%s steps, final loss %s)", output_folder, metrics["steps"],
             metrics["final_loss"])
    return build.result()


def checkpoint_folder(output_folder: Path, input_fingerprint: str) -> Path:
    """Where the SFT of ``output_folder`` keeps its resumable checkpoints: beside it, outside the atomic temporary
    folder (which a failed build removes), named by the inputs' fingerprint so that a run on other inputs or params
    never resumes from it."""
    return output_folder.parent / f".{output_folder.name}.checkpoints-{input_fingerprint[:16]}"


def drop_stale_checkpoints(output_folder: Path, keep: Path | None) -> None:
    """Remove the checkpoints of this output but ``keep``: those of other inputs or params can never resume."""
    for stale in output_folder.parent.glob(f".{output_folder.name}.checkpoints-*"):
        if stale != keep:
            log.info("removing %s: checkpoints of other SFT inputs or params", stale)
            shutil.rmtree(stale, ignore_errors=True)


def last_checkpoint(folder: Path) -> str | None:
    """The newest complete ``checkpoint-<step>`` in ``folder`` (None: start from the base model).

    A checkpoint whose trainer state is missing was cut off while being written, so it is skipped."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not folder.is_dir():
        return None
    complete = [p for p in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
                if p.name.rsplit("-", 1)[-1].isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(complete, key=checkpoint_step)) if complete else None


def checkpoint_step(checkpoint: Path | str) -> int:
    return int(Path(checkpoint).name.rsplit("-", 1)[-1])


def checkpoint_pause_callback() -> Any:
    """A transformers ``TrainerCallback`` with the ``sft_checkpoint_saved`` pause point after each checkpoint is
    saved: the tests kill a real SFT there and resume it."""
    from transformers import TrainerCallback

    class CheckpointSaved(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            pause_point("sft_checkpoint_saved")

    return CheckpointSaved()


def training_summary(manifest: Any) -> str:
    """One line on an SFT model's training (the CLI and `omne run` print it): steps, final loss, tokens/s,
    the trained (assistant) tokens/s and the conversations left out."""
    meta, rows = manifest.metadata, manifest.rows
    left_out = (f", {rows['dropped_examples']} of {rows['conversations']} conversations dropped"
                if rows.get("dropped_examples") else "")
    return (f"{meta.get('steps')} steps, final loss {meta.get('final_loss')}, {meta.get('tokens_per_second')} "
            f"tokens/s ({meta.get('assistant_tokens_per_second')} trained assistant tokens/s){left_out}")


def truncated(dataset: Any, max_length: int) -> Any:
    """The prepared examples cut to their first ``max_length`` tokens, those left without a trained token dropped:
    what TRL does itself, except with ``padding_free`` (where it wants no ``max_length``)."""
    cut = dataset.map(lambda ex: {"input_ids": ex["input_ids"][:max_length], "labels": ex["labels"][:max_length]})
    return cut.filter(lambda ex: any(label != -100 for label in ex["labels"]))


def _token_counts(dataset: Any) -> tuple[list[int], int]:
    """(tokens per example, trained (assistant) tokens in all) of a prepared dataset, read through Arrow."""
    import pyarrow.compute as pc

    table = dataset.select_columns(["input_ids", "labels"]).with_format("arrow")[:]
    lengths = pc.list_value_length(table["input_ids"]).to_pylist()
    trained = pc.sum(pc.not_equal(pc.list_flatten(table["labels"]), -100)).as_py() if len(table) else 0
    return lengths, int(trained or 0)
