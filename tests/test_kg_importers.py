"""KG importers and entity merging, on real files written to tmp_path (triple tables, LightRAG GraphML)."""

from __future__ import annotations

import csv
import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import polars as pl
import pytest

from pipelines.config import CheckParams
from pipelines.domains import Domain, Registry, SourceSpec, check_domain_name, load_registry
from pipelines.errors import KGSourceError, RegistryError
from pipelines.kg.checks import run_kg_checks
from pipelines.kg.importers import (
    LIGHTRAG_GRAPHML,
    import_source,
    read_entities,
    read_lightrag_graphml,
    read_lightrag_workdir,
    read_triples,
)
from pipelines.kg.model import ENTITY_SCHEMA, RELATION_SCHEMA, KnowledgeGraph, assemble_graph, normalise_key

TRIPLES = [
    {"head": "Earth", "relation": "orbits", "tail": "Sun", "description": "Third planet.", "weight": "2.5"},
    {"head": "Moon", "relation": "orbits", "tail": "Earth", "description": "Only natural satellite.",
     "weight": "1"},
    {"head": "Mars", "relation": "orbits", "tail": "Sun", "description": "Fourth planet, \"red\".",
     "weight": "0.5"},
    {"head": "Phobos", "relation": "orbits", "tail": "Mars", "description": "Inner moon.", "weight": "3"},
]


def write_csv(path: Path, rows: list[dict[str, str]], delimiter: str = ",") -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter=delimiter,
                                quoting=csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE,
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def entity_pairs(kg: KnowledgeGraph) -> list[tuple[int, str]]:
    return list(zip(kg.entities["id"].to_list(), kg.entities["name"].to_list(), strict=True))


def relation_triples(kg: KnowledgeGraph) -> set[tuple[str, str, str]]:
    names = dict(entity_pairs(kg))
    return {(names[s], k, names[d]) for s, d, k in kg.relations.select("src", "dst", "keywords").iter_rows()}


# --------------------------------------------------------------------------------------------- triples


def test_csv_tsv_parquet_and_jsonl_give_the_same_graph(tmp_path: Path) -> None:
    csv_path = write_csv(tmp_path / "triples.csv", TRIPLES)
    tsv_rows = [{**row, "description": row["description"].replace('"', "")} for row in TRIPLES]
    csv_plain = write_csv(tmp_path / "plain.csv", tsv_rows)
    tsv_path = write_csv(tmp_path / "triples.tsv", tsv_rows, delimiter="\t")
    parquet_path = tmp_path / "triples.parquet"
    pl.DataFrame(TRIPLES).with_columns(pl.col("weight").cast(pl.Float64)).write_parquet(parquet_path)
    jsonl_path = tmp_path / "triples.jsonl"
    jsonl_path.write_text("".join(json.dumps({**row, "weight": float(row["weight"])}) + "\n" for row in TRIPLES),
                          encoding="utf-8")

    graphs = {path.name: assemble_graph(read_triples(path), directed=True)
              for path in (csv_path, parquet_path, jsonl_path)}
    reference = graphs["triples.csv"]
    assert reference.num_entities == 5
    assert reference.entities["id"].to_list() == [0, 1, 2, 3, 4]
    assert reference.entities["key"].to_list() == ["earth", "mars", "moon", "phobos", "sun"]
    assert reference.relations.height == 4
    assert sorted(reference.relations["weight"].to_list()) == [0.5, 1.0, 2.5, 3.0]
    assert "Fourth planet, \"red\"." in reference.relations["description"].to_list()
    for name, kg in graphs.items():
        assert kg.entities.drop("source_ids").equals(reference.entities.drop("source_ids")), name
        assert kg.relations.equals(reference.relations), name
        assert set(kg.entities["source_ids"].explode().to_list()) == {name}
    # the TSV (no quoting in TSV) against the same content as CSV
    tsv = assemble_graph(read_triples(tsv_path), directed=True)
    plain = assemble_graph(read_triples(csv_plain), directed=True)
    assert tsv.relations.equals(plain.relations)
    assert tsv.entities.drop("source_ids").equals(plain.entities.drop("source_ids"))


