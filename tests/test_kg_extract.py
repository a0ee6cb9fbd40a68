"""Text -> KG extraction: chunking, the tolerant record parsers, extract_graph over real files with a
scripted LLM, and the end-to-end build of a `text` domain (parquet + manifest, idempotent reruns)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.config import Params, load_params
from pipelines.domains import SourceSpec, load_registry
from pipelines.errors import KGSourceError, RegistryError
from pipelines.kg.build import build_knowledge_graph
from pipelines.kg.extract import (
    EXTRACT_TAG,
    LIGHTRAG_SYSTEM,
    TRIPLES_SYSTEM,
    Chunk,
    chunk_text,
    count_tokens,
    extract_graph,
    parse_lightrag_records,
    parse_triple_lines,
    read_chunks,
)
from pipelines.kg.importers import import_source
from pipelines.kg.model import assemble_graph, normalise_key
from pipelines.kg.store import read_kg
from pipelines.llm.base import ChatRequest, LLMError
from pipelines.llm.scripted import ScriptedChatClient, scripted_openai_app, serve_in_thread
from tests.conftest import DATA, TINY_REGISTRY, make_project

TEXT_DATA = DATA / "text_domain"
ORIGIN = "rivers.txt#chunk2"

# What the scripted "model" knows: entities it reports when their name is in the chunk, and links
# it reports when both ends are.
FACTS = {
    "Rhine": ("location", "The Rhine is a river that rises in the Swiss Alps."),
    "Basel": ("location", "Basel is a Swiss city on the Rhine."),
    "Cologne": ("location", "Cologne is one of the largest cities in Germany."),
    "North Sea": ("location", "The North Sea receives the Rhine and the Elbe."),
    "Elbe": ("location", "The Elbe begins in the Krkonose mountains."),
    "Dresden": ("location", "Dresden is a city on the Elbe."),
    "Hamburg": ("location", "Hamburg has one of the busiest ports in Europe."),
    "Vltava": ("location", "The Vltava is the longest river within the Czech Republic."),
    "Prague": ("location", "Prague is the Czech capital."),
}
LINKS = [("Rhine", "Basel", "flows through"), ("Rhine", "Cologne", "flows through"),
         ("Rhine", "North Sea", "flows into"), ("Elbe", "Dresden", "flows through"),
         ("Elbe", "Hamburg", "flows through"), ("Elbe", "North Sea", "flows into"),
         ("Vltava", "Prague", "flows through"), ("Vltava", "Elbe", "tributary of")]


def chunk_of(request: ChatRequest) -> str:
    user = request.messages[-1]["content"]
    return user.split("Text:\n", 1)[1].rsplit("\nOutput:", 1)[0]


def lightrag_reply(request: ChatRequest) -> str:
    """Well-formed LightRAG records for the chunk; the cities notes write names SHOUTED and quoted,
    so merging across files by normalised key is exercised."""
    text = chunk_of(request)
    notes = "Basel lies" in text or "city state" in text

    def written(name: str) -> str:
        return f'"{name.upper()}"' if notes else name

    records = [f'("entity"<|>{written(name)}<|>{type_}<|>'
               f'{f"{name} is named in the cities notes." if notes else description})'
               for name, (type_, description) in FACTS.items() if name in text]
    records += [f'("relationship"<|>{written(a)}<|>{written(b)}<|>{a} {label} {b}.<|>{label}<|>7)'
                for a, b, label in LINKS if a in text and b in text]
    return "##\n".join(records) + "##\n<|COMPLETE|>"


def triples_reply(request: ChatRequest) -> str:
    text = chunk_of(request)
    return "\n".join(f"{a} | {label} | {b}" for a, b, label in LINKS if a in text and b in text)


def text_source(tmp_path: Path, **options: object) -> SourceSpec:
    shutil.copytree(TEXT_DATA, tmp_path / "corpus")
    return SourceSpec(kind="text", path="corpus", **options)


# ------------------------------------------------------------------------------------------ chunking


def test_chunks_end_on_boundaries_and_respect_the_token_budget() -> None:
    text = (TEXT_DATA / "rivers.txt").read_text(encoding="utf-8")
    chunks = chunk_text(text, 60, 10, "rivers.txt")
    assert len(chunks) >= 3
    for chunk in chunks:
        assert chunk.text == text[chunk.start:chunk.end] and chunk.text == chunk.text.strip()
        assert chunk.tokens == count_tokens(chunk.text) <= 60
        assert chunk.id.startswith("chunk-") and chunk.source == "rivers.txt"
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start == 0 and chunks[-1].end == len(text.rstrip())
    # the first chunk ends with the first paragraph (a boundary in its second half), not mid-sentence
    assert chunks[0].text.endswith("near Rotterdam.")
    assert all(b.start < a.end for a, b in zip(chunks, chunks[1:], strict=False))  # consecutive chunks overlap
    assert chunks[0].origin == "rivers.txt#chunk1"


def test_chunking_is_deterministic_and_ids_are_stable() -> None:
    text = (TEXT_DATA / "rivers.txt").read_text(encoding="utf-8")
    first, again = chunk_text(text, 40, 5, "rivers.txt"), chunk_text(text, 40, 5, "rivers.txt")
    assert first == again
    assert len({c.id for c in first}) == len(first)
    elsewhere = chunk_text(text, 40, 5, "other.txt")
    assert [c.text for c in elsewhere] == [c.text for c in first]
    assert not {c.id for c in elsewhere} & {c.id for c in first}
    expected = "chunk-" + hashlib.sha256(f"rivers.txt\0{first[0].text}".encode()).hexdigest()[:32]
    assert first[0].id == expected


def test_chunking_without_boundaries_uses_exact_token_windows() -> None:
    text = " ".join(f"w{i}" for i in range(25))
    chunks = chunk_text(text, 10, 3, "flat.txt")
    assert [c.text.split()[0] for c in chunks] == ["w0", "w7", "w14", "w21"]
    assert [c.tokens for c in chunks] == [10, 10, 10, 4]
    assert chunk_text(text, 10, 0, "flat.txt")[1].text.split()[0] == "w10"


def test_one_chunk_for_short_text_and_none_for_blank() -> None:
    assert [c.text for c in chunk_text("  The Rhine flows.\n", 1200, 100, "a.txt")] == ["The Rhine flows."]
    assert chunk_text(" \n\t\n ", 1200, 100, "a.txt") == []
    with pytest.raises(ValueError, match="overlap"):
        chunk_text("x", 10, 10, "a.txt")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.sampled_from([*"ab .!?\n\"')", "\n\n", "word", "Ünï"]), max_size=150).map("".join),
       size=st.integers(1, 30), overlap=st.integers(0, 29))
def test_chunks_cover_every_token_in_order(text: str, size: int, overlap: int) -> None:
    overlap = min(overlap, size - 1)
    chunks = chunk_text(text, size, overlap, "f.txt")
    starts = {m.start(): i for i, m in enumerate(re.finditer(r"\w+|[^\w\s]", text))}
    covered = -1
    for chunk in chunks:
        assert chunk.text == text[chunk.start:chunk.end] and 1 <= chunk.tokens <= size
        first = starts[chunk.start]
        assert first <= covered + 1 and covered - first + 1 <= overlap  # no gap, at most `overlap` shared
        covered = first + chunk.tokens - 1
    assert covered == len(starts) - 1


# ------------------------------------------------------------------------------- LightRAG record parser

WELL_FORMED = """("entity"<|>Rhine<|>location<|>The Rhine rises in the Swiss Alps.)##
("entity"<|>Basel<|>location<|>Basel is a Swiss city on the Rhine (near France).)##
("relationship"<|>Rhine<|>Basel<|>The Rhine flows through Basel.<|>flows through, city<|>8)##
<|COMPLETE|>"""
RHINE = ("Rhine", "location", "The Rhine rises in the Swiss Alps.")
BASEL = ("Basel", "location", "Basel is a Swiss city on the Rhine (near France).")
FLOW = ("Rhine", "Basel", "flows through,city", "The Rhine flows through Basel.", 8.0)


def parsed(text: str) -> tuple[set, set, list[str]]:
    entities, relations, problems = parse_lightrag_records(text, ORIGIN)
    return ({(e.name, e.type, e.description) for e in entities},
            {(r.head, r.tail, r.keywords, r.description, r.weight) for r in relations}, problems)


def test_well_formed_records() -> None:
    assert parsed(WELL_FORMED) == ({RHINE, BASEL}, {FLOW}, [])


@pytest.mark.parametrize("reply", [
    pytest.param(WELL_FORMED.replace("(", "", 1).replace(".)##", ".##"), id="missing-parentheses"),
    pytest.param(WELL_FORMED.replace('("', '(("').replace(")##", "))##"), id="extra-parentheses"),
    pytest.param(WELL_FORMED.replace("<|>Rhine<|>location<|>The", '<|>"Rhine<|>\'location\'<|>"The')
                 .replace('"relationship"<|>Rhine', "relationship<|>'Rhine'"), id="stray-quotes"),
    pytest.param(WELL_FORMED.replace("<|>", "|"), id="bare-pipe-delimiters"),
    pytest.param(WELL_FORMED.replace("<|>", " <|> ").replace("<|>Basel<|>The", "<|>Basel|The"),
                 id="mixed-delimiters-and-spaces"),
    pytest.param(WELL_FORMED.replace("rises in the Swiss", "rises\n  in the Swiss")
                 .replace("<|>flows through", "\n<|>flows through"), id="records-split-over-lines"),
    pytest.param(WELL_FORMED.replace("##", ""), id="missing-separators"),
    pytest.param(WELL_FORMED.replace("##", " ## ").replace("\n", ""), id="all-on-one-line"),
    pytest.param(WELL_FORMED.replace("<|COMPLETE|>", ""), id="missing-complete-marker"),
    pytest.param(WELL_FORMED + "\n\nI found 2 entities and 1 relationship. Let me know if you need more!",
                 id="trailing-prose"),
    pytest.param(WELL_FORMED.replace("##\n<|COMPLETE|>", "\nThat is all I found in the text."),
                 id="trailing-prose-without-marker"),
    pytest.param("Here are the records:\n```text\n" + WELL_FORMED + "\n```\n", id="markdown-fence"),
    pytest.param("\n".join(f"- {line}" for line in WELL_FORMED.splitlines()), id="dash-bullets"),
    pytest.param("\n".join(f"{i}. {line}" for i, line in enumerate(WELL_FORMED.splitlines(), 1)),
                 id="numbered-list"),
    pytest.param(WELL_FORMED.replace("<|>Rhine<|>location", "<|>**Rhine**<|>Location"), id="bold-and-case"),
    pytest.param(WELL_FORMED.replace("<|COMPLETE|>", "<|complete|>").replace(")##", ")\n##"),
                 id="marker-case-and-late-separators"),
])
def test_tolerated_malformations(reply: str) -> None:
    assert parsed(reply) == ({RHINE, BASEL}, {FLOW}, [])


@pytest.mark.parametrize(("strength", "weight"), [
    ("", 1.0), ("strong", 1.0), ("8/10", 8.0), ("7.5 (explicit)", 7.5), ('"9"', 9.0), ("-3", 1.0), ("nan", 1.0),
])
def test_strength_missing_or_not_a_number_defaults_to_one(strength: str, weight: float) -> None:
    tail = f"<|>{strength}" if strength else ""
    _, relations, problems = parsed(f'("relationship"<|>Rhine<|>Basel<|>Flows.<|>flows through{tail})')
    assert relations == {("Rhine", "Basel", "flows through", "Flows.", weight)} and problems == []


@pytest.mark.parametrize(("record", "why"), [
    ('("entity"<|>Elbe<|>location)', "record 2 (entity): too few fields (2; need name, type, description)"),
    ('("entity"<|>Elbe)', "record 2 (entity): too few fields (1;"),
    ('("entity"<|>  ""  <|>location<|>Nameless.)', "record 2 (entity): empty name"),
    ('("relationship"<|>Rhine<|>Basel<|>Flows.)', "record 2 (relationship): too few fields (3;"),
    ('("relationship"<|><|>Basel<|>Flows.<|>flows<|>2)', "record 2 (relationship): empty source name"),
    ('("relationship"<|>Rhine<|>" "<|>Flows.<|>flows<|>2)', "record 2 (relationship): empty target name"),
    ('("relationship"<|>Rhine<|> rhine <|>Itself.<|>loops<|>2)', "record 2 (relationship): self loop"),
    ('("relationship"<|>Rhine<|>Basel<|>Flows.<|>9)', "record 2 (relationship): no keywords"),
    ('("relationship"<|>Rhine<|>Basel<|>Flows.<|>""<|>9)', "record 2 (relationship): empty keywords"),
    ('(Rhine<|>location<|>A record without its kind.)', "not an entity or relationship record"),
])
def test_unusable_records_are_skipped_with_a_problem_naming_the_origin(record: str, why: str) -> None:
    reply = f'("entity"<|>Rhine<|>location<|>The Rhine rises in the Swiss Alps.)##\n{record}##\n<|COMPLETE|>'
    entities, relations, problems = parsed(reply)
    assert entities == {RHINE} and relations == set()
    assert len(problems) == 1 and problems[0].startswith(f"{ORIGIN}: ") and why in problems[0], problems


def test_replies_without_records_are_problems_not_errors() -> None:
    assert parsed("") == (set(), set(), [f"{ORIGIN}: empty reply"])
    entities, relations, problems = parsed("I could not find any entities in this text.")
    assert (entities, relations) == (set(), set()) and problems[0].startswith(f"{ORIGIN}: no records in the reply")
    not_text = parse_lightrag_records(None, ORIGIN)  # type: ignore[arg-type]
    assert not_text[2] == [f"{ORIGIN}: reply is not text (NoneType)"]


RECORD_BITS = ['("entity"', '"relationship"', "relation", "<|>", "|", "##", "<|COMPLETE|>", "(", ")", '"', "'",
               "\n", "\n\n", " ", "```", "- ", "1. ", "Rhine", "rhine", "Basel", "8", "x.y", "**", "<", ">"]


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(RECORD_BITS), max_size=60).map("".join)))
def test_parsers_never_raise_on_arbitrary_text(text: str) -> None:
    for parse in (parse_lightrag_records, parse_triple_lines):
        entities, relations, problems = parse(text, ORIGIN)
        assert all(normalise_key(e.name) for e in entities)
        for relation in relations:
            assert normalise_key(relation.head) and normalise_key(relation.tail) and relation.keywords
            assert normalise_key(relation.head) != normalise_key(relation.tail)
            assert relation.weight > 0
        assert all(isinstance(p, str) and p.startswith(f"{ORIGIN}: ") for p in problems)


# ------------------------------------------------------------------------------- EoG triple line parser


def triples(text: str) -> tuple[set, list[str]]:
    _, relations, problems = parse_triple_lines(text, ORIGIN)
    return {(r.head, r.keywords, r.tail, r.description, r.weight) for r in relations}, problems


def test_triple_lines_in_the_forms_models_write() -> None:
    reply = """Here are the triples:
```
1. Rhine | flows through | Basel
- "Elbe" | flows into | North Sea
* (Vltava | tributary of | Elbe)
Prague <|> capital of <|> Czech Republic
Hamburg | port on | Elbe | Ships sail up the Elbe.
Dresden | lies on | Elbe | 0.5
```
| head | relation | tail |
|------|----------|------|
| Cologne | lies on | Rhine |
That is all."""
    found, problems = triples(reply)
    assert found == {
        ("Rhine", "flows through", "Basel", "", 1.0), ("Elbe", "flows into", "North Sea", "", 1.0),
        ("Vltava", "tributary of", "Elbe", "", 1.0), ("Prague", "capital of", "Czech Republic", "", 1.0),
        ("Hamburg", "port on", "Elbe", "Ships sail up the Elbe.", 1.0), ("Dresden", "lies on", "Elbe", "", 0.5),
        ("Cologne", "lies on", "Rhine", "", 1.0),
    }
    assert problems == []
    entities, _, _ = parse_triple_lines(reply, ORIGIN)
    assert {"Rhine", "Basel", "North Sea", "Czech Republic"} <= {e.name for e in entities}


def test_bad_triple_lines_are_problems() -> None:
    found, problems = triples("Rhine | Basel\nRhine | flows | rhine\n | flows | Basel\nRhine |  | Basel\n"
                              "Elbe | flows into | North Sea")
    assert found == {("Elbe", "flows into", "North Sea", "", 1.0)}
    assert [p.split(", skipped")[0] for p in problems] == [
        f"{ORIGIN}: line 1: too few fields (2; need head | relation | tail)",
        f"{ORIGIN}: line 2: self loop ('Rhine' to itself)",
        f"{ORIGIN}: line 3: empty source name",
        f"{ORIGIN}: line 4: empty relation",
    ]
    assert triples("No triples here.")[1][0].startswith(f"{ORIGIN}: no 'head | relation | tail' lines")


# ------------------------------------------------------------------------------------ extract_graph


def test_extract_graph_over_real_files(tmp_path: Path) -> None:
    spec = text_source(tmp_path, chunk_tokens=60, chunk_overlap=10)
    client = ScriptedChatClient(lightrag_reply)
    raw = extract_graph(spec, tmp_path, client, progress=False)
    chunks = read_chunks(spec, tmp_path)
    assert {c.source for c in chunks} == {"cities.md", "rivers.txt"}  # ABOUT is not text
    assert len(client.requests) == len(chunks) >= 4
    for request, chunk in zip(client.requests, chunks, strict=True):
        assert request.temperature == 0.0 and request.tag == EXTRACT_TAG
        assert request.messages[0] == {"role": "system", "content": LIGHTRAG_SYSTEM}
        assert chunk_of(request) == chunk.text
    by_id = {c.id: c.origin for c in chunks}
    assert raw.entities.height and raw.relations.height
    assert all(by_id[s] == o for s, o in raw.entities.select("source_id", "origin").iter_rows())
    assert set(raw.relations["origin"]) <= set(by_id.values())
    assert raw.summary.chunks == len(chunks) and raw.summary.files == 2 and raw.summary.failed_chunks == 0
    assert raw.summary.problems == [] and raw.summary.model == "scripted"

    kg = assemble_graph(raw, directed=spec.is_directed)
    rhine = kg.entities.filter(pl.col("key") == "rhine").to_dicts()
    assert len(rhine) == 1  # "RHINE" (quoted, cities notes) and "Rhine" (rivers) are one entity
    assert set(rhine[0]["description"].split("\n")) == {FACTS["Rhine"][1], "Rhine is named in the cities notes."}
    assert rhine[0]["type"] == "location" and len(rhine[0]["source_ids"]) >= 2
    assert kg.entities["key"].is_unique().all()
    names = dict(zip(kg.entities["id"], kg.entities["key"], strict=True))
    edges = {(names[s], names[d], k) for s, d, k in kg.relations.select("src", "dst", "keywords").iter_rows()}
    assert {tuple(sorted((a.lower(), b.lower()))) + (label,) for a, b, label in LINKS} == \
        {tuple(sorted((s, d))) + (k,) for s, d, k in edges}


def test_duplicates_merge_by_key_with_descriptions_joined(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("First paragraph about the Rhine.\n\nSecond paragraph about the Rhine.\n",
                                    encoding="utf-8")
    replies = ['("entity"<|>Rhine<|>location<|>A river.)##("entity"<|>Basel<|>location<|>A city.)##'
               '("relationship"<|>Rhine<|>Basel<|>Flows through it.<|>flows through<|>2)##<|COMPLETE|>',
               '("entity"<|>  rhine <|>LOCATION<|>A long river.)##("entity"<|>"RHINE"<|>location<|>A river.)##'
               '("relationship"<|>basel<|>RHINE<|>Lies on it.<|>flows through<|>3)##<|COMPLETE|>']
    spec = SourceSpec(kind="text", path="a.txt", chunk_tokens=6, chunk_overlap=0)
    raw = extract_graph(spec, tmp_path, ScriptedChatClient(replies), progress=False)
    kg = assemble_graph(raw, directed=False)
    rows = {r["key"]: r for r in kg.entities.to_dicts()}
    assert sorted(rows) == ["basel", "rhine"]
    assert rows["rhine"]["name"] == "Rhine" and rows["rhine"]["description"] == "A river.\nA long river."
    assert len(rows["rhine"]["source_ids"]) == 2
    assert kg.relations.to_dicts() == [{"src": rows["rhine"]["id"], "dst": rows["basel"]["id"],
                                        "keywords": "flows through", "description": "Flows through it.\nLies on it.",
                                        "weight": 5.0}]


def test_triples_format_extraction(tmp_path: Path) -> None:
    spec = text_source(tmp_path, extract_format="triples", directed=True)
    client = ScriptedChatClient(triples_reply)
    raw = extract_graph(spec, tmp_path, client, progress=False)
    assert client.requests[0].messages[0]["content"] == TRIPLES_SYSTEM
    kg = assemble_graph(raw, directed=spec.is_directed)
    assert kg.directed and kg.relations.height == len(LINKS)
    assert set(kg.relations["keywords"]) == {"flows through", "flows into", "tributary of"}


def test_malformed_replies_become_problems_in_the_summary(tmp_path: Path) -> None:
    spec = text_source(tmp_path, chunk_tokens=60, chunk_overlap=10)

    def reply(request: ChatRequest) -> str:
        good = lightrag_reply(request)
        return good + '\n("entity"<|>Orphan)\n("relationship"<|>Rhine<|>rhine<|>x<|>y<|>1)' \
            if "Swiss Alps" in chunk_of(request) else good

    raw = extract_graph(spec, tmp_path, ScriptedChatClient(reply), progress=False)
    problems = raw.summary.problems
    assert raw.summary.problem_count == len(problems) == 2
    assert problems[0].startswith("rivers.txt#chunk1: record ") and "too few fields" in problems[0]
    assert "self loop" in problems[1]


def test_some_chunks_failing_are_counted_and_the_rest_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = text_source(tmp_path, chunk_tokens=60, chunk_overlap=10)

    def reply(request: ChatRequest) -> str:
        if "Vltava" in chunk_of(request):
            raise LLMError("HTTP 500 from the endpoint")
        return lightrag_reply(request)

    with caplog.at_level(logging.WARNING, logger="pipelines.kg.extract"):
        raw = extract_graph(spec, tmp_path, ScriptedChatClient(reply), progress=False)
    failed = sum("Vltava" in c.text for c in read_chunks(spec, tmp_path))
    assert failed >= 1 and raw.summary.failed_chunks == failed
    assert raw.summary.first_error and "HTTP 500" in raw.summary.first_error
    assert raw.summary.problems[0].startswith("rivers.txt#chunk") and "request failed" in raw.summary.problems[0]
    assert f"{failed} of {raw.summary.chunks} chunk(s) failed" in caplog.text
    assert "rhine" in set(assemble_graph(raw, directed=False).entities["key"])


def test_all_chunks_failing_is_a_source_error(tmp_path: Path) -> None:
    spec = text_source(tmp_path, chunk_tokens=60, chunk_overlap=10)
    n = len(read_chunks(spec, tmp_path))

    def reply(request: ChatRequest) -> str:
        raise LLMError("connection refused")

    with pytest.raises(KGSourceError, match=rf"failed for all {n} chunk\(s\); first error \(cities.md#chunk1\): "
                                            "connection refused"):
        extract_graph(spec, tmp_path, ScriptedChatClient(reply), progress=False)


def test_replies_without_any_record_are_a_source_error(tmp_path: Path) -> None:
    spec = text_source(tmp_path)
    with pytest.raises(KGSourceError, match="no usable records"):
        extract_graph(spec, tmp_path, ScriptedChatClient(lambda r: "Sorry, I cannot help."), progress=False)


def test_bad_text_files_are_errors_naming_the_file(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_text("The Rhine flows.", encoding="utf-8")
    (corpus / "latin1.txt").write_bytes("The Rhine passes K\u00f6ln.\n".encode("latin-1"))
    client = ScriptedChatClient(lightrag_reply)
    spec = SourceSpec(kind="text", path="corpus")
    with pytest.raises(KGSourceError, match=r"latin1\.txt: line 1 is not valid UTF-8"):
        extract_graph(spec, tmp_path, client, progress=False)
    (corpus / "latin1.txt").write_bytes(b"")
    with pytest.raises(KGSourceError, match=r"latin1\.txt: text file is empty"):
        extract_graph(spec, tmp_path, client, progress=False)
    (corpus / "latin1.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(KGSourceError, match=r"latin1\.txt: text file has no text"):
        extract_graph(spec, tmp_path, client, progress=False)
    with pytest.raises(KGSourceError, match=r"missing\.txt: text file not found"):
        extract_graph(SourceSpec(kind="text", path="missing.txt"), tmp_path, client, progress=False)
    (tmp_path / "notes.rst").write_text("The Rhine.", encoding="utf-8")
    with pytest.raises(KGSourceError, match=r"notes\.rst: a text source must be a \.txt or \.md file"):
        extract_graph(SourceSpec(kind="text", path="notes.rst"), tmp_path, client, progress=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "data.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(KGSourceError, match=r"empty: no \.txt or \.md files"):
        extract_graph(SourceSpec(kind="text", path="empty"), tmp_path, client, progress=False)
    assert client.requests == []  # nothing is sent before every file has been read


def test_import_source_refuses_text_sources(tmp_path: Path) -> None:
    with pytest.raises(KGSourceError, match="needs an LLM.*extract_graph"):
        import_source(text_source(tmp_path), tmp_path)


# ------------------------------------------------------------------------------ the `text` source kind


def test_text_source_options_and_defaults() -> None:
    spec = SourceSpec(kind="text", path="corpus")
    assert (spec.extract_format, spec.chunk_tokens, spec.chunk_overlap, spec.is_directed) == ("lightrag", 1200, 100,
                                                                                              False)
    assert SourceSpec(kind="text", path="c", directed=True).is_directed
    assert spec.model_dump(mode="json", exclude_none=True) == {
        "kind": "text", "path": "corpus", "extract_format": "lightrag", "chunk_tokens": 1200, "chunk_overlap": 100}
    # other kinds neither take nor dump the text options (their registries and manifests are unchanged)
    assert SourceSpec(kind="triples", path="t.csv").model_dump(mode="json") == {
        "kind": "triples", "path": "t.csv", "entities": None, "directed": None}


@pytest.mark.parametrize(("source", "fragment"), [
    ("{kind: text, path: c, extract_format: eog}", "source.extract_format"),
    ("{kind: text, path: c, chunk_tokens: 0}", "source.chunk_tokens"),
    ("{kind: text, path: c, chunk_tokens: yes}", "source.chunk_tokens"),
    ("{kind: text, path: c, chunk_overlap: -1}", "source.chunk_overlap"),
    ("{kind: text, path: c, chunk_tokens: 100, chunk_overlap: 100}", "chunk_overlap (100) must be smaller than "
                                                                     "chunk_tokens (100)"),
    ("{kind: text, path: c, entities: e.csv}", "entities: not used by source kind 'text'"),
    ("{kind: triples, path: t.csv, chunk_tokens: 10}", "chunk_tokens: only for source kind 'text'"),
    ("{kind: text, path: c, chunk_size: 10}", "source.chunk_size"),
])
def test_bad_text_source_options_name_the_field(tmp_path: Path, source: str, fragment: str) -> None:
    path = tmp_path / "domains.yaml"
    path.write_text(f"domains:\n  rivers:\n    source: {source}\n", encoding="utf-8")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert fragment in str(info.value)


# ------------------------------------------------------------------------------------ build wiring

TEXT_REGISTRY = TINY_REGISTRY + """  rivers:
    description: Rivers and cities, extracted from text.
    source:
      kind: text
      path: kg_assets/rivers
      chunk_tokens: 60
      chunk_overlap: 10
