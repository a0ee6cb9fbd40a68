"""External KGQA question sets (WebQSP, CWQ, GrailQA, QALD, ...): load them, build their KG, roll the
agent out on a per-question 2-hop subgraph around the topic entities, as the seed systems evaluate.

A KGQA file holds questions with their topic entities and one or more answers; a triple file (any
format of :mod:`pipelines.kg.importers`) holds the KG they are asked about. ``omne eval --kgqa FILE
--triples FILE`` then:

1. reads the questions (:func:`load_kgqa`; the documented simple form, one JSON object per line,
   ``{"id": "q1", "question": "...", "topic_entities": ["..."], "answers": ["...", "..."]}``, and the
   layouts of the common sets, see :func:`read_kgqa`);
2. builds the triple file into a KG domain with the ordinary import/build steps (KG + entity index,
   skipped when unchanged), in a workspace of its own, ``artifacts/kgqa/`` (its own registry
   ``artifacts/kgqa/domains.yaml``, KGs and indexes): an external evaluation KG never joins the
   training pipeline (``omne run``, DVC, Dagster read only ``kg_assets/domains.yaml``), so no QA
   data is generated from the KG of a test set;
3. resolves each question's topic entities and answers to KG entities (trying aliases and ids such
   as Freebase mids), and restricts every tool of its episode to the entities within 2 hops of the
   topic entities (:class:`~pipelines.agent.tools.Scope`, carried by each tool call of the
   episode): the rest of the KG is "not found";
4. puts the topic entities in the prompt and scores answer sets: Hit@1 and F1 are the headline
   numbers for these sets (bucket and hops are None, so those groups stay empty).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict

from pipelines.agent.client import ToolClient
from pipelines.agent.kg_view import DomainGraph
from pipelines.agent.protocols import Protocol
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.server import CallRequest
from pipelines.agent.tools import KGToolbox, Scope, ToolCall, ToolResult, subgraph_entities
from pipelines.config import Params
from pipelines.domains import Domain, Registry, SourceSpec, add_domain, check_domain_name, load_registry
from pipelines.errors import ArtifactMissingError, KGSourceError, RegistryError
from pipelines.eval.contexts import retrieval_context, scoped_graph_context
from pipelines.eval.source import QuestionSource
from pipelines.kg.model import normalise_key
from pipelines.layout import embeddings_cache_dir, kg_dir, kgqa_workspace
from pipelines.llm.base import ChatClient
from pipelines.manifest import read_manifest, relative_path, sha256_file

log = logging.getLogger(__name__)

DEFAULT_HOPS = 2
MAX_SEEDS = 100  # Scope.seeds limit

ID_KEYS = ("id", "ID", "QuestionId", "qid", "question_id", "_id")
QUESTION_KEYS = ("question", "RawQuestion", "ProcessedQuestion", "machine_question", "utterance")
TOPIC_KEYS = ("topic_entities", "topic_entity", "TopicEntityName", "q_entity")
ANSWER_KEYS = ("answers", "answer", "a_entity", "Answers")
LIST_KEYS = ("Questions", "questions", "data", "items")  # where a .json file wraps its records
# inside an entity/answer object: its name, then ids and other spellings it may have in the KG
NAME_KEYS = ("name", "entity_name", "EntityName", "TopicEntityName", "answer", "friendly_name", "label", "text",
             "string")
ALT_KEYS = ("id", "mid", "entity_id", "answer_id", "answer_argument", "AnswerArgument", "TopicEntityMid", "uri",
            "kb_id")


class KGQAFormatError(KGSourceError):
    """A KGQA file, or one of its records, that cannot be read; the message names file:line and what is wrong."""


class KGQAItem(BaseModel):
    """One external question: its topic entities and gold answers as the file names them."""

    model_config = ConfigDict(extra="forbid")
    id: str
    question: str
    topic_entities: list[str]
    answers: list[str]
    alternatives: dict[str, list[str]] = {}  # a topic entity or answer -> other names / ids (aliases, mids, URIs)
    origin: str = ""  # file:line of the record


class KGQAFile(BaseModel):
    """What :func:`read_kgqa` made of a file: the questions, and the records skipped with the reason."""

    items: list[KGQAItem]
    skipped: list[str] = []  # "file:line: reason" (no answer, a yes/no question, no topic entity)


class _Skip(Exception):  # noqa: N818 - control flow: a readable record that cannot be evaluated
    pass


class _Missing(Exception):  # noqa: N818 - control flow: a record that cannot be read
    pass


# ----- reading ----------------------------------------------------------------------------------------

def load_kgqa(path: str | Path) -> list[KGQAItem]:
    """The questions of a KGQA file (see :func:`read_kgqa`); skipped records are logged."""
    result = read_kgqa(path)
    if result.skipped:
        log.warning("%s: %d record(s) skipped (first: %s)", path, len(result.skipped), result.skipped[0])
    return result.items


def read_kgqa(path: str | Path) -> KGQAFile:
    """Read a KGQA file: JSON lines (``.jsonl``/``.ndjson``), JSON (a list of records, or an object that
    holds it under ``Questions`` / ``questions`` / ``data``, as WebQSP and QALD do) or parquet.

    Each record needs a question, topic entities and answers; the field names of the common sets are
    understood:

    - simple form: ``question``, ``topic_entities`` (names), ``answers`` (names), optional ``id``;
    - WebQSP: ``QuestionId``, ``RawQuestion`` / ``ProcessedQuestion``, ``Parses[].TopicEntityName`` (and
      ``TopicEntityMid``), ``Parses[].Answers[].EntityName`` (or ``AnswerArgument`` for values); the union
      over parses;
    - CWQ: ``ID``, ``question`` / ``machine_question``, ``answers[].answer`` with ``answer_id`` and
      ``aliases``; topic entities from ``topic_entity`` (``{mid: name}``, as the preprocessed releases give
      them) or else the Freebase ids in ``sparql``;
    - GrailQA: ``qid``, ``question``, ``answer[].entity_name`` / ``answer_argument``, topic entities from the
      entity nodes of ``graph_query`` (``friendly_name``, ``id``);
    - QALD: ``question[]`` (the ``en`` string), ``answers[].results.bindings`` (URIs become names: the
      last path segment, ``_`` as spaces), topic entities from the DBpedia/Wikidata resources of
      ``query.sparql`` unless ``topic_entities`` is given;
    - RoG-style (WebQSP/CWQ on Hugging Face): ``q_entity``, ``answer`` / ``a_entity``.

    A record without a question, answer field or any topic-entity field is an error naming file:line
    and what is missing; a readable record that cannot be scored (no answer, a yes/no question, no
    topic entity) is skipped and listed in ``skipped``.
    """
    path = Path(path)
    if not path.is_file():
        raise KGQAFormatError(f"{path}: KGQA file not found")
    items: list[KGQAItem] = []
    skipped: list[str] = []
    seen: dict[str, str] = {}
    for number, (origin, record) in enumerate(_records(path), start=1):
        where = f"{path}:{origin}"
        if not isinstance(record, dict):
            raise KGQAFormatError(f"{where}: a JSON {type(record).__name__}, expected an object")
        try:
            item = _item(record, f"{path.stem}-{number}", f"{path.name}:{origin}")
        except _Missing as exc:
            raise KGQAFormatError(f"{where}: {exc}") from None
        except _Skip as exc:
            skipped.append(f"{path.name}:{origin}: {exc}")
            continue
        if item.id in seen:
            raise KGQAFormatError(f"{where}: id {item.id!r} already used by {seen[item.id]}")
        seen[item.id] = item.origin
        items.append(item)
    if not items:
        detail = f" ({len(skipped)} skipped, first: {skipped[0]})" if skipped else ""
        raise KGQAFormatError(f"{path}: no questions{detail}")
    return KGQAFile(items=items, skipped=skipped)


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """(origin, record) of every record: origin is "line N" (or "row N" for parquet)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import polars as pl

        try:
            frame = pl.read_parquet(path)
        except Exception as exc:  # polars raises several error types for corrupt files
            raise KGQAFormatError(f"{path}: not a readable parquet file: {exc}") from None
        keep = [c for c in frame.columns if c != "graph"]  # RoG's per-question subgraph: not needed here
        for row, record in enumerate(frame.select(keep).iter_rows(named=True), start=1):
            yield f"row {row}", record
        return
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KGQAFormatError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if suffix in (".jsonl", ".ndjson"):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield str(number), json.loads(line)
            except json.JSONDecodeError as exc:
                raise KGQAFormatError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
        return
    if suffix != ".json":
        raise KGQAFormatError(f"{path}: unsupported KGQA file format {suffix!r}; use .json, .jsonl or .parquet")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KGQAFormatError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    key = None
    if isinstance(data, dict):
        key = next((k for k in LIST_KEYS if isinstance(data.get(k), list)), None)
        if key is None:
            raise KGQAFormatError(f"{path}: a JSON object without a list of questions (expected a list, or one "
                                  f"under {' / '.join(LIST_KEYS)})")
        data = data[key]
    if not isinstance(data, list):
        raise KGQAFormatError(f"{path}: expected a JSON list of questions, found a {type(data).__name__}")
    lines = _record_lines(text, key, len(data))
    for index, record in enumerate(data):
        yield (str(lines[index]) if lines else f"record {index + 1}"), record


