"""Memory bounds of generation and training (issue "One build, nothing lost", item 2), measured on tiny models
by what is allocated, never by time: the prefix store of the local backend never holds more bytes than its
budget; the fused LM head's float32 temporaries are bounded by its tile (``logprob_chunk_tokens``) with the
same log-probabilities and gradients; RL micro-batches (``micro_batch``, padding trimmed) give the gradient
of the whole step."""

from __future__ import annotations

import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.conftest import PROJECT_ROOT
from tests.model_support import TEXT, build_tiny_llama


class LiveBytes(TorchDispatchMode):
    """Bytes of the tensor storages allocated inside the block that are still alive, and their high-water mark.

    An op's output counts when its storage is none of its inputs' (views, in-place and ``out=`` ops allocate
    nothing); it stops counting when the storage is freed (the storage's Python object lives exactly as long
    as the storage, so a finalizer on it fires then)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._counted: set[int] = set()

    def _free(self, key: int, size: int) -> None:
        self.live -= size
        self._counted.discard(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
                continue
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or key in inputs or key in self._counted:
                continue
            self._counted.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, key, size)
        return out


def test_live_bytes_sees_temporaries_and_frees() -> None:
    x = torch.ones(1000, 1000)
    with LiveBytes() as meter:
        y = x * 2  # 4 MB
        z = y.exp()  # 4 MB more
        del y, z
        view = x[:10]  # a view allocates nothing
        x.mul_(1.0)  # nor does an in-place op
    assert meter.peak == 2 * 4_000_000 and meter.live == 0 and view.shape == (10, 1000)


# ----- the prefix store ---------------------------------------------------------------------------------------
def _stored_bytes(store: Any) -> int:
    """The real bytes the store keeps alive: every distinct storage its entries reference, counted once."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for entry in store.entries.values() for pair in entry.kv for t in pair}
    return sum(storages.values())


def test_prefix_store_never_exceeds_its_byte_budget() -> None:
    from pipelines.llm.prefix_store import PrefixStore

    rng = np.random.default_rng(0)
    per_token = 2 * 2 * 2 * 16 * 4  # layers x (k, v) x kv heads x head dim x float32
    store = PrefixStore(max_bytes=300 * per_token)
    for step in range(200):
        length = int(rng.integers(1, 120))
        tokens = rng.integers(0, 5, size=length)  # a small alphabet: many shared prefixes
        kv = [(torch.zeros(1, 2, length, 16), torch.zeros(1, 2, length, 16)) for _ in range(2)]
        if step % 7 == 0:  # a view of a bigger tensor keeps all of it alive: counted whole
            kv = [(torch.zeros(1, 2, length + 50, 16)[:, :, :length],) * 2 for _ in range(2)]
        store.add(tokens, kv)
        assert store.nbytes == sum(e.nbytes for e in store.entries.values())
        assert _stored_bytes(store) <= store.nbytes <= store.max_bytes
    assert 1 < len(store) < 200  # entries were evicted, and several fit
    nothing = PrefixStore(max_bytes=0)
    nothing.add(np.arange(4), [(torch.zeros(1, 2, 4, 16),) * 2])
    assert len(nothing) == 0 and nothing.nbytes == 0


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def test_generation_keeps_the_prefix_store_within_budget(tiny_llama: Path) -> None:
    """Multi-round episodes through a budget that holds only a few of them: after every store, the bytes the
    store keeps alive stay within the budget; the replies are the plain path's."""
    from pipelines.llm.base import ChatRequest
    from pipelines.llm.local import TransformersChatClient

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cached = TransformersChatClient(tiny_llama, device="cpu", batch_size=4, prefix_cache_mb=0)
        plain = TransformersChatClient(tiny_llama, device="cpu", batch_size=4, prefix_cache=False)
        per_token = 2 * 2 * 2 * 16 * 4
        cached.prefix_store.max_bytes = 900 * per_token  # ~2 conversations of these
        store, adds = cached.prefix_store, []
        original = store.add

        def checked_add(tokens: Any, kv: Any) -> None:
            original(tokens, kv)
            adds.append(len(tokens))
            assert _stored_bytes(store) <= store.nbytes <= store.max_bytes

        store.add = checked_add  # type: ignore[method-assign]
        users = ["Mars?", "Which moon orbits the planet that orbits the Sun?", "Phobos and Deimos", "The Sun " * 5]
        conversations = [[{"role": "system", "content": TEXT[:600]}, {"role": "user", "content": u}] for u in users]
        for _ in range(3):  # rounds: each conversation grows by its reply and a tool response
            requests = [ChatRequest(messages=list(c), max_tokens=12, prefix="<think>") for c in conversations]
            replies, expected = cached.complete_many(requests), plain.complete_many(requests)
            assert [r.text for r in replies] == [r.text for r in expected]
            for conversation, reply in zip(conversations, replies, strict=True):
                conversation += [{"role": "assistant", "content": "<think>" + reply.text},
                                 {"role": "user", "content": "<tool_response>\n" + TEXT[:150] + "\n</tool_response>"}]
        assert len(adds) > 4 and cached.prefill_stats["reused"] > 0
    finally:
        torch.set_num_threads(before)