"""


@pytest.fixture()
def text_project(tmp_path: Path) -> Params:
    root = make_project(tmp_path / "project", TEXT_REGISTRY)
    shutil.copytree(TEXT_DATA, root / "kg_assets" / "rivers")
    return load_params(root / "params.yaml")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_of_a_text_domain(text_project: Params) -> None:
    params = text_project
    domain = load_registry(params.registry_path).get("rivers")
    client = ScriptedChatClient(lightrag_reply)
    result = build_knowledge_graph(domain, params, client=client)
    folder = params.root / "artifacts" / "kg" / "rivers"
    assert not result.skipped and result.folder == folder
    assert sorted(p.name for p in folder.iterdir()) == ["entities.parquet", "manifest.json", "relations.parquet"]
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    source = params.root / "kg_assets" / "rivers"
    assert manifest["inputs"] == {"kg_assets/rivers/cities.md": sha256(source / "cities.md"),
                                  "kg_assets/rivers/rivers.txt": sha256(source / "rivers.txt")}
    assert manifest["params"]["source"] == {"kind": "text", "path": "kg_assets/rivers", "entities": None,
                                            "directed": None, "extract_format": "lightrag", "chunk_tokens": 60,
                                            "chunk_overlap": 10}
    extraction = manifest["params"]["extraction"]
    assert extraction["model"] == "scripted" and extraction["format"] == "lightrag"
    assert (extraction["chunk_tokens"], extraction["chunk_overlap"]) == (60, 10) and extraction["prompt_sha256"]
    metadata = manifest["metadata"]
    assert metadata["directed"] is False and metadata["description"] == "Rivers and cities, extracted from text."
    assert metadata["extraction"]["chunks"] == len(client.requests) and metadata["extraction"]["failed_chunks"] == 0
    kg = read_kg(folder)
    assert not kg.directed and manifest["rows"] == {"entities": kg.num_entities, "relations": kg.relations.height}
    assert set(kg.entities["key"]) == {name.lower() for name in FACTS}
    assert kg.relations.height == len(LINKS)

    sent = len(client.requests)
    assert build_knowledge_graph(domain, params, client=client).skipped and len(client.requests) == sent
    other_model = ScriptedChatClient(lightrag_reply, model="another-model")
    assert not build_knowledge_graph(domain, params, client=other_model).skipped
    finer = domain.model_copy(update={"source": domain.source.model_copy(update={"chunk_tokens": 40})})
    assert not build_knowledge_graph(finer, params, client=client).skipped
    assert build_knowledge_graph(finer, params, client=client).skipped
    with (source / "rivers.txt").open("a", encoding="utf-8") as handle:
        handle.write("\nThe Main joins the Rhine at Mainz.\n")
    assert not build_knowledge_graph(finer, params, client=client).skipped


def test_build_through_the_llm_factory_and_cache(text_project: Params, monkeypatch: pytest.MonkeyPatch) -> None:
    """No client given: params.llm decides (here the real OpenAI client against the scripted server), behind the
    disk cache, so a forced rebuild sends only what the cache refused to keep: a reply cut at max_tokens and one
    without any record are used once (their problems counted) but never replayed (issue 50)."""
    for name in ("OMNE_LLM_BASE_URL", "OMNE_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    domain = load_registry(text_project.registry_path).get("rivers")

    def handler(body: dict) -> dict:
        request = ChatRequest(messages=body["messages"])
        if "Prague" in chunk_of(request):
            return {"text": "I cannot extract anything from this text."}
        reply = {"text": lightrag_reply(request)}
        return {**reply, "finish_reason": "length"} if "Krkonose" in chunk_of(request) else reply

    app = scripted_openai_app(handler)
    with serve_in_thread(app) as url:
        llm = text_project.llm.model_copy(update={"base_url": f"{url}/v1", "model": "test-model", "max_retries": 0,
                                                  "timeout_s": 10.0})
        params = text_project.model_copy(update={"llm": llm})
        first = build_knowledge_graph(domain, params)
        sent = app.state.log.total
        forced = build_knowledge_graph(domain, params, force=True)
    summary = first.manifest.metadata["extraction"]
    refused = summary["truncated_replies"] + 1  # the cut replies and the one without records
    assert summary["truncated_replies"] >= 1 and "cut at max_tokens" in " ".join(summary["problems"])
    assert sent == summary["chunks"] and app.state.log.total == sent + refused  # only those were asked again
    assert forced.manifest.metadata["extraction"]["cached_replies"] == summary["chunks"] - refused
    assert first.manifest.params["extraction"]["model"] == "test-model"
    assert (params.artifacts_dir / "cache" / "llm").is_dir()
    names = read_kg(first.folder).entities["name"].to_list()
    assert "Cologne" in names and "Prague" not in names  # Prague is only in the chunk of the reply without records


def test_chunk_model_is_frozen() -> None:
    chunk = chunk_text("The Rhine flows.", 10, 0, "a.txt")[0]
    assert isinstance(chunk, Chunk)
    with pytest.raises(ValueError):
        chunk.text = "changed"  # type: ignore[misc]


def test_record_words_inside_fields_do_not_start_records() -> None:
    reply = ('("entity"<|>Basel<|>location<|>A city, not a legal entity<|>)##\n'
             '("relationship"<|>Rhine<|>Basel<|>Their relation | entity|bond.<|>flows through<|>4)## '
             '("entity"<|>Rhine<|>location<|>A river.)("entity"<|>Elbe<|>location<|>Another river.)')
    entities, relations, problems = parsed(reply)
    assert entities == {("Basel", "location", "A city, not a legal entity"), ("Rhine", "location", "A river."),
                        ("Elbe", "location", "Another river.")}
    assert relations == {("Rhine", "Basel", "flows through", "Their relation | entity | bond.", 4.0)}
    assert problems == []
