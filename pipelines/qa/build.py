"""Build steps of QA synthesis, each one function shared by the CLI, the Dagster asset and the DVC stage:

    knowledge_graph -> seed_subgraphs -> qa_pairs -> gold_paths   (per domain)
    gold_paths of every domain -> qa_dataset                        (merged, deduped, split)

Like the KG steps, a step whose inputs and params are unchanged is skipped, and every artifact is
written to a temporary folder that replaces the old one only when complete. LLM replies live in the
client's disk cache, so a killed generation run restarts without paying for a reply twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel

from pipelines.config import Params
from pipelines.crashsafe import file_lock
from pipelines.domains import load_registry
from pipelines.errors import ArtifactMissingError
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir, lock_file, qa_dir
from pipelines.llm.base import ChatClient, require_replies
from pipelines.llm.factory import build_chat_client
from pipelines.manifest import ArtifactBuild, BuildResult, manifest_inputs, read_manifest, sha256_files
from pipelines.qa.dataset import assign_splits, dataset_stats, dedupe
from pipelines.qa.expectations import qa_table
from pipelines.qa.generate import GenerationResult, generate_llm_pairs, generate_template_pairs
from pipelines.qa.gold import gold_paths
from pipelines.qa.models import GoldPath, QAPair
from pipelines.qa.paraphrase import PARAPHRASES_FILE, ParaphraseResult, paraphrase_pairs
from pipelines.qa.paths import RelationGraph
from pipelines.qa.seeds import SEEDS_FILE, read_seeds, sample_seed_subgraphs, seeds_table
from pipelines.qa.template import WRITER_VERSION
from pipelines.text.phrases import PHRASES_FILE, PhraseLexicon, draft_lexicon, label_sentences, read_lexicon

log = logging.getLogger(__name__)

PAIRS_FILE, ATTEMPTS_FILE, GOLD_FILE = "qa_pairs.jsonl", "attempts.jsonl", "gold_paths.jsonl"
GENERIC_WORDS_FILE = "generic_words.json"  # words that give no entity away (the leak rules' exceptions)
DATASET_FILE, STATS_FILE = "qa.parquet", "stats.json"


def write_jsonl(path: Path, records: Iterable[BaseModel]) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record.model_dump_json() + "\n")
            count += 1
    return count


def read_jsonl(path: Path, model: type[BaseModel]) -> list[Any]:
    if not path.is_file():
        raise ArtifactMissingError(f"{path}: not built yet")
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    records.append(model.model_validate_json(line))
                except ValueError as exc:
                    raise ArtifactMissingError(f"{path}:{number}: not a valid {model.__name__}: {exc}") from None
    return records


def build_seed_subgraphs(domain: str, params: Params, *, force: bool = False) -> BuildResult:
    """Sample eligible seeds of a built KG and store their BFS balls (parquet + manifest)."""
    source, folder = kg_dir(params.artifacts_dir, domain), qa_dir(params.artifacts_dir, "seeds", domain)
    inputs = manifest_inputs(source, params.root, f"knowledge graph of {domain!r} (run `omne kg build`)")
    shaping = {"seeds": params.section("seeds"), "seeds_per_domain": params.qa.seeds_per_domain,
               "random_seed": params.qa.random_seed}
    build = ArtifactBuild(folder, "seed_subgraphs", inputs, shaping, domain=domain)
    if manifest := build.reusable(force):
        return build.result(manifest, skipped=True)
    kg = read_kg(source)
    subgraphs = sample_seed_subgraphs(kg, domain, params.seeds, params.qa.seeds_per_domain, params.qa.random_seed)
    table = seeds_table(subgraphs)
    with build.writing() as draft:
        table.write_parquet(draft.folder / SEEDS_FILE, compression="zstd", statistics=False)
        sizes = table["size"]
        draft.record(files=[draft.folder / SEEDS_FILE], rows={"seeds": table.height},
                     metadata={"size_min": int(sizes.min() or 0), "size_max": int(sizes.max() or 0),
                               "size_mean": round(float(sizes.mean() or 0), 2)})
    return build.result()


def read_seed_subgraphs(domain: str, params: Params) -> pl.DataFrame:
    path = qa_dir(params.artifacts_dir, "seeds", domain) / SEEDS_FILE
    if not path.is_file():
        raise ArtifactMissingError(f"{path}: seed subgraphs of {domain!r} not built (run `omne qa seeds`)")
    return pl.read_parquet(path)


def phrases_file(params: Params, domain: str) -> Path:
    """The domain's relation phrases (kg_assets/<domain>/phrases.yaml, beside its registry entry's sources)."""
    return params.registry_path.parent / domain / PHRASES_FILE


def relation_graph(domain: str, params: Params) -> RelationGraph:
    """A built domain's graph as QA synthesis reads it: with its phrases file, and per-edge phrasing where the
    source's labels are not shared relation names (LightRAG graphs, text extraction)."""
    registry = load_registry(params.registry_path)
    shared = registry.get(domain).source.kind == "triples" if domain in registry.names else True
    return RelationGraph(read_kg(kg_dir(params.artifacts_dir, domain)), read_lexicon(phrases_file(params, domain)),
                         shared_labels=shared)