# ----- the fused LM head ---------------------------------------------------------------------------------------
def _fused_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> tuple[Any, Any, Any]:
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    hidden = hidden.detach().requires_grad_(True)
    logprobs, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 1.0, weight.shape[0], None,
                                                         1.0, ("log_probs", "entropy"))
    (logprobs * torch.linspace(0.5, 1.5, len(targets))).sum().backward()
    return logprobs.detach(), entropy.detach(), hidden.grad


def test_fused_logprob_tile_bounds_the_peak_allocation() -> None:
    """The float32 temporaries of the LM head are a few copies of (tokens per tile x vocabulary chunk): with 128
    tokens per tile the peak stays under a bound the default 4,096-token tile exceeds several times over, and
    the log-probabilities, entropies and gradients are the same."""
    from pipelines.train.memory import fused_logprob_tokens, logprob_tile_bytes

    torch.manual_seed(0)
    tokens, hidden_size, vocab = 1024, 32, 4096
    hidden, weight = torch.randn(tokens, hidden_size), torch.randn(vocab, hidden_size) * 0.1
    targets = torch.randint(0, vocab, (tokens,))
    with LiveBytes() as default:
        full = _fused_logprobs(hidden, weight, targets)
    with fused_logprob_tokens(128), LiveBytes() as tiled:
        small = _fused_logprobs(hidden, weight, targets)
    from trl.kernels import chunked_logprob

    assert chunked_logprob.TOKEN_CHUNK_SIZE == 4096  # restored
    per_token_state = tokens * hidden_size * 4 * 4 + tokens * 4 * 16  # hidden copies and grads, per-token stats
    bound = logprob_tile_bytes(128, vocab) + per_token_state
    assert tiled.peak <= bound < default.peak / 3
    assert default.peak > logprob_tile_bytes(tokens, vocab, copies=4)  # the meter sees the whole-batch tile
    for a, b in zip(full, small, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ----- RL micro-batches -------------------------------------------------------------------------------------------
def test_micro_batches_give_the_gradient_of_the_whole_step(tiny_llama: Path) -> None:
    """One generation batch of 4 rollouts of different lengths: the GRPO loss of the batch at once, and of 4
    micro-batches of 1 (gradient accumulation, each trimmed of the completion padding it does not need), give
    the same gradient, and the micro-batches never hold the whole batch's padded width."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from pipelines.config import RLStageParams
    from pipelines.train.rl.micro_batches import micro_batch_size, trim_completion_padding
    from pipelines.train.rl.rollouts import ToolRollouts
    from pipelines.train.rl.trainers import ToolGRPOTrainer

    assert [micro_batch_size(8, w) for w in (1, 3, 4, 8, 20)] == [1, 2, 4, 8, 8]
    import datasets

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "Mars?"}], "qa_id": "q"}])
    stage = RLStageParams()
    torch.manual_seed(0)
    prompt = torch.randint(3, 200, (4, 7))
    lengths = [5, 23, 11, 2]
    completion = torch.zeros(4, max(lengths), dtype=torch.long)
    mask = torch.zeros(4, max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        completion[row, :n] = torch.randint(3, 200, (n,))
        mask[row, :n] = 1
    tool_mask = mask.clone()
    tool_mask[1, 4:9] = 0  # a tool response inside the second rollout
    batch = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": completion,
             "completion_mask": mask, "tool_mask": tool_mask, "advantages": torch.tensor([1.0, -0.5, 0.25, -0.75]),
             "num_items_in_batch": (mask * tool_mask).sum()}

    def gradient(rows_per_micro_batch: int) -> tuple[dict[str, torch.Tensor], list[int]]:
        model = AutoModelForCausalLM.from_pretrained(tiny_llama)
        steps = 4 // rows_per_micro_batch
        args = GRPOConfig(output_dir=str(tiny_llama.parent / "out"), use_cpu=True, report_to="none", bf16=False,
                          num_generations=4, per_device_train_batch_size=rows_per_micro_batch,
                          gradient_accumulation_steps=steps)
        trainer = ToolGRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                                  args=args, train_dataset=dataset, processing_class=tokenizer,
                                  rollouts=ToolRollouts(None, None, tokenizer, stage, {}, 4096), stage=stage)
        trainer.current_gradient_accumulation_steps = steps
        model = trainer.model
        widths = []
        for start in range(0, 4, rows_per_micro_batch):
            micro = {k: v[start:start + rows_per_micro_batch] if v.dim() else v for k, v in batch.items()}
            micro = trim_completion_padding(micro)
            widths.append(micro["completion_ids"].shape[1])
            trainer.compute_loss(model, micro).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, widths

    whole, whole_widths = gradient(4)
    micro, micro_widths = gradient(1)
    assert whole_widths == [max(lengths)] and micro_widths == lengths
    assert whole.keys() == micro.keys() and whole
    for name, grad in whole.items():
        torch.testing.assert_close(micro[name], grad, rtol=1e-4, atol=1e-6, msg=name)


# ----- estimates ---------------------------------------------------------------------------------------------------
def test_model_shape_counts_what_the_model_holds(tiny_llama: Path) -> None:
    """The estimator's sizes are the model's: parameters (tied and untied embeddings), LoRA parameters on every
    linear layer of the blocks (as PEFT counts them), and key/value bytes per token (as the model's cache holds)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from pipelines.train.memory import ModelShape

    config = AutoConfig.from_pretrained(tiny_llama)
    shape = ModelShape.from_config(config)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    tied = LlamaConfig(**{**config.to_dict(), "tie_word_embeddings": True})
    assert ModelShape.from_config(tied).parameters == sum(p.numel() for p in LlamaForCausalLM(tied).parameters())
    lora = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    assert shape.lora_parameters(8) == sum(p.numel() for p in lora.parameters() if p.requires_grad)
    fresh = AutoModelForCausalLM.from_pretrained(tiny_llama)
    cache = fresh(torch.arange(3, 13).unsqueeze(0), use_cache=True).past_key_values
    cached = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers) * 4  # float32
    assert shape.kv_bytes_per_token(4) * 10 == cached


def test_estimates_follow_the_settings_that_bound_memory() -> None:
    """The parts move with the settings that decide them: a smaller LM-head tile, activation checkpointing, LoRA
    and fewer rollouts per step each lower their part; PPO adds a value model and beta > 0 a reference model."""
    from pipelines.config import RLStageParams, SFTParams
    from pipelines.train.memory import ModelShape, estimate_rl, estimate_sft

    shape = ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, vocab=49152,
                       tied_embeddings=True)
    assert shape.parameters == 134_515_008  # SmolLM2-135M
    base = estimate_sft(shape, SFTParams(logprob_chunk_tokens=None), cuda=False)
    tiled = estimate_sft(shape, SFTParams(logprob_chunk_tokens=512), cuda=False)
    assert tiled.parts["LM head tile"] * 3 < base.parts["LM head tile"]
    checkpointed = estimate_sft(shape, SFTParams(gradient_checkpointing=True), cuda=False)
    assert checkpointed.parts["activations"] * 4 < tiled.parts["activations"]
    full = estimate_sft(shape, SFTParams(method="full"), cuda=False)
    assert full.parts["gradients + AdamW"] == 12 * shape.parameters > 50 * tiled.parts["gradients + AdamW"]
    grpo = estimate_rl(shape, RLStageParams(), cuda=True)
    ppo = estimate_rl(shape, RLStageParams(algorithm="ppo", beta=0.01, questions_per_step=8), cuda=True)
    assert "value model (+ AdamW)" in ppo.parts and "reference model" in ppo.parts
    assert "value model (+ AdamW)" not in grpo.parts and ppo.parts["KV cache"] == 8 * grpo.parts["KV cache"]
    bounded = estimate_rl(shape, RLStageParams(questions_per_step=8), cuda=True, together=16)
    assert bounded.parts["KV cache"] == ppo.parts["KV cache"] // 2
    # LoRA on the last 15 of 30 blocks: backward keeps half the activations, half the adapters' optimizer states
    half = estimate_sft(shape, SFTParams(logprob_chunk_tokens=512, lora_layers=15), cuda=False)
    assert half.parts["activations"] * 2 == tiled.parts["activations"]
    assert half.parts["gradients + AdamW"] == pytest.approx(tiled.parts["gradients + AdamW"] / 2, rel=1e-6)
    last = estimate_rl(shape, RLStageParams(algorithm="ppo", lora_layers=10, questions_per_step=8), cuda=True)
    assert last.parts["activations"] * 3 == ppo.parts["activations"]
    assert last.parts["value model (+ AdamW)"] < ppo.parts["value model (+ AdamW)"]  # the critic is LoRA'd alike
    whole = estimate_rl(shape, RLStageParams(algorithm="ppo", method="full", questions_per_step=8), cuda=True)
    assert whole.parts["value model (+ AdamW)"] - ppo.parts["value model (+ AdamW)"] > 10 * shape.parameters
    assert estimate_sft(shape, SFTParams(method="full", lora_layers=15), cuda=False).parts == full.parts


