"""The LightRAG baseline of the Omne-R1 paper (Tables 2 and 7): the lightrag-hku library retrieves a context from
the domain's graph, then the evaluated model answers from it with the no-tool baseline prompt.

The paper's baseline is LightRAG itself, so everything between the question and the context is the library's:
its keyword extraction (written by the evaluated model, as the paper's baseline used its own model), its
local/global retrieval and its context format. What this module adds is the glue:

- the domain's built KG is loaded once with ``insert_custom_kg`` into a LightRAG working dir under
  ``artifacts/lightrag/<domain>/`` (an artifact with a manifest, reused while the KG files, the encoder and the
  library's version are unchanged), embedded with the project's encoder (all-MiniLM-L6-v2 by default);
- LightRAG counts tokens with that encoder's tokenizer (its default, tiktoken, downloads a vocabulary);
- the questions are asked with ``aquery_llm(question, QueryParam(only_need_context=True))``, concurrently in one
  event loop, and the keyword requests of the questions in flight go to the model together (one batch);
- how each question's retrieval went is counted (:class:`LightRAGSummary`): a small model often writes no usable
  keyword JSON, and then LightRAG's own fallback decides (the question as a keyword, or no context).

lightrag-hku is an optional extra (``pip install 'omne[lightrag]'``; in ``dev`` too), imported only here, lazily.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from pipelines.agent.rollout import Task
from pipelines.agent.tools import KGToolbox
from pipelines.config import LightRAGParams, Params
from pipelines.errors import OmneError
from pipelines.kg.embed import Encoder
from pipelines.kg.store import read_kg
from pipelines.layout import embeddings_cache_dir, kg_dir, lightrag_dir
from pipelines.llm.base import ChatClient, ChatRequest, LLMError
from pipelines.manifest import ArtifactBuild, BuildResult, manifest_inputs

log = logging.getLogger(__name__)

INDEX_KIND = "lightrag_index"
LOADER_VERSION = 1  # how the KG becomes LightRAG's entities and relations (below); part of the index's fingerprint
KEYWORD_TAG = "lightrag.keywords"
BATCH_WAIT_S = 1.0  # the most a batch of keyword requests waits for the other questions in flight to ask
NO_TIMEOUT_S = 7 * 24 * 3600  # the model generates on the event loop's thread: LightRAG's timeouts must not fire
QUIET_LOGGERS = ("lightrag", "nano-vectordb")  # per-entity warnings (no source chunk), per-query info lines

Outcome = Literal["keywords", "question", "none", "no_match", "failed"]
OUTCOMES: dict[str, str] = {
    "keywords": "LightRAG retrieved with the model's keywords",
    "question": "the model gave no keywords; LightRAG searched with the question itself (its fallback)",
    "none": "the model gave no keywords and LightRAG returned no context (its fallback for long questions)",
    "no_match": "LightRAG found nothing (for the model's keywords, or for the question as its fallback)",
    "failed": "the query failed (e.g. the model's request failed)",
}


class LightRAGMissingError(OmneError, ImportError):
    """The lightrag-hku library is not installed (an optional extra)."""


def _lightrag() -> Any:
    try:
        import lightrag
    except ImportError as exc:
        raise LightRAGMissingError("the lightrag baseline needs the lightrag-hku library: "
                                   "pip install 'omne[lightrag]' (the dev extra has it too)") from exc
    return lightrag


def library_version() -> str:
    _lightrag()
    return importlib.metadata.version("lightrag-hku")


@contextmanager
def quiet_lightrag() -> Iterator[None]:
    """LightRAG's loggers at ERROR while it runs: it warns once per entity without a source chunk (every entity of a
    custom KG) and logs every query; what matters of it is counted in :class:`LightRAGSummary`."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class _EncoderTokenizer:
    """LightRAG's token counting with the index encoder's tokenizer. Locked: a fast tokenizer must not be called from
    several threads at once, and LightRAG counts tokens in worker threads; shared, not copied (LightRAG deep-copies
    its config)."""

    def __init__(self, encoder: Encoder) -> None:
        self._tokenizer = encoder.model.tokenizer
        self._lock = threading.Lock()

    def encode(self, content: str) -> list[int]:
        with self._lock:
            return list(self._tokenizer.encode(content, add_special_tokens=False, verbose=False))

    def decode(self, tokens: list[int]) -> str:
        with self._lock:
            return str(self._tokenizer.decode(tokens))

    def __deepcopy__(self, memo: dict[int, Any]) -> _EncoderTokenizer:
        return self


