"""Running one RL stage (``omne rl --stage N``): the start model, the rollouts, the trainer, and the saved model.

Stages 1 and 3 of the Omne-R1 paper: RL with multi-turn tool rollouts on TRL's GRPOTrainer, from the base model
(stage 1) or the SFT model (stage 3). Two credit assignments (``rl.<stage>.credit``): ``sequence`` (TRL's
group-normalised advantage, one per rollout) and ``turn`` (KG-R1's per-turn returns); ``algorithm: ppo``
replaces the group baseline with a value model and GAE (``pipelines.train.rl.trainers``).

Cheap to import: torch, TRL and transformers load inside ``train_rl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.agent.models import BASE, adapter_base, onnx_agent_folder, resolve_model_folder
from pipelines.agent.protocols import PROMPT_VERSION
from pipelines.agent.rollout import Task
from pipelines.agent.tools import KGToolbox
from pipelines.config import Params, RLStageParams
from pipelines.errors import ArtifactMissingError, ConfigError
from pipelines.layout import CORRECT_ROLLOUTS_FILE, SFT_MODEL, model_dir, qa_dir, rl_model_name
from pipelines.llm.checkpoints import load_trained_model
from pipelines.llm.factory import build_chat_client
from pipelines.manifest import ArtifactBuild, BuildResult, model_identity, read_manifest, relative_path, sha256_files
from pipelines.train.lora import cut_gradient_below, lora_config
from pipelines.train.memory import (
    RL_MMAP_THRESHOLD_BYTES,
    fused_logprob_tokens,
    labelled_positions_only,
    mmap_large_allocations,
    release_memory,
)
from pipelines.train.precision import use_bf16
from pipelines.train.rewards import JUDGED_REWARDS, check_reward_protocols
from pipelines.train.rl.data import rl_dataset, rl_questions, stage_params, validation_questions
from pipelines.train.rl.history import plot_rl_curves, rl_summary
from pipelines.train.rl.keep import CorrectRollouts
from pipelines.train.rl.micro_batches import micro_batch_size
from pipelines.train.rl.resampling import gold_conversations
from pipelines.train.rl.rollouts import ToolRollouts, trajectory_rewards


def _start_model(params: Params, stage: int, start: str | None) -> Path:
    """The folder a stage starts from: ``start`` when given, else stage 1's base model (rl.stage1.base_model, by
    default agent.base_model) or the SFT model."""

    if start:
        return resolve_model_folder(start, params)
    if stage == 1:
        return resolve_model_folder(params.rl.stage1.base_model or BASE, params)
    folder = model_dir(params.artifacts_dir, SFT_MODEL)
    if not folder.is_dir():

        raise ArtifactMissingError(f"{folder}: stage 3 starts from the SFT model (run `omne sft train` first)")
    return folder


def load_policy(folder: Path, params: Params) -> tuple[Any, Any]:
    """The policy to start from: a full model folder, or an SFT/RL adapter merged onto its base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer


    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():

        model, tokenizer = load_trained_model(folder, base_model_folder=adapter_base(folder, params), merge=True)
    else:
        model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def stage_rewards(params: Params, stage: int) -> tuple[list[Any], Any]:
    """The stage's rewards (``rl.<stage>.rewards``) as TRL reward functions on the rollouts' trajectories, and the
    LLM judge they score with (None unless a reward needs one: kg_hopper, built from ``llm:``). Refuses a reward
    that cannot score ``agent.protocol``, and a judged reward without a usable ``llm:`` model."""

    settings = stage_params(params, stage)
    where = f"rl.stage{stage}.rewards"
    check_reward_protocols(settings.rewards, params.agent.protocol, where=where)
    judge = None
    judged = sorted(JUDGED_REWARDS & set(settings.rewards))
    if judged:

        try:
            judge = build_chat_client(params)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {', '.join(judged)} scores the reasoning (R_reason) with the LLM judge of "
                              f"`llm:`, which is not usable: {exc}") from None
    functions = trajectory_rewards(settings.rewards, None, settings.reward_options, settings.overlong_tokens,
                                   judge=judge)
    return functions, judge


def _uses_cuda(params: Params) -> bool:
    """Whether the stage trains on a CUDA GPU (one is there and agent.device allows it); torch imported here, so that
    a check of a current model does not pay for it."""
    import torch

    return torch.cuda.is_available() and params.agent.device != "cpu"