def _record_lines(text: str, key: str | None, count: int) -> list[int] | None:
    """The line on which each record of the JSON list starts (None when they cannot be located)."""
    if key is None:
        start = text.find("[")
    else:
        found = re.search(rf'"{re.escape(key)}"\s*:\s*\[', text)
        start = found.end() - 1 if found else -1
    if start < 0:
        return None
    decoder, position, lines, line = json.JSONDecoder(), start + 1, [], 1 + text.count("\n", 0, start + 1)
    try:
        while len(lines) < count:
            while text[position] in " \t\r\n,":
                if text[position] == "\n":
                    line += 1
                position += 1
            lines.append(line)
            _, end = decoder.raw_decode(text, position)
            line += text.count("\n", position, end)
            position = end
    except (IndexError, json.JSONDecodeError):
        return None
    return lines


# ----- one record -------------------------------------------------------------------------------------

_URI = re.compile(r"^https?://\S+$")
_FREEBASE_ID = re.compile(r"\bns:([mg]\.[0-9a-z_]+)\b")
_RESOURCE = re.compile(r"<(https?://(?:[a-z]+\.)?dbpedia\.org/resource/[^>\s]+|http://www\.wikidata\.org/entity/Q\d+)>"
                       r"|\b(?:dbr|res):([^\s;.,(){}]+(?:\.[^\s;.,(){}]+)*)|\bwd:(Q\d+)\b")