class _KeywordModel:
    """The evaluated model as LightRAG's LLM (it only extracts keywords here: the context is all that is asked
    for). LightRAG sends one request per question; those of the questions in flight go to the model in one
    ``complete_many``, as the rollouts batch their episodes: a batch goes when it is full (``batch_size``, or every
    question not yet asked: each asks once) or after :data:`BATCH_WAIT_S`. The model runs on the event loop's thread
    (a local backend is not called from two threads), so nothing else moves while it generates."""

    def __init__(self, client: ChatClient, max_tokens: int, seed: int, *, questions: int, batch_size: int) -> None:
        self.client, self.max_tokens, self.seed = client, max_tokens, seed
        self.questions, self.batch_size = questions, batch_size
        self.requests = 0
        self.batches: list[int] = []
        self._pending: list[tuple[ChatRequest, asyncio.Future[str]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def __call__(self, prompt: str, system_prompt: str | None = None,
                       history_messages: list[dict[str, str]] | None = None, **kwargs: Any) -> str:
        messages = [*([{"role": "system", "content": system_prompt}] if system_prompt else []),
                    *(history_messages or []), {"role": "user", "content": prompt}]
        request = ChatRequest(messages=messages, max_tokens=self.max_tokens, temperature=0.0, seed=self.seed,
                              json_mode="response_format" in kwargs, tag=KEYWORD_TAG)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            deadline = loop.time() + BATCH_WAIT_S
            full = max(1, min(self.batch_size, self.questions - self.requests))
            while len(self._pending) < full and loop.time() < deadline:
                await asyncio.sleep(0.005)
            batch, self._pending = self._pending, []
            self.requests += len(batch)
            self.batches.append(len(batch))
            try:
                results: list[Any] = self.client.complete_many([request for request, _ in batch])
            except Exception as exc:  # noqa: BLE001 - a waiting question must fail, never wait for ever
                results = [LLMError(f"{type(exc).__name__}: {exc}")] * len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # cancelled meanwhile
                    continue
                if isinstance(result, LLMError):
                    future.set_exception(result)
                else:
                    future.set_result(result.text)
            await asyncio.sleep(0)

    def __deepcopy__(self, memo: dict[int, Any]) -> _KeywordModel:
        return self  # LightRAG deep-copies its config; the model and its pending requests are one


async def _no_llm(*_: Any, **__: Any) -> str:
    raise RuntimeError("loading a graph into LightRAG asks no LLM")


def _rag(working_dir: Path, domain: str, encoder: Encoder, llm: Any, max_async: int = 1) -> Any:
    """A LightRAG instance over ``working_dir`` (the domain is its workspace: instances of several domains share
    LightRAG's process-wide state) with the project's encoder and ``llm`` (``max_async`` requests in flight); the LLM
    cache is off (the project's own cache is the client's, and the index folder is not written after its build)."""
    _lightrag()
    from lightrag import LightRAG
    from lightrag.utils import EmbeddingFunc, Tokenizer

    async def embed(texts: list[str], context: str = "document", **_: Any) -> np.ndarray:
        # the graph's texts go through the embeddings disk cache; keywords a model wrote do not (unbounded)
        return encoder.encode(list(texts), cache=context != "query")

    embedding = EmbeddingFunc(embedding_dim=encoder.dimension, func=embed,
                              max_token_size=int(encoder.model.max_seq_length), supports_asymmetric=True)
    return LightRAG(working_dir=str(working_dir), workspace=domain, llm_model_func=llm, embedding_func=embedding,
                    tokenizer=Tokenizer(encoder.model_id, _EncoderTokenizer(encoder)), enable_llm_cache=False,
                    llm_model_max_async=max_async,
                    embedding_batch_num=encoder.params.batch_size, embedding_func_max_async=1,
                    default_llm_timeout=NO_TIMEOUT_S, default_embedding_timeout=NO_TIMEOUT_S)


# --- the index --------------------------------------------------------------------------------------------------

class CustomKG(BaseModel):
    """The domain's graph as ``insert_custom_kg`` takes it, and what had to be left out."""

    entities: list[dict[str, Any]]
    relationships: list[dict[str, Any]]
    skipped: dict[str, int] = Field(default_factory=dict)


def custom_kg(artifacts: Path, domain: str) -> CustomKG:
    """The domain's built KG as LightRAG's entities and relationships.

    LightRAG's relations are undirected and its context shows only their descriptions, so a labelled (directed)
    relation's description starts with its triple, "Moon orbits Earth.", before its own text; relations of one
    pair are one LightRAG edge (their keywords and descriptions joined, weights summed), as LightRAG merges them.
    Names LightRAG's normalisation empties (e.g. "7": short numbers) and relations from an entity to itself
    (which LightRAG refuses) are left out and counted."""
    _lightrag()
    from lightrag.constants import GRAPH_FIELD_SEP
    from lightrag.utils import normalize_entity_name

    kg = read_kg(kg_dir(artifacts, domain))
    names = kg.entities["name"].to_list()
    usable = [bool(normalize_entity_name(name)) for name in names]
    entities = []
    for row, ok in zip(kg.entities.iter_rows(named=True), usable, strict=True):
        if ok:
            entity = {"entity_name": row["name"], "entity_type": row["type"] or "UNKNOWN"}
            entities.append(entity | ({"description": row["description"]} if row["description"] else {}))
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: Counter[str] = Counter(entities_unnamed=usable.count(False))
    for row in kg.relations.iter_rows(named=True):
        src, dst = names[row["src"]], names[row["dst"]]
        if not (usable[row["src"]] and usable[row["dst"]]):
            skipped["relations_unnamed_end"] += 1
            continue
        if normalize_entity_name(src) == normalize_entity_name(dst):
            skipped["relations_self_loop"] += 1
            continue
        keywords, own = row["keywords"] or "", row["description"] or ""
        fact = f"{src} {keywords} {dst}." if kg.directed and keywords else ""
        description = " ".join(part for part in (fact, own) if part) or f"{src} and {dst} are related."
        pair = (src, dst) if src <= dst else (dst, src)
        edge = edges.get(pair)
        weight = float(row["weight"]) if row["weight"] is not None else 1.0
        if edge is None:
            edges[pair] = {"src_id": src, "tgt_id": dst, "keywords": keywords, "description": description,
                           "weight": weight}
        else:
            edge["keywords"] = ", ".join(k for k in (edge["keywords"], keywords) if k)
            edge["description"] = f"{edge['description']}{GRAPH_FIELD_SEP}{description}"
            edge["weight"] += weight
    return CustomKG(entities=entities, relationships=list(edges.values()),
                    skipped={k: v for k, v in skipped.items() if v})


def build_lightrag_index(where: Params, domain: str, *, encoder: Encoder | None = None,
                         force: bool = False) -> BuildResult:
    """The domain's graph loaded into a LightRAG working dir (artifacts/lightrag/<domain>/), built once and reused
    while the KG files, the encoder, the library's version and :data:`LOADER_VERSION` are unchanged.
    ``where``: the params of the project whose KG it is (the KGQA workspace's for an external set)."""
    encoder = encoder or Encoder(where.index, cache_dir=embeddings_cache_dir(where.artifacts_dir))
    inputs = manifest_inputs(kg_dir(where.artifacts_dir, domain), where.root,
                             f"the KG of {domain} (run `omne kg build --domain {domain}`)")
    shaping = {"lightrag_hku": library_version(), "encoder": encoder.model_id, "loader_version": LOADER_VERSION}
    build = ArtifactBuild(lightrag_dir(where.artifacts_dir, domain), INDEX_KIND, inputs, shaping, domain=domain,
                          owned=True)
    if manifest := build.reusable(force):
        return build.result(manifest, skipped=True)
    graph = custom_kg(where.artifacts_dir, domain)
    started = time.perf_counter()

    async def load(folder: Path) -> None:
        rag = _rag(folder, domain, encoder, _no_llm)
        await rag.initialize_storages()
        try:
            await rag.ainsert_custom_kg({"entities": graph.entities, "relationships": graph.relationships})
        finally:
            await rag.finalize_storages()

    with build.writing() as draft, quiet_lightrag():
        asyncio.run(load(draft.folder))
        draft.record(rows={"entities": len(graph.entities), "relations": len(graph.relationships)},
                     metadata={"left_out": graph.skipped, "seconds": round(time.perf_counter() - started, 2)})
    log.info("%s: LightRAG index of %d entities, %d relations -> %s", domain, len(graph.entities),
             len(graph.relationships), build.folder)
    return build.result()


# --- retrieval --------------------------------------------------------------------------------------------------

class Retrieved(BaseModel):
    """LightRAG's answer to one question: the context (empty when it gave none) and how it got there."""

    context: str
    outcome: Outcome
    high_level: list[str] = Field(default_factory=list, description="the keywords LightRAG searched relations with")
    low_level: list[str] = Field(default_factory=list, description="... and entities with")


class LightRAGSummary(BaseModel):
    """How the LightRAG retrieval of an evaluation went (the report's manifest keeps it under ``lightrag``)."""

    library: str
    mode: str
    questions: int
    outcomes: dict[str, int] = Field(description=f"questions per outcome: {OUTCOMES}")
    empty_keyword_share: float = Field(description=(
        "share of the questions whose keyword reply gave LightRAG no keyword (outcomes question and none)"))
    keyword_requests: int
    keyword_batches: list[int] = Field(description="the keyword requests sent to the model together, batch by batch")
    indexes: dict[str, str] = Field(description="domain -> built | reused")
    seconds: float


class LightRAGRetrieval(BaseModel):
    contexts: dict[str, dict[str, Retrieved]] = Field(description="domain -> question -> what LightRAG retrieved")
    summary: LightRAGSummary

    def context(self, domain: str, question: str) -> str:
        return self.contexts[domain][question].context


def _query_param(settings: LightRAGParams) -> Any:
    from lightrag import QueryParam

    return QueryParam(mode=settings.mode, only_need_context=True, top_k=settings.top_k,
                      max_entity_tokens=settings.entity_tokens, max_relation_tokens=settings.relation_tokens,
                      enable_rerank=False)


def _retrieved(question: str, result: dict[str, Any]) -> Retrieved:
    """Read ``aquery_llm``'s result: its context, keywords and which of LightRAG's paths it took."""
    if "status" not in result:  # kg_query's canned reply: no keyword, and a question too long to stand for one
        return Retrieved(context="", outcome="none")
    if result["status"] != "success":
        failed = str(result.get("message", "")).startswith("Query failed")
        return Retrieved(context="", outcome="failed" if failed else "no_match")
    keywords = (result.get("metadata") or {}).get("keywords") or {}
    high, low = list(keywords.get("high_level") or []), list(keywords.get("low_level") or [])
    outcome: Outcome = "question" if not high and low == [question.strip()] else "keywords"
    context = str((result.get("llm_response") or {}).get("content") or "").strip()
    return Retrieved(context=context, outcome=outcome, high_level=high, low_level=low)


def lightrag_contexts(params: Params, where: Params, client: ChatClient, questions: dict[str, list[str]], *,
                      encoder: Encoder | None = None, progress: bool = False) -> LightRAGRetrieval:
    """LightRAG's context for each question (``questions``: domain -> questions), its keywords written by
    ``client`` (the evaluated model); the domains' indexes are built first when missing or stale. ``params``:
    the evaluation's (lightrag, agent.batch_size: questions in flight, eval.seed); ``where``: the project whose KGs
    the questions are about."""
    settings = params.lightrag
    encoder = encoder or Encoder(where.index, cache_dir=embeddings_cache_dir(where.artifacts_dir))
    started = time.perf_counter()
    indexes = {d: "reused" if build_lightrag_index(where, d, encoder=encoder).skipped else "built"
               for d in tqdm(questions, desc="lightrag indexes", unit="domain", disable=not progress)}
    total = sum(len(set(qs)) for qs in questions.values())
    model = _KeywordModel(client, settings.keyword_tokens, params.eval.seed, questions=total,
                          batch_size=params.agent.batch_size)

    async def ask_all() -> dict[str, dict[str, Retrieved]]:
        rags = {d: _rag(lightrag_dir(where.artifacts_dir, d), d, encoder, model, params.agent.batch_size)
                for d in questions}
        in_flight = asyncio.Semaphore(params.agent.batch_size)
        bar = tqdm(total=total, desc="lightrag", unit="q", disable=not progress)

        async def ask(domain: str, question: str) -> Retrieved:
            async with in_flight:
                try:
                    result = await rags[domain].aquery_llm(question, _query_param(settings))
                except ValueError as exc:  # a query LightRAG refuses (empty, under 3 characters): no context
                    result = {"status": "failure", "message": f"Query failed: {exc}"}
            bar.update()
            return _retrieved(question, result)

        try:
            for rag in rags.values():
                await rag.initialize_storages()
            pairs = [(d, q) for d, qs in questions.items() for q in dict.fromkeys(qs)]
            found = await asyncio.gather(*(ask(d, q) for d, q in pairs))
        finally:
            bar.close()
            for rag in rags.values():
                await rag.finalize_storages()
        contexts: dict[str, dict[str, Retrieved]] = {d: {} for d in questions}
        for (domain, question), retrieved in zip(pairs, found, strict=True):
            contexts[domain][question] = retrieved
        return contexts

    with quiet_lightrag():
        contexts = asyncio.run(ask_all())
    outcomes = Counter(r.outcome for by_question in contexts.values() for r in by_question.values())
    summary = LightRAGSummary(library=library_version(), mode=settings.mode, questions=total,
                              outcomes={o: outcomes.get(o, 0) for o in OUTCOMES},
                              empty_keyword_share=round((outcomes["question"] + outcomes["none"]) / max(total, 1), 4),
                              keyword_requests=model.requests, keyword_batches=model.batches, indexes=indexes,
                              seconds=round(time.perf_counter() - started, 2))
    return LightRAGRetrieval(contexts=contexts, summary=summary)


def with_lightrag_contexts(params: Params, toolbox: KGToolbox, client: ChatClient, tasks: list[Task], *,
                           progress: bool = False) -> tuple[list[Task], dict[str, Any]]:
    """``tasks`` with LightRAG's context of each question (asked once, whatever its samples), and the summary of
    how the retrieval went; the KGs are those ``toolbox`` answers from (a KGQA set's workspace included)."""
    questions: dict[str, list[str]] = {}
    for task in tasks:
        questions.setdefault(task.domain, []).append(task.question)
    retrieval = lightrag_contexts(params, toolbox.params, client, questions, encoder=toolbox.encoder,
                                  progress=progress)
    summary = retrieval.summary
    log.info("lightrag (%s): %d questions, %s; no keyword from the model for %.0f%%", summary.mode,
             summary.questions, ", ".join(f"{k} {v}" for k, v in summary.outcomes.items() if v),
             100 * summary.empty_keyword_share)
    return ([t.model_copy(update={"context": retrieval.context(t.domain, t.question)}) for t in tasks],
            summary.model_dump())