def draft_phrases(domain: str, params: Params) -> PhraseLexicon:
    """The domain's phrases file as the rules draft it from its built KG, keeping every entry the file already
    has (a user's edits survive); labels of keyword-list graphs are left out (their edges are phrased one by one)."""
    graph = relation_graph(domain, params)
    labels = label_sentences(graph.keywords, graph.rel_descriptions, graph.names, graph.src.tolist(),
                             graph.dst.tolist(), skip=graph.lexicon.relations) if graph.shared_labels else {}
    return draft_lexicon(labels, graph.types, graph.lexicon)


def _phrases_inputs(params: Params, domain: str) -> dict[str, str]:
    path = phrases_file(params, domain)
    return sha256_files([path], params.root) if path.is_file() else {}


def _client(params: Params, client: ChatClient | None) -> ChatClient:
    if client is not None:
        return client

    return build_chat_client(params)


def build_qa_pairs(domain: str, params: Params, *, generator: str | None = None, limit: int | None = None,
                   client: ChatClient | None = None, force: bool = False, progress: bool = True) -> BuildResult:
    """Generate validated QA pairs from a domain's seed subgraphs (template or LLM generator)."""
    qa, llm = params.qa, params.llm
    generator = generator or qa.generator
    seeds_folder, folder = qa_dir(params.artifacts_dir, "seeds", domain), qa_dir(params.artifacts_dir, "pairs", domain)
    inputs = {**manifest_inputs(kg_dir(params.artifacts_dir, domain), params.root, f"knowledge graph of {domain!r}"),
              **manifest_inputs(seeds_folder, params.root, f"seed subgraphs of {domain!r} (run `omne qa seeds`)"),
              **_phrases_inputs(params, domain)}
    targets = {"1-2": qa.one_two_hop_per_domain, "3+": qa.three_plus_per_domain}
    if limit is not None:
        targets = {bucket: min(n, limit) for bucket, n in targets.items()}
    shaping: dict[str, Any] = {"generator": generator, "targets": targets,
                               **qa.model_dump(include={"random_seed", "max_hops", "max_retries", "strict_path",
                                                         "max_question_words"})}
    if generator == "template":
        shaping["writer_version"] = WRITER_VERSION
    if qa.name_rules != "strict":  # only then: the fingerprints of builds under the strict rules stay as they were
        shaping["name_rules"] = qa.name_rules
    if generator == "llm":
        shaping.update(qa.model_dump(include={"show_descriptions", "max_prompt_relations", "judge"}))
        shaping["llm"] = llm.model_dump(include={"backend", "model", "temperature", "max_tokens",
                                                 "json_repair_rounds"})
    paraphrase = qa.paraphrase == "llm" and generator == "template"  # LLM questions are not rewritten
    if paraphrase:  # only then: the fingerprints of builds without a paraphrase stay as they were
        shaping["paraphrase"] = llm.model_dump(include={"backend", "model", "temperature", "max_tokens",
                                                        "json_repair_rounds"})
    build = ArtifactBuild(folder, "qa_pairs", inputs, shaping, domain=domain)
    if manifest := build.reusable(force):
        return build.result(manifest, skipped=True)

    graph = relation_graph(domain, params)
    subgraphs = read_seeds(read_seed_subgraphs(domain, params))
    usage: dict[str, Any] = {}
    if generator == "llm":
        chat = _client(params, client)
        result = generate_llm_pairs(graph, subgraphs, qa, llm, domain, chat, targets, progress=progress)
        require_replies(chat.usage, f"qa generate {domain}")  # an endpoint that never answered: an error, not 0 pairs
        usage = chat.usage.model_dump()
        model = chat.model
    elif generator == "template":
        result = generate_template_pairs(graph, subgraphs, qa, domain, targets)
        model = "template"
    else:
        raise ValueError(f"unknown generator {generator!r}: use template or llm")
    rewritten = None
    if paraphrase:  # docs/qa.md, "Paraphrase"

        chat = _client(params, client)
        rewritten = paraphrase_pairs(graph, result.pairs, qa, llm, chat, domain=domain, progress=progress)
        require_replies(chat.usage, f"qa generate {domain} (paraphrase)")
        result = result.model_copy(update={"pairs": rewritten.pairs})
        usage = chat.usage.model_dump()
    return _write_pairs(build, result, usage, model, graph.generic_words, rewritten)


