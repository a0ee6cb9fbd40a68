"""Text -> KG extraction for ``text`` sources: chunk the files, ask an LLM for records, parse them.

This is our own implementation of what LightRAG does when it builds a graph (we do not drive the
``lightrag-hku`` package: it needs its own LLM/embedding plumbing and storage, while this runs on
our ``ChatClient``, its cache and concurrency, and our RawGraph/assemble_graph merging):

* ``chunk_text`` cuts a file into overlapping token windows (LightRAG's 1200/100 by default),
  ending them on paragraph or sentence boundaries where it can;
* one chat request per chunk asks for LightRAG-style ``("entity"<|>…)`` / ``("relationship"<|>…)``
  records, or for EoG's simpler ``head | relation | tail`` lines;
* the parsers accept what models really write (broken parentheses, stray quotes, ``|`` for ``<|>``,
  records over several lines, bullets, fences, prose) and turn every record they must drop into a
  problem string that names the file, chunk and record, instead of raising;
* duplicates across chunks are merged by ``assemble_graph`` (same normalised key, descriptions joined).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from pipelines.domains import TEXT_SUFFIXES, SourceSpec
from pipelines.errors import KGSourceError
from pipelines.kg.importers import _check_utf8, _require_file
from pipelines.kg.model import RAW_ENTITY_SCHEMA, RAW_RELATION_SCHEMA, RawGraph, normalise_key
from pipelines.llm.base import ChatClient, ChatReply, ChatRequest, LLMError

log = logging.getLogger(__name__)

EXTRACT_TAG = "kg.extract"
EXTRACT_MAX_TOKENS = 4096  # a dense 1200-token chunk can yield well over 1024 tokens of records
DEFAULT_ENTITY_TYPES = ("person", "organization", "location", "event", "concept", "artifact")
DEFAULT_STRENGTH = 1.0
MAX_PROBLEMS_KEPT = 50  # problem strings kept in the summary (the count is always exact)

# ----------------------------------------------------------------------------------------- chunking

_TOKEN = re.compile(r"\w+|[^\w\s]")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")
_CLOSERS = set("\"'\u201d\u2019)]")


class Chunk(BaseModel):
    """A window of one source file; ``start``/``end`` are character offsets into its decoded text."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str  # "chunk-" + sha256(source, text): stable across runs and clones
    source: str  # the file, relative to the source folder (or its name)
    index: int  # 0-based position in the file
    start: int
    end: int
    tokens: int
    text: str

    @property
    def origin(self) -> str:
        """How records and problems name the chunk: ``file#chunkN`` (1-based, like line numbers)."""
        return f"{self.source}#chunk{self.index + 1}"


def count_tokens(text: str) -> int:
    """Tokens as the chunker counts them: words and single punctuation marks (no model download)."""
    return sum(1 for _ in _TOKEN.finditer(text))


def _boundary_scores(text: str, spans: list[tuple[int, int]]) -> list[int]:
    """score[i]: how good a cut is just before token i (3 paragraph, 2 sentence, 1 line break, 0 none)."""
    scores = [3] + [0] * (len(spans) - 1)
    for i in range(1, len(spans)):
        gap = text[spans[i - 1][1]:spans[i][0]]
        if not gap:
            continue
        if _BLANK_LINE.search(gap):
            scores[i] = 3
            continue
        # the sentence ends at a terminal mark, possibly followed by closing quotes/brackets
        j = i - 1
        while j > 0 and text[spans[j][0]:spans[j][1]] in _CLOSERS and spans[j][0] == spans[j - 1][1]:
            j -= 1
        if text[spans[j][0]:spans[j][1]] in {".", "!", "?"}:
            scores[i] = 2
        elif "\n" in gap:
            scores[i] = 1
    return scores