def train_rl(params: Params, stage: int, *, start: str | None = None, name: str | None = None, force: bool = False,
             progress: bool = True) -> BuildResult:
    """Run one RL stage and save the policy (merged, HF format) with its log history, curves and manifest;
    reused when the start model, the data and the stage's params are unchanged."""

    settings = stage_params(params, stage)
    rewards, judge = stage_rewards(params, stage)  # refuses a reward that cannot be scored before any model loads
    output = model_dir(params.artifacts_dir, name or rl_model_name(stage))
    start_folder = _start_model(params, stage, start)
    backend = settings.rollout_backend(params.agent)
    if backend == "vllm":  # refused before any data or model is read (and before a current model is reused)
        require_vllm(settings, stage, _full_model_folder(start_folder, params), cuda=_uses_cuda(params))
    dataset_dir = qa_dir(params.artifacts_dir, "dataset")
    inputs = {**sha256_files([dataset_dir / "train.jsonl", dataset_dir / "val.jsonl"], params.root),
              "start_model": model_identity(start_folder)}
    # memory knobs leave the model as it is: out of the fingerprint (recorded in the manifest's metadata)
    memory = {"micro_batch": settings.micro_batch, "logprob_chunk_tokens": settings.logprob_chunk_tokens,
              "prefix_cache_mb": params.agent.prefix_cache_mb}
    shaping = {"stage": stage, "rl": settings.result_settings(), "agent": params.agent.result_settings(),
               "tools": params.section("tools"), "prompt_version": PROMPT_VERSION,
               **({"judge": judge.model} if judge is not None else {})}
    build = ArtifactBuild(output, f"rl_stage{stage}_model", inputs, shaping)
    # (a model saved before its stage kept its correct rollouts is trained again: the SFT data reads them)
    if (existing := build.reusable(force)) and CORRECT_ROLLOUTS_FILE in existing.files:
        return build.result(existing, skipped=True)

    # the trainer's imports after the check above (~5 s of TRL, transformers and the tools: a rerun only checks it)
    from trl import GRPOConfig

    from pipelines.agent.client import InProcessToolClient
    from pipelines.eval.runner import load_gold_paths, make_protocol
    from pipelines.train.rl.trainers import PPOToolTrainer, ToolGRPOTrainer
    from pipelines.train.rl.validation import ValidationEM

    use_cuda = _uses_cuda(params)

    agent = params.agent.model_copy(update={"max_rounds": settings.max_rounds or params.agent.max_rounds})
    protocol = make_protocol(params.model_copy(update={"agent": agent}), agent.protocol, None)
    pairs = rl_questions(params, stage)
    if not pairs:
        raise ValueError(f"rl.stage{stage}: no training questions (data_mix {settings.data_mix!r} on the train split's "
                         f"questions of {', '.join(params.selected_domains(f'rl.stage{stage}'))})")
    dataset = rl_dataset(pairs, protocol, load_gold_paths(params))
    tasks = {row["prompt"][-1]["content"]: Task(qa_id=p.id, domain=p.domain, question=p.question,
                                                gold_answers=p.answers, bucket=p.bucket, hops=p.hops)
             for row, p in zip(dataset, pairs, strict=True)}
    mmap_large_allocations(RL_MMAP_THRESHOLD_BYTES)  # each step's activations would otherwise fragment the heap
    model, tokenizer = load_policy(start_folder, params)
    toolbox = KGToolbox(params)
    rollouts = ToolRollouts(protocol=protocol, tools=InProcessToolClient(toolbox), tokenizer=tokenizer, stage=settings,
                            tasks=tasks, max_length=settings.max_length, prefix_cache_mb=params.agent.prefix_cache_mb,
                            batch_size=params.agent.batch_size, backend=backend,
                            onnx_precision=params.agent.onnx_precision, sync_every=settings.sync_every,
                            agent=params.agent,
                            start_onnx=lambda: onnx_agent_folder(start_folder, params))
    config = GRPOConfig(
        output_dir=str(output.with_name(output.name + ".trainer")), max_steps=settings.max_steps,
        num_train_epochs=settings.epochs, learning_rate=settings.learning_rate, beta=settings.beta,
        epsilon=settings.epsilon, max_grad_norm=settings.max_grad_norm, num_generations=settings.num_generations,
        **update_schedule(settings),
        temperature=settings.temperature, logging_steps=1, save_strategy="no",
        report_to="none", seed=settings.seed, bf16=use_bf16(settings.bf16, cuda=use_cuda), use_cpu=not use_cuda,
        max_completion_length=settings.max_length, disable_tqdm=not progress,
        reward_weights=settings.reward_weights, lr_scheduler_type="constant", warmup_steps=0,
        remove_unused_columns=False, dataloader_num_workers=0, gradient_checkpointing=settings.gradient_checkpointing,
        **vllm_trainer_options(settings, backend))
    peft_config = None
    if settings.method == "lora":

        peft_config = lora_config(model, r=settings.lora_r, alpha=settings.lora_alpha, layers=settings.lora_layers)
        cut_gradient_below(model, settings.lora_layers)  # backward ends at the first adapted block
    common = dict(model=model, reward_funcs=rewards, args=config, train_dataset=dataset, processing_class=tokenizer,
                  peft_config=peft_config, rollouts=rollouts, stage=settings)
    if settings.algorithm == "ppo":
        trainer = PPOToolTrainer(**common, value_model=value_model(model, settings, tokenizer))
    else:
        trainer = ToolGRPOTrainer(**common)
    rollouts.attach(trainer)  # backend vllm: the engine TRL made (validation rolls out before the first step)
    trainer.keeper = CorrectRollouts.beside(output)  # the exactly-correct rollouts, for the stage-2 SFT data
    if settings.resample == "hard_case":
        trainer.hard_case_conversations = gold_conversations(params, {p.id for p in pairs if p.bucket == "3+"})
    validation = validation_questions(params, stage)
    if validation and settings.val_questions:
        trainer.add_callback(ValidationEM(trainer, rollouts, validation, settings.eval_every))
    with fused_logprob_tokens(settings.logprob_chunk_tokens), labelled_positions_only():
        try:
            trainer.train()
        finally:
            rollouts.close()  # the onnx backend's copy of the policy, if any

    # under several processes (accelerate launch, data parallel) the main process writes the model
    main = trainer.accelerator.is_main_process
    if main:
        with build.writing() as draft:
            tmp = draft.folder
            policy = trainer.accelerator.unwrap_model(trainer.model)
            if hasattr(policy, "merge_and_unload"):
                policy = policy.merge_and_unload()
            policy.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            history = trainer.state.log_history
            (tmp / "trainer_state.json").write_text(json.dumps({"log_history": history,
                                                                "global_step": trainer.state.global_step}, indent=2))
            plot_rl_curves(history, tmp / "training_curves.png", title=f"RL stage {stage} ({settings.algorithm})")
            summary = rl_summary(history)
            kept = trainer.keeper.move_into(tmp)
            draft.record(files=[kept], rows={"questions": len(pairs), "steps": trainer.state.global_step,
                                             "correct_rollouts": trainer.keeper.kept},
                         metadata={"start_model": relative_path(start_folder, params.root), **summary,
                                   "domains": sorted({p.domain for p in pairs}), "memory": memory})
        del policy
    trainer.accelerator.wait_for_everyone()  # the other processes go on once it is written
    del trainer, model, rollouts, toolbox, common
    release_memory()  # the next stage of the same process starts without this one's model and trainer
    return build.result() if main else build.result(read_manifest(output))