def _label(uri: str) -> str:
    """A readable name for a resource URI: its last path segment, percent-decoded, '_' as spaces."""
    tail = uri.rstrip("/").rsplit("/", 1)[-1].split("#")[-1]
    return unquote(tail).replace("_", " ").strip() or uri


class _Names:
    """Entities in order of first mention, deduplicated by normalised name, each with its alternatives."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # key -> name as first written
        self.alternatives: dict[str, list[str]] = {}

    def add(self, name: object, alternatives: Iterable[object] = ()) -> None:
        text = str(name).strip() if name is not None and not isinstance(name, (dict, list)) else ""
        alts = [str(a).strip() for a in alternatives if a is not None and not isinstance(a, (dict, list))]
        if text and _URI.match(text):
            text, alts = _label(text), [text, *alts]
        if not text:
            if not any(alts):
                return
            text, alts = alts[0], alts[1:]
        key = normalise_key(text)
        if not key:
            return
        if key not in self.names:
            self.names[key] = text
            self.alternatives[text] = []
        known = self.alternatives[self.names[key]]
        known.extend(a for a in alts if a and a != self.names[key] and a not in known)

    def add_value(self, value: Any) -> None:
        """A name, a list of them, an entity object, or a ``{id: name}`` mapping."""
        if value is None:
            return
        if isinstance(value, list):
            for part in value:
                self.add_value(part)
            return
        if isinstance(value, dict):
            named = [value[k] for k in NAME_KEYS if _has_scalar(value, k)]
            alts = [value[k] for k in ALT_KEYS if _has_scalar(value, k)]
            aliases = value.get("aliases")
            alts += [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []
            if named or alts:
                self.add(named[0] if named else None, alts)
                return
            for key, name in value.items():  # {"m.02mjmr": "Barack Obama"}
                if isinstance(name, str):
                    self.add(name, [key])
            return
        if isinstance(value, bool):
            return  # a yes/no value is not an entity
        self.add(value)

    def __bool__(self) -> bool:
        return bool(self.names)

    @property
    def listed(self) -> list[str]:
        return list(self.names.values())


def _has_scalar(record: dict, key: str) -> bool:
    """Whether ``record[key]`` is a non-blank name or id (a string or number)."""
    return isinstance(record.get(key), (str, int, float)) and bool(str(record[key]).strip())


def _question(record: dict) -> str:
    for key in QUESTION_KEYS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list):  # QALD: [{"language": "en", "string": "..."}, ...]
            strings = [(q.get("language"), q.get("string")) for q in value if isinstance(q, dict)]
            strings = [(lang, s.strip()) for lang, s in strings if isinstance(s, str) and s.strip()]
            english = [s for lang, s in strings if lang in (None, "en")]
            if english or strings:
                return (english or [s for _, s in strings])[0]
    raise _Missing(f"no question (expected a non-empty one of: {', '.join(QUESTION_KEYS)}, or QALD's "
                   "question[].string)")


def _sparql(record: dict) -> str:
    parts = [record.get("sparql"), record.get("Sparql")]
    query = record.get("query")
    parts.append(query.get("sparql") if isinstance(query, dict) else query)
    for parse in record.get("Parses") or []:
        if isinstance(parse, dict):
            parts.append(parse.get("Sparql"))
    return "\n".join(p for p in parts if isinstance(p, str))


def _topics(record: dict) -> _Names:
    topics, present = _Names(), False
    for key in TOPIC_KEYS:
        if key in record:
            present = True
            topics.add_value(record[key])
    for parse in record.get("Parses") or []:  # WebQSP
        if isinstance(parse, dict) and ("TopicEntityName" in parse or "TopicEntityMid" in parse):
            present = True
            topics.add(parse.get("TopicEntityName"), [parse.get("TopicEntityMid")])
    graph_query = record.get("graph_query")
    if isinstance(graph_query, dict) and isinstance(graph_query.get("nodes"), list):  # GrailQA
        present = True
        for node in graph_query["nodes"]:
            if isinstance(node, dict) and node.get("node_type") == "entity":
                topics.add(node.get("friendly_name"), [node.get("id")])
    if not topics and (query := _sparql(record)):
        present = True
        for mid in dict.fromkeys(_FREEBASE_ID.findall(query)):
            topics.add(mid)
        for uri, short, wikidata in _RESOURCE.findall(query):
            if uri:
                topics.add(uri)
            elif short:
                topics.add(_label(short), [short])
            else:
                topics.add(wikidata)
    if not present:
        raise _Missing(f"no topic entities (expected one of: {', '.join(TOPIC_KEYS)}, WebQSP's "
                       "Parses[].TopicEntityName, GrailQA's graph_query, or a SPARQL query naming them)")
    if not topics:
        raise _Skip("no topic entity")
    return topics


def _answers(record: dict) -> _Names:
    answers, present = _Names(), False
    key = next((k for k in ANSWER_KEYS if k in record), None)
    if key is not None:
        present = True
        value = record[key]
        if isinstance(value, list) and value and all(isinstance(v, dict) and ("results" in v or "boolean" in v)
                                                    for v in value):  # QALD
            for block in value:
                if "boolean" in block:
                    raise _Skip("a yes/no question (boolean answer)")
                for binding in (block.get("results") or {}).get("bindings") or []:
                    for cell in binding.values() if isinstance(binding, dict) else []:
                        if isinstance(cell, dict):
                            answers.add(cell.get("value"))
        else:
            answers.add_value(value)
    for parse in record.get("Parses") or []:  # WebQSP: the union of every parse's answers
        if isinstance(parse, dict) and "Answers" in parse:
            present = True
            answers.add_value(parse.get("Answers"))
    if not present:
        raise _Missing(f"no answers (expected one of: {', '.join(ANSWER_KEYS)}, or WebQSP's Parses[].Answers)")
    if not answers:
        raise _Skip("no answer")
    return answers


def _item(record: dict, default_id: str, origin: str) -> KGQAItem:
    question = _question(record)
    answers = _answers(record)
    topics = _topics(record)
    raw_id = next((record[k] for k in ID_KEYS if isinstance(record.get(k), (str, int)) and str(record[k]).strip()),
                  default_id)
    alternatives = {name: alts for source in (topics, answers) for name, alts in source.alternatives.items() if alts}
    return KGQAItem(id=str(raw_id).strip(), question=question, topic_entities=topics.listed, answers=answers.listed,
                    alternatives=alternatives, origin=origin)


# ----- the KG of a question set -------------------------------------------------------------------------

def slug(text: str) -> str:
    """A domain name from a file name: ASCII, lower case, runs of anything else as one '_'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "_", ascii_text.lower()).strip("_") or "kgqa"