def test_memory_command_prints_every_stage(tiny_llama: Path, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT, cli_env

    command = [sys.executable, "-m", "pipelines.cli", "--params", str(PROJECT_ROOT / "params.yaml"),
                           "--profile", "paper", "memory", "--model", str(tiny_llama), "--device", "cuda"]
    table = subprocess.run(command, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr
    assert "profile paper" in table.stdout
    for stage in ("eval", "sft", "rl stage 1", "rl stage 3"):
        assert f"│ {stage} " in table.stdout
    done = subprocess.run([*command, "--json"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=300)
    estimates = {e["stage"]: e for e in json.loads(done.stdout)}
    assert list(estimates) == ["eval", "sft", "rl stage 1", "rl stage 3"]
    assert estimates["rl stage 1"]["notes"] == ["32 of 128 rollouts at a time x 16384 tokens"]  # the paper's sizes
    assert all(e["total_bytes"] == sum(e["parts"].values()) > 0 for e in estimates.values())


# ----- the heap of a training stage ---------------------------------------------------------------------------
HEAP_PROBE = """
import ctypes, ctypes.util, re, sys
from pathlib import Path

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
if sys.argv[1] == "mmap":
    from pipelines.train.memory import mmap_large_allocations
    assert mmap_large_allocations()


def rss_mib():
    return int(re.search(r"VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def block(size):
    pointer = libc.malloc(size)
    ctypes.memset(pointer, 1, size)
    return pointer


libc.free(block(30 << 20))  # glibc's default: the threshold rises to the size of this freed mmapped block
before = rss_mib()
blocks, pins = [], []
for i in range(64):  # a step's activations: a few MiB each, sizes varying, live smaller ones between them
    blocks.append(block((4 << 20) + i * 4096))
    pins.append(block(128 << 10))  # stays: a hole in the heap cannot be trimmed
for pointer in blocks:
    libc.free(pointer)
if sys.argv[1] == "trim":  # the holes handed back after the fact (what SFT does after every step)
    from pipelines.heap import malloc_trim
    assert malloc_trim()
print(rss_mib() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file() or sys.platform != "linux", reason="glibc and /proc")
def test_large_allocations_go_back_to_the_os_when_freed() -> None:
    """After ``mmap_large_allocations`` (what the SFT stage calls), 256 MiB of freed blocks between live smaller ones
    leave the process; with glibc's default (rising) threshold they stay resident, holes in the heap."""
    def kept(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", HEAP_PROBE, mode], cwd=PROJECT_ROOT, capture_output=True,
                             text=True, check=True, timeout=120)
        return float(out.stdout.strip())

    assert kept("default") > 200 and kept("mmap") < 32
    assert kept("trim") < 32  # malloc_trim returns the holes too (SFT's heap_trim_callback, every step)


def test_labelled_positions_only_projects_the_trained_rows_with_the_same_values(monkeypatch: Any) -> None:
    """On a CPU TRL's fused LM head projects every position of a sequence; inside ``labelled_positions_only``
    only the positions whose next-token label is set reach the LM head (here 16 of 63), with the same
    log-probabilities, entropies and gradients, and TRL's own switch is back afterwards."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer import utils as trl_utils

    from pipelines.train.memory import labelled_positions_only

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=500, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    input_ids = torch.randint(0, 500, (1, 64))
    labels = torch.full_like(input_ids, -100)
    labels[:, 20:28] = input_ids[:, 20:28]  # two assistant turns: 8 + 8 trained targets
    labels[:, 50:58] = input_ids[:, 50:58]
    projected: list[int] = []
    apply = trl_utils._ChunkedLogProbFunction.apply

    def counting_apply(hidden: torch.Tensor, *args: Any) -> Any:
        projected.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting_apply)

    def run() -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        out = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
        out.loss.backward()
        return out.log_probs.detach(), out.entropy.detach(), [p.grad.clone() for p in model.parameters()]

    switch = trl_utils._use_triton
    every = run()
    with labelled_positions_only():
        labelled = run()
    assert trl_utils._use_triton is switch
    assert projected == [63, 16]
    for a, b in zip(every[:2], labelled[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(every[2], labelled[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
