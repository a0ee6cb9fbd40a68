"""A model folder converted for the ONNX Runtime generation backend: an artifact with a manifest, cached by the
source model's identity.

The conversion is onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder``), run in a
child process (it holds the whole model in memory while it writes the graph) offline from the local folder:
the graph (``model.onnx``: GroupQueryAttention with a key/value cache as inputs and outputs) and its weights
(``model.onnx.data``), ``genai_config.json`` (layers, heads, input names), and the source's tokenizer and
generation config, so that the folder alone is enough to generate. It lands in
``artifacts/models/onnx/<identity>-<precision>/`` (``layout.onnx_model_dir``) whole or not at all; a folder
whose manifest names the same source identity, precision and builder version is reused as it is.

Sources: a transformers folder (the base model, a full fine-tune), or anything that can write one: a PEFT adapter
merged into its base (``pipelines.agent.models``), the RL policy in memory, its LoRA merged into a copy
(``save_merged``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from pipelines.config import OnnxPrecision
from pipelines.crashsafe import file_lock
from pipelines.layout import lock_file, onnx_model_dir
from pipelines.llm.base import LLMError
from pipelines.manifest import ArtifactBuild

log = logging.getLogger(__name__)

ONNX_PRECISIONS = get_args(OnnxPrecision)
ONNX_KIND = "onnx_model"
LOGITS = "last_position"  # the graph edit below: logits of each row's last position only (a conversion param)
# int8/int4 multiply in int8 (the builder's accuracy level 4, its CPU default, said here so that it stays): level 1
# (fp32 products) decoded at a tenth of fp32's speed (2026-11-27, docs/llm.md)
BUILDER_OPTIONS = {"int8": ["--extra_options", "accuracy_level=4"], "int4": ["--extra_options", "accuracy_level=4"]}


def builder_version() -> str:
    from importlib.metadata import version

    return f"onnxruntime-genai=={version('onnxruntime-genai')}"


def convert_folder(source: Path, out: Path, *, precision: str = "fp32") -> None:
    """Run the model builder on the transformers folder ``source`` into the empty folder ``out`` (offline), then
    put the source's tokenizer and generation config beside the graph."""
    if precision not in ONNX_PRECISIONS:
        raise LLMError(f"ONNX precision {precision!r}: expected one of {', '.join(ONNX_PRECISIONS)}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="omne-onnx-cache-") as cache:
        done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
                               "-o", str(out), "-p", precision, "-e", "cpu", "-c", cache,
                               *BUILDER_OPTIONS.get(precision, [])],
                              capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0 or not (out / "model.onnx").is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-8:]
        raise LLMError(f"converting {source} to ONNX ({precision}) failed (exit {done.returncode}): "
                       + " | ".join(tail))
    last_position_logits(out / "model.onnx")
    from transformers import AutoTokenizer, GenerationConfig

    AutoTokenizer.from_pretrained(source).save_pretrained(out)  # the source's, exactly (special tokens, template)
    if (source / "generation_config.json").is_file():
        GenerationConfig.from_pretrained(source).save_pretrained(out)


def last_position_logits(graph_path: Path) -> None:
    """Edit the builder's graph so that the LM head runs on each row's last position only: a prompt of n tokens
    then costs n positions of the decoder and one of the LM head (a fifth of SmolLM2-135M's compute per token is
    its LM head), and its logits output is [rows, 1, vocabulary] instead of n times that, which is all generation
    reads (``logits_to_keep=1`` in transformers). The weights file is not touched."""
    import onnx
    from onnx import helper

    model = onnx.load(str(graph_path), load_external_data=False)
    graph = model.graph
    head = next((n for n in graph.node if "logits" in n.output), None)
    if head is None:
        raise LLMError(f"{graph_path}: no node writes 'logits'")
    hidden = head.input[0]
    constants = [helper.make_tensor(f"/lm_head/last/{name}", onnx.TensorProto.INT64, [1], [value])
                 for name, value in (("starts", -1), ("ends", 2**62), ("axes", 1))]
    graph.initializer.extend(constants)
    sliced = f"{hidden}/last_position"
    index = list(graph.node).index(head)
    graph.node.insert(index, helper.make_node("Slice", [hidden, *(c.name for c in constants)], [sliced],
                                              name="/lm_head/last_position"))
    head.input[0] = sliced
    output = next(o for o in graph.output if o.name == "logits")
    output.type.tensor_type.shape.dim[1].ClearField("dim_param")
    output.type.tensor_type.shape.dim[1].dim_value = 1
    onnx.save(model, str(graph_path))


def export_onnx(identity: str, write_source: Callable[[Path], None] | Path, artifacts_dir: Path, *,
                precision: str = "fp32", source_name: str = "") -> Path:
    """The ONNX folder of the model whose identity is ``identity``: reused when its manifest matches, else
    converted from ``write_source`` (a transformers folder, or a function that writes one into the folder it
    is given, e.g. a merged adapter). Returns the folder. Several processes (``accelerate launch``: one rollout
    engine each) convert the same model in turn under a file lock: the first writes it, the others reuse it."""
    folder = onnx_model_dir(Path(artifacts_dir), identity, precision)
    with file_lock(lock_file(Path(artifacts_dir), f"onnx-{folder.name}"), timeout_s=None,
                   what=f"the ONNX conversion of {identity}"):
        return _convert_once(folder, identity, write_source, precision=precision, source_name=source_name)


def _convert_once(folder: Path, identity: str, write_source: Callable[[Path], None] | Path, *, precision: str,
                  source_name: str) -> Path:
    build = ArtifactBuild(folder, ONNX_KIND, {"model": identity},
                          {"precision": precision, "builder": builder_version(), "execution_provider": "cpu",
                           "logits": LOGITS})
    if build.reusable() and (folder / "model.onnx").is_file() and (folder / "genai_config.json").is_file():
        return folder
    start = time.perf_counter()
    with build.writing() as draft:  # files: every file written
        tmp = draft.folder
        if isinstance(write_source, Path):
            convert_folder(write_source, tmp, precision=precision)
        else:
            with tempfile.TemporaryDirectory(prefix=".merged-", dir=tmp.parent) as merged:
                write_source(Path(merged))
                convert_folder(Path(merged), tmp, precision=precision)
        seconds = time.perf_counter() - start
        draft.record(metadata={"source": source_name or identity, "convert_seconds": round(seconds, 2)})
    log.info("converted %s to ONNX (%s) in %.1f s: %s", source_name or identity, precision, seconds, folder)
    return folder


def save_merged(lm: Any, tokenizer: Any, out: Path) -> None:
    """Write a transformers folder of ``lm`` (a PEFT model: its adapter merged into a copy, the model in
    memory untouched) and ``tokenizer`` into ``out``."""
    import copy

    import torch

    model = lm
    if hasattr(lm, "merge_and_unload"):
        model = copy.deepcopy(lm).merge_and_unload()
    with torch.no_grad():
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