def kgqa_params(params: Params) -> Params:
    """``params`` pointed at the KGQA workspace: artifacts/kgqa/ with its own domains.yaml, kg/ and index/."""
    base = kgqa_workspace(Path(params.paths.artifacts))
    paths = params.paths.model_copy(update={"artifacts": base.as_posix(),
                                            "registry": (base / "domains.yaml").as_posix()})
    return params.model_copy(update={"paths": paths})


def build_kgqa_domain(params: Params, triples: str | Path | None, name: str | None = None) -> tuple[Params, str]:
    """Build (or reuse, when unchanged) the KG and entity index of a KGQA set's triple file.

    The domain is ``name`` or a slug of the triple file's name, registered in the KGQA workspace
    (:func:`kgqa_params`) with the same import/build steps as ``omne kg import``. Without ``triples``,
    ``name`` must be a domain built before: one of the workspace, or a built domain of the main
    registry. Returns the params to load the domain with, and its name.
    """
    from pipelines.kg.build import build_entity_index, build_knowledge_graph
    from pipelines.kg.embed import Encoder

    workspace = kgqa_params(params)
    if triples is None:
        if name is None:
            raise KGSourceError("a KGQA evaluation needs the triple file of its KG (--triples), or a built domain "
                                "(--kgqa-domain)")
        check_domain_name(name)
        for candidate in (workspace, params):
            if candidate.registry_path.is_file() and name in load_registry(candidate.registry_path).names:
                if read_manifest(kg_dir(candidate.artifacts_dir, name)) is None:
                    raise ArtifactMissingError(f"domain {name!r} is registered but its KG is not built "
                                               "(give --triples, or run `omne kg build`)")
                return candidate, name
        raise RegistryError(f"unknown KGQA domain {name!r}: give the triple file of its KG (--triples)")
    path = Path(triples)
    if not path.is_file():
        raise KGSourceError(f"{path}: triples file not found")
    name = check_domain_name(name or slug(path.stem))
    domain = Domain(name=name, description=f"External KGQA knowledge graph ({path.name}); evaluation only.",
                    source=SourceSpec(kind="triples", path=relative_path(path, params.root)))
    registry = load_registry(workspace.registry_path) if workspace.registry_path.is_file() else Registry()
    if domain not in registry.domains:
        if name in registry.names:
            log.warning("KGQA domain %s now comes from %s (was %s)", name, domain.source.path,
                        registry.get(name).source.path)
        workspace.registry_path.parent.mkdir(parents=True, exist_ok=True)
        add_domain(workspace.registry_path, domain, replace=True)
    result = build_knowledge_graph(domain, workspace)
    encoder = Encoder(params.index, cache_dir=embeddings_cache_dir(params.artifacts_dir))  # the shared cache
    build_entity_index(name, workspace, encoder=encoder)
    log.info("KGQA domain %s: %s (%d entities)", name, "reused" if result.skipped else "built",
             result.manifest.rows["entities"])
    return workspace, name