def test_directed_triples_keep_their_direction(tmp_path: Path) -> None:
    kg = assemble_graph(read_triples(write_csv(tmp_path / "t.csv", TRIPLES)), directed=True)
    assert relation_triples(kg) == {("Earth", "orbits", "Sun"), ("Moon", "orbits", "Earth"),
                                    ("Mars", "orbits", "Sun"), ("Phobos", "orbits", "Mars")}
    ids = {name: i for i, name in entity_pairs(kg)}
    earth_sun = kg.relations.filter((pl.col("src") == ids["Earth"]) & (pl.col("dst") == ids["Sun"]))
    assert earth_sun.height == 1 and ids["Earth"] < ids["Sun"]
    moon_earth = kg.relations.filter(pl.col("src") == ids["Moon"])
    assert moon_earth["dst"].to_list() == [ids["Earth"]]  # src > dst kept as is in a directed graph


def test_column_aliases_subject_predicate_object(tmp_path: Path) -> None:
    canonical = assemble_graph(read_triples(write_csv(tmp_path / "a.csv", TRIPLES)), directed=True)
    aliased_rows = [{"Subject": r["head"], "predicate": r["relation"], "OBJECT": r["tail"],
                     "description": r["description"], "weight": r["weight"]} for r in TRIPLES]
    aliased = assemble_graph(read_triples(write_csv(tmp_path / "b.csv", aliased_rows)), directed=True)
    assert aliased.relations.equals(canonical.relations)
    assert aliased.entities.drop("source_ids").equals(canonical.entities.drop("source_ids"))
    # LightRAG-style column names for an edge list
    lightrag_rows = [{"source": r["head"], "target": r["tail"], "keywords": r["relation"]} for r in TRIPLES]
    edge_list = assemble_graph(read_triples(write_csv(tmp_path / "c.csv", lightrag_rows)), directed=True)
    assert relation_triples(edge_list) == relation_triples(canonical)


def test_entities_file_supplies_types_and_descriptions(tmp_path: Path) -> None:
    triples = write_csv(tmp_path / "triples.csv", TRIPLES)
    entities = write_csv(tmp_path / "entities.csv", [
        {"entity_name": "Earth", "entity_type": "planet", "description": "Third rock."},
        {"entity_name": "SUN", "entity_type": "star", "description": "Our star."},
        {"entity_name": "Pluto", "entity_type": "dwarf planet", "description": "Not in any triple."},
        {"entity_name": "Moon", "entity_type": "", "description": ""},
    ])
    kg = assemble_graph(read_triples(triples, entities), directed=True)
    rows = {row["key"]: row for row in kg.entities.iter_rows(named=True)}
    assert set(rows) == {"earth", "mars", "moon", "phobos", "pluto", "sun"}
    assert kg.entities["id"].to_list() == list(range(6))
    assert rows["earth"]["type"] == "planet" and rows["earth"]["description"] == "Third rock."
    assert rows["sun"]["type"] == "star" and rows["sun"]["name"] == "SUN"  # the entity table's spelling first
    assert rows["pluto"]["description"] == "Not in any triple." and rows["pluto"]["type"] == "dwarf planet"
    assert rows["moon"]["type"] == "" and rows["moon"]["description"] == ""
    assert rows["mars"]["type"] == "" and rows["mars"]["description"] == ""
    assert rows["earth"]["source_ids"] == ["entities.csv", "triples.csv"]
    assert rows["pluto"]["source_ids"] == ["entities.csv"]
    # the isolated entity from the entity table has no relation
    pluto = rows["pluto"]["id"]
    assert kg.relations.filter((pl.col("src") == pluto) | (pl.col("dst") == pluto)).height == 0


def test_read_entities_accepts_jsonl_and_parquet(tmp_path: Path) -> None:
    records = [{"name": "Io", "type": "moon", "description": "Volcanic."}, {"name": "Europa", "type": "moon"}]
    jsonl = tmp_path / "e.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    parquet = tmp_path / "e.parquet"
    pl.DataFrame(records).write_parquet(parquet)
    for path in (jsonl, parquet):
        frame = read_entities(path)
        assert frame["name"].to_list() == ["Io", "Europa"]
        assert frame["type"].to_list() == ["moon", "moon"]
        assert frame["description"].to_list() == ["Volcanic.", ""]
    assert read_entities(jsonl)["origin"].to_list() == ["e.jsonl:1", "e.jsonl:2"]
    assert read_entities(parquet)["origin"].to_list() == ["e.parquet:row 1", "e.parquet:row 2"]