def vllm_trainer_options(settings: RLStageParams, backend: str) -> dict[str, Any]:
    """GRPOConfig's vLLM settings for a stage whose rollouts vLLM generates (none otherwise): TRL then makes a
    ``VLLMGeneration`` (``trainer.vllm_generation``) and pushes the policy's weights into it before each step's
    rollouts. No importance-sampling correction: the rollouts hand TRL no sampling log-probabilities (the
    trainer computes every log-probability with the training model, as with the other backends)."""
    if backend != "vllm":
        return {}
    options: dict[str, Any] = {"use_vllm": True, "vllm_mode": settings.vllm_mode,
                               "vllm_importance_sampling_correction": False}
    if settings.vllm_mode == "server":
        options["vllm_server_base_url"] = settings.vllm_server_base_url
    else:
        options["vllm_gpu_memory_utilization"] = settings.vllm_gpu_memory_utilization
    return options


def require_vllm(settings: RLStageParams, stage: int, served: Path, *, cuda: bool) -> None:
    """Refuse vLLM rollouts where they cannot run (vllm not importable, no CUDA GPU), saying what they need;
    ``served``: the model folder a ``trl vllm-serve`` server starts from."""
    import importlib.util


    missing = [*([] if importlib.util.find_spec("vllm") is not None else ["vllm is not installed"]),
               *([] if cuda else ["no CUDA GPU is in use (agent.device, torch.cuda)"])]
    if not missing:
        return
    if settings.vllm_mode == "server":
        how = (f"in server mode, `trl vllm-serve --model {served}` running at {settings.vllm_server_base_url} "
               "(rl.<stage>.vllm_server_base_url; TRL pushes the policy's weights to it every step)")
    else:
        how = "in colocate mode, vLLM runs inside the training process on its GPU"
    raise ConfigError(f"rl.stage{stage}.backend: vllm: {' and '.join(missing)}. vLLM rollouts need a CUDA GPU machine "
                      f"with `pip install omne[vllm]` and, {how}; elsewhere use backend: transformers or onnx")


