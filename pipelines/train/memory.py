"""Memory bounds of training (SFT and RL stages 1/3): the fused LM head's tile and what is left behind.

TRL's fused LM head (``ChunkedLogProbFunction``, used by ``ThinkWeightedSFTTrainer`` and ``GRPOTrainer``)
never materialises the ``(tokens, 49k vocabulary)`` logits: it projects ``TOKEN_CHUNK_SIZE`` tokens x
32,768 vocabulary columns at a time. On a GPU the tile is folded in place by Triton kernels, but on a CPU
each tile goes through ~4 (forward) and ~9 (backward) temporaries in float32: with TRL's 4,096 tokens per
tile, 4096 x 32768 x 4 B = 512 MiB each, 2-4.5 GiB at the peak of a step. ``fused_logprob_tokens`` sets
the tile's token count for a block of code (params ``sft.logprob_chunk_tokens``,
``rl.<stage>.logprob_chunk_tokens``). Tokens are independent rows of the tile, so the per-token values
are the same computation; only the accumulation order of an LM-head weight gradient changes (fp32).

``labelled_positions_only`` makes the head project only the positions that are trained, on a CPU too
(TRL does so on CUDA only): fewer tiles, the same values.

``release_memory`` ends a training stage: a model patched by TRL (``model.forward`` bound to the model,
PEFT wrappers, the trainer's callbacks holding the trainer) sits in reference cycles, which only the cyclic
garbage collector frees, and glibc keeps freed heap pages mapped until ``malloc_trim``; in one ``omne run``
process the next stage would otherwise start on top of the previous one's memory. ``mmap_large_allocations``
keeps a training stage's own heap from fragmenting step after step.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from pipelines.heap import glibc_function, malloc_trim
from pipelines.train.precision import cpu_has_native_bf16

TRL_TOKEN_CHUNK_SIZE = 4096  # TRL's own value of trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE


def logprob_tile_bytes(tokens: int, vocab_chunk: int = 32768, copies: int = 9) -> int:
    """Bytes of the float32 temporaries of one fused-LM-head tile on a CPU (``copies`` of tokens x vocab_chunk;
    ~9 in the backward pass, the peak)."""
    return tokens * vocab_chunk * 4 * copies


@contextlib.contextmanager
def fused_logprob_tokens(tokens: int | None) -> Iterator[None]:
    """Within the block, TRL's fused LM head projects at most ``tokens`` tokens per tile (None: TRL's default)."""
    if tokens is None:
        yield
        return
    from trl.kernels import chunked_logprob

    before = chunked_logprob.TOKEN_CHUNK_SIZE
    chunked_logprob.TOKEN_CHUNK_SIZE = int(tokens)
    try:
        yield
    finally:
        chunked_logprob.TOKEN_CHUNK_SIZE = before


@contextlib.contextmanager
def labelled_positions_only() -> Iterator[None]:
    """Within the block, TRL's fused LM head projects only the positions whose next-token label is set, on
    every device: TRL does so on CUDA (its Triton kernels) but scores every position elsewhere, so that
    Neuron's compiled tile shapes stay fixed. A CPU runs eagerly and has no such reason: in a quick SFT
    conversation ~1 token in 5 is trained (assistant), and the projection of the other 4 onto the 49k
    vocabulary, with its backward, was over a third of a step (2026-11-26: 1.63x the steps per second, the same
    losses; bench/sft_lm_head.py). The per-token values are the same computation on fewer rows.
    Without TRL's switch (another TRL version), the block runs unchanged."""
    from trl.trainer import utils as trl_utils

    before = getattr(trl_utils, "_use_triton", None)
    if before is None:  # pragma: no cover - a TRL without the switch: its own choice stands
        yield
        return
    trl_utils._use_triton = lambda device: True  # its only use in trl.trainer.utils: compact the positions
    try:
        yield
    finally:
        trl_utils._use_triton = before


SFT_MMAP_THRESHOLD_BYTES = 4 << 20  # SFT: allocations from 4 MiB up (a layer's activations at ~1k tokens) get pages of
# their own. RL keeps 1 MiB: its steps are mostly generation, so the page faults cost little there, and its peak
# is the one with a target (4 GB; quick stage 3 peaked at 3.87 GiB with 1 MiB, 2026-11-26)
RL_MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