def test_weight_column_defaults_and_duplicate_triples_are_summed(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "w.csv", [
        {"head": "A", "relation": "r", "tail": "B", "weight": "2.5"},
        {"head": "A", "relation": "r", "tail": "C", "weight": ""},
        {"head": "a", "relation": "r", "tail": " b ", "weight": "0.5"},  # same triple after normalisation
        {"head": "B", "relation": "s", "tail": "C", "weight": "4"},
    ])
    kg = assemble_graph(read_triples(path), directed=True)
    weights = {(s, d, k): w for s, d, k, w in kg.relations.select("src", "dst", "keywords", "weight").iter_rows()}
    assert weights == {(0, 1, "r"): 3.0, (0, 2, "r"): 1.0, (1, 2, "s"): 4.0}
    no_weight = write_csv(tmp_path / "nw.csv", [{"head": "A", "relation": "r", "tail": "B"}])
    assert assemble_graph(read_triples(no_weight), directed=True).relations["weight"].to_list() == [1.0]
    assert kg.relations.schema == pl.Schema(RELATION_SCHEMA)


def test_head_and_tail_types_and_descriptions_columns(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", [
        {"head": "Io", "relation": "orbits", "tail": "Jupiter", "head_type": "moon", "tail_type": "planet",
         "head_description": "Volcanic moon.", "tail_description": "Gas giant."},
        {"head": "Europa", "relation": "orbits", "tail": "jupiter", "head_type": "moon", "tail_type": "",
         "head_description": "Icy moon.", "tail_description": "Largest planet."},
    ])
    kg = assemble_graph(read_triples(path), directed=True)
    rows = {row["key"]: row for row in kg.entities.iter_rows(named=True)}
    assert rows["jupiter"]["type"] == "planet"
    assert rows["jupiter"]["description"] == "Gas giant.\nLargest planet."
    assert rows["io"]["description"] == "Volcanic moon."


# --------------------------------------------------------------------------------------------- LightRAG


def lightrag_graph() -> nx.Graph:
    graph = nx.Graph()
    graph.add_node("PARIS", entity_id="PARIS", entity_type="geo",
                   description="Capital of France.<SEP>City on the Seine.<SEP>Capital of France.",
                   source_id="chunk-1<SEP>chunk-2", file_path="doc.txt", created_at=1700000000)
    graph.add_node("FRANCE", entity_id="FRANCE", entity_type="geo", description="A country in Europe.",
                   source_id="chunk-1", file_path="doc.txt", created_at=1700000000)
    graph.add_node("SEINE", entity_id="SEINE", entity_type="geo", description="A river.",
                   source_id="chunk-2", file_path="doc.txt", created_at=1700000000)
    graph.add_edge("PARIS", "FRANCE", weight=2.0,
                   description="Paris is the capital of France.<SEP>The French capital.",
                   keywords="capital city,located in<SEP>capital city", source_id="chunk-1<SEP>chunk-3")
    graph.add_edge("SEINE", "PARIS", weight=1.0, description="The Seine flows through Paris.",
                   keywords="flows through", source_id="chunk-2")
    return graph


def write_handmade_graphml(path: Path) -> Path:
    """A LightRAG-like GraphML written element by element, with an edge whose source sorts after its target."""
    ns = "http://graphml.graphdrawing.org/xmlns"
    ET.register_namespace("", ns)
    root = ET.Element(f"{{{ns}}}graphml")
    keys = [("d0", "node", "entity_id"), ("d1", "node", "entity_type"), ("d2", "node", "description"),
            ("d3", "node", "source_id"), ("d4", "edge", "weight"), ("d5", "edge", "description"),
            ("d6", "edge", "keywords"), ("d7", "edge", "source_id")]
    for key_id, target, name in keys:
        ET.SubElement(root, f"{{{ns}}}key", id=key_id, attrib={"for": target, "attr.name": name,
                                                               "attr.type": "double" if name == "weight" else "string"})
    graph = ET.SubElement(root, f"{{{ns}}}graph", edgedefault="undirected")

    def node(name: str, etype: str, description: str, source: str) -> None:
        element = ET.SubElement(graph, f"{{{ns}}}node", id=name)
        for key_id, value in (("d0", name), ("d1", etype), ("d2", description), ("d3", source)):
            ET.SubElement(element, f"{{{ns}}}data", key=key_id).text = value

    node("ZETA", "star", "A bright star.", "chunk-9")
    node("ALPHA", "star", "Another star.<SEP>Binary system.", "chunk-8<SEP>chunk-9")
    edge = ET.SubElement(graph, f"{{{ns}}}edge", source="ZETA", target="ALPHA")
    for key_id, value in (("d4", "3.5"), ("d5", "Zeta and Alpha form a pair."), ("d6", "pair"), ("d7", "chunk-9")):
        ET.SubElement(edge, f"{{{ns}}}data", key=key_id).text = value
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


