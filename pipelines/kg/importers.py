"""Importers: turn a user's KG file into raw records (``RawGraph``), with errors that name the record.

Supported sources: triple tables (CSV, TSV, parquet, JSON lines) with optional entity tables,
LightRAG GraphML files, LightRAG working directories (which hold such a GraphML file), and LightRAG
renderings of a triples domain (pipelines.kg.lightrag_render). Plain
text (kind ``text``) needs an LLM and is read by pipelines.kg.extract instead.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import sys
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import networkx as nx
import polars as pl

from pipelines.domains import SourceSpec
from pipelines.errors import KGSourceError
from pipelines.kg.lightrag_render import LIGHTRAG_SEP, render_lightrag
from pipelines.kg.model import RAW_ENTITY_SCHEMA, RAW_RELATION_SCHEMA, RawGraph, json_records

log = logging.getLogger(__name__)

LIGHTRAG_GRAPHML = "graph_chunk_entity_relation.graphml"

# Limits on what one record may hold (docs/kg.md, "Importing a KG"): a name is a look-up key that the agent
# types and the tools print in every answer, so a longer one is an error naming the record; the longest
# names of the shipped domains have under 200 characters. Longer descriptions, types and relation labels are
# truncated (ending in "…") and the truncation is reported: the shipped domains' longest description has
# 3,420 characters, their longest LightRAG keyword list 532.
MAX_NAME_CHARS = 500
MAX_DESCRIPTION_CHARS = 10_000
MAX_TYPE_CHARS = 200  # entity types and LightRAG source (chunk) ids
MAX_LABEL_CHARS = 1_000  # relation labels (a triple's relation, LightRAG's keywords)
TRUNCATED = "…"
SHOWN_CHARS = 40  # a value quoted in an error message is clipped to this
SHOWN_RECORDS = 5  # records named in one message
MAX_REF_CHARS = 200  # a longer node id is quoted and clipped where an error names its record
MAX_MESSAGE_CHARS = 2_000
# what str.splitlines() breaks a line at: escaped in messages, which are one line
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})
TEXT_SUFFIXES = {".csv", ".tsv", ".txt", ".jsonl", ".ndjson"}
TABLE_SUFFIXES = TEXT_SUFFIXES | {".parquet"}

# Accepted column names, first is canonical.
TRIPLE_COLUMNS = {
    "head": ("head", "subject", "source", "src", "h"),
    "relation": ("relation", "predicate", "rel", "r", "keywords"),
    "tail": ("tail", "object", "target", "dst", "t"),
    "description": ("description", "relation_description"),
    "weight": ("weight",),
    "head_type": ("head_type",),
    "tail_type": ("tail_type",),
    "head_description": ("head_description",),
    "tail_description": ("tail_description",),
}
ENTITY_COLUMNS = {
    "name": ("name", "entity", "entity_id", "entity_name"),
    "type": ("type", "entity_type"),
    "description": ("description",),
}


# --------------------------------------------------------------------------------------------- messages


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message as the CLI prints it: every line break escaped, at most ``limit`` characters."""
    line = text[:limit].translate(_LINE_BREAKS)
    return line if len(line) <= limit and len(text) <= limit else line[:limit - 1] + TRUNCATED


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A user's value quoted in a message: its repr (escaped, one line), clipped, with its length if clipped."""
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # an int of more digits than Python converts
        return f"(a number of over {sys.get_int_max_str_digits()} digits)"
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit] + TRUNCATED!r} of {len(text):,} characters"


def _shown_list(values: list[str], limit: int = 20) -> str:
    more = f", … ({len(values)} in all)" if len(values) > limit else ""
    return "[" + ", ".join(shown(v) for v in values[:limit]) + more + "]"


def _ref(value: object) -> str:
    """A node id as a record's origin names it: as is when printable and not long, else quoted and clipped."""
    text = str(value)
    return text if len(text) <= MAX_REF_CHARS and text.isprintable() else shown(text)


def _where(origins: pl.Series) -> str:
    """The first records of a selection by their origin (file:line), and how many more there are."""
    distinct = origins.unique(maintain_order=True)
    more = f" and {distinct.len() - SHOWN_RECORDS} more" if distinct.len() > SHOWN_RECORDS else ""
    return ", ".join(distinct.head(SHOWN_RECORDS).to_list()) + more


