"""Generation with ONNX Runtime on the CPU: the fast local backend (``agent.backend: onnx``, ``llm.backend: onnx``).

The graph is the one onnxruntime-genai's model builder writes (``pipelines.llm.onnx_export``): a decoder whose
attention is ONNX Runtime's GroupQueryAttention, taking each layer's keys and values as inputs and returning
them as outputs. GroupQueryAttention reads a row's cache up to its own length (the attention mask's row sum)
and writes the new positions right after it, in place when the input and output are bound to one buffer. So
this module drives the session itself (``onnxruntime.InferenceSession`` with I/O binding) rather than
onnxruntime-genai's generator, whose batches cannot keep one row's cache across calls nor drop a row:

- **one buffer per batch**: every layer's keys and values for all rows, ``[layers, 2, rows, kv heads, positions,
  head dim]``, each row's cache from position 0 (right-aligned lengths, no padding inside);
- **prompts from stored prefixes**: a prompt's longest common prefix with a stored sequence
  (``PrefixStore``: the shared system prompt, an episode's earlier rounds, its own generated tokens) is copied
  into its row and only the rest runs, at batch 1 in chunks (on a CPU a prompt token costs the same alone or
  batched); a first message with no stored match is computed and stored on its own first, for every later
  prompt to share;
- **batched decoding**: one step for all live rows, each at its own length; a row that ends (an end token, its
  token limit, a stop string in its text) has its sequence stored for its next round and leaves the batch
  (the rows after it move up, so the live rows stay one contiguous block);
- **sampling** in numpy, per row, seeded by the request's seed and the row's prompt (not its place in the
  batch): temperature, then the 50 most likely tokens (transformers' default ``top_k``).

Greedy output equals the transformers reference up to floating-point rounding (a near tie can flip a token):
tests/test_onnx_backend.py checks it on a tiny random llama, and bench/rollout.py on SmolLM2.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.llm.base import LLMError
from pipelines.llm.generation import ONNX, GenerationBackend, generation_counters
from pipelines.llm.local import LocalChatClient
from pipelines.llm.prefix_store import ANCHOR_MIN_TOKENS, PrefixStore

TOP_K = 50  # sampling: transformers' default top_k
PREFILL_CHUNK = 512  # prompt tokens per forward (bounds the activations of one forward)


def _threads(threads: int) -> int:
    if threads > 0:
        return threads
    try:
        import torch

        return torch.get_num_threads()  # the process's setting (bench --threads, OMP_NUM_THREADS)
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0


class OnnxBackend(GenerationBackend):
    """``GenerationBackend`` over an ONNX folder (``genai_config.json`` + ``model.onnx``).

    ``ends``: token ids that end a row (end of text, padding); ``tokenizer``: decodes a row's last tokens to
    find stop strings; ``prefix_cache_mb``: the store of prompt states (0: nothing kept, every prompt computed
    whole); ``threads``: ONNX Runtime's intra-op threads (0: torch's current setting); ``initializers``: arrays
    that replace the graph's initializers of the same names (``onnx_weights.WeightRefresh``). ``stats``: its work
    (``generation_counters``)."""

    name = ONNX

    def __init__(self, folder: str | Path, *, ends: set[int], tokenizer: Any, prefix_cache_mb: int = 512,
                 threads: int = 0, initializers: Mapping[str, np.ndarray] | None = None) -> None:
        import onnxruntime as ort

        self.folder = Path(folder)
        config_path = self.folder / "genai_config.json"
        if not config_path.is_file():
            raise LLMError(f"{self.folder} is not an ONNX model folder (no genai_config.json)")
        decoder = json.loads(config_path.read_text(encoding="utf-8"))["model"]["decoder"]
        self.layers = int(decoder["num_hidden_layers"])
        self.kv_heads = int(decoder["num_key_value_heads"])
        self.head_size = int(decoder["head_size"])
        names = decoder["inputs"]
        outputs = decoder["outputs"]
        self._past = [(names["past_key_names"] % i, names["past_value_names"] % i) for i in range(self.layers)]
        self._present = [(outputs["present_key_names"] % i, outputs["present_value_names"] % i)
                         for i in range(self.layers)]
        self._ids_name, self._mask_name, self._logits_name = names["input_ids"], names["attention_mask"], \
            outputs["logits"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads(threads)
        options.inter_op_num_threads = 1
        # weights that replace the file's (an RL policy's adapted layers, ``onnx_weights``): ONNX Runtime uses these
        # arrays in place of deserialising those initializers, for as long as they live (kept here)
        self._initializers = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
                              for array in (initializers or {}).values()]
        for name, value in zip(initializers or {}, self._initializers, strict=True):
            options.add_initializer(name, value)
        self.session = ort.InferenceSession(str(self.folder / decoder["filename"]), options,
                                            providers=["CPUExecutionProvider"])
        kv_type = next(i.type for i in self.session.get_inputs() if i.name == self._past[0][0])
        self.dtype = np.float16 if "float16" in kv_type else np.float32
        self.ends = set(ends)
        self.tokenizer = tokenizer
        self.store = PrefixStore(prefix_cache_mb << 20)
        self._stats: dict[str, float] = generation_counters()

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def clear_cache(self) -> None:
        self.store.clear()

    # -------------------------------------------------------------------------------------------
    # one forward pass over rows of the batch buffer
    # -------------------------------------------------------------------------------------------

    def _forward(self, kv: np.ndarray, ids: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
        """Run ``ids`` ([rows, new]) after each row's first ``lengths[row]`` cached positions of ``kv`` (the rows
        of the batch buffer, a contiguous block), writing the new positions in place. Returns the logits of each
        row's last position, [rows, 1, vocabulary] (the converted graph computes no others)."""
        import onnxruntime as ort

        rows, new = ids.shape
        width = max(lengths) + new
        mask = np.zeros((rows, width), dtype=np.int64)
        for row, length in enumerate(lengths):
            mask[row, :length + new] = 1
        binding = self.session.io_binding()
        binding.bind_output(self._logits_name)
        binding.bind_cpu_input(self._ids_name, np.ascontiguousarray(ids, dtype=np.int64))
        binding.bind_cpu_input(self._mask_name, mask)
        keep = []
        for layer in range(self.layers):
            for which in (0, 1):
                value = ort.OrtValue.ortvalue_from_numpy(kv[layer, which])
                keep.append(value)
                binding.bind_ortvalue_input(self._past[layer][which], value)
                binding.bind_ortvalue_output(self._present[layer][which], value)  # the same memory: in place
        self.session.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()

    def _prefill_row(self, kv: np.ndarray, row: int, tokens: list[int], start: int) -> np.ndarray:
        """Positions ``start..start+len(tokens)`` of ``row``, at batch 1 in chunks; the last position's logits."""
        view = kv[:, :, row:row + 1]
        logits = None
        for offset in range(0, len(tokens), PREFILL_CHUNK):
            chunk = tokens[offset:offset + PREFILL_CHUNK]
            logits = self._forward(view, np.asarray([chunk], dtype=np.int64), [start + offset])[0, -1]
        self._stats["computed"] += len(tokens)
        assert logits is not None
        return logits

    def _keep(self, kv: np.ndarray, row: int, tokens: Sequence[int], length: int) -> None:
        """Store the first ``length`` positions of ``row`` (their tokens ``tokens[:length]``)."""
        if length <= 0 or self.store.max_bytes <= 0:
            return
        states = kv[:, :, row, :, :length].copy()  # [layers, 2, heads, length, dim]: one allocation
        self.store.add(np.asarray(tokens[:length], dtype=np.int64),
                       [(states[layer, 0][None], states[layer, 1][None]) for layer in range(self.layers)])

    # -------------------------------------------------------------------------------------------
    # generation
    # -------------------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: Sequence[int], *, temperature: float,
                 seed: int | None, stop: list[str], boundaries: Sequence[list[int]] | None) -> list[list[int]]:
        rows = len(prompts)
        limits = [max(0, int(m)) for m in max_new_tokens]
        total = max(len(p) + m for p, m in zip(prompts, limits, strict=True))
        kv = np.zeros((self.layers, 2, rows, self.kv_heads, total, self.head_size), dtype=self.dtype)
        self._stats["batches"] += 1
        self._stats["rows"] += rows
        rngs = [np.random.default_rng([seed if seed is not None else int(time.time_ns() % (1 << 32)),
                                       zlib.crc32(np.asarray(p, dtype=np.int64).tobytes())]) if temperature > 0
                else None for p in prompts]
        window = max((len(s) for s in stop), default=0) + 2  # tokens enough to hold any stop string
        out: list[list[int]] = [[] for _ in range(rows)]
        sequences = [list(p) for p in prompts]  # prompt + generated: what each row's cache holds (but the last)

        start = time.perf_counter()
        first_logits = []
        for row, ids in enumerate(prompts):
            first_logits.append(self._prefill(kv, row, ids, boundaries[row] if boundaries is not None else []))
        self._stats["prefill_seconds"] += time.perf_counter() - start

        start = time.perf_counter()
        slots = list(range(rows))  # slot -> row: the live rows, in buffer order
        lengths = [len(p) for p in prompts]  # cached positions per slot
        logits = np.stack(first_logits)
        while True:
            ended = []
            for slot, row in enumerate(slots):
                token = self._pick(logits[slot], temperature, rngs[row])
                out[row].append(token)
                sequences[row].append(token)
                if (token in self.ends or len(out[row]) >= limits[row]
                        or (stop and self._stopped(out[row][-window:], stop))):
                    ended.append(slot)
            for slot in ended:  # its conversation so far, for its next round (the last token has no state yet)
                self._keep(kv, slot, sequences[slots[slot]], lengths[slot])
            for slot in sorted(ended, reverse=True):  # the last live row fills each hole: one row moved per end
                last = len(slots) - 1
                if slot != last:
                    kv[:, :, slot, :, :lengths[last]] = kv[:, :, last, :, :lengths[last]]
                    slots[slot], lengths[slot] = slots[last], lengths[last]
                slots.pop()
                lengths.pop()
            if not slots:
                break
            ids = np.asarray([[out[row][-1]] for row in slots], dtype=np.int64)
            logits = self._forward(kv[:, :, :len(slots)], ids, lengths)[:, -1]
            lengths = [length + 1 for length in lengths]
            self._stats["decode_steps"] += 1
            self._stats["row_steps"] += len(slots)
        self._stats["decode_seconds"] += time.perf_counter() - start
        return out

    def _prefill(self, kv: np.ndarray, row: int, ids: list[int], bounds: list[int]) -> np.ndarray:
        """Fill ``row`` with the states of every token of ``ids`` (reusing the store's longest common prefix, at
        most all but the last token); the logits after its last token."""
        tokens = np.asarray(ids, dtype=np.int64)
        common, entry = self.store.match(tokens)
        cached = min(common, len(ids) - 1)
        if cached > 0 and entry is not None:
            for layer, (keys, values) in enumerate(entry.kv):
                kv[layer, 0, row, :, :cached] = keys[0, :, :cached]
                kv[layer, 1, row, :, :cached] = values[0, :, :cached]
        else:
            cached = 0
        self._stats["reused"] += cached
        first = next((b for b in bounds if b >= ANCHOR_MIN_TOKENS), None)
        if first is not None and cached < first < len(ids):
            # the first message (the system prompt) on its own, stored for every later prompt to share
            anchor_start = time.perf_counter()
            self._prefill_row(kv, row, ids[cached:first], cached)
            self._stats["anchor"] += first - cached
            self._stats["anchor_seconds"] += time.perf_counter() - anchor_start
            self._keep(kv, row, ids, first)
            cached = first
        return self._prefill_row(kv, row, ids[cached:], cached)

    def _stopped(self, tail: list[int], stop: list[str]) -> bool:
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        return any(s in text for s in stop)

    @staticmethod
    def _pick(logits: np.ndarray, temperature: float, rng: np.random.Generator | None) -> int:
        if temperature <= 0 or rng is None:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / temperature
        top = np.argpartition(scaled, -TOP_K)[-TOP_K:] if scaled.shape[0] > TOP_K else np.arange(scaled.shape[0])
        weights = np.exp(scaled[top] - scaled[top].max())
        return int(top[rng.choice(len(top), p=weights / weights.sum())])


def onnx_chat_client(folder: str | Path, *, model: str, batch_size: int = 8, prefix_cache_mb: int = 512,
                     threads: int = 0, initializers: Mapping[str, np.ndarray] | None = None) -> Any:
    """A ``LocalChatClient`` generating with ``OnnxBackend`` from an ONNX folder (``onnx_export``), with the
    tokenizer and generation config stored beside the graph; ``model`` names it in replies and cache keys;
    ``initializers`` replace the graph's weights of those names."""
    from transformers import AutoTokenizer, GenerationConfig


    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos: set[int] = set()
    if (folder / "generation_config.json").is_file():
        found = GenerationConfig.from_pretrained(folder).eos_token_id
        eos = {*([found] if isinstance(found, int) else (found or []))}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ends = (eos | {tokenizer.eos_token_id, pad}) - {None}
    backend = OnnxBackend(folder, ends=ends, tokenizer=tokenizer, prefix_cache_mb=prefix_cache_mb, threads=threads,
                          initializers=initializers)
    return LocalChatClient(folder, tokenizer, backend, model=model, batch_size=batch_size, eos=eos)