def test_lightrag_graphml_splits_sep_values(tmp_path: Path) -> None:
    path = tmp_path / "graph.graphml"
    nx.write_graphml(lightrag_graph(), path)
    kg = assemble_graph(read_lightrag_graphml(path), directed=False)
    assert kg.entities["key"].to_list() == ["france", "paris", "seine"]
    rows = {row["name"]: row for row in kg.entities.iter_rows(named=True)}
    assert rows["PARIS"]["description"] == "Capital of France.\nCity on the Seine."
    assert rows["PARIS"]["source_ids"] == ["chunk-1", "chunk-2"]
    assert rows["PARIS"]["type"] == "geo"
    assert rows["FRANCE"]["source_ids"] == ["chunk-1"]
    ids = {name: row["id"] for name, row in rows.items()}
    relations = {(s, d): (k, desc, w) for s, d, k, desc, w in
                 kg.relations.select("src", "dst", "keywords", "description", "weight").iter_rows()}
    assert relations == {  # undirected edges keep the orientation the file wrote them in
        (ids["PARIS"], ids["FRANCE"]): ("capital city,located in",
                                        "Paris is the capital of France.\nThe French capital.", 2.0),
        (ids["PARIS"], ids["SEINE"]): ("flows through", "The Seine flows through Paris.", 1.0),
    }
    assert kg.entities.schema == pl.Schema(ENTITY_SCHEMA)


def test_handwritten_graphml_stores_undirected_edge_once_as_written(tmp_path: Path) -> None:
    path = write_handmade_graphml(tmp_path / "stars.graphml")
    raw = read_lightrag_graphml(path)
    assert raw.relations["head"].to_list() == ["ZETA"] and raw.relations["tail"].to_list() == ["ALPHA"]
    kg = assemble_graph(raw, directed=False)
    assert entity_pairs(kg) == [(0, "ALPHA"), (1, "ZETA")]
    assert kg.relations.select("src", "dst", "weight").rows() == [(1, 0, 3.5)]  # ZETA -- ALPHA, as written
    assert kg.entities.filter(pl.col("name") == "ALPHA")["description"].to_list() == ["Another star.\nBinary system."]
    assert kg.entities.filter(pl.col("name") == "ALPHA")["source_ids"].to_list() == [["chunk-8", "chunk-9"]]
    directed = assemble_graph(raw, directed=True)
    assert directed.relations.select("src", "dst").rows() == [(1, 0)]


def test_lightrag_workdir_and_import_source(tmp_path: Path) -> None:
    workdir = tmp_path / "rag_storage"
    workdir.mkdir()
    nx.write_graphml(lightrag_graph(), workdir / LIGHTRAG_GRAPHML)
    (workdir / "kv_store_text_chunks.json").write_text("{}", encoding="utf-8")
    from_dir = assemble_graph(read_lightrag_workdir(workdir), directed=False)
    from_file = assemble_graph(read_lightrag_graphml(workdir / LIGHTRAG_GRAPHML), directed=False)
    assert from_dir.entities.equals(from_file.entities) and from_dir.relations.equals(from_file.relations)
    spec = SourceSpec(kind="lightrag_workdir", path="rag_storage")
    assert not spec.is_directed
    via_spec = assemble_graph(import_source(spec, tmp_path), directed=spec.is_directed)
    assert via_spec.relations.equals(from_file.relations)
    assert spec.files(tmp_path) == sorted([workdir / LIGHTRAG_GRAPHML, workdir / "kv_store_text_chunks.json"])