@contextmanager
def _reading(path: object) -> Iterator[None]:
    """Whatever goes wrong reading ``path`` leaves as one KGSourceError line naming the file, never a traceback."""
    try:
        yield
    except KGSourceError as exc:
        text = str(exc)
        if (line := one_line(text)) == text:
            raise
        raise KGSourceError(line) from None
    except RecursionError:
        raise KGSourceError(one_line(f"{path}: nested too deeply to be read")) from None
    except MemoryError:
        raise KGSourceError(one_line(f"{path}: too large to be read into memory")) from None
    except OSError as exc:
        raise KGSourceError(one_line(f"{path}: cannot be read: {exc.strerror or exc}")) from None
    except (Exception, pl.exceptions.PanicException) as exc:  # a case the importer does not know: still one line
        log.debug("importing %s failed", path, exc_info=True)
        first = next((line for line in str(exc).splitlines() if line.strip()), "")
        raise KGSourceError(one_line(f"{path}: could not be read ({type(exc).__name__}: {first[:200]}); this is a "
                                     "gap in omne's importer: please report it with the file")) from None


# --------------------------------------------------------------------------------------------- tables


def _require_file(path: Path, what: str) -> None:
    if not path.exists():
        raise KGSourceError(f"{path}: {what} not found")
    if not path.is_file():
        raise KGSourceError(f"{path}: {what} is not a file")
    if path.stat().st_size == 0:
        raise KGSourceError(f"{path}: {what} is empty")