def mmap_large_allocations(threshold: int = SFT_MMAP_THRESHOLD_BYTES) -> bool:
    """From now on, serve every allocation of at least ``threshold`` bytes by its own ``mmap``, handed back to the
    OS the moment it is freed; False where malloc is not glibc's.

    glibc's threshold starts at 128 KiB but rises, up to 32 MiB, to the size of each mmapped block freed; after the
    first step a training stage's activations (a few MiB each, their sizes varying with the sequence length) come
    from the heap, whose freed holes are neither reused exactly nor returned. In a process of its own the quick SFT's
    peak rose step after step that way: 6.0 GB at step 20, 7.5 GB at step 60 (2026-11-25); with the threshold set
    here (set explicitly, it stays put), 4.9 GB at step 20. Every mmapped block is fresh pages, faulted in on first
    touch: at 1 MiB 10 quick SFT steps took 2.4M page faults a step and 39 s of system time, 69 s in all; at 4 MiB
    (the default) 55-56 s, the speed of no threshold, at a peak of 4.14 GiB instead of 3.74 (2026-11-26; with the
    heap trimmed after every step, ``heap_trim_callback``). Generation is left alone: a KV cache grown token by
    token would get fresh zeroed pages each time.
    """
    mallopt = glibc_function("mallopt")
    return bool(mallopt is not None and mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def heap_trim_callback() -> Any:
    """A transformers ``TrainerCallback`` that trims the heap after every optimizer step: a step's small
    allocations (under the mmap threshold) leave freed holes that the next, differently sized step does not
    fill, so the quick SFT's peak rose over its 60 steps (6.04 GiB; 5.30 GiB trimmed each step, 2026-11-26)."""
    from transformers import TrainerCallback

    class HeapTrim(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            malloc_trim()

    return HeapTrim()


def release_memory() -> None:
    """Collect reference cycles (trainers, patched models) and hand freed heap pages back to the OS."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    malloc_trim()


# ----- estimates: what a stage needs on one device, from the model's config and the params -------------------
GIB = 1 << 30
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")  # every linear layer of a block (sft/rl method lora)


class ModelShape(BaseModel):
    """The sizes of a decoder-only transformer that decide its memory (read from its config.json)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        heads = config.num_attention_heads
        return cls(layers=config.num_hidden_layers, hidden=config.hidden_size,
                   intermediate=config.intermediate_size, heads=heads,
                   kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                   vocab=config.vocab_size, tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)))

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of one block."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h),
                "gate": (h, self.intermediate), "up": (h, self.intermediate), "down": (self.intermediate, h)}

    @property
    def parameters(self) -> int:
        block = sum(i * o for i, o in self.linear_shapes().values()) + 2 * self.hidden  # + two RMSNorm weights
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * block + embeddings + self.hidden  # + the final norm

    def lora_parameters(self, rank: int) -> int:
        return self.layers * sum(rank * (i + o) for i, o in self.linear_shapes().values())

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes

    def activation_bytes_per_token(self, checkpointing: bool, dtype_bytes: int = 2, blocks: int | None = None) -> int:
        """What backward keeps per token: every block's saved inputs (norms, projections, attention output, MLP
        intermediates; attention scores are never materialised with SDPA/flash kernels), or with activation
        checkpointing each block's input plus one block recomputed at a time. ``blocks``: backward runs through the
        last this many only (LoRA on the last blocks, ``lora_layers``); None: all."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        block = (6 * self.hidden + 3 * q + 2 * kv + 4 * self.intermediate) * dtype_bytes
        kept = self.layers if blocks is None else min(blocks, self.layers)
        return (kept * self.hidden * dtype_bytes + block) if checkpointing else kept * block


class MemoryEstimate(BaseModel):
    """Bytes a stage needs on one device, by part (peak of a training step, or of generation); the process's own
    footprint (Python, torch, TRL: ~1-1.5 GB of host memory) comes on top."""

    stage: str
    parts: dict[str, int]
    notes: list[str] = []

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def _backward_blocks(section: Any) -> int | None:
    """The blocks backward runs through: the last ``lora_layers`` with LoRA on those only; None: every block."""
    return section.lora_layers if section.method == "lora" else None


def _trainable(shape: ModelShape, method: str, lora_r: int, blocks: int | None = None) -> tuple[int, int]:
    """(bytes of weights, bytes of gradients + AdamW states) of a policy trained in fp32 master weights; ``blocks``:
    LoRA on the last this many blocks only."""
    weights = 4 * shape.parameters
    share = 1.0 if blocks is None else min(blocks, shape.layers) / shape.layers
    trained = shape.parameters if method == "full" else int(shape.lora_parameters(lora_r) * share)
    return weights + (4 * trained if method == "lora" else 0), 12 * trained  # grads (4) + Adam m, v (8)


def _lm_head_bytes(shape: ModelShape, chunk_tokens: int | None, tokens: int, cuda: bool) -> int:
    """The fused LM head's float32 temporaries of one tile: folded in place by Triton on a GPU (~2 copies),
    ~9 copies on a CPU (``logprob_tile_bytes``)."""
    tile = min(chunk_tokens or TRL_TOKEN_CHUNK_SIZE, tokens)
    return logprob_tile_bytes(tile, min(32768, shape.vocab), copies=2 if cuda else 9)


def _activation_dtype_bytes(bf16: Any, cuda: bool) -> int:
    """2 under bf16 mixed precision (``auto``: assumed on a GPU, native bf16 on this CPU), else 4."""

    if bf16 == "auto":
        return 2 if cuda or cpu_has_native_bf16() else 4
    return 2 if bf16 else 4


def estimate_sft(shape: ModelShape, sft: Any, *, cuda: bool) -> MemoryEstimate:
    """Stage 2: the policy, its optimizer and one micro-batch of ``per_device_batch x max_length`` tokens."""
    tokens = sft.per_device_batch * sft.max_length
    blocks = _backward_blocks(sft)
    weights, optimizer = _trainable(shape, sft.method, sft.lora_r, blocks)
    per_token = shape.activation_bytes_per_token(sft.gradient_checkpointing, _activation_dtype_bytes(sft.bf16, cuda),
                                                 blocks)
    return MemoryEstimate(stage="sft", parts={
        "weights": weights, "gradients + AdamW": optimizer, "activations": tokens * per_token,
        "LM head tile": _lm_head_bytes(shape, sft.logprob_chunk_tokens, tokens, cuda)})


def estimate_rl(shape: ModelShape, stage: Any, *, cuda: bool, name: str = "rl",
                together: int | None = None) -> MemoryEstimate:
    """An RL stage: the policy and its optimizer; the reference model (beta > 0); PPO's value model (a copy of the
    trunk, trained as the policy is: whole, or LoRA); one micro-batch's activations; the rollouts' key/value cache
    (``together`` rollouts of a step generated at a time, ``agent.batch_size``; None: all; up to ``max_length``
    tokens each, in the policy's float32)."""
    tokens = stage.micro_batch * stage.max_length
    blocks = _backward_blocks(stage)
    weights, optimizer = _trainable(shape, stage.method, stage.lora_r, blocks)
    dtype_bytes = _activation_dtype_bytes(stage.bf16, cuda)
    activations = tokens * shape.activation_bytes_per_token(stage.gradient_checkpointing, dtype_bytes, blocks)
    rollouts = stage.questions_per_step * stage.num_generations
    batch = min(rollouts, together or rollouts)
    parts = {"weights": weights, "gradients + AdamW": optimizer, "activations": activations,
             "LM head tile": _lm_head_bytes(shape, stage.logprob_chunk_tokens, tokens, cuda),
             "KV cache": batch * stage.max_length * shape.kv_bytes_per_token(4)}
    if stage.beta > 0:
        parts["reference model"] = 4 * shape.parameters
    if stage.algorithm == "ppo":  # trained whole, or LoRA (and the head) when the policy is LoRA
        trunk = shape.parameters - shape.vocab * shape.hidden * (1 if shape.tied_embeddings else 2)
        critic = trunk + shape.vocab * shape.hidden  # input embeddings kept, a scalar head
        share = 1.0 if blocks is None else min(blocks, shape.layers) / shape.layers
        trained = critic if stage.method == "full" else int(shape.lora_parameters(stage.lora_r) * share)
        parts["value model (+ AdamW)"] = 4 * critic + (4 * trained if stage.method == "lora" else 0) + 12 * trained \
            + tokens * shape.activation_bytes_per_token(stage.gradient_checkpointing, dtype_bytes, blocks)
    notes = [f"{batch} of {rollouts} rollouts at a time x {stage.max_length} tokens"]
    return MemoryEstimate(stage=name, parts=parts, notes=notes)


def estimate_eval(shape: ModelShape, agent: Any, *, cuda: bool, prompt_tokens: int = 1024,
                  tool_response_tokens: int = 512) -> MemoryEstimate:
    """Evaluation (and SFT data from rollouts): the model and the key/value cache of ``agent.batch_size`` episodes
    at their longest (the system prompt, then every round's reply and tool response; both token counts are
    assumptions: SmolLM2 tokens of the omne protocol's prompt and of a clipped tool response)."""
    dtype_bytes = 2 if cuda else 4
    context = prompt_tokens + agent.max_rounds * (agent.max_new_tokens + tool_response_tokens)
    return MemoryEstimate(stage="eval", parts={
        "weights": dtype_bytes * shape.parameters,
        "KV cache": agent.batch_size * context * shape.kv_bytes_per_token(dtype_bytes)},
        notes=[f"{agent.batch_size} episodes x {context} tokens"])


def estimate_stages(shape: ModelShape, params: Any, *, cuda: bool) -> list[MemoryEstimate]:
    """Evaluation, SFT and both RL stages of ``params`` (a profile), on one device."""
    return [estimate_eval(shape, params.agent, cuda=cuda), estimate_sft(shape, params.sft, cuda=cuda),
            estimate_rl(shape, params.rl.stage1, cuda=cuda, name="rl stage 1", together=params.agent.batch_size),
            estimate_rl(shape, params.rl.stage3, cuda=cuda, name="rl stage 3", together=params.agent.batch_size)]