def chunk_text(text: str, chunk_tokens: int, overlap: int, source: str) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``chunk_tokens`` tokens, consecutive ones sharing up to
    ``overlap`` tokens. A chunk ends at the best boundary (paragraph > sentence > line) in its second
    half, and the next one starts at the best boundary inside the overlap, so records are rarely cut
    mid-sentence; text without boundaries falls back to exact token windows. Deterministic."""
    if chunk_tokens < 1 or not 0 <= overlap < chunk_tokens:
        raise ValueError(f"need chunk_tokens >= 1 and 0 <= overlap < chunk_tokens, got {chunk_tokens}, {overlap}")
    spans = [m.span() for m in _TOKEN.finditer(text)]
    if not spans:
        return []
    scores = _boundary_scores(text, spans)
    n, start, chunks = len(spans), 0, []
    while True:
        limit = min(start + chunk_tokens, n)
        end = limit
        if limit < n:
            lowest = start + max(1, chunk_tokens // 2)
            best = max(range(lowest, limit + 1), key=lambda k: (scores[k], k))
            if scores[best] > 0:
                end = best
        piece = text[spans[start][0]:spans[end - 1][1]]
        digest = hashlib.sha256(f"{source}\0{piece}".encode()).hexdigest()[:32]
        chunks.append(Chunk(id=f"chunk-{digest}", source=source, index=len(chunks), start=spans[start][0],
                            end=spans[end - 1][1], tokens=end - start, text=piece))
        if end >= n:
            return chunks
        following = end
        if overlap:
            window = range(max(start + 1, end - overlap), end)
            best = max(window, key=lambda k: (scores[k], -k), default=end)
            following = best if best < end and scores[best] > 0 else max(start + 1, end - overlap)
        start = following


# ------------------------------------------------------------------------------------------ prompts

LIGHTRAG_SYSTEM = """You turn text into a knowledge graph. Read the text the user sends and write down \
the entities it names and the relationships the text states between them, as records in the exact \
format below.

For every entity of one of the given types write
("entity"<|>NAME<|>TYPE<|>DESCRIPTION)
  NAME: the entity's name as the text writes it
  TYPE: one of the given entity types
  DESCRIPTION: what the text says about the entity, in one or two sentences of your own

For every pair of those entities that the text clearly connects write
("relationship"<|>SOURCE<|>TARGET<|>DESCRIPTION<|>KEYWORDS<|>STRENGTH)
  SOURCE, TARGET: names of entities you wrote above
  DESCRIPTION: how the two are connected, according to the text
  KEYWORDS: a few comma-separated words that sum up the connection
  STRENGTH: a number from 1 to 10, higher when the text states the connection more directly

Rules
- Write only records, separated by ##, and finish with <|COMPLETE|>.
- Use only what the text states; add no outside knowledge.
- Write names and descriptions in the language of the text.