# ----- questions on the KG ------------------------------------------------------------------------------

@dataclass
class KGQAQuestion:
    """A question resolved on the KG: the topic entities and answers as KG names, and its subgraph."""

    item: KGQAItem
    topics: list[str]  # resolved topic entities (KG names): the scope's seeds
    prompt_topics: list[str]  # what the prompt names: KG names, or the file's names when not in the KG
    answers: list[str]  # gold answers, as KG names where they are KG entities
    subgraph: frozenset[int]
    answer_in_kg: bool
    answer_in_subgraph: bool
    hops: int = DEFAULT_HOPS

    @property
    def scope(self) -> Scope:
        return Scope(seeds=self.topics[:MAX_SEEDS], hops=self.hops)


def _find(graph: DomainGraph, item: KGQAItem, name: str) -> int | None:
    for candidate in (name, *item.alternatives.get(name, [])):
        found = graph.lookup(candidate)
        if found is not None:
            return found
    return None


def resolve_question(graph: DomainGraph, item: KGQAItem, hops: int = DEFAULT_HOPS) -> KGQAQuestion:
    """Map a question's topic entities and answers to KG entities and compute its ``hops`` subgraph."""
    topic_ids = [_find(graph, item, name) for name in item.topic_entities]
    topics = list(dict.fromkeys(graph.names[i] for i in topic_ids if i is not None))
    prompt = list(dict.fromkeys(graph.names[i] if i is not None else name
                                for name, i in zip(item.topic_entities, topic_ids, strict=True)))
    subgraph = subgraph_entities(graph, (i for i in topic_ids if i is not None), hops)
    answer_ids = [_find(graph, item, name) for name in item.answers]
    answers = list(dict.fromkeys(graph.names[i] if i is not None else name
                                 for name, i in zip(item.answers, answer_ids, strict=True)))
    found = [i for i in answer_ids if i is not None]
    return KGQAQuestion(item=item, topics=topics, prompt_topics=prompt, answers=answers, subgraph=subgraph,
                        answer_in_kg=bool(found), answer_in_subgraph=any(i in subgraph for i in found),
                        hops=hops)