# --------------------------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(("name", "key"), [
    ("Paris", "paris"),
    ("ＰＡＲＩＳ", "paris"),  # full-width letters (NFKC)
    ("Ｐａｒｉｓ　Ｃｉｔｙ", "paris city"),  # full-width letters and ideographic space
    ("  Paris \t\n  City  ", "paris city"),
    ('"Paris"', "paris"),
    ("\u201cParis\u201d", "paris"),
    ("'Paris'", "paris"),
    ("\u00abParis\u00bb", "paris"),
    (' " Paris " ', "paris"),
    ("STRASSE", "strasse"),
    ("Straße", "strasse"),  # casefold, not lower
    ("ﬁre", "fire"),  # ligature (NFKC)
    ("Rock 'n' Roll", "rock 'n' roll"),  # inner quotes are kept
    ('""', ""),
])
def test_normalise_key(name: str, key: str) -> None:
    assert normalise_key(name) == key


def test_variants_of_one_name_merge_into_one_entity(tmp_path: Path) -> None:
    rows = [
        {"head": "Paris", "relation": "capital of", "tail": "France", "head_description": "Capital of France."},
        {"head": "  PARIS ", "relation": "located on", "tail": "Seine", "head_description": "City on the Seine."},
        {"head": '"paris"', "relation": "twinned with", "tail": "Rome", "head_description": "Capital of France."},
        {"head": "\u201cＰａｒｉｓ\u201d", "relation": "in", "tail": "Île-de-France", "head_description": ""},
        {"head": "Rome", "relation": "capital of", "tail": "Italy", "head_description": "Eternal city."},
    ]
    kg = assemble_graph(read_triples(write_csv(tmp_path / "t.csv", rows)), directed=True)
    paris = kg.entities.filter(pl.col("key") == "paris")
    assert paris.height == 1
    assert paris["name"].to_list() == ["Paris"]  # the first spelling seen, stripped
    assert paris["description"].to_list() == ["Capital of France.\nCity on the Seine."]
    assert kg.entities["key"].is_unique().all()
    assert kg.num_entities == 6  # paris, france, seine, rome, île-de-france, italy
    pid = paris["id"].item()
    assert kg.relations.filter(pl.col("src") == pid).height == 4


def test_ids_follow_key_order_and_ignore_row_order(tmp_path: Path) -> None:
    solar = Path(__file__).resolve().parent / "data" / "solar"
    triples = list(csv.DictReader((solar / "triples.csv").open(encoding="utf-8")))
    entities = list(csv.DictReader((solar / "entities.csv").open(encoding="utf-8")))
    reference = assemble_graph(read_triples(write_csv(tmp_path / "t.csv", triples),
                                            write_csv(tmp_path / "e.csv", entities)), directed=True)
    keys = reference.entities["key"].to_list()
    assert keys == sorted(keys)
    assert reference.entities["id"].to_list() == list(range(len(keys)))
    rng = random.Random(7)
    for attempt in range(3):
        rng.shuffle(triples)
        rng.shuffle(entities)
        shuffled = assemble_graph(read_triples(write_csv(tmp_path / f"t{attempt}.csv", triples),
                                               write_csv(tmp_path / f"e{attempt}.csv", entities)), directed=True)
        assert shuffled.entities.select("id", "key", "name", "type", "description").equals(
            reference.entities.select("id", "key", "name", "type", "description"))
        assert shuffled.relations.equals(reference.relations)


def test_name_that_normalises_to_nothing_is_rejected_with_its_row(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", [{"head": "A", "relation": "r", "tail": "B"},
                                         {"head": '""', "relation": "r", "tail": "C"}])
    with pytest.raises(KGSourceError) as info:
        assemble_graph(read_triples(path), directed=True)
    assert str(path) in str(info.value) and "t.csv:3" in str(info.value) and "empty entity name" in str(info.value)


# --------------------------------------------------------------------------------------------- bad input


def raises_source_error(call, *fragments: str) -> str:  # noqa: ANN001
    with pytest.raises(KGSourceError) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def test_missing_and_empty_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    raises_source_error(lambda: read_triples(missing), str(missing), "not found")
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    raises_source_error(lambda: read_triples(empty), str(empty), "empty")
    empty_graphml = tmp_path / "empty.graphml"
    empty_graphml.write_bytes(b"")
    raises_source_error(lambda: read_lightrag_graphml(empty_graphml), str(empty_graphml), "empty")
    raises_source_error(lambda: read_lightrag_graphml(tmp_path / "nope.graphml"), "nope.graphml", "not found")
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    raises_source_error(lambda: read_triples(folder), str(folder), "not a file")