Example
Entity types: person, organization, location, event, concept
Text:
Lise Meitner worked at the Kaiser Wilhelm Institute in Berlin until 1938, when she fled to Stockholm. \
With Otto Frisch she explained nuclear fission.
Output:
("entity"<|>Lise Meitner<|>person<|>Lise Meitner was a physicist who worked in Berlin, fled to \
Stockholm in 1938 and explained nuclear fission with Otto Frisch.)##
("entity"<|>Kaiser Wilhelm Institute<|>organization<|>The Kaiser Wilhelm Institute in Berlin was \
Meitner's workplace until 1938.)##
("entity"<|>Berlin<|>location<|>Berlin is the city of the Kaiser Wilhelm Institute.)##
("entity"<|>Stockholm<|>location<|>Stockholm is where Meitner went in 1938.)##
("entity"<|>Otto Frisch<|>person<|>Otto Frisch explained nuclear fission together with Meitner.)##
("entity"<|>Nuclear Fission<|>concept<|>Nuclear fission was explained by Meitner and Frisch.)##
("relationship"<|>Lise Meitner<|>Kaiser Wilhelm Institute<|>Meitner worked at the institute until \
1938.<|>employment, research<|>9)##
("relationship"<|>Kaiser Wilhelm Institute<|>Berlin<|>The institute was in Berlin.<|>located in<|>8)##
("relationship"<|>Lise Meitner<|>Stockholm<|>Meitner fled to Stockholm in 1938.<|>emigration, refuge<|>8)##
("relationship"<|>Lise Meitner<|>Otto Frisch<|>Meitner and Frisch explained fission together.\
<|>collaboration<|>9)##
("relationship"<|>Lise Meitner<|>Nuclear Fission<|>Meitner explained nuclear fission.\
<|>discovery, explanation<|>10)##
<|COMPLETE|>"""

LIGHTRAG_USER = "Entity types: {entity_types}\nText:\n{text}\nOutput:"

TRIPLES_SYSTEM = """You turn text into knowledge-graph triples. For every fact the text states \
between two named things, write one line

head | relation | tail

  head, tail: the names of the two things as the text writes them
  relation: a short phrase for how the head relates to the tail, e.g. "born in", "capital of"

Rules
- One triple per line and nothing else: no numbering, no headings, no explanations.
- Use only what the text states; add no outside knowledge.

Example
Text:
Lise Meitner worked at the Kaiser Wilhelm Institute in Berlin until 1938, when she fled to Stockholm.
Output:
Lise Meitner | worked at | Kaiser Wilhelm Institute
Kaiser Wilhelm Institute | located in | Berlin
Lise Meitner | fled to | Stockholm"""

TRIPLES_USER = "Text:\n{text}\nOutput:"


def extraction_messages(chunk_text_: str, extract_format: str,
                        entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES) -> list[dict[str, str]]:
    """The chat messages that ask for the records of one chunk."""
    if extract_format == "lightrag":
        user = LIGHTRAG_USER.format(entity_types=", ".join(entity_types), text=chunk_text_)
        return [{"role": "system", "content": LIGHTRAG_SYSTEM}, {"role": "user", "content": user}]
    return [{"role": "system", "content": TRIPLES_SYSTEM},
            {"role": "user", "content": TRIPLES_USER.format(text=chunk_text_)}]


def extraction_params(spec: SourceSpec, model: str, *, max_tokens: int = EXTRACT_MAX_TOKENS,
                      entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES) -> dict:
    """What shapes an extracted KG besides the files (manifest params: a change means a rebuild)."""
    prompts = (LIGHTRAG_SYSTEM + LIGHTRAG_USER if spec.extract_format == "lightrag"
               else TRIPLES_SYSTEM + TRIPLES_USER)
    return {"model": model, "format": spec.extract_format, "chunk_tokens": spec.chunk_tokens,
            "chunk_overlap": spec.chunk_overlap, "max_tokens": max_tokens,
            "entity_types": list(entity_types) if spec.extract_format == "lightrag" else [],
            "prompt_sha256": hashlib.sha256(prompts.encode()).hexdigest()}


# ------------------------------------------------------------------------------------------ parsing


class ExtractedEntity(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    type: str = ""
    description: str = ""


class ExtractedRelation(BaseModel):
    model_config = ConfigDict(frozen=True)
    head: str
    tail: str
    keywords: str
    description: str = ""
    weight: float = DEFAULT_STRENGTH


Parsed = tuple[list[ExtractedEntity], list[ExtractedRelation], list[str]]

_QUOTES = "\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb"
_RECORD_START = re.compile(
    r"""(?:^|(?<=[\n(\[#:]))               # at a line start, after an opening bracket, ## or a colon
        [ \t]*(?:(?:[-*\u2022]|\d+[.)])[ \t]+)?   # a markdown bullet
        \(?[ \t]*[*"'`\u2018\u2019\u201c\u201d]*[ \t]*
        (?P<kind>entity|relationship|relation)
        [ \t]*[*"'`\u2018\u2019\u201c\u201d]*[ \t]*
        (?=<\s*\|+\s*>|\|)              # followed by a delimiter: <|> or a bare |
    """, re.IGNORECASE | re.VERBOSE)
_FIELD_SPLIT = re.compile(r"\s*<?\s*\|+\s*>?\s*")
_TUPLE_DELIM = re.compile(r"<\s*\|+\s*>")
_COMPLETE = re.compile(r"<?\|?\s*COMPLETE\s*\|?>?", re.IGNORECASE)
_COMPLETE_STRICT = re.compile(r"<\|?\s*COMPLETE\s*\|?>", re.IGNORECASE)
_FENCE_LINE = re.compile(r"^[ \t]*```[^\n]*$", re.MULTILINE)
_TRAILING_BULLET = re.compile(r"\n\s*(?:[-*\u2022]+|\d+[.)])?\s*$")
_LEADING_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\d+[.)])\s+")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_TABLE_RULE = re.compile(r"^[\s|:\-+=]+$")
_HEADERS = ({"head", "relation", "tail"}, {"subject", "predicate", "object"}, {"source", "relation", "target"})


def _snippet(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "\u2026")


def _strip_unbalanced(value: str, opener: str, closer: str) -> str:
    while value.startswith(opener) and value.count(opener) > value.count(closer):
        value = value[1:].strip()
    while value.endswith(closer) and value.count(closer) > value.count(opener):
        value = value[:-1].strip()
    return value


def _clean(field: str, *, name: bool) -> str:
    """One field without the noise around it: whitespace runs, markdown emphasis, stray quotes and
    brackets. Names lose every outer quote; a description keeps quotes that are balanced inside it."""
    value = " ".join(field.split()).strip("* ")
    for _ in range(3):
        before = value
        value = _strip_unbalanced(_strip_unbalanced(value, "(", ")"), "[", "]").strip("* ")
        if name:
            value = value.strip(_QUOTES + " ")
        else:
            for quote in "\"`":  # an unmatched quote at an end is noise (apostrophes are not)
                if value.count(quote) % 2 == 1:
                    if value.startswith(quote):
                        value = value[1:].strip()
                    elif value.endswith(quote):
                        value = value[:-1].strip()
            if len(value) >= 2 and value[0] in _QUOTES and value[-1] in _QUOTES and value[0] == value[-1]:
                value = value[1:-1].strip()
        if value == before:
            break
    return value


def _record_end(body: str) -> int:
    """Where a record's body stops: its closing parenthesis, ``##``, the COMPLETE marker or a blank line."""
    cuts = [len(body)]
    depth = 0
    for position, char in enumerate(body):
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                cuts.append(position)
                break
            depth -= 1
    if (found := body.find("##")) >= 0:
        cuts.append(found)
    for regex in (_COMPLETE_STRICT, _BLANK_LINE):
        if match := regex.search(body):
            cuts.append(match.start())
    return min(cuts)


def _strength(value: str) -> float | None:
    match = _NUMBER.match(value.strip())
    if not match:
        return None
    number = float(match.group())
    return number if math.isfinite(number) and number > 0 else None


def _check_names(head: str, tail: str, where: str, raw: str, problems: list[str]) -> bool:
    if not normalise_key(head) or not normalise_key(tail):
        problems.append(f"{where}: empty {'source' if not normalise_key(head) else 'target'} name, "
                        f"skipped: {_snippet(raw)}")
        return False
    if normalise_key(head) == normalise_key(tail):
        problems.append(f"{where}: self loop ({head!r} to itself), skipped: {_snippet(raw)}")
        return False
    return True


def parse_lightrag_records(text: str, origin: str) -> Parsed:
    """LightRAG-style ``("entity"<|>…)`` / ``("relationship"<|>…)`` records from a model reply.

    Never raises on model output: a record that cannot be used (too few fields, an empty name, a
    self loop) is skipped and described in the returned problems (``origin: record N (kind): why``);
    delimited text that is no record at all is reported the same way. Tolerated without a problem:
    missing or extra parentheses, stray quotes, ``|`` instead of ``<|>``, records over several
    lines, missing ``##``, a missing COMPLETE marker, trailing prose, markdown fences and bullets,
    and a strength that is missing or not a number (1.0).
    """
    entities: list[ExtractedEntity] = []
    relations: list[ExtractedRelation] = []
    problems: list[str] = []
    if not isinstance(text, str):
        return entities, relations, [f"{origin}: reply is not text ({type(text).__name__})"]
    if not text.strip():
        return entities, relations, [f"{origin}: empty reply"]
    body_text = _FENCE_LINE.sub("", text)
    starts = list(_RECORD_START.finditer(body_text))
    leftovers = [body_text[: starts[0].start()] if starts else body_text]
    for number, match in enumerate(starts, start=1):
        stop = starts[number].start() if number < len(starts) else len(body_text)
        body = body_text[match.end():stop]
        end = _record_end(body)
        leftovers.append(body[end:])
        raw = match.group(0) + body[:end]
        content = _TRAILING_BULLET.sub("", body[:end]).strip()
        kind = "relationship" if match.group("kind").lower().startswith("relation") else "entity"
        where = f"{origin}: record {number} ({kind})"
        fields = [_clean(f, name=False) for f in _FIELD_SPLIT.split(content)]
        if fields and fields[0] == "":  # the delimiter right after the record type
            fields = fields[1:]
        while fields and fields[-1] == "":
            fields.pop()
        if kind == "entity":
            if len(fields) < 3:
                problems.append(f"{where}: too few fields ({len(fields)}; need name, type, description), "
                                f"skipped: {_snippet(raw)}")
                continue
            name, type_ = _clean(fields[0], name=True), _clean(fields[1], name=True).lower()
            if not normalise_key(name):
                problems.append(f"{where}: empty name, skipped: {_snippet(raw)}")
                continue
            entities.append(ExtractedEntity(name=name, type=type_, description=" | ".join(fields[2:]).strip()))
            continue
        if len(fields) < 4:
            problems.append(f"{where}: too few fields ({len(fields)}; need source, target, description, "
                            f"keywords[, strength]), skipped: {_snippet(raw)}")
            continue
        head, tail = _clean(fields[0], name=True), _clean(fields[1], name=True)
        if not _check_names(head, tail, where, raw, problems):
            continue
        rest = fields[2:]
        if len(rest) == 2 and _NUMBER.fullmatch(rest[1]):
            problems.append(f"{where}: no keywords (only a strength), skipped: {_snippet(raw)}")
            continue
        weight = _strength(rest[-1]) if len(rest) >= 3 else None
        if len(rest) >= 3:
            rest = rest[:-1]  # a strength (a number, or junk standing where it belongs)
        keywords = ",".join(k for k in (_clean(part, name=True) for part in rest[-1].split(",")) if k)
        if not keywords:
            problems.append(f"{where}: empty keywords, skipped: {_snippet(raw)}")
            continue
        relations.append(ExtractedRelation(head=head, tail=tail, keywords=keywords,
                                           description=" | ".join(rest[:-1]).strip(),
                                           weight=DEFAULT_STRENGTH if weight is None else weight))
    for piece in leftovers:
        for line in _COMPLETE.sub("", piece).splitlines():
            if _TUPLE_DELIM.search(line) and line.strip(" #()<|>\t"):
                problems.append(f"{origin}: not an entity or relationship record, skipped: {_snippet(line)}")
    if not entities and not relations and not problems and body_text.strip():
        problems.append(f"{origin}: no records in the reply: {_snippet(body_text)}")
    return entities, relations, problems


def parse_triple_lines(text: str, origin: str) -> Parsed:
    """EoG-style ``head | relation | tail`` lines from a model reply (same contract as
    ``parse_lightrag_records``). Entities are the heads and tails (no type, no description). A fourth
    field is kept as the description, or as the weight when it is a number; lines without ``|``
    (prose, headings) are ignored; markdown tables (header, rule, outer pipes) are understood."""
    entities: list[ExtractedEntity] = []
    relations: list[ExtractedRelation] = []
    problems: list[str] = []
    if not isinstance(text, str):
        return entities, relations, [f"{origin}: reply is not text ({type(text).__name__})"]
    if not text.strip():
        return entities, relations, [f"{origin}: empty reply"]
    for number, raw in enumerate(_FENCE_LINE.sub("", text).splitlines(), start=1):
        line = _COMPLETE_STRICT.sub("", raw).strip()
        line = _LEADING_BULLET.sub("", line).strip().rstrip("#").strip()
        if "|" not in line or _TABLE_RULE.match(line):
            continue
        if line.startswith("(") and line.endswith(")"):
            line = line[1:-1]
        where = f"{origin}: line {number}"
        if line.startswith("|") and line.endswith("|"):  # a markdown table row: outer pipes
            line = line[1:-1]
        fields = [_clean(f, name=False) for f in _FIELD_SPLIT.split(line.strip())]
        while fields and fields[-1] == "":
            fields.pop()
        if {f.lower() for f in fields[:3]} in _HEADERS:
            continue
        if len(fields) < 3:
            problems.append(f"{where}: too few fields ({len(fields)}; need head | relation | tail), "
                            f"skipped: {_snippet(raw)}")
            continue
        head, relation, tail = (_clean(fields[0], name=True), _clean(fields[1], name=True),
                                _clean(fields[2], name=True))
        if not relation:
            problems.append(f"{where}: empty relation, skipped: {_snippet(raw)}")
            continue
        if not _check_names(head, tail, where, raw, problems):
            continue
        extra = fields[3:]
        weight = _strength(extra[0]) if len(extra) == 1 else None
        description = "" if weight is not None else " | ".join(extra)
        relations.append(ExtractedRelation(head=head, tail=tail, keywords=relation, description=description,
                                           weight=DEFAULT_STRENGTH if weight is None else weight))
        entities.extend([ExtractedEntity(name=head), ExtractedEntity(name=tail)])
    if not relations and not problems and text.strip():
        problems.append(f"{origin}: no 'head | relation | tail' lines in the reply: {_snippet(text)}")
    return entities, relations, problems


# --------------------------------------------------------------------------------------- extraction


class ExtractionSummary(BaseModel):
    """How an extraction went: what the build puts in the KG manifest's metadata."""

    format: str
    model: str
    files: int
    chunks: int
    failed_chunks: int = 0  # chunks whose request failed for good (LLMError)
    truncated_replies: int = 0  # replies cut at max_tokens (records after the cut are lost)
    entity_records: int = 0
    relation_records: int = 0
    problem_count: int = 0  # failed requests, cut replies, records dropped, replies without records
    problems: list[str] = Field(default_factory=list)  # the first MAX_PROBLEMS_KEPT, with origins
    first_error: str | None = None
    cached_replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class ExtractedGraph(RawGraph):
    """A RawGraph from text, with the summary of the extraction that produced it."""

    summary: ExtractionSummary


def text_files(spec: SourceSpec, root: Path) -> list[tuple[Path, str]]:
    """The source's files with the name chunks go by (relative to the source folder, or the file name)."""
    path = root / spec.path
    if path.is_dir():
        files = spec.files(root)
        if not files:
            raise KGSourceError(f"{path}: no {' or '.join(TEXT_SUFFIXES)} files in this text source folder")
        return [(f, f.relative_to(path).as_posix()) for f in files]
    _require_file(path, "text file")
    if path.suffix.lower() not in TEXT_SUFFIXES:
        raise KGSourceError(f"{path}: a text source must be a {' or '.join(TEXT_SUFFIXES)} file "
                            "or a folder of them")
    return [(path, path.name)]


def read_chunks(spec: SourceSpec, root: Path) -> list[Chunk]:
    """Every chunk of every file of a text source, in file order; a bad file is an error naming it."""
    chunks: list[Chunk] = []
    for path, name in text_files(spec, root):
        _require_file(path, "text file")
        text = _check_utf8(path)
        found = chunk_text(text, spec.chunk_tokens, spec.chunk_overlap, name)
        if not found:
            raise KGSourceError(f"{path}: text file has no text (only whitespace)")
        chunks.extend(found)
    return chunks


def extract_graph(spec: SourceSpec, root: Path, client: ChatClient, *, progress: bool = True,
                  max_tokens: int = EXTRACT_MAX_TOKENS,
                  entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES) -> ExtractedGraph:
    """Chunk a ``text`` source, ask ``client`` for records of every chunk (concurrently, cached by the
    client), parse them, and return raw records whose ``origin`` is ``file#chunkN`` and ``source_id``
    the chunk id. Failed requests are tolerated unless every chunk failed (then KGSourceError)."""
    if spec.kind != "text":
        raise KGSourceError(f"{spec.path}: extract_graph reads sources of kind 'text', not {spec.kind!r}")
    chunks = read_chunks(spec, root)
    requests = [ChatRequest(messages=extraction_messages(c.text, spec.extract_format, entity_types),
                            temperature=0.0, max_tokens=max_tokens, tag=EXTRACT_TAG) for c in chunks]
    parse = parse_lightrag_records if spec.extract_format == "lightrag" else parse_triple_lines
    parsed: dict[int, tuple[ChatReply, Parsed]] = {}  # the verdict's parse, reused below

    def vet(index: int, reply: ChatReply) -> bool:
        """A cache keeps only a reply with records that was not cut at max_tokens (``OnReply``): a garbage or cut
        one is asked again next run, never replayed."""
        found = parse(reply.text, chunks[index].origin)
        parsed[index] = (reply, found)
        return reply.finish_reason != "length" and bool(found[0] or found[1])

    results = client.complete_many(requests, progress=progress, desc=f"extract {Path(spec.path).name}",
                                   on_reply=vet)

    files = len({c.source for c in chunks})
    summary = ExtractionSummary(format=spec.extract_format, model=client.model, files=files, chunks=len(chunks))
    entity_rows: list[dict] = []
    relation_rows: list[dict] = []
    problems: list[str] = []
    errors: list[tuple[Chunk, LLMError]] = []
    for index, (chunk, result) in enumerate(zip(chunks, results, strict=True)):
        if not isinstance(result, ChatReply):
            errors.append((chunk, result if isinstance(result, LLMError) else LLMError(str(result))))
            continue
        summary.cached_replies += int(result.cached)
        summary.prompt_tokens += result.prompt_tokens
        summary.completion_tokens += result.completion_tokens
        summary.cost_usd += result.cost_usd
        if result.finish_reason == "length":
            summary.truncated_replies += 1
            problems.append(f"{chunk.origin}: reply cut at max_tokens={max_tokens}; records after the cut are lost")
        seen = parsed.get(index)
        entities, relations, found = seen[1] if seen is not None and seen[0] is result else parse(result.text,
                                                                                                  chunk.origin)
        problems.extend(found)
        summary.entity_records += len(entities)
        summary.relation_records += len(relations)
        entity_rows.extend({"name": e.name, "type": e.type, "description": e.description, "source_id": chunk.id,
                            "origin": chunk.origin} for e in entities)
        for r in relations:
            relation_rows.append({"head": r.head, "tail": r.tail, "keywords": r.keywords,
                                  "description": r.description, "weight": r.weight, "origin": chunk.origin})
            if spec.extract_format == "triples":
                continue  # the parser already gave the endpoints as entities
            # endpoints carry the chunk id too, even when the model gave them no entity record
            entity_rows.extend({"name": n, "type": "", "description": "", "source_id": chunk.id,
                                "origin": chunk.origin} for n in (r.head, r.tail))

    if errors and len(errors) == len(chunks):
        chunk, error = errors[0]
        raise KGSourceError(f"{root / spec.path}: extraction failed for all {len(chunks)} chunk(s); "
                            f"first error ({chunk.origin}): {error}")
    if errors:
        log.warning("text extraction of %s: %d of %d chunk(s) failed (first: %s: %s); keeping the others",
                    spec.path, len(errors), len(chunks), errors[0][0].origin, errors[0][1])
        summary.first_error = f"{errors[0][0].origin}: {errors[0][1]}"
        problems = [f"{c.origin}: request failed: {e}" for c, e in errors] + problems
    summary.failed_chunks = len(errors)
    summary.problem_count = len(problems)
    summary.problems = problems[:MAX_PROBLEMS_KEPT]
    if problems:
        log.info("text extraction of %s: %d problem(s), e.g. %s", spec.path, len(problems), problems[0])
    if not relation_rows and not entity_rows:
        raise KGSourceError(f"{root / spec.path}: the model's replies held no usable records "
                            f"({len(chunks)} chunk(s); first problem: {problems[0] if problems else 'none'})")
    return ExtractedGraph(
        entities=pl.DataFrame(entity_rows, schema=RAW_ENTITY_SCHEMA),
        relations=pl.DataFrame(relation_rows, schema=RAW_RELATION_SCHEMA),
        source=str(root / spec.path), summary=summary)
