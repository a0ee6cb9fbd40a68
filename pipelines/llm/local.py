"""Local chat clients, so that every LLM step can run offline with no endpoint.

``LocalChatClient`` turns chat requests into token batches and replies: it renders prompts with the
model's chat template (noting where each message ends), batches requests that sample alike, hands each
batch to its ``GenerationBackend`` (``pipelines.llm.generation``) and turns the generated tokens back into
``ChatReply`` objects. ``TransformersChatClient`` is the reference: the model in this process, either plain
``generate`` or (``prefix_cache``) prefill from the stored states of earlier prompts
(``prefix_store.PrefixStore``) and decoding from a static cache (``kv_generation.KVGeneration``). The ONNX
Runtime backend (``onnx_backend``) plugs into ``LocalChatClient`` the same way; encoding, batching and
replies are shared. The default model is ``smollm2`` (``smollm2.smollm2_folder``).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pipelines.llm.base import ChatReply, ChatRequest, LLMError, OnReply, Usage, complete_one, cut_at_stop
from pipelines.llm.generation import GenerationBackend, TransformersBackend, generation_counters
from pipelines.llm.kv_generation import KVGeneration, fits_static_cache
from pipelines.llm.prefix_store import PrefixStore
from pipelines.manifest import model_identity

log = logging.getLogger(__name__)


# stop-string criteria by (tokenizer id, stop strings), shared by every client: RL makes a client per rollout
# call around the same tokenizer, and building them costs ~1 s of Python per call (2026-11-26)
_STOP_CRITERIA: dict[tuple[int, tuple[str, ...]], tuple[Any, Any]] = {}


def batch_seed(seeds: Sequence[int | None]) -> int | None:
    """The one seed of a sampled batch whose requests carry ``seeds``: theirs when they agree, else one drawn
    from all of them (the same requests batched alike sample alike); None when any request is unseeded."""
    if any(s is None for s in seeds):
        return None
    if len(set(seeds)) == 1:
        return seeds[0]
    import hashlib

    return int.from_bytes(hashlib.sha256(repr(list(seeds)).encode()).digest()[:7], "big")


def model_eos(lm: Any) -> set[int]:
    """The token ids that end a model's replies (its generation config's ``eos_token_id``)."""
    eos = lm.generation_config.eos_token_id
    return {*([eos] if isinstance(eos, int) else (eos or []))}


def autocast_wrapped(lm: Any) -> bool:
    """Whether the forward that ``lm.generate`` runs is wrapped in a trainer's mixed precision (accelerate keeps the
    unwrapped one as ``_original_forward``; a PEFT model generates with its base model's): keys then come out in
    float32 (after the rotary embedding) and values in bf16, which a ``StaticCache`` (one dtype) cannot take in."""
    inner = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    return hasattr(inner, "_original_forward")


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class LocalChatClient:
    """A ``ChatClient`` that generates with a local model (``backend``) and the model's chat template.

    Requests are generated in batches of ``batch_size`` (grouped by temperature, stop strings and, unless the
    backend ``mixes_seeds``, seed; sorted by prompt length): greedy when temperature is 0, else sampling seeded
    by the requests' seeds (``batch_seed``).
    Greedy output does not depend on the batching. ``json_mode`` has no local equivalent (no constrained
    decoding): the repair round of ``complete_json_many`` covers it. Token counts come from the tokenizer;
    cost is 0. ``eos``: the token ids that end a reply (besides the tokenizer's padding)."""

    prefix_cache = True  # prompts are encoded with their message boundaries (where a backend's reuse may end)

    def __init__(self, path: str | Path, tokenizer: Any, backend: GenerationBackend, *, model: str,
                 batch_size: int = 8, eos: set[int] | None = None) -> None:
        self.path = Path(path)
        self.model = model
        self.usage = Usage()
        self.batch_size = batch_size
        self.tokenizer = tokenizer
        self.backend = backend
        if not self.tokenizer.chat_template:
            raise LLMError(f"{self.path}: the tokenizer has no chat template")
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._eos = ({*(eos or ()), self.tokenizer.eos_token_id}) - {None}
        self._lock = threading.Lock()  # one generate at a time per model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, model={self.model!r}, backend={self.backend.name!r})"

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
        """Forget the backend's kept prompt states (the system prompt, episodes so far)."""
        with self._lock:
            self.backend.clear_cache()

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
            own_seed = request.temperature > 0 and not self.backend.mixes_seeds
            key = (request.temperature, request.seed if own_seed else None, tuple(request.stop))
            groups.setdefault(key, []).append(index)
        with tqdm(total=len(requests), desc=desc, unit="req", disable=not progress) as bar:
            for (temperature, seed, stop), members in groups.items():
                members.sort(key=lambda i: len(prompts[i]))
                for start in range(0, len(members), self.batch_size):
                    batch = members[start:start + self.batch_size]
                    if temperature > 0 and self.backend.mixes_seeds:
                        seed = batch_seed([requests[i].seed for i in batch])
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

    def _generate(self, prompts: Sequence[list[int]], max_tokens: Sequence[int], temperature: float,
                  seed: int | None, stop: list[str] | None = None,
                  boundaries: Sequence[list[int]] | None = None) -> list[ChatReply]:
        start = time.perf_counter()
        generated = self._generate_tokens(prompts, max_tokens, temperature, seed, stop or [], boundaries)
        latency = (time.perf_counter() - start) / len(prompts)
        return self._replies(generated, prompts, max_tokens, stop or [], latency)

    def _generate_tokens(self, prompts: Sequence[list[int]], max_tokens: Sequence[int], temperature: float,
                         seed: int | None, stop: list[str], boundaries: Sequence[list[int]] | None) -> list[list[int]]:
        with self._lock:
            return self.backend.generate(prompts, max_tokens, temperature=temperature, seed=seed, stop=stop,
                                         boundaries=boundaries)

    def _replies(self, generated: list[list[int]], prompts: Sequence[list[int]], max_tokens: Sequence[int],
                 stop: list[str], latency: float) -> list[ChatReply]:
        """Replies from token rows: each cut at its own limit, its end of text or padding, and its first
        stop string."""
        pad = self.tokenizer.pad_token_id
        replies = []
        for row, prompt, limit in zip(generated, prompts, max_tokens, strict=True):
            row = row[:limit]  # a batch runs to its longest limit; greedy prefixes do not depend on it
            end = next((k for k, token in enumerate(row) if token in self._eos or token == pad), None)
            kept = row if end is None else row[:end]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            text, stopped = cut_at_stop(text, stop)
            finished = end is not None or stopped
            replies.append(ChatReply(
                text=text, model=self.model, prompt_tokens=len(prompt),
                completion_tokens=len(kept) + (1 if end is not None and not stopped else 0),
                latency_s=latency, finish_reason="stop" if finished else "length"))
        return replies


class TransformersChatClient(LocalChatClient):
    """The reference ``LocalChatClient``: generation with a transformers causal LM in this process
    (``TransformersBackend``), its batches left-padded.

    With ``prefix_cache`` (the default), prompts are not run through the model whole: the key/value
    states of earlier prompts are kept (``prefix_store``, ``prefix_cache_mb`` at most) and reused up
    to the last message boundary that a prompt shares with one of them (the system prompt, or an
    episode's previous round); the first message of a prompt with no stored match is computed on
    its own first, so that it is shared by every later prompt. The prompts' remaining tokens then
    run in groups of similar length (``prefill_group`` rows at most), and the batch generates from
    a static cache filled with those states, in chunks of ``decode_chunk`` steps between which rows
    that ended leave the batch (``KVGeneration``; ``prefill_stats`` counts its work). The store is
    dropped when the model or its weights change (``clear_prefix_cache`` drops it by hand); a model
    in training mode, or one whose layers are not all full attention, generates on the plain path.
    Greedy output is the same token for token as on the plain path up to floating-point rounding
    (a near tie can flip a token).
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
        device_used = _device(device)
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if device_used == "cuda" else torch.float32)
        if loaded is not None:  # from_model: a model already in memory (the RL policy), used as it is
            self.lm, self.tokenizer = loaded
            device_used = str(next(self.lm.parameters()).device)
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.lm = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch_dtype).to(device_used).eval()
        super().__init__(self.path, self.tokenizer, TransformersBackend(self), model=self.model, batch_size=batch_size,
                         eos=model_eos(self.lm))
        self.device = device_used
        self.prefix_cache = prefix_cache
        self.decode_chunk = decode_chunk
        self.prefill_group = prefill_group
        self.prefix_store = PrefixStore(prefix_cache_mb << 20)
        self._store_owner: tuple[Any, ...] | None = None
        self._cacheable_for: tuple[Any, bool] | None = None
        # the prefix cache path's work (``generation_counters``): prefill before generate, then its decoding
        self.prefill_stats: dict[str, float] = generation_counters()

    @classmethod
    def from_model(cls, lm: Any, tokenizer: Any, *, name: str, batch_size: int = 8,
                   **options: Any) -> TransformersChatClient:
        """A client around a model and tokenizer already in memory (the policy being trained by RL): nothing
        is loaded or copied, so generation always sees the current weights. The tokenizer's padding side is
        set to left (generation needs it)."""
        return cls(Path(getattr(lm, "name_or_path", "") or "."), name=name, batch_size=batch_size,
                   loaded=(lm, tokenizer), **options)

    def __repr__(self) -> str:
        return f"TransformersChatClient({str(self.path)!r}, model={self.model!r}, device={self.device!r})"

    def _transformers_tokens(self, prompts: Sequence[list[int]], max_new: int, temperature: float,
                             seed: int | None, stop: list[str],
                             boundaries: Sequence[list[int]] | None) -> list[list[int]]:
        """``TransformersBackend``: each prompt's new tokens (``max_new`` at most; a row may run on past its end,
        which ``_replies`` cuts): through the prefix cache when it applies, else plain ``generate``. The caller
        holds the client's lock."""
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        options: dict[str, Any] = {"max_new_tokens": max_new, "pad_token_id": pad, "eos_token_id": sorted(self._eos)}
        if temperature > 0:
            options.update(do_sample=True, temperature=temperature)
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop:  # each row ends at its first stop string; finished rows are padded
            options.update(stopping_criteria=self._stopping(stop))
        # not in training mode (dropout; gradient checkpointing turns the cache off), nor under a trainer's autocast
        cached = (self.prefix_cache and boundaries is not None and width > 1 and not self.lm.training
                  and not autocast_wrapped(self.lm) and self._cacheable())
        with torch.inference_mode(), torch.random.fork_rng(
                devices=[torch.cuda.current_device()] if self.device == "cuda" else []):
            if cached and boundaries is not None:
                generation = KVGeneration(self.lm, pad, self.device, self.prefill_stats)
                cache = generation.prefill(prompts, boundaries, max_new, self._store(), group=self.prefill_group)
                if seed is not None:
                    torch.manual_seed(seed)
                return generation.decode(input_ids, attention, cache, options, ends={*self._eos, pad},
                                         criteria=self._stopping(stop)[0] if stop else None, chunk=self.decode_chunk)
            if seed is not None:
                torch.manual_seed(seed)
            output = self.lm.generate(input_ids=input_ids, attention_mask=attention, **options)
            return output[:, width:].tolist()

    def _stopping(self, stop: list[str]) -> Any:
        """The stop-string criteria for ``generate``, built once per tokenizer and stop strings (in any client).
        (Given ``stop_strings``, ``generate`` builds them on every call, and their table cache in transformers
        never hits: its key holds the vocabulary in ``get_vocab()`` order, which changes between calls;
        building them costs 1-3 s of Python for a 49k-token vocabulary.)"""
        from transformers import StoppingCriteriaList
        from transformers.generation.stopping_criteria import StopStringCriteria

        key = (id(self.tokenizer), tuple(stop))
        found = _STOP_CRITERIA.get(key)
        if found is None or found[0]() is not self.tokenizer:
            criteria = StoppingCriteriaList([StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))])
            found = _STOP_CRITERIA[key] = (weakref.ref(self.tokenizer), criteria)
            while len(_STOP_CRITERIA) > 16:
                del _STOP_CRITERIA[next(iter(_STOP_CRITERIA))]
        return found[1]

    # ---------------------------------------------------------------------------------------
    # the prefix store: whose states it holds
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
        """Whether the prefix cache's static cache fits the model (checked once per model object)."""
        known = self._cacheable_for
        if known is not None and known[0]() is self.lm:
            return known[1]
        ok = fits_static_cache(self.lm.config)
        if not ok:
            log.info("%s: no prefix cache for this architecture (not full attention in every layer)", self.model)
        self._cacheable_for = (weakref.ref(self.lm), ok)
        return ok
