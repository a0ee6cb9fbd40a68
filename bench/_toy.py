"""Toy inputs for ``--toy`` runs of the bench scripts: a throw-away project with the tests' solar domain
(tests/data/solar, 25 entities) in a temporary folder, built as far as a benchmark needs (KG, entity
index, QA dataset), a tiny random sentence encoder and a tiny random llama built from a config
(tests/model_support.py), and a few SFT conversations. Nothing here reads or writes the project's artifacts/.

The temporary folder lives as long as the process (removed at exit).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from _common import ROOT  # first: the offline environment and the project root on sys.path

SOLAR = ROOT / "tests" / "data" / "solar"
DOMAIN = "solar"
REGISTRY = {"domains": {DOMAIN: {"description": "A tiny solar-system graph (tests/data/solar).",
                                 "source": {"kind": "triples", "path": "kg_assets/solar/triples.csv",
                                            "entities": "kg_assets/solar/entities.csv"}}}}

_scratch: tempfile.TemporaryDirectory | None = None


def scratch() -> Path:
    """This process's temporary folder for toy inputs (removed when the process exits)."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="omne-bench-toy-")
    return Path(_scratch.name)


def tiny_model(folder: Path | None = None) -> Path:
    """A 2-layer llama of width 64 with a 300-token BPE tokenizer, random weights (built in a second)."""
    from tests.model_support import build_tiny_llama

    folder = folder or scratch() / "tiny-llama"
    if not (folder / "config.json").is_file():
        build_tiny_llama(folder)
    return folder


def tiny_encoder(folder: Path | None = None) -> Path:
    """A sentence-transformers folder like all-MiniLM-L6-v2 (its tokenizer, mean pooling, normalised) with a
    random 1-layer BERT of width 32 built from a config: embeddings in milliseconds, meaningless ones."""
    folder = folder or scratch() / "tiny-encoder"
    if (folder / "model.safetensors").is_file():
        return folder
    import torch
    from transformers import BertConfig, BertModel

    from pipelines.kg.embed import resolve_encoder_path

    source = resolve_encoder_path("all-MiniLM-L6-v2")
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("model.safetensors", "*.bin", "README.md"),
                    dirs_exist_ok=True)
    config = BertConfig.from_pretrained(source)
    config.update({"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64})
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text(encoding="utf-8")),
                                   "word_embedding_dimension": 32}, indent=2), encoding="utf-8")
    return folder


def toy_project(*, build: str = "none", model: bool = False, overrides: dict[str, dict[str, Any]] | None = None,
                name: str = "project") -> Path:
    """A project under the scratch folder: the real params.yaml (with ``overrides`` merged per section), a
    registry with the solar domain and its source files; built up to ``build`` (none | kg | index | qa:
    the KG, + the entity index, + seeds, pairs, gold paths and the dataset); ``model``: the tiny llama as
    ``agent.base_model``. The entity index uses the tiny encoder (``tiny_encoder``). Returns its params.yaml."""
    root = scratch() / name
    root.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")) or {}
    raw["paths"] = {**(raw.get("paths") or {}), "registry": "kg_assets/domains.yaml", "artifacts": "artifacts"}
    raw["index"] = {**(raw.get("index") or {}), "encoder": str(tiny_encoder()), "device": "cpu"}
    if model:
        raw["agent"] = {**raw.get("agent", {}), "base_model": str(tiny_model()), "device": "cpu"}
    for section, values in (overrides or {}).items():
        raw[section] = {**(raw.get(section) or {}), **values}
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    shutil.copytree(SOLAR, root / "kg_assets" / DOMAIN, dirs_exist_ok=True)
    (root / "kg_assets" / "domains.yaml").write_text(yaml.safe_dump(REGISTRY, sort_keys=False), encoding="utf-8")
    if build not in ("none", "kg", "index", "qa"):
        raise ValueError(f"build: none, kg, index or qa, not {build!r}")
    if build != "none":
        from pipelines.config import load_params
        from pipelines.domains import load_registry
        from pipelines.kg.build import build_entity_index, build_knowledge_graph

        params = load_params(root / "params.yaml")
        build_knowledge_graph(load_registry(params.registry_path).get(DOMAIN), params)
        if build in ("index", "qa"):
            build_entity_index(DOMAIN, params)
        if build == "qa":
            from pipelines.qa.build import build_gold_paths, build_qa_dataset, build_qa_pairs, build_seed_subgraphs

            build_seed_subgraphs(DOMAIN, params)
            build_qa_pairs(DOMAIN, params, progress=False)
            build_gold_paths(DOMAIN, params, progress=False)
            build_qa_dataset(params, [DOMAIN])
    return root / "params.yaml"


def toy_conversations(path: Path | None = None, count: int = 8) -> Path:
    """``count`` two-round ShareGPT SFT conversations on the solar graph (a tool call, then the answer)."""
    path = path or scratch() / "conversations.jsonl"
    rows = []
    for i in range(count):
        rows.append({
            "id": f"toy{i}", "graph_type": DOMAIN, "question": "Which moon orbits Mars?", "golden_answer": "Phobos",
            "system": "Answer the question with the tools. Reason inside <think> </think>.", "tools": "",
            "conversations": [
                {"from": "human", "value": f"Knowledge graph: solar\nQuestion {i}: Which moon orbits the planet "
                                           "that orbits the Sun?"},
                {"from": "gpt", "value": "<think>I look up Mars first.</think>\n"
                                         '<tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>'},
                {"from": "observation", "value": "<tool_response>\nPhobos and Deimos orbit Mars.\n</tool_response>"},
                {"from": "gpt", "value": "<think>Phobos orbits Mars.</think>\n<answer>Phobos</answer>"}]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