def stable_subset(items: list[KGQAItem], limit: int | None, seed: int) -> list[KGQAItem]:
    """Up to ``limit`` questions chosen by a seeded hash of their ids (the same in every run), in file order."""
    if limit is None or limit >= len(items):
        return items
    rank = sorted(items, key=lambda item: hashlib.sha256(f"{seed}:{item.id}".encode()).hexdigest())
    chosen = {item.id for item in rank[:limit]}
    return [item for item in items if item.id in chosen]


@dataclass
class KGQASet(QuestionSource):
    """A KGQA file prepared for evaluation: its domain loaded, its questions resolved and scoped.

    As a :class:`QuestionSource` its tasks name the topic entities in the prompt, its engine restricts
    each episode's tools to the question's subgraph, and the report's params gain its coverage summary.
    """

    path: Path
    domain: str
    params: Params  # where the domain lives (the KGQA workspace, or the main project)
    toolbox: KGToolbox
    questions: list[KGQAQuestion]
    hops: int
    skipped: list[str] = field(default_factory=list)
    total: int = 0  # questions in the file (before --limit)
    limit: int | None = None  # the number of questions asked for (a stable sample of the file)

    @property
    def split(self) -> str:
        """The label that stands for the split in metrics and the report name."""
        return f"kgqa-{slug(self.path.stem)}"

    @property
    def scopes(self) -> dict[str, Scope]:
        return {q.item.id: q.scope for q in self.questions}

    def summary(self, root: Path) -> dict[str, Any]:
        """What the report records about the set: coverage of topic entities and answers by the KG."""
        n = len(self.questions) or 1
        return {
            "file": relative_path(self.path, root), "domain": self.domain, "hops": self.hops,
            "questions": len(self.questions), "questions_in_file": self.total, "skipped": len(self.skipped),
            "topic_found": round(sum(bool(q.topics) for q in self.questions) / n, 4),
            "answer_in_kg": round(sum(q.answer_in_kg for q in self.questions) / n, 4),
            # the share of questions answerable inside the scope: an upper bound on Hit@1
            "answer_in_subgraph": round(sum(q.answer_in_subgraph for q in self.questions) / n, 4),
            "subgraph_entities_mean": round(sum(len(q.subgraph) for q in self.questions) / n, 1),
        }

    def inputs(self, root: Path) -> dict[str, str]:
        """path -> sha256 of what the evaluation read: the KGQA file and the KG's data files."""
        inputs = {relative_path(self.path, root): sha256_file(self.path)}
        folder = kg_dir(self.params.artifacts_dir, self.domain)
        manifest = read_manifest(folder)
        for name, sha in (manifest.files.items() if manifest else []):
            inputs[relative_path(folder / name, root)] = sha
        return inputs

    def report_params(self, root: Path) -> dict[str, Any]:
        """The report records the set's coverage summary under ``kgqa``."""
        return {"kgqa": self.summary(root)}

    def tasks(self, params: Params, baseline: str | None, samples: int) -> list[Task]:
        """One task per question and sample: the topic entities in the prompt, the gold answers from the file."""
        graph = self.toolbox.graph(self.domain)
        tasks = []
        for question in self.questions:
            item, context = question.item, ""
            if baseline == "retrieval":
                context = retrieval_context(self.toolbox, item.question, self.domain, params.eval.retrieval_top_k)
            elif baseline == "graph":
                context = scoped_graph_context(graph, question.topics, question.subgraph,
                                               params.eval.graph_max_triples)
            for sample in range(samples):
                tasks.append(Task(qa_id=item.id, domain=self.domain, question=item.question,
                                  gold_answers=question.answers, topic_entities=question.prompt_topics or None,
                                  context=context, sample=sample))
        return tasks

    def engine(self, client: ChatClient, protocol: Protocol, tools: ToolClient | None, params: RolloutParams,
               *, name: str | None = None) -> ScopedRolloutEngine:
        """The engine that restricts each episode's tools to its question's subgraph."""
        return ScopedRolloutEngine(client, protocol, tools, params, scopes=self.scopes, name=name)