def _write_pairs(build: ArtifactBuild, result: GenerationResult, usage: dict[str, Any], model: str,
                 generic: frozenset[str], rewritten: ParaphraseResult | None = None) -> BuildResult:
    with build.writing() as draft:
        tmp = draft.folder
        rows = write_jsonl(tmp / PAIRS_FILE, result.pairs)
        write_jsonl(tmp / ATTEMPTS_FILE, result.attempts)
        (tmp / GENERIC_WORDS_FILE).write_text(json.dumps(sorted(generic), ensure_ascii=False) + "\n", encoding="utf-8")
        files = [tmp / PAIRS_FILE, tmp / ATTEMPTS_FILE, tmp / GENERIC_WORDS_FILE]
        metadata: dict[str, Any] = {"generator": model, "stats": result.stats(), "llm_usage": usage}
        if rewritten is not None:  # every rewrite proposed, and what became of it
            write_jsonl(tmp / PARAPHRASES_FILE, rewritten.outcomes)
            files.append(tmp / PARAPHRASES_FILE)
            metadata["paraphrase"] = rewritten.stats()
        draft.record(files=files, rows={"pairs": rows, "seed_attempts": len(result.attempts)}, metadata=metadata)
    return build.result()


def read_qa_pairs(domain: str, params: Params) -> list[QAPair]:
    return read_jsonl(qa_dir(params.artifacts_dir, "pairs", domain) / PAIRS_FILE, QAPair)


def build_gold_paths(domain: str, params: Params, *, client: ChatClient | None = None, force: bool = False,
                     progress: bool = True) -> BuildResult:
    """Every simple start->answer path of each QA pair, verified by rules or the LLM."""
    qa = params.qa
    pairs_folder, folder = qa_dir(params.artifacts_dir, "pairs", domain), qa_dir(params.artifacts_dir, "gold", domain)
    inputs = {**manifest_inputs(kg_dir(params.artifacts_dir, domain), params.root, f"knowledge graph of {domain!r}"),
              **manifest_inputs(pairs_folder, params.root, f"QA pairs of {domain!r} (run `omne qa generate`)")}
    shaping: dict[str, Any] = qa.model_dump(include={"gold_max_hops", "gold_max_paths", "gold_verify"})
    if qa.gold_verify == "llm":
        shaping["llm"] = params.llm.model_dump(include={"backend", "model", "max_tokens"})
    build = ArtifactBuild(folder, "gold_paths", inputs, shaping, domain=domain)
    if manifest := build.reusable(force):
        return build.result(manifest, skipped=True)
    graph = relation_graph(domain, params)
    pairs = read_qa_pairs(domain, params)
    chat = _client(params, client) if qa.gold_verify == "llm" else None
    golds = gold_paths(graph, pairs, qa, client=chat, llm=params.llm, progress=progress)
    paths = [len(g.paths) for g in golds]
    valid = [sum(p.valid for p in g.paths) for g in golds]
    with build.writing() as draft:
        write_jsonl(draft.folder / GOLD_FILE, golds)
        draft.record(files=[draft.folder / GOLD_FILE],
                     rows={"qa_pairs": len(golds), "paths": sum(paths), "valid_paths": sum(valid)},
                     metadata={"mean_paths": round(sum(paths) / len(paths), 3) if paths else 0.0,
                               "mean_valid_paths": round(sum(valid) / len(valid), 3) if valid else 0.0,
                               "truncated": sum(g.truncated for g in golds),
                               "llm_usage": chat.usage.model_dump() if chat else {}})
    return build.result()


def read_gold_paths(domain: str, params: Params) -> list[GoldPath]:
    return read_jsonl(qa_dir(params.artifacts_dir, "gold", domain) / GOLD_FILE, GoldPath)


class DatasetResult(BuildResult):
    stats: dict[str, Any] = {}


def built_qa_domains(params: Params, kind: str = "gold") -> list[str]:
    """The domains qa.domains / qa.exclude_domains select whose ``kind`` (pairs, gold) is built: what the dataset
    merges. Every domain qa.domains names is kept, built or not, so that a missing one is an error naming it."""
    return [d for d in params.selected_domains("qa") if params.qa.domains is not None
            or read_manifest(qa_dir(params.artifacts_dir, kind, d)) is not None]