def _check_utf8(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise KGSourceError(
            f"{path}: line {line} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-encode the file as UTF-8") from None


def _cell(value: object, path: Path, number: int, key: str) -> str | None:
    """A JSON value as the text of a table cell: strings as they are, numbers as Python writes them, booleans as
    ``true``/``false``, arrays and objects as JSON text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)  # json.loads refused more digits than str() converts
    if isinstance(value, float):
        return repr(value)
    try:
        return json.dumps(value)
    except RecursionError:
        raise KGSourceError(f"{path}: line {number}: field {shown(key)} nests arrays or objects too deeply "
                            "to be read") from None


def _read_jsonl(path: Path, text: str) -> pl.DataFrame:
    rows, origins = [], []
    for number, record in json_records(path, text):
        rows.append({k: _cell(v, path, number, k) for k, v in record.items()})
        origins.append(f"{path.name}:{number}")
    if not rows:
        raise KGSourceError(f"{path}: no records")
    columns = sorted({k for row in rows for k in row})
    frame = pl.DataFrame({c: [row.get(c) for row in rows] for c in columns}, schema=dict.fromkeys(columns, pl.String))
    return frame.with_columns(pl.Series("origin", origins))


def _csv_origins(path: Path, text: str, height: int) -> pl.Series:
    """file:line per row when every record is one line, else file:row N (quoted multi-line fields)."""
    lines = text.rstrip("\r\n").count("\n") + 1
    if lines == height + 1:
        return pl.Series("origin", [f"{path.name}:{i + 2}" for i in range(height)])
    return pl.Series("origin", [f"{path.name}:row {i + 1}" for i in range(height)])


def _lines(text: str) -> Iterator[str]:
    """The lines of a text as the line numbers of errors count them (each ends at a line feed), with a lone
    carriage return made a space: polars reads it as a character of the field, Python's csv module as the end of
    a record."""
    start = 0
    text = re.sub(r"\r(?!\n)", " ", text)
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end + 1]
        start = end + 1
    if start < len(text):
        yield text[start:]


_CSV_REASONS = {
    "unexpected end of data": "a quoted field that starts on this line is never closed (an unmatched '\"')",
    "expected after": "a quoted field goes on after its closing quote (inside a quoted field write a quote as \"\")",
}


def _csv_problem(text: str, separator: str) -> str | None:
    """Where a table polars refused goes wrong, as 'line N: why' (polars' own error names neither the line nor
    the row): the first record that Python's csv module, reading as polars does, finds malformed or longer than
    the header."""
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # fields may be long; polars has no limit
    try:
        reader = csv.reader(_lines(text), delimiter=separator, quotechar='"', doublequote=True, strict=True,
                            quoting=csv.QUOTE_MINIMAL if separator == "," else csv.QUOTE_NONE)
        start, width = 1, None
        try:
            for row in reader:
                if row and width is None:
                    width = len(row)
                elif width is not None and len(row) > width:
                    return f"line {start} has {len(row)} fields, the header {width}"
                start = reader.line_num + 1
        except csv.Error as exc:
            reason = next((why for known, why in _CSV_REASONS.items() if known in str(exc)), str(exc))
            return f"line {start}: {reason}"
    finally:
        csv.field_size_limit(limit)
    return None


def _polars_reason(exc: BaseException) -> str:
    """What polars' several-line error says, in a few words (when the line could not be found)."""
    text = str(exc)
    if "more fields than defined" in text:
        return "a row has more fields than the header"
    if "not properly escaped" in text or "could not parse" in text:
        return "a quoted field is not closed, or goes on after its closing quote"
    first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
    return first[:200]


def _read_delimited(path: Path, text: str, separator: str) -> pl.DataFrame:
    kind = "CSV" if separator == "," else "TSV"
    if "\r" in text and "\n" not in text:
        raise KGSourceError(f"{path}: not a readable {kind} file: its lines end in a carriage return (\\r) alone; "
                            "save it with \\n or \\r\\n line ends")
    try:
        return pl.read_csv(path, separator=separator, infer_schema=False, quote_char='"' if separator == "," else None)
    except (Exception, pl.exceptions.PanicException) as exc:  # polars' errors are several lines without the line
        raise KGSourceError(f"{path}: not a readable {kind} file: "
                            f"{_csv_problem(text, separator) or _polars_reason(exc)}") from None


# every column name an importer looks for: a parquet column of lists or structs is refused only if it is one
_ACCEPTED_NAMES = frozenset(a for spec in (TRIPLE_COLUMNS, ENTITY_COLUMNS) for names in spec.values()
                           for a in names)


def _read_parquet(path: Path) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except (Exception, pl.exceptions.PanicException) as exc:  # polars raises several error types for corrupt files
        raise KGSourceError(f"{path}: not a readable parquet file: {_polars_reason(exc)}") from None
    columns = []
    for name, dtype in frame.schema.items():
        if dtype.is_nested() or dtype == pl.Object:
            if name.lower().strip() in _ACCEPTED_NAMES:
                raise KGSourceError(f"{path}: column {shown(name)} holds {dtype} values; it must hold text or "
                                    "numbers")
            continue  # a column the importer does not read (an embedding, a list of chunk ids)
        try:
            columns.append(frame[name].cast(pl.String))
        except (Exception, pl.exceptions.PanicException):
            raise KGSourceError(f"{path}: column {shown(name)} ({dtype}) cannot be read as text (bytes that are "
                                "not UTF-8?)") from None
    return pl.DataFrame(columns)


def read_table(path: Path, what: str = "table") -> pl.DataFrame:
    """Read a CSV/TSV/parquet/JSON-lines table as strings, plus an ``origin`` column (file:line)."""
    with _reading(path):
        _require_file(path, what)
        suffix = path.suffix.lower()
        if suffix not in TABLE_SUFFIXES:
            raise KGSourceError(f"{path}: unsupported {what} format {shown(suffix)}; use one of "
                                f"{sorted(TABLE_SUFFIXES)}")
        if suffix == ".parquet":
            frame = _read_parquet(path)
            origins = pl.Series("origin", [f"{path.name}:row {i + 1}" for i in range(frame.height)])
        else:
            text = _check_utf8(path)
            if suffix in {".jsonl", ".ndjson"}:
                return _read_jsonl(path, text)
            frame = _read_delimited(path, text, "," if suffix == ".csv" else "\t")
            origins = _csv_origins(path, text, frame.height)
        if frame.height == 0:
            raise KGSourceError(f"{path}: no records (only a header?)")
        return frame.cast(pl.String).with_columns(origins)


def _canonical_columns(frame: pl.DataFrame, spec: dict[str, tuple[str, ...]], path: Path,
                       required: tuple[str, ...]) -> pl.DataFrame:
    lower = {c.lower().strip(): c for c in frame.columns if c != "origin"}
    chosen: dict[str, str] = {}
    for canonical, aliases in spec.items():
        for alias in aliases:
            if alias in lower:
                chosen[canonical] = lower[alias]
                break
    missing = [c for c in required if c not in chosen]
    if missing:
        found = [c for c in frame.columns if c != "origin"]
        raise KGSourceError(f"{path}: missing column(s) {missing}; found {_shown_list(found)}; "
                            f"accepted names: { {c: spec[c] for c in missing} }")
    return frame.select(*(pl.col(src).alias(dst) for dst, src in chosen.items()), pl.col("origin"))


def _reject_blank(frame: pl.DataFrame, columns: tuple[str, ...], path: Path) -> None:
    for column in columns:
        blank = frame.filter(pl.col(column).is_null() | (pl.col(column).str.strip_chars() == ""))
        if blank.height:
            raise KGSourceError(f"{path}: {blank.height} record(s) with an empty '{column}': {_where(blank['origin'])}")


def _reject_long_names(frame: pl.DataFrame, columns: tuple[str, ...], path: Path) -> None:
    """A name longer than MAX_NAME_CHARS is an error naming the records (a description in the wrong column?)."""
    for column in columns:
        long = frame.filter(pl.col(column).str.len_chars() > MAX_NAME_CHARS)
        if long.height:
            shown_rows = ", ".join(f"{o} ({shown(n)})" for n, o in long.select(column, "origin").head(SHOWN_RECORDS)
                                   .iter_rows())
            raise KGSourceError(f"{path}: {long.height} record(s) with a '{column}' longer than {MAX_NAME_CHARS} "
                                f"characters, the most an entity name may have (long text belongs in a description "
                                f"column): {shown_rows}")


def _truncate(frame: pl.DataFrame, column: str, limit: int, what: str, path: Path, notes: list[str]) -> pl.DataFrame:
    """Values of ``column`` longer than ``limit`` cut to ``limit`` characters (the last one "…"), noted."""
    if column not in frame.columns:
        return frame
    long = pl.col(column).str.len_chars() > limit
    over = frame.filter(long)
    if not over.height:
        return frame
    notes.append(f"{path}: {over['origin'].n_unique()} {what}(s) longer than {limit:,} characters truncated to "
                 f"{limit:,}: {_where(over['origin'])}")
    return frame.with_columns(pl.when(long).then(pl.col(column).str.slice(0, limit - 1) + TRUNCATED)
                              .otherwise(pl.col(column)).alias(column))


def _weights(frame: pl.DataFrame, path: Path) -> pl.Series:
    """The weight column as floats (empty -> 1.0); a value that is not a finite number is an error
    (a NaN or infinite weight would poison every weighted path and score computed from it)."""
    raw = frame["weight"].str.strip_chars()
    weights = raw.cast(pl.Float64, strict=False)
    bad = frame.filter(weights.is_null() & raw.is_not_null() & (raw != ""))
    if bad.height:
        values = ", ".join(f"{o} ({shown(w)})"
                           for w, o in bad.select("weight", "origin").head(SHOWN_RECORDS).iter_rows())
        raise KGSourceError(f"{path}: {bad.height} record(s) with a non-numeric weight: {values}")
    written = raw.str.to_lowercase().str.strip_chars_start("+-").is_in(["nan", "inf", "infinity"])
    for selected, why in ((weights.is_nan() | (weights.is_infinite() & written),
                           "that is not finite (NaN or infinity)"),
                          (weights.is_infinite() & ~written, "too large for a float (beyond ±1.8e308)")):
        infinite = frame.filter(selected)
        if infinite.height:
            values = ", ".join(f"{o} ({shown(w)})"
                               for w, o in infinite.select("weight", "origin").head(SHOWN_RECORDS).iter_rows())
            raise KGSourceError(f"{path}: {infinite.height} record(s) with a weight {why}: {values}")
    return weights.fill_null(1.0)


def read_triples(path: Path, entities_path: Path | None = None) -> RawGraph:
    """Triples (head, relation, tail, optional descriptions/types/weight) and an optional entity table."""
    with _reading(path):
        frame = _canonical_columns(read_table(path, "triples file"), TRIPLE_COLUMNS, path,
                                   ("head", "relation", "tail"))
        _reject_blank(frame, ("head", "relation", "tail"), path)
        _reject_long_names(frame, ("head", "tail"), path)
        notes: list[str] = []
        for column, limit, what in (("relation", MAX_LABEL_CHARS, "relation label"),
                                    ("description", MAX_DESCRIPTION_CHARS, "relation description"),
                                    ("head_type", MAX_TYPE_CHARS, "head type"),
                                    ("tail_type", MAX_TYPE_CHARS, "tail type"),
                                    ("head_description", MAX_DESCRIPTION_CHARS, "head description"),
                                    ("tail_description", MAX_DESCRIPTION_CHARS, "tail description")):
            frame = _truncate(frame, column, limit, what, path, notes)
        weight = _weights(frame, path) if "weight" in frame.columns else pl.lit(1.0)
        relations = frame.select(
            head=pl.col("head"), tail=pl.col("tail"), keywords=pl.col("relation").str.strip_chars(),
            description=pl.col("description").fill_null("") if "description" in frame.columns else pl.lit(""),
            weight=weight, origin=pl.col("origin"),
        )
        endpoint_entities = [
            frame.select(name=pl.col(side),
                         type=pl.col(f"{side}_type").fill_null("") if f"{side}_type" in frame.columns else pl.lit(""),
                         description=(pl.col(f"{side}_description").fill_null("")
                                      if f"{side}_description" in frame.columns else pl.lit("")),
                         source_id=pl.lit(path.name), origin=pl.col("origin"))
            for side in ("head", "tail")
        ]
    tables = []
    if entities_path:
        with _reading(entities_path):
            tables.append(_entity_table(entities_path, notes))
    with _reading(path):
        entities = pl.concat([*tables, *(e.cast(RAW_ENTITY_SCHEMA) for e in endpoint_entities)])
        return RawGraph(entities=entities.cast(RAW_ENTITY_SCHEMA), relations=relations.cast(RAW_RELATION_SCHEMA),
                        source=str(path), notes=tuple(notes))


def read_entities(path: Path) -> pl.DataFrame:
    """An entity table (name, optional type and description) as raw entity records."""
    with _reading(path):
        return _entity_table(path, [])


def _entity_table(path: Path, notes: list[str]) -> pl.DataFrame:
    frame = _canonical_columns(read_table(path, "entities file"), ENTITY_COLUMNS, path, ("name",))
    _reject_blank(frame, ("name",), path)
    _reject_long_names(frame, ("name",), path)
    frame = _truncate(frame, "type", MAX_TYPE_CHARS, "entity type", path, notes)
    frame = _truncate(frame, "description", MAX_DESCRIPTION_CHARS, "entity description", path, notes)
    return frame.select(
        name=pl.col("name"),
        type=pl.col("type").fill_null("") if "type" in frame.columns else pl.lit(""),
        description=pl.col("description").fill_null("") if "description" in frame.columns else pl.lit(""),
        source_id=pl.lit(path.name), origin=pl.col("origin"),
    ).cast(RAW_ENTITY_SCHEMA)


# --------------------------------------------------------------------------------------------- LightRAG


def _split_sep(value: object) -> list[str]:
    return [part for part in (_unquoted(p) for p in str(value or "").split(LIGHTRAG_SEP)) if part]


def _unquoted(text: str) -> str:
    """A LightRAG value without the literal quotes its legacy format (2024) wrapped ids, types, descriptions and
    keywords in (``"SCROOGE"``, ``"PERSON"``; a malformed ``("GEO"`` too): quotes are LightRAG's, not the name's."""
    text = text.strip()
    stripped = text.lstrip('(').strip('"').strip()
    if text.startswith(('"', '("')) and (text.endswith('"') or text.startswith('("')) and stripped:
        return stripped
    return text


GRAPHML_NS = "{http://graphml.graphdrawing.org/xmlns}"
_GRAPHML_TYPES = {"string", "yfiles", "int", "integer", "long", "float", "double", "boolean"}


def _bad_graphml_value(kind: str, text: str | None) -> str | None:
    """Why networkx cannot convert ``text`` to a GraphML ``attr.type`` (None: it can)."""
    if kind in ("string", "yfiles"):
        return None
    if text is None:
        return f"is empty, not a {kind}"
    if kind in ("int", "integer", "long"):
        try:
            int(text)
        except ValueError:
            digits = text.strip().lstrip("+-")
            if digits.isdigit() and len(digits) > sys.get_int_max_str_digits():
                return (f"holds a number of {len(digits):,} digits, more than Python converts "
                        f"({sys.get_int_max_str_digits()})")
            return f"holds {shown(text)}, not an integer (attr.type {kind})"
    elif kind in ("float", "double"):
        try:
            float(text)
        except ValueError:
            return f"holds {shown(text)}, not a number (attr.type {kind})"
    elif text.lower() not in ("true", "false", "0", "1"):
        return f"holds {shown(text)}, not a boolean (true, false, 0 or 1)"
    return None


def _graphml_problem(path: Path) -> str | None:
    """The first element of a GraphML file that networkx cannot read, named (networkx's error names none)."""
    try:
        root = ET.parse(path).getroot()
    except (Exception, pl.exceptions.PanicException):
        return None
    # networkx reads a <graphml> without a namespace as if it had GraphML's
    ns = "" if root.tag == "graphml" else GRAPHML_NS
    if root.find(f"{ns}graph") is None:
        top = str(root.tag).rsplit("}", 1)[-1][:SHOWN_CHARS]
        return f"no <graph> element in GraphML's namespace (xmlns=\"{GRAPHML_NS[1:-1]}\") under <{top}>"
    keys: dict[str | None, str] = {}
    for key in root.iter(f"{ns}key"):
        key_id, kind = key.get("id"), "yfiles" if key.get("yfiles.type") is not None else key.get("attr.type", "string")
        if kind not in _GRAPHML_TYPES:
            return (f"<key id={shown(key_id)}> has attr.type {shown(kind)}; GraphML's types are string, int, long, "
                    "float, double and boolean")
        if kind != "yfiles" and key.get("attr.name") is None:
            return f"<key id={shown(key_id)}> has no attr.name"
        keys[key_id] = kind
        default = key.find(f"{ns}default")
        if default is not None and (why := _bad_graphml_value(kind, default.text)):
            return f"the <default> of <key id={shown(key_id)}> {why}"
    if root.find(f".//{ns}hyperedge") is not None:
        return "it holds a hyperedge, which has no place in a graph of entities and relations"
    for tag in ("node", "edge"):
        for number, element in enumerate(root.iter(f"{ns}{tag}"), start=1):
            ends = ("id",) if tag == "node" else ("source", "target")
            if missing := [end for end in ends if element.get(end) is None]:
                return f"<{tag}> number {number} has no {' or '.join(missing)}"
            ref = (f"node {shown(element.get('id'))}" if tag == "node"
                   else f"edge {shown(element.get('source'))}-{shown(element.get('target'))}")
            for data in element.findall(f"{ns}data"):
                key_id = data.get("key")
                if key_id not in keys:
                    return f"{ref}: <data key={shown(key_id)}> has no <key> declaration"
                if len(data) == 0 and data.text is not None and (why := _bad_graphml_value(keys[key_id], data.text)):
                    return f"{ref}: <data key={shown(key_id)}> {why}"
    return None


def read_lightrag_graphml(path: Path) -> RawGraph:
    """A LightRAG GraphML graph: node ids/entity_id are names; ``<SEP>`` joins multiple values."""
    with _reading(path):
        _require_file(path, "GraphML file")
        _check_utf8(path)
        try:
            with warnings.catch_warnings():  # networkx warns (on stderr) of keys without a type and of ports
                warnings.simplefilter("ignore")
                graph = nx.read_graphml(path)
        except ET.ParseError as exc:
            line, column = exc.position
            raise KGSourceError(f"{path}: malformed XML at line {line}, column {column}: {exc}") from None
        except (Exception, pl.exceptions.PanicException) as exc:  # networkx's KeyError, ValueError, TypeError, ...
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise KGSourceError(f"{path}: not a valid GraphML graph: "
                                f"{_graphml_problem(path) or first[:200]}") from None
        if "None" in graph and (problem := _graphml_problem(path)):  # networkx names a node without an id "None"
            raise KGSourceError(f"{path}: not a valid GraphML graph: {problem}")
        return lightrag_records(graph, path)


def lightrag_records(graph: nx.Graph, path: Path) -> RawGraph:
    """The records of a graph in LightRAG's layout (node ids/entity_id are names; ``<SEP>`` joins multiple
    values): what a LightRAG GraphML file at ``path`` holds, or a LightRAG rendering of a domain there."""
    with _reading(path):
        return _lightrag_records(graph, path)


def _lightrag_records(graph: nx.Graph, path: Path) -> RawGraph:
    if graph.number_of_nodes() == 0:
        raise KGSourceError(f"{path}: the graph has no nodes")
    names: dict[object, str] = {}
    entity_rows = []
    for node, attrs in graph.nodes(data=True):
        name = _unquoted(str(attrs.get("entity_id") or node))
        if not name:
            raise KGSourceError(f"{path}: node {shown(node)} has an empty entity_id")
        if len(name) > MAX_NAME_CHARS:
            raise KGSourceError(f"{path}: node {shown(node)} has a name ({shown(name)}) longer than {MAX_NAME_CHARS} "
                                "characters, the most an entity name may have")
        names[node] = name
        types = _split_sep(attrs.get("entity_type"))
        sources = _split_sep(attrs.get("source_id"))
        entity_rows.append({"name": name, "type": types[0] if types else "",
                            "description": "\n".join(dict.fromkeys(_split_sep(attrs.get("description")))),
                            "source_id": sources, "origin": f"{path.name}:node {_ref(node)}"})
    relation_rows = []
    for u, v, attrs in graph.edges(data=True):
        keywords = ",".join(dict.fromkeys(k.strip() for part in _split_sep(attrs.get("keywords"))
                                          for k in part.split(",") if k.strip()))
        edge = f"edge {shown(u)}-{shown(v)}"
        try:
            weight = float(attrs.get("weight", 1.0))
        except OverflowError:
            raise KGSourceError(f"{path}: {edge} has a weight too large for a float: "
                                f"{shown(attrs.get('weight'))}") from None
        except (TypeError, ValueError):
            raise KGSourceError(f"{path}: {edge} has a non-numeric weight {shown(attrs.get('weight'))}") from None
        if not math.isfinite(weight):
            raise KGSourceError(f"{path}: {edge} has a weight that is not finite: {shown(attrs.get('weight'))}")
        relation_rows.append({"head": names[u], "tail": names[v], "keywords": keywords,
                              "description": "\n".join(dict.fromkeys(_split_sep(attrs.get("description")))),
                              "weight": weight, "origin": f"{path.name}:edge {_ref(u)}-{_ref(v)}"})
    entities = pl.DataFrame(entity_rows).explode("source_id") if entity_rows else pl.DataFrame()
    entities = entities.cast(RAW_ENTITY_SCHEMA).select(RAW_ENTITY_SCHEMA.keys())
    relations = pl.DataFrame(relation_rows, schema=RAW_RELATION_SCHEMA)
    notes: list[str] = []
    entities = _truncate(entities, "description", MAX_DESCRIPTION_CHARS, "entity description", path, notes)
    entities = _truncate(entities, "type", MAX_TYPE_CHARS, "entity type", path, notes)
    entities = _truncate(entities, "source_id", MAX_TYPE_CHARS, "source id", path, notes)
    relations = _truncate(relations, "description", MAX_DESCRIPTION_CHARS, "relation description", path, notes)
    relations = _truncate(relations, "keywords", MAX_LABEL_CHARS, "keyword list", path, notes)
    return RawGraph(entities=entities, relations=relations, source=str(path), notes=tuple(notes))


def read_lightrag_workdir(path: Path) -> RawGraph:
    """A LightRAG working directory: its GraphML file holds the graph."""
    with _reading(path):
        if not path.is_dir():
            raise KGSourceError(f"{path}: LightRAG working directory not found")
        graphml = path / LIGHTRAG_GRAPHML
        if not graphml.is_file():
            raise KGSourceError(f"{path}: no {LIGHTRAG_GRAPHML} in it (is this a LightRAG working directory?)")
        return read_lightrag_graphml(graphml)


def import_source(source: SourceSpec, root: Path) -> RawGraph:
    """Read a registry source with the importer of its kind. Every error is one KGSourceError line that names
    the file and, where there is one, the record; over-long descriptions are truncated (``RawGraph.notes``)."""
    path = root / source.path
    with _reading(path):
        if source.kind == "triples":
            raw = read_triples(path, root / source.entities if source.entities else None)
        elif source.kind == "lightrag_graphml":
            raw = read_lightrag_graphml(path)
        elif source.kind == "lightrag_rendering":
            raw = lightrag_records(render_lightrag(path), path)
        elif source.kind == "text":
            raise KGSourceError(f"{path}: a source of kind 'text' needs an LLM to become a graph: use "
                                "pipelines.kg.extract.extract_graph with a ChatClient (build_knowledge_graph does "
                                "this)")
        else:
            raw = read_lightrag_workdir(path)
    for note in raw.notes:
        log.info("%s", note)
    return raw