def prepare_kgqa(params: Params, kgqa: str | Path, *, triples: str | Path | None = None, domain: str | None = None,
                 hops: int = DEFAULT_HOPS, limit: int | None = None, seed: int = 0) -> KGQASet:
    """Read a KGQA file, build (or reuse) the KG of its triple file, resolve and scope its questions."""
    if not 0 <= hops <= 4:
        raise ValueError(f"hops must be between 0 and 4, not {hops}")
    read = read_kgqa(kgqa)
    where, name = build_kgqa_domain(params, triples, domain)
    toolbox = KGToolbox(where, [name])
    graph = toolbox.graph(name)
    items = stable_subset(read.items, limit, seed)
    questions = [resolve_question(graph, item, hops) for item in items]
    missing = sum(not q.topics for q in questions)
    if missing:
        log.warning("%s: %d of %d questions have no topic entity in the KG %r", kgqa, missing, len(questions), name)
    return KGQASet(path=Path(kgqa), domain=name, params=where, toolbox=toolbox, questions=questions, hops=hops,
                   skipped=read.skipped, total=len(read.items), limit=limit)


# ----- rollouts restricted to each question's subgraph --------------------------------------------------------

class ScopedToolClient:
    """A tool client whose calls carry their episode's :class:`Scope` (in-process or over HTTP alike)."""

    def __init__(self, inner: ToolClient) -> None:
        self.inner = inner
        self.scopes: dict[str, Scope] = {}  # episode id -> scope

    def call(self, call: str | dict[str, Any] | ToolCall, *, graph_type: str | None = None,
             episode_id: str | None = None, question: str | None = None) -> ToolResult:
        scope = self.scopes.get(episode_id) if episode_id is not None else None
        return self.batch([CallRequest(call=call.model_dump() if isinstance(call, ToolCall) else call,
                                       graph_type=graph_type, episode_id=episode_id, scope=scope,
                                       question=question)])[0]

    def batch(self, requests: list[CallRequest]) -> list[ToolResult]:
        scoped = [r.model_copy(update={"scope": self.scopes[r.episode_id]})
                  if r.episode_id is not None and r.episode_id in self.scopes else r for r in requests]
        return self.inner.batch(scoped)


class ScopedRolloutEngine(RolloutEngine):
    """The rollout engine with each task's tools restricted to a scope (``scopes``: qa_id -> Scope).

    Only the episode's start differs: it registers the episode's scope with a :class:`ScopedToolClient`
    around the tool client, which adds it to every call of that episode. Tasks without a scope see the
    whole graph; the ordinary engine is untouched (no cost on the normal path).
    """

    def __init__(self, client: ChatClient, protocol: Protocol, tools: ToolClient | None, params: RolloutParams,
                 *, scopes: Mapping[str, Scope], name: str | None = None) -> None:
        super().__init__(client, protocol, ScopedToolClient(tools) if tools is not None else None, params, name=name)
        self.scopes = dict(scopes)

    def _start(self, task: Task):  # noqa: ANN202 - the engine's private episode type
        episode = super()._start(task)
        scope = self.scopes.get(task.qa_id)
        if scope is not None and isinstance(self.tools, ScopedToolClient):
            self.tools.scopes[episode.episode_id] = scope
        return episode

    def run(self, tasks: list[Task], *, progress: bool = True) -> list:  # noqa: D102
        try:
            return super().run(tasks, progress=progress)
        finally:
            if isinstance(self.tools, ScopedToolClient):
                self.tools.scopes.clear()