DATASET_LOCK = "qa-dataset"  # its lock file in artifacts/.locks/: no domain's ('-' is not in a domain name)


def build_qa_dataset(params: Params, domains: list[str] | None = None, *, force: bool = False) -> DatasetResult:
    """Merge the domains' pairs (default: ``built_qa_domains``), dedupe, split by stable hash, write qa.parquet +
    split jsonl + stats; the manifest's params name the merged domains. One build at a time across processes
    (Dagster runs of several domains at once, the CLI beside them): no two replace the folder together, and the
    last one reads every domain finished before it."""
    with file_lock(lock_file(params.artifacts_dir, DATASET_LOCK), timeout_s=None, what="the QA dataset"):
        return _merge_qa_dataset(params, domains, force=force)


def _merge_qa_dataset(params: Params, domains: list[str] | None, *, force: bool) -> DatasetResult:
    domains = domains if domains is not None else built_qa_domains(params)
    if not domains:
        raise ArtifactMissingError("no domain has QA pairs and gold paths yet (run `omne qa generate` first)")
    folder = qa_dir(params.artifacts_dir, "dataset")
    inputs: dict[str, str] = {}
    for domain in domains:
        inputs.update(manifest_inputs(qa_dir(params.artifacts_dir, "pairs", domain), params.root,
                                      f"QA pairs of {domain!r}"))
        inputs.update(manifest_inputs(qa_dir(params.artifacts_dir, "gold", domain), params.root,
                                      f"gold paths of {domain!r} (run `omne qa gold`)"))
    shaping = {"domains": domains,  # test_per_bucket only when set: the fingerprints of share splits stay as they were
               **params.qa.model_dump(include={"test_share", "test_per_bucket", "val_share", "random_seed"})}
    build = ArtifactBuild(folder, "qa_dataset", inputs, shaping)
    if manifest := build.reusable(force):
        return DatasetResult(domain=None, folder=folder, manifest=manifest, skipped=True,
                             stats=manifest.metadata.get("stats", {}))
    pairs = [pair for domain in domains for pair in read_qa_pairs(domain, params)]
    kept, report = dedupe(pairs)
    kept = assign_splits(kept, params.qa)
    ids = {p.id for p in kept}
    golds = [g for domain in domains for g in read_gold_paths(domain, params) if g.qa_id in ids]
    stats = dataset_stats(kept)
    with build.writing() as draft:
        tmp = draft.folder
        qa_table(kept).write_parquet(tmp / DATASET_FILE, compression="zstd", statistics=False)
        files = [tmp / DATASET_FILE]
        for split in ("train", "val", "test"):
            write_jsonl(tmp / f"{split}.jsonl", (p for p in kept if p.split == split))
            files.append(tmp / f"{split}.jsonl")
        write_jsonl(tmp / GOLD_FILE, golds)
        (tmp / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
        generic = {d: sorted(_pairs_generic_words(params, d)) for d in domains}
        (tmp / GENERIC_WORDS_FILE).write_text(json.dumps(generic, ensure_ascii=False) + "\n", encoding="utf-8")
        files += [tmp / GOLD_FILE, tmp / STATS_FILE, tmp / GENERIC_WORDS_FILE]
        draft.record(files=files, rows={"pairs": len(kept), **{s: n for s, n in stats["splits"].items()}},
                     metadata={"stats": stats, "dedupe": report.model_dump()})
    return DatasetResult(domain=None, folder=folder, manifest=build.manifest, skipped=False, stats=stats)


def _pairs_generic_words(params: Params, domain: str) -> frozenset[str]:
    path = qa_dir(params.artifacts_dir, "pairs", domain) / GENERIC_WORDS_FILE
    return frozenset(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else frozenset()


def read_generic_words(params: Params) -> dict[str, frozenset[str]]:
    """Each dataset domain's generic words (what the dataset's leak check excuses), as the QA build saved them."""
    path = qa_dir(params.artifacts_dir, "dataset") / GENERIC_WORDS_FILE
    if not path.is_file():
        return {}
    return {domain: frozenset(words) for domain, words in json.loads(path.read_text(encoding="utf-8")).items()}


def read_qa_dataset(params: Params) -> pl.DataFrame:
    path = qa_dir(params.artifacts_dir, "dataset") / DATASET_FILE
    if not path.is_file():
        raise ArtifactMissingError(f"{path}: QA dataset not built (run `omne qa build`)")
    return pl.read_parquet(path)