def test_header_only_csv(tmp_path: Path) -> None:
    path = tmp_path / "header.csv"
    path.write_text("head,relation,tail\n", encoding="utf-8")
    raises_source_error(lambda: read_triples(path), str(path), "no records")
    entities = tmp_path / "entities.csv"
    entities.write_text("name,type,description\n", encoding="utf-8")
    good = write_csv(tmp_path / "good.csv", TRIPLES)
    raises_source_error(lambda: read_triples(good, entities), str(entities), "no records")


def test_malformed_graphml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.graphml"
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n'
                    '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
                    '  <graph edgedefault="undirected">\n'
                    '    <node id="A"/>\n'
                    '    <node id="B">\n'
                    '  </graph>\n'
                    '</graphml>\n', encoding="utf-8")
    raises_source_error(lambda: read_lightrag_graphml(path), str(path), "malformed XML", "line 6")


def test_graphml_without_nodes_or_with_bad_weight(tmp_path: Path) -> None:
    path = tmp_path / "empty_graph.graphml"
    nx.write_graphml(nx.Graph(), path)
    raises_source_error(lambda: read_lightrag_graphml(path), str(path), "no nodes")
    graph = nx.Graph()
    graph.add_edge("A", "B", weight="heavy")
    bad_weight = tmp_path / "weight.graphml"
    nx.write_graphml(graph, bad_weight)
    raises_source_error(lambda: read_lightrag_graphml(bad_weight), str(bad_weight), "non-numeric weight",
                        "'heavy'")


def test_non_utf8_csv_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("head,relation,tail\nParis,in,France\nZürich,in,Suisse\n".encode("latin-1"))
    raises_source_error(lambda: read_triples(path), str(path), "line 3", "not valid UTF-8", "0xfc")
    graphml = tmp_path / "latin1.graphml"
    graphml.write_bytes('<?xml version="1.0"?>\n<graphml>\n<graph edgedefault="undirected">\n'
                        '<node id="Zürich"/>\n</graph>\n</graphml>\n'.encode("latin-1"))
    raises_source_error(lambda: read_lightrag_graphml(graphml), str(graphml), "line 4", "not valid UTF-8")


def test_invalid_json_line(tmp_path: Path) -> None:
    path = tmp_path / "triples.jsonl"
    path.write_text('{"head": "A", "relation": "r", "tail": "B"}\n'
                    '{"head": "C", "relation": "r", "tail": "D"}\n'
                    '{"head": "E", "relation": "r", "tail": }\n', encoding="utf-8")
    raises_source_error(lambda: read_triples(path), str(path), "line 3", "not valid JSON")
    array = tmp_path / "array.jsonl"
    array.write_text('{"head": "A", "relation": "r", "tail": "B"}\n["C", "r", "D"]\n', encoding="utf-8")
    raises_source_error(lambda: read_triples(array), str(array), "line 2", "expected an object")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n", encoding="utf-8")
    raises_source_error(lambda: read_triples(blank), str(blank), "no records")


def test_missing_required_column_lists_found_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("head,verb,tail\nA,r,B\n", encoding="utf-8")
    message = raises_source_error(lambda: read_triples(path), str(path), "missing column", "'relation'")
    assert "['head', 'verb', 'tail']" in message
    assert "predicate" in message  # says which names are accepted
    entities = tmp_path / "e.csv"
    entities.write_text("label,type\nA,x\n", encoding="utf-8")
    good = write_csv(tmp_path / "good.csv", TRIPLES)
    raises_source_error(lambda: read_triples(good, entities), str(entities), "'name'", "['label', 'type']")