def _full_model_folder(folder: Path, params: Params) -> Path:
    """The full model folder under a start model: the folder itself, or an adapter's base (what a vLLM server
    loads: the merged weights reach it with TRL's first sync)."""
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():

        return adapter_base(folder, params)
    return folder


def update_schedule(settings: RLStageParams) -> dict[str, int]:
    """GRPOConfig's batch settings. A batch of rollouts (questions_per_step x num_generations) is generated once and
    run in micro-batches of up to ``micro_batch`` (TRL's gradient accumulation: the same loss). With ppo, TRL's own
    reuse of a generation batch gives the paper's minibatch epochs: ``steps_per_generation`` spans the batch, the
    accumulation one of its ``ppo_minibatches`` (an optimizer step each), and ``num_iterations`` repeats the pass
    ``ppo_epochs`` times against the log-probabilities the rollouts were generated with (so the clip acts)."""
    rollouts = settings.questions_per_step * settings.num_generations
    epochs, minibatches = (settings.ppo_epochs, settings.ppo_minibatches) if settings.algorithm == "ppo" else (1, 1)
    micro = micro_batch_size(rollouts // minibatches, settings.micro_batch)
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": rollouts // minibatches // micro,
            "steps_per_generation": rollouts // micro, "num_iterations": epochs}


def value_model(policy: Any, settings: RLStageParams, tokenizer: Any) -> Any:
    """The PPO critic, before the policy gets its adapter: the stage's start model as the policy was loaded (in
    stage 3 the SFT model, an adapter merged onto its base) with a fresh scalar head, one value per token. A copy of
    its weights (the policy trains its own); with a LoRA policy, a LoRA adapter and the head are what trains
    (PEFT's TOKEN_CLS task), else the whole critic. Its fresh weights (head, adapter) are drawn from the stage's seed,
    as TRL draws the policy's adapter: the same critic in every run and in every process of a data-parallel one."""
    import copy

    import torch
    from transformers import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING


    head = MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING.get(type(policy.config), None)
    if head is None:
        raise ConfigError(f"algorithm: ppo needs a token-classification head for the critic; transformers has none "
                          f"for model type {policy.config.model_type!r}")
    config = copy.deepcopy(policy.config)
    config.num_labels, config.pad_token_id = 1, tokenizer.pad_token_id
    trunk = f"{policy.base_model_prefix}."
    weights = {k: v.detach().clone() for k, v in policy.state_dict().items() if k.startswith(trunk)}
    with torch.random.fork_rng(devices=[]):  # (the CPU's generator: the critic is made there)
        torch.manual_seed(settings.seed)
        critic = head.from_pretrained(None, config=config, state_dict=weights, dtype=policy.dtype)
        if settings.method == "lora":
            from peft import get_peft_model


            critic = get_peft_model(critic, lora_config(critic, r=settings.lora_r, alpha=settings.lora_alpha,
                                                        layers=settings.lora_layers, task_type="TOKEN_CLS"))
            cut_gradient_below(critic, settings.lora_layers)
    return critic
