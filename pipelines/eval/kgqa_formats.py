"""The file formats of external KGQA question sets (WebQSP, CWQ, GrailQA, QALD, RoG-style parquet, and the
documented simple form): :func:`read_kgqa` turns a file into :class:`KGQAItem` records (a question, its topic
entities, its answers and their other names), naming file:line when a record cannot be read.

Apart from the KG workspace (:mod:`pipelines.eval.kgqa_workspace`) and the scoped evaluation
(:mod:`pipelines.eval.kgqa`): reading a file needs no KG, no params and no model.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict

from pipelines.errors import KGSourceError
from pipelines.kg.model import normalise_key

log = logging.getLogger(__name__)

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