def test_empty_head_or_tail_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("head,relation,tail\nA,r,B\nC,r,\nD,r,E\n", encoding="utf-8")
    raises_source_error(lambda: read_triples(path), str(path), "empty 'tail'", "t.csv:3")
    spaces = tmp_path / "s.tsv"
    spaces.write_text("head\trelation\ttail\nA\tr\tB\nC\tr\tD\n   \tr\tE\n", encoding="utf-8")
    raises_source_error(lambda: read_triples(spaces), str(spaces), "empty 'head'", "s.tsv:4")
    parquet = tmp_path / "t.parquet"
    pl.DataFrame({"head": ["A", None], "relation": ["r", "r"], "tail": ["B", "C"]}).write_parquet(parquet)
    raises_source_error(lambda: read_triples(parquet), str(parquet), "empty 'head'", "t.parquet:row 2")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"head": "A", "relation": "r", "tail": "B"}\n{"head": "C", "relation": " ", "tail": "D"}\n',
                     encoding="utf-8")
    raises_source_error(lambda: read_triples(jsonl), str(jsonl), "empty 'relation'", "t.jsonl:2")


def test_jsonl_row_numbers_count_blank_lines(tmp_path: Path) -> None:
    """The error must point at the physical line of the bad record, also after a blank line."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"head": "A", "relation": "r", "tail": "B"}\n'
                    "\n"
                    '{"head": "", "relation": "r", "tail": "D"}\n', encoding="utf-8")
    raises_source_error(lambda: read_triples(path), str(path), "empty 'head'", "t.jsonl:3")


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "triples.xlsx"
    path.write_bytes(b"PK\x03\x04not really")
    raises_source_error(lambda: read_triples(path), str(path), "unsupported", "'.xlsx'", ".csv")


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "triples.parquet"
    path.write_bytes(b"this is not parquet at all")
    raises_source_error(lambda: read_triples(path), str(path), "not a readable parquet file")


def test_workdir_without_graphml(tmp_path: Path) -> None:
    workdir = tmp_path / "rag_storage"
    workdir.mkdir()
    (workdir / "kv_store_full_docs.json").write_text("{}", encoding="utf-8")
    raises_source_error(lambda: read_lightrag_workdir(workdir), str(workdir), LIGHTRAG_GRAPHML)
    raises_source_error(lambda: read_lightrag_workdir(tmp_path / "absent"), "absent", "not found")


@pytest.mark.parametrize("name", ["../x", "Bad Name", "", "Solar", "a-b", "x/y", "solar\n", "a" * 65, "b" * 300])
def test_domain_name_must_be_a_slug(name: str) -> None:
    with pytest.raises(RegistryError, match="invalid domain name"):
        check_domain_name(name)
    registry = Registry(domains=[Domain(name="solar", source=SourceSpec(kind="triples", path="t.csv"))])
    with pytest.raises(RegistryError, match="invalid domain name"):
        registry.get(name)


def test_slug_names_are_accepted_and_unknown_domain_lists_known() -> None:
    assert check_domain_name("chem_2") == "chem_2"
    registry = Registry(domains=[Domain(name=n, source=SourceSpec(kind="triples", path=f"{n}.csv"))
                                 for n in ("solar", "chemistry")])
    assert registry.get("chemistry").source.path == "chemistry.csv"
    with pytest.raises(RegistryError) as info:
        registry.get("biology")
    assert "unknown domain 'biology'" in str(info.value) and "solar, chemistry" in str(info.value)
    with pytest.raises(RegistryError, match=r"known domains: \(none\)"):
        Registry().get("biology")


def test_registry_file_with_bad_domain_name(tmp_path: Path) -> None:
    path = tmp_path / "domains.yaml"
    path.write_text("domains:\n  Bad Name:\n    source: {kind: triples, path: t.csv}\n", encoding="utf-8")
    with pytest.raises(RegistryError) as info:
        load_registry(path)
    assert str(path) in str(info.value) and "invalid domain name" in str(info.value)


# --------------------------------------------------------------------------------------------- quality checks


def test_mostly_isolated_graphml_imports_but_fails_isolated_share(tmp_path: Path) -> None:
    graph = nx.Graph()
    for i in range(10):
        graph.add_node(f"N{i}", entity_id=f"N{i}", entity_type="thing", description=f"Node {i}.",
                       source_id="chunk-1")
    graph.add_edge("N0", "N1", weight=1.0, description="linked", keywords="link", source_id="chunk-1")
    path = tmp_path / "isolated.graphml"
    nx.write_graphml(graph, path)
    kg = assemble_graph(read_lightrag_graphml(path), directed=False)
    outcomes = {o.spec.name: o for o in run_kg_checks(kg, CheckParams())}
    assert outcomes["isolated_share"].passed is False
    assert outcomes["isolated_share"].metadata == {"isolated": 8, "entities": 10, "share": 0.8, "max_share": 0.5}
    assert not outcomes["isolated_share"].spec.blocking
    assert outcomes["description_share"].passed
    assert all(outcomes[name].passed for name in ("no_dangling_edges", "unique_normalised_keys", "no_empty_names"))


def test_mostly_undescribed_graphml_imports_but_fails_description_share(tmp_path: Path) -> None:
    graph = nx.path_graph([f"N{i}" for i in range(8)])
    for i in range(8):
        graph.nodes[f"N{i}"].update(entity_id=f"N{i}", entity_type="thing",
                                    description=f"Node {i}." if i < 2 else ("<SEP>" if i == 2 else ""),
                                    source_id="chunk-1")
    path = tmp_path / "undescribed.graphml"
    nx.write_graphml(graph, path)
    kg = assemble_graph(read_lightrag_graphml(path), directed=False)
    outcomes = {o.spec.name: o for o in run_kg_checks(kg, CheckParams())}
    assert outcomes["description_share"].passed is False
    assert outcomes["description_share"].metadata == {"described": 2, "entities": 8, "share": 0.25,
                                                      "min_share": 0.5}
    assert outcomes["isolated_share"].passed and outcomes["isolated_share"].metadata["isolated"] == 0
    relaxed = {o.spec.name: o for o in run_kg_checks(kg, CheckParams(min_description_share=0.25))}
    assert relaxed["description_share"].passed


def test_non_numeric_weight_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("head,relation,tail,weight\nA,r,B,2.5\nB,r,C,heavy\nC,r,D,\n", encoding="utf-8")
    raises_source_error(lambda: read_triples(path), str(path), "non-numeric weight", "t.csv:3 ('heavy')")
    path.write_text("head,relation,tail,weight\nA,r,B,2.5\nC,r,D,\n", encoding="utf-8")
    assert read_triples(path).relations["weight"].to_list() == [2.5, 1.0]


def test_non_finite_weights_are_refused_in_every_format(tmp_path: Path) -> None:
    """NaN/inf weights would be stored and poison every weighted sum: each format names the record."""
    path = tmp_path / "t.csv"
    path.write_text("head,relation,tail,weight\nA,r,B,2.5\nB,r,C,NaN\nC,r,D,-inf\n", encoding="utf-8")
    raises_source_error(lambda: read_triples(path), str(path), "2 record(s) with a weight that is not finite",
                        "t.csv:3 ('NaN')", "t.csv:4 ('-inf')")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"head": "A", "relation": "r", "tail": "B", "weight": 1}\n'
                     '{"head": "B", "relation": "r", "tail": "C", "weight": Infinity}\n', encoding="utf-8")
    raises_source_error(lambda: read_triples(jsonl), str(jsonl), "not finite", "t.jsonl:2")
    parquet = tmp_path / "t.parquet"
    pl.DataFrame({"head": ["A", "B"], "relation": ["r", "r"], "tail": ["B", "C"],
                  "weight": [1.0, float("nan")]}).write_parquet(parquet)
    raises_source_error(lambda: read_triples(parquet), str(parquet), "not finite", "t.parquet:row 2")
    graph = nx.Graph()
    graph.add_edge("A", "B", weight=float("inf"))
    graphml = tmp_path / "inf.graphml"
    nx.write_graphml(graph, graphml)
    raises_source_error(lambda: read_lightrag_graphml(graphml), str(graphml), "edge 'A'-'B'",
                        "weight that is not finite")


def test_overlong_domain_name_is_a_clear_error_not_an_os_error() -> None:
    with pytest.raises(RegistryError, match=r"invalid domain name 'x{20}\.\.\.': 256 characters, at most 64"):
        check_domain_name("x" * 256)
    assert check_domain_name("y" * 64) == "y" * 64


def test_undirected_reverse_duplicates_merge_into_the_first_orientation(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("head,relation,tail,weight\nB,linked,A,1\nA,linked,B,2\nA,other,B,1\n", encoding="utf-8")
    kg = assemble_graph(read_triples(path), directed=False)
    assert kg.relations.select("src", "dst", "keywords", "weight").rows() == [(0, 1, "other", 1.0),
                                                                              (1, 0, "linked", 3.0)]
    directed = assemble_graph(read_triples(path), directed=True)
    assert directed.relations.height == 3
