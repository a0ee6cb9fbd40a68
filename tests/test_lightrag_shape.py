"""Graphs in LightRAG's shape, end to end: the LightRAG rendering of a triples domain (pipelines/kg/lightrag_render.py,
source kind ``lightrag_rendering``, ``omne kg render-lightrag``), the phrases node_info reads unlabelled relations
with, the closest names of a name not found, the names and verbs of questions written on such graphs, the question's
spelling the SFT data looks up, and the evaluation's figures of answers copied from the tools.

Real data throughout: the embedded software domain, a tiny triples domain written here (lakes) and its rendering
built in a temporary project, and the construction graph of tests/lightrag_support.py imported and indexed."""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest
import yaml
from polars.testing import assert_frame_equal
from pydantic import ValidationError

from pipelines.agent.calls import ErrorType
from pipelines.agent.kg_view import DomainGraph
from pipelines.agent.tools import KGToolbox
from pipelines.agent.trajectory import ToolCallRecord, Trajectory
from pipelines.config import Params, load_params
from pipelines.domains import SourceSpec, load_registry
from pipelines.errors import KGSourceError, RegistryError
from pipelines.eval.behaviour import answer_from_tools, answer_in_last_thought, behaviour
from pipelines.eval.schema import Behaviour
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.importers import import_source, lightrag_records, read_lightrag_graphml
from pipelines.kg.lightrag_render import GENERIC_TYPES, LIGHTRAG_SEP, render_lightrag, write_lightrag_graphml
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir
from pipelines.qa.build import build_qa_pairs, build_seed_subgraphs, read_qa_pairs, relation_graph
from pipelines.qa.template import keyword_sentence, relation_sentence
from pipelines.text.names import find_name, written_name
from pipelines.text.phrases import PhraseLexicon, edge_phrase, shown_keywords, singular_subject, type_noun
from pipelines.train.sft_data import question_spelling
from tests.conftest import PROJECT_ROOT, TINY_REGISTRY, cli_env, make_project
from tests.lightrag_support import write_lightrag_graphml as write_construction_graphml
from tests.tool_support import with_tools

SOFTWARE = PROJECT_ROOT / "kg_assets" / "software"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----- a tiny triples domain and its rendering --------------------------------------------------------------------
# (head, relation, tail, the triple's own description or ""): Greece and North Macedonia are related twice (one
# undirected edge in the rendering); "flows through" is not in phrases.yaml (the label's own statement says it);
# NATO is written in upper case by the source itself
LAKES_TRIPLES = [
    ("Skopje", "capital of", "North Macedonia", "Skopje has been the capital since 1991."),
    ("Ohrid", "located in", "North Macedonia", ""),
    ("Ohrid", "lies on", "Lake Ohrid", "The town of Ohrid lies on the north-eastern shore of the lake."),
    ("Lake Ohrid", "located in", "North Macedonia", ""),
    ("Lake Ohrid", "located in", "Albania", "About a third of the lake belongs to Albania."),
    ("Vardar", "flows through", "Skopje", "The Vardar runs through the centre of Skopje."),
    ("Vardar", "flows into", "Aegean Sea", "Near Thessaloniki the Vardar (Axios) reaches the Aegean Sea."),
    ("Thessaloniki", "located in", "Greece", ""),
    ("Thessaloniki", "lies on", "Aegean Sea", "Thessaloniki lies on the Thermaic Gulf of the Aegean Sea."),
    ("Greece", "borders", "North Macedonia", "The border runs for about 250 km."),
    ("North Macedonia", "borders", "Greece", "North Macedonia has Greece to its south."),
    ("Albania", "borders", "North Macedonia", ""),
    ("Albania", "borders", "Greece", ""),
    ("Mother Teresa", "born in", "Skopje", "Anjeze Bojaxhiu was born in Skopje in 1910."),
    ("Ss Cyril and Methodius University", "located in", "Skopje", "The university's campus is in Skopje."),
    ("Ilinden Uprising", "took place in", "North Macedonia", "The uprising of 1903 took place in the region."),
    ("Galičica National Park", "located in", "North Macedonia", ""),
    ("Galičica National Park", "borders", "Lake Ohrid", "The park rises between Lake Ohrid and Lake Prespa."),
    ("Mount Olympus", "located in", "Greece", ""),
    ("Tirana", "capital of", "Albania", ""),
    ("Athens", "capital of", "Greece", ""),
    ("North Macedonia", "member of", "NATO", "North Macedonia joined NATO in 2020."),
    ("Albania", "member of", "NATO", ""),
]
LAKES_TYPES = {  # Athens is left out of entities.jsonl: only a triple names it
    "Skopje": "city", "North Macedonia": "country", "Ohrid": "city", "Lake Ohrid": "lake", "Albania": "country",
    "Vardar": "river", "Aegean Sea": "sea", "Thessaloniki": "city", "Greece": "country",
    "Mother Teresa": "person", "Ss Cyril and Methodius University": "university", "Ilinden Uprising": "event",
    "Galičica National Park": "national park", "Mount Olympus": "mountain", "Tirana": "city",
    "NATO": "organization",
}
# what LightRAG's extraction would have typed each of them (the rendering's generic types)
LAKES_GENERIC = {
    "SKOPJE": "GEO", "NORTH MACEDONIA": "GEO", "OHRID": "GEO", "LAKE OHRID": "CATEGORY", "ALBANIA": "GEO",
    "VARDAR": "CATEGORY", "AEGEAN SEA": "CATEGORY", "THESSALONIKI": "GEO", "GREECE": "GEO",
    "MOTHER TERESA": "PERSON", "SS CYRIL AND METHODIUS UNIVERSITY": "ORGANIZATION", "ILINDEN UPRISING": "EVENT",
    "GALIČICA NATIONAL PARK": "CATEGORY", "MOUNT OLYMPUS": "CATEGORY", "TIRANA": "GEO", "ATHENS": "CATEGORY",
    "NATO": "ORGANIZATION",
}
LAKES_PHRASES = """types:
  city: city
  country: country
relations:
  capital of:
    statement: '{head} is the capital of {tail}'
    ask_tail: 'Which {type} is {head} the capital of?'
  located in:
    statement: '{head} is located in {tail}'
  lies on:
    statement: '{head} lies on {tail}'
  flows into:
    statement: '{head} flows into {tail}'
  borders:
    statement: '{head} borders {tail}'
  born in:
    statement: '{head} was born in {tail}'
  took place in:
    statement: '{head} took place in {tail}'
  member of:
    statement: '{head} is a member of {tail}'
"""
LAKES_REGISTRY = TINY_REGISTRY + """  lakes:
    description: Lakes, rivers and towns of the southern Balkans.
    source:
      kind: triples
      path: kg_assets/lakes/triples.jsonl
      entities: kg_assets/lakes/entities.jsonl
  lakes_lightrag:
    description: The lakes domain as LightRAG would have written it from text.
    source:
      kind: lightrag_rendering
      path: kg_assets/lakes
"""


def write_lakes(folder: Path) -> Path:
    """The lakes domain's triples.jsonl, entities.jsonl and phrases.yaml in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"head": h, "relation": r, "tail": t, **({"description": d} if d else {})} for h, r, t, d in LAKES_TRIPLES]
    (folder / "triples.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                                          encoding="utf-8")
    entities = [{"name": name, "type": kind, "description": f"{name} ({kind}) in the southern Balkans."}
                for name, kind in LAKES_TYPES.items()]
    (folder / "entities.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in entities),
                                           encoding="utf-8")
    (folder / "phrases.yaml").write_text(LAKES_PHRASES, encoding="utf-8")
    return folder


def lakes_project(root: Path) -> Params:
    """A project with the solar, lakes and lakes_lightrag domains (seeds of 5+ nodes: the graph has 17)."""
    make_project(root, LAKES_REGISTRY)
    write_lakes(root / "kg_assets" / "lakes")
    path = root / "params.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("min_nodes: 20", "min_nodes: 5"), encoding="utf-8")
    return load_params(path)


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """The lakes project with both KGs built, and the seeds and template questions of the rendering."""
    params = lakes_project(tmp_path_factory.mktemp("lakes") / "project")
    registry = load_registry(params.registry_path)
    for name in ("lakes", "lakes_lightrag"):
        build_knowledge_graph(registry.get(name), params)
    build_seed_subgraphs("lakes_lightrag", params)
    build_qa_pairs("lakes_lightrag", params, progress=False)
    return params


CONSTRUCTION_REGISTRY = """domains:
  construction:
    description: A construction specification (LightRAG graph).
    source:
      kind: lightrag_graphml
      path: kg_assets/construction/graph_chunk_entity_relation.graphml
"""


@pytest.fixture(scope="module")
def construction(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """tests/lightrag_support.py's graph imported into a project: KG, entity index, seeds of 10+ nodes, questions."""
    root = make_project(tmp_path_factory.mktemp("construction") / "project", CONSTRUCTION_REGISTRY)
    folder = root / "kg_assets" / "construction"
    folder.mkdir(parents=True)
    write_construction_graphml(folder / "graph_chunk_entity_relation.graphml")
    path = root / "params.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("min_nodes: 20", "min_nodes: 10"), encoding="utf-8")
    params = load_params(path)
    build_knowledge_graph(load_registry(params.registry_path).get("construction"), params)
    build_entity_index("construction", params)
    build_seed_subgraphs("construction", params)
    build_qa_pairs("construction", params, progress=False)
    return params


@pytest.fixture(scope="module")
def box(construction: Params) -> KGToolbox:
    toolbox = KGToolbox(construction)
    toolbox.load_all()
    return toolbox


def tool_ok(toolbox: KGToolbox, call: str) -> str:
    result = toolbox.call(call)
    assert result.ok and result.error_type is None, result
    return result.content


# ----- 1. render_lightrag on the real software domain ------------------------------------------------------------
@pytest.fixture(scope="module")
def software() -> nx.Graph:
    return render_lightrag(SOFTWARE)


def test_software_rendering_keeps_every_fact_on_an_upper_case_undirected_edge(software: nx.Graph) -> None:
    triples = read_jsonl(SOFTWARE / "triples.jsonl")
    entities = {row["name"]: row for row in read_jsonl(SOFTWARE / "entities.jsonl")}
    statements = {label: forms["statement"] for label, forms in
                  yaml.safe_load((SOFTWARE / "phrases.yaml").read_text(encoding="utf-8"))["relations"].items()}
    assert type(software) is nx.Graph  # undirected, one edge per pair (LightRAG merges what chunks say of a pair)
    facts: dict[frozenset[str], list[dict]] = defaultdict(list)
    for row in triples:
        facts[frozenset((row["head"].upper(), row["tail"].upper()))].append(row)
    assert software.number_of_edges() == len(facts) < len(triples)  # some pairs hold two or three facts
    names = {row[end] for row in triples for end in ("head", "tail")}
    assert sorted(software.nodes) == sorted(name.upper() for name in names)

    with_own_description = 0
    for pair, rows in facts.items():
        edge = software.edges[tuple(pair)]
        said = edge["description"].split(LIGHTRAG_SEP)
        for row in rows:  # the statement of phrases.yaml, both ends in their own case, is one of the edge's sentences
            sentence = statements[row["relation"]].replace("{head}", row["head"]).replace("{tail}", row["tail"])
            assert sentence + "." in said, (row, said)
            assert any(row["head"].lower() in s.lower() and row["tail"].lower() in s.lower() for s in said)
            assert any(word in edge["keywords"].split(", ") for word in row["relation"].split()), (row, edge)
        # nothing else: each sentence is a statement or the triple's own description (a second "chunk")
        allowed = {statements[r["relation"]].replace("{head}", r["head"]).replace("{tail}", r["tail"]) + "."
                   for r in rows} | {r["description"] for r in rows}
        assert set(said) <= allowed, said
        with_own_description += any(s == r["description"] for r in rows for s in said)
        # LightRAG's strength: 5..10 per fact, summed when facts of one pair merge
        assert edge["weight"] == int(edge["weight"]) and 5 * len(rows) <= edge["weight"] <= 10 * len(rows), edge
    assert 0 < with_own_description < len(facts)  # sometimes, not always

    for name in names:
        node = software.nodes[name.upper()]
        assert node["entity_id"] == name.upper()
        assert node["entity_type"] == "CATEGORY"  # classes, modules, exceptions, packages: none a person, place...
        own, second = node["description"].split(LIGHTRAG_SEP)
        assert own == " ".join(entities[name]["description"].split())
        assert name in second  # a relation's sentence, the name in its own case


def test_software_rendering_is_deterministic_and_its_graphml_reads_back_as_the_same_records(
        software: nx.Graph, tmp_path: Path) -> None:
    again = render_lightrag(SOFTWARE)
    assert list(again.nodes(data=True)) == list(software.nodes(data=True))
    assert list(again.edges(data=True)) == list(software.edges(data=True))
    first, second = tmp_path / "a" / "graph.graphml", tmp_path / "b" / "graph.graphml"  # folders made as needed
    write_lightrag_graphml(software, first)
    write_lightrag_graphml(again, second)
    assert first.read_bytes() == second.read_bytes()

    direct, read = lightrag_records(software, SOFTWARE), read_lightrag_graphml(first)
    assert direct.entities.height == software.number_of_nodes() and direct.relations.height == 3373
    assert_frame_equal(read.entities.drop("origin"), direct.entities.drop("origin"))
    assert_frame_equal(read.relations.drop("origin"), direct.relations.drop("origin"))
    assert set(read.entities["name"]) == {name.upper() for name in read.entities["name"]}
    assert set(read.entities["type"]) <= set(GENERIC_TYPES)


def test_render_errors_name_the_folder_or_file_and_the_line(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    with pytest.raises(KGSourceError, match="not found") as caught:
        render_lightrag(absent)
    assert str(absent) in str(caught.value)

    folder = tmp_path / "no_triples"
    folder.mkdir()
    (folder / "entities.jsonl").write_text('{"name": "A", "type": "city"}\n', encoding="utf-8")
    with pytest.raises(KGSourceError, match="triples.jsonl") as caught:
        render_lightrag(folder)
    assert str(folder) in str(caught.value)

    triples = folder / "triples.jsonl"
    cases = {
        "\n\n": "no triples to render",
        '{"head": "A", "relation": "r", "tail": "B"}\nnot json\n': "line 2 is not valid JSON",
        '["A", "r", "B"]\n': "line 1 is a JSON list, expected an object",
        '{"head": "A", "relation": "r", "tail": "B"}\n{"head": "A", "relation": " ", "tail": "C"}\n':
            "line 2 has an empty head, relation or tail",
    }
    for text, message in cases.items():
        triples.write_text(text, encoding="utf-8")
        with pytest.raises(KGSourceError, match=re.escape(message)) as caught:
            render_lightrag(folder)
        assert str(triples) in str(caught.value)

    # the importer of a registry source of kind lightrag_rendering says the same
    with pytest.raises(KGSourceError, match="not found") as caught:
        import_source(SourceSpec(kind="lightrag_rendering", path="kg_assets/nowhere"), tmp_path)
    assert str(tmp_path / "kg_assets" / "nowhere") in str(caught.value)


# ----- 2. source kind lightrag_rendering in a project ------------------------------------------------------------
def test_rendering_domain_builds_the_same_entities_undirected_upper_case_with_generic_types(lakes: Params) -> None:
    triples, rendered = (read_kg(kg_dir(lakes.artifacts_dir, name)) for name in ("lakes", "lakes_lightrag"))
    assert triples.directed and not rendered.directed
    assert rendered.num_entities == triples.num_entities == 17
    names = rendered.entities["name"].to_list()
    assert sorted(names) == sorted(name.upper() for name in triples.entities["name"])
    assert dict(zip(names, rendered.entities["type"], strict=True)) == LAKES_GENERIC
    assert triples.relations.height == len(LAKES_TRIPLES) and rendered.relations.height == len(LAKES_TRIPLES) - 1

    def edge(a: str, b: str) -> dict:
        ids = {names.index(a), names.index(b)}
        rows = [r for r in rendered.relations.iter_rows(named=True) if {r["src"], r["dst"]} == ids]
        assert len(rows) == 1, (a, b, rows)
        return rows[0]

    merged = edge("GREECE", "NORTH MACEDONIA")  # two facts of one pair: one edge, both sentences, summed weight
    lines = merged["description"].split("\n")
    assert "Greece borders North Macedonia." in lines and "North Macedonia borders Greece." in lines
    assert 10 <= merged["weight"] <= 20
    assert edge("VARDAR", "SKOPJE")["description"].split("\n")[0] == "Vardar flows through Skopje."  # label's own
    assert edge("OHRID", "LAKE OHRID")["description"].split("\n")[0] == "Ohrid lies on Lake Ohrid."

    manifest = build_knowledge_graph(load_registry(lakes.registry_path).get("lakes_lightrag"), lakes)
    assert manifest.skipped  # built once, up to date
    assert sorted(manifest.manifest.inputs) == [f"kg_assets/lakes/{f}" for f in
                                                ("entities.jsonl", "phrases.yaml", "triples.jsonl")]


def test_rendering_rebuilds_when_its_phrases_change(tmp_path: Path) -> None:
    params = lakes_project(tmp_path / "project")
    domain = load_registry(params.registry_path).get("lakes_lightrag")
    build_knowledge_graph(domain, params)
    assert build_knowledge_graph(domain, params).skipped
    phrases = params.root / "kg_assets" / "lakes" / "phrases.yaml"
    phrases.write_text(phrases.read_text(encoding="utf-8").replace("'{head} borders {tail}'",
                                                                   "'{head} shares a border with {tail}'"))
    assert not build_knowledge_graph(domain, params).skipped
    descriptions = "\n".join(read_kg(kg_dir(params.artifacts_dir, "lakes_lightrag")).relations["description"])
    assert "Albania shares a border with Greece." in descriptions and " borders " not in descriptions


def test_rendering_source_refuses_an_entities_table(tmp_path: Path) -> None:
    message = "entities: not used by source kind 'lightrag_rendering'"
    with pytest.raises(ValidationError, match=message):
        SourceSpec(kind="lightrag_rendering", path="kg_assets/lakes", entities="kg_assets/lakes/entities.jsonl")
    registry = tmp_path / "domains.yaml"
    registry.write_text("domains:\n  lakes_lightrag:\n    source:\n      kind: lightrag_rendering\n"
                        "      path: kg_assets/lakes\n      entities: kg_assets/lakes/entities.jsonl\n")
    with pytest.raises(RegistryError, match=message) as caught:
        load_registry(registry)
    assert str(registry) in str(caught.value)


# ----- 3. omne kg render-lightrag ----------------------------------------------------------------------------------
def omne(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["omne", *args], cwd=root, env=cli_env(), capture_output=True, text=True, timeout=300)


def test_cli_render_lightrag_writes_the_graphml_and_refuses_other_domains_in_one_line(lakes: Params) -> None:
    root = lakes.root
    done = omne(root, "kg", "render-lightrag", "--domain", "lakes", "--out", "out/lakes/graph.graphml")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "wrote out/lakes/graph.graphml: 17 entities, 22 relations (a LightRAG rendering of lakes)"
    written = read_lightrag_graphml(root / "out" / "lakes" / "graph.graphml")
    direct = lightrag_records(render_lightrag(root / "kg_assets" / "lakes"), root / "kg_assets" / "lakes")
    assert_frame_equal(written.entities.drop("origin"), direct.entities.drop("origin"))
    assert_frame_equal(written.relations.drop("origin"), direct.relations.drop("origin"))

    refused = {
        "lakes_lightrag": "error: lakes_lightrag: a LightRAG rendering needs a triples domain, this one is "
                          "'lightrag_rendering'",
        "atlantis": "error: unknown domain 'atlantis'",
        "solar": "triples.jsonl",  # a triples domain kept as CSV: its folder has no triples.jsonl to render
    }
    for name, message in refused.items():
        out = root / "out" / f"{name}.graphml"
        result = omne(root, "kg", "render-lightrag", "--domain", name, "--out", str(out))
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (name, result.stderr)
        assert "Traceback" not in result.stderr and not out.exists()


# ----- 4. phrases of unlabelled edges ------------------------------------------------------------------------------
def test_edge_phrase_reads_the_words_between_the_ends_and_their_direction() -> None:
    assert edge_phrase("STRIP FOUNDATIONS are cast in GRADE 30 CONCRETE.", "GRADE 30 CONCRETE",
                       "STRIP FOUNDATIONS") == ("are cast in", True)
    assert edge_phrase("ACME CONCRETE LTD supplies GRADE 30 CONCRETE to the site.", "ACME CONCRETE LTD",
                       "GRADE 30 CONCRETE") == ("supplies", False)
    # the first sentence (LightRAG's <SEP>-joined chunks) that names both ends, the ends matched in any case
    assert edge_phrase("Offcuts are collected weekly.<SEP>Offcuts go to the WASTE CARRIER.<SEP>"
                       "Timber is collected by the Waste Carrier.", "TIMBER", "WASTE CARRIER") == (
        "is collected by", False)
    assert edge_phrase("The BLINDING LAYER is formed of GRADE 10 CONCRETE.", "GRADE 10 CONCRETE",
                       "BLINDING LAYER") == ("is formed of", True)
    # at most six words between the ends
    assert edge_phrase("ALPHA knows one two three four of BETA.", "ALPHA", "BETA") == (
        "knows one two three four of", False)
    assert edge_phrase("ALPHA knows one two three four five of BETA.", "ALPHA", "BETA") is None
    # no sentence naming both ends, only function words between them, no words at all
    assert edge_phrase("Offcuts are collected weekly.<SEP>Skips on site.", "TIMBER", "WASTE CARRIER") is None
    assert edge_phrase("ALPHA and BETA.", "ALPHA", "BETA") is None
    assert edge_phrase("ALPHA BETA.", "ALPHA", "BETA") is None
    assert edge_phrase("", "ALPHA", "BETA") is None


def test_singular_subject_and_generic_type_nouns() -> None:
    assert singular_subject("{head} are cast in {tail}") == "{head} is cast in {tail}"
    assert singular_subject("{tail} were found in {head}") == "{tail} was found in {head}"
    assert singular_subject("{head} have {tail}") == "{head} has {tail}"
    assert singular_subject("{head} is in {tail}") == "{head} is in {tail}"
    assert singular_subject("{head} supplies {tail}") == "{head} supplies {tail}"
    lexicon = PhraseLexicon()
    assert [type_noun(t, lexicon) for t in ("GEO", "CATEGORY", "PERSON", "ORGANIZATION", "EVENT", "UNKNOWN", "")] == [
        "place", "entity", "person", "organization", "event", "entity", "entity"]
    assert type_noun("GEO", PhraseLexicon(types={"GEO": "region"})) == "region"  # a phrases file's own noun first


# ----- 5. node_info on a LightRAG graph ------------------------------------------------------------------------------
GRADE_30_PHRASED = """Entity: GRADE 30 CONCRETE
Type: material
Relations (6):
1. -[contains]-> PORTLAND CEMENT [material]
2. -[is specified to]-> BS 8500 [standard]
3. <-[are cast in]- STRIP FOUNDATIONS [component]
4. <-[check the strength of]- CUBE TESTS [event]
5. <-[is cast in]- GROUND FLOOR SLAB [component]
6. <-[supplies]- ACME CONCRETE LTD [organization]"""

GRADE_30_KEYWORDS = """Entity: GRADE 30 CONCRETE
Type: material
Relations (6):
1. -[binder,ingredients]-- PORTLAND CEMENT [material]
2. -[compliance,standards]-- BS 8500 [standard]
3. -[materials,build,foundations]-- STRIP FOUNDATIONS [component]
4. -[materials,build,slab]-- GROUND FLOOR SLAB [component]
5. -[testing,quality]-- CUBE TESTS [event]
6. -[supply,materials,ready-mix]-- ACME CONCRETE LTD [organization]"""


def test_node_info_reads_unlabelled_relations_by_their_sentences_or_keywords(box: KGToolbox) -> None:
    assert tool_ok(box, 'node_info(node_name="GRADE 30 CONCRETE", graph_type="construction")') == GRADE_30_PHRASED
    # the same relation from its other end reads the same way round
    assert tool_ok(box, 'node_info(node_name="ACME CONCRETE LTD", graph_type="construction")').split("\n")[3:] == [
        "1. -[also delivers]-> GRADE 10 CONCRETE [material]", "2. -[supplies]-> GRADE 30 CONCRETE [material]"]
    assert "1. -[are cast in]-> GRADE 30 CONCRETE [material]" in tool_ok(
        box, 'node_info(node_name="STRIP FOUNDATIONS", graph_type="construction")').split("\n")
    # an edge whose sentences never name both ends keeps its keyword list, undirected
    assert tool_ok(box, 'node_info(node_name="TIMBER", graph_type="construction")').split("\n")[3:] == [
        "1. -[waste,offcuts]-- WASTE CARRIER [organization]", "2. <-[is made of]- FORMWORK [component]"]
    keywords = KGToolbox(with_tools(box.params, unlabelled_relations="keywords"), encoder=box.encoder)
    assert tool_ok(keywords, 'node_info(node_name="GRADE 30 CONCRETE", graph_type="construction")') == \
        GRADE_30_KEYWORDS


def test_a_merged_keyword_list_is_shown_as_its_gist() -> None:
    # a NIST CSF 2.0 hub relation (kg_assets/nist_csf_lightrag, "Header" -- "The NIST Cybersecurity Framework (CSF)
    # 2.0"): LightRAG merged 36 keywords; node_info shows the 4 that share most words with the rest, in their order
    merged = ("Kind: text,NIST CSWP 29,content context,document content,document location,document page reference,"
              "document reference,file reference,header information,metadata field,page 5,page number,page reference,"
              "reference point,specific page reference")
    assert shown_keywords(merged) == "document page reference,document reference,page reference,specific page reference"
    assert shown_keywords("waste,offcuts") == "waste,offcuts"  # the training graphs' lists (<= 4) as they are
    assert shown_keywords("a,b,c,d") == "a,b,c,d"
    assert len(shown_keywords(merged, 2).split(",")) == 2


def test_domain_graph_labels_relations_with_phrases_read_from_src_to_dst(construction: Params) -> None:
    phrased = DomainGraph.load(construction.artifacts_dir, "construction")
    plain = DomainGraph.load(construction.artifacts_dir, "construction", relation_phrases=False)
    assert not phrased.directed and not plain.rel_phrased.any()
    assert phrased.rel_keywords != plain.rel_keywords
    ids = {name: i for i, name in enumerate(phrased.names)}

    def relation(graph: DomainGraph, a: str, b: str) -> int:
        found = [r for r in range(len(graph.rel_keywords))
                 if {int(graph.rel_src[r]), int(graph.rel_dst[r])} == {ids[a], ids[b]}]
        assert len(found) == 1
        return found[0]

    # "STRIP FOUNDATIONS are cast in GRADE 30 CONCRETE." on the edge written GRADE 30 CONCRETE -> STRIP FOUNDATIONS
    r = relation(phrased, "GRADE 30 CONCRETE", "STRIP FOUNDATIONS")
    assert (phrased.rel_keywords[r], bool(phrased.rel_phrased[r])) == ("are cast in", True)
    assert (phrased.names[phrased.rel_src[r]], phrased.names[phrased.rel_dst[r]]) == (
        "STRIP FOUNDATIONS", "GRADE 30 CONCRETE")
    r = relation(plain, "GRADE 30 CONCRETE", "STRIP FOUNDATIONS")
    assert plain.rel_keywords[r] == "materials,build,foundations"
    assert (plain.names[plain.rel_src[r]], plain.names[plain.rel_dst[r]]) == ("GRADE 30 CONCRETE", "STRIP FOUNDATIONS")
    # read forwards: the ends stay as written
    r = relation(phrased, "ACME CONCRETE LTD", "GRADE 30 CONCRETE")
    assert (phrased.rel_keywords[r], phrased.names[phrased.rel_src[r]]) == ("supplies", "ACME CONCRETE LTD")
    r = relation(phrased, "TIMBER", "WASTE CARRIER")
    assert (phrased.rel_keywords[r], bool(phrased.rel_phrased[r])) == ("waste,offcuts", False)
    # every phrased relation's description names its src before its dst
    for r in map(int, phrased.rel_phrased.nonzero()[0]):
        text = phrased.rel_descriptions[r].upper()
        src, dst = phrased.names[phrased.rel_src[r]].upper(), phrased.names[phrased.rel_dst[r]].upper()
        assert any(src in s and dst in s and s.index(src) < s.index(dst) for s in re.split(r"(?<=\.) ", text)), r


def test_thinking_reads_an_unlabelled_relation_as_node_info_labels_it(construction: Params, box: KGToolbox) -> None:
    """The SFT thinking quotes the hop as node_info showed it ("STRIP FOUNDATIONS are cast in GRADE 30 CONCRETE"
    beside "-[are cast in]->"), not a sentence around the keyword list ("has the materials,build,foundations")."""
    graph = relation_graph("construction", construction)
    ids = {name: i for i, name in enumerate(graph.names)}
    r = next(r for r in range(len(graph.src))
             if {int(graph.src[r]), int(graph.dst[r])} == {ids["GRADE 30 CONCRETE"], ids["STRIP FOUNDATIONS"]})
    assert relation_sentence(graph, r, descriptions=False) == "STRIP FOUNDATIONS are cast in GRADE 30 CONCRETE"
    assert "-[are cast in]-> GRADE 30 CONCRETE" in tool_ok(
        box, 'node_info(node_name="STRIP FOUNDATIONS", graph_type="construction")')
    assert relation_sentence(graph, r, descriptions=False, phrased=False) == keyword_sentence(
        "GRADE 30 CONCRETE", "materials,build,foundations", "STRIP FOUNDATIONS")  # tools.unlabelled_relations: keywords
    r = next(r for r in range(len(graph.src))
             if {int(graph.src[r]), int(graph.dst[r])} == {ids["TIMBER"], ids["WASTE CARRIER"]})
    assert relation_sentence(graph, r, descriptions=False) == keyword_sentence(  # no phrase: keywords, as node_info
        "TIMBER", "waste,offcuts", "WASTE CARRIER")


# ----- 6. a name not found ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("garbled", "real"), [("STRUCTURL ENGINEERS", "STRUCTURAL ENGINEER"),
                                               ("PRINCIPLE CONTRACTORS", "PRINCIPAL CONTRACTOR")])
def test_node_info_on_a_garbled_upper_case_name_lists_the_closest_names(box: KGToolbox, garbled: str,
                                                                        real: str) -> None:
    result = box.call(f'node_info(node_name="{garbled}", graph_type="construction")')
    assert not result.ok and result.error_type == ErrorType.ENTITY_NOT_FOUND, result
    match = re.fullmatch(rf'<error>Entity "{garbled}" not found in KG; the closest names are ((?:"[^"]+"(?:, )?)+)'
                         r"</error>", result.content)
    assert match, result.content
    closest = re.findall(r'"([^"]+)"', match[1])
    assert real in closest and len(closest) == box.params.tools.entity_matcher_top_k
    matcher = tool_ok(box, f'entity_matcher(node_name="{garbled}", graph_type="construction")').split("\n")[1:]
    assert [line.split(". ", 1)[1].split(" [")[0] for line in matcher] == closest  # the matcher's names, in order


# ----- 7. names and verbs of questions on LightRAG graphs ------------------------------------------------------------
def test_written_name_takes_a_mixed_case_mention_else_title_case() -> None:
    assert written_name("CODE OF PRACTICE FOR DEMOLITION OF BUILDINGS") == \
        "Code of Practice for Demolition of Buildings"
    assert written_name("BS 8500") == "BS 8500"
    assert written_name("RADIUM-213") == "Radium-213"
    assert written_name("ACME CONCRETE LTD", ["ACME CONCRETE LTD supplies concrete.",
                                              "ACME Concrete Ltd is the ready-mix supplier."]) == "ACME Concrete Ltd"
    assert written_name("SS CYRIL AND METHODIUS UNIVERSITY", []) == "SS Cyril and Methodius University"
    assert written_name("SS CYRIL AND METHODIUS UNIVERSITY", ["Ss Cyril and Methodius University is in Skopje."]) \
        == "Ss Cyril and Methodius University"
    # a leading article is a word of the name ("The"), a short leading word an acronym ("IT")
    assert written_name("THE BUILDINGS DEPARTMENT") == "The Buildings Department"
    assert written_name("IT DEPARTMENT") == "IT Department"
    for name in ("Radium-213", "iPhone", "abc.ABC", "2024"):  # lower-case letters (or none): kept as it is
        assert written_name(name, [name.upper(), name.lower()]) == name


def test_short_ies_verbs_keep_their_e() -> None:
    from pipelines.text.phrases import base_verb, derive_forms

    assert [base_verb(w) for w in ("lies", "dies", "applies", "decays", "symbolizes", "quizzes", "fixes")] == [
        "lie", "die", "apply", "decay", "symbolize", "quiz", "fix"]
    from pipelines.text.phrases import edge_statement, singular_subject

    # a past tense without -ed stays as it is; a possessive slot cannot take "an event"
    assert singular_subject("{head} held the title of {tail}") == "{head} held the title of {tail}"
    assert singular_subject("{head} utilize {tail}") == "{head} utilizes {tail}"
    assert singular_subject("{head} of the PDF is part of {tail}") == "{head} of the PDF is part of {tail}"
    assert edge_statement("The Cratchit Family's Christmas Dinner symbolizes togetherness.", "THE CRATCHIT FAMILY",
                          "CHRISTMAS DINNER") is None
    assert derive_forms("{head} lies on {tail}").ask_tail == "Which {type} does {head} lie on?"
    # nor can a quoted or bracketed one take "which entity" ("the 'which entity' category")
    for text in ("The GOVERN function includes the 'SUPPLY CHAIN' category.", "\u201cGOVERN\u201d includes SUPPLY CHAIN.",
                 "GOVERN includes the category (SUPPLY CHAIN)."):
        assert edge_statement(text, "GOVERN", "SUPPLY CHAIN") is None, text
    assert edge_statement("GOVERN includes SUPPLY CHAIN.", "GOVERN", "SUPPLY CHAIN") == "{head} includes {tail}"
    # a statement relates its two ends and nothing else: it starts with one and ends with the other, with a plain
    # verb group between (real LightRAG descriptions: lennys_podcast_lightrag, christmas_carol_lightrag)
    refused = [("DEB discusses how PRODUCT SENSE matters.", "DEB", "PRODUCT SENSE"),  # a clause left open
               ("VALENTINE is mentioned as a friend, emphasizing SCROOGE.", "VALENTINE", "SCROOGE"),  # a comma
               ("DEB discusses parenting as it relates to MARIN.", "DEB", "MARIN"),  # a pronoun pointing outside
               ("In 2020 ACME acquired BETA.", "ACME", "BETA"),  # words before the first end
               ("DEB talks about the importance of making strategic CAREER MOVES.", "DEB", "CAREER MOVES"),  # adjective
               ("Poplar tree symbolizes desolation in Scrooge.", "POPLAR", "SCROOGE"),  # "tree" is no verb
               ("ADA and LENNY discuss MONETIZATION.", "ADA", "MONETIZATION"),
               ("ADA has played a role in managing FUNDING.", "ADA", "FUNDING"),  # "does ADA have played"
               # NIST CSF 2.0 (kg_assets/nist_csf_lightrag): a plural noun before "of", the rest of a longer name
               ("The Kind property of the entity in NIST Cybersecurity Framework (CSF) 2.0 relates to its type.",
                "Kind", "NIST Cybersecurity Framework (CSF) 2.0"),  # asked "An entity properties of the entity in …"
               ("Kind properties of the entity in NIST Cybersecurity Framework (CSF) 2.0.", "Kind",
                "NIST Cybersecurity Framework (CSF) 2.0"),
               ("NIST Cybersecurity Framework 2.0 document is processed by PyMuPDF.", "NIST Cybersecurity Framework",
                "PyMuPDF"),  # asked "A concept 2.0 document is processed by …"
               # lennys_podcast_lightrag (writer 9): the rest of the subject before an adverb and the verb; a noun
               # after an article, whose end is the subject of a clause of its own
               ("The Workplace environment significantly impacts discussions about Promotion and employee "
                "aspirations.", "WORKPLACE", "PROMOTION"),  # asked "Workplace environments significantly impacts …"
               ("Kayvon Beykpour mentions the struggles Instagram has faced in giving users control.",
                "KAYVON BEYKPOUR", "INSTAGRAM")]  # asked "A person mentions the struggles that organization"
    for text, head, tail in refused:
        assert edge_statement(text, head, tail) is None, text
    kept = [("Septic embolism asks to code Lung abscess first.", "Septic embolism", "Lung abscess",
             "{head} asks to code {tail}"),  # "to code", not "to {tail}"
            ("CUBE TESTS check the strength of GRADE 30 CONCRETE.", "CUBE TESTS", "GRADE 30 CONCRETE",
             "{head} check the strength of {tail}"),  # a base-form verb (the singular rule makes it "checks")
            ("Valentine oversaw the ledger of Scrooge.", "VALENTINE", "SCROOGE", "{head} oversaw the ledger of {tail}"),
            ("ACME does not include BETA.", "ACME", "BETA", "{head} does not include {tail}"),
            ("CONCRETE consists of CEMENT.", "CONCRETE", "CEMENT", "{head} consists of {tail}"),  # a verb with "of"
            ("LENNY co-founded AIRBNB.", "LENNY", "AIRBNB", "{head} co-founded {tail}"),  # lennys_podcast_lightrag
            ("ADA often discusses MONETIZATION.", "ADA", "MONETIZATION", "{head} often discusses {tail}"),
            ("Team spirit frequently shapes CULTURE.", "TEAM SPIRIT", "CULTURE", "{head} frequently shapes {tail}")]
    for text, head, tail, statement in kept:
        assert edge_statement(text, head, tail) == statement, text


def test_questions_on_the_lightrag_graph_write_names_as_people_do_and_verbs_in_the_singular(
        construction: Params) -> None:
    graph = relation_graph("construction", construction)
    pairs = read_qa_pairs("construction", construction)
    assert not graph.shared_labels and len(pairs) >= 20
    ids = {name: i for i, name in enumerate(graph.names)}
    assert graph.written_name(ids["ACME CONCRETE LTD"]) == "ACME Concrete Ltd"  # its description writes it so
    assert graph.written_name(ids["GRADE 30 CONCRETE"]) == "Grade 30 Concrete"
    assert graph.written_name(ids["BS 8500"]) == "BS 8500"
    shouted = [n for n in graph.names if not any(c.islower() for c in n) and re.search(r"[^\W\d_]{4,}", n)]
    assert len(shouted) >= 20
    for pair in pairs:
        for name in shouted:  # an upper-case name of a word of 4+ letters is never written as the graph stores it
            assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", pair.question), (name, pair.question)
        start = pair.path[0]  # the question names its start as written_name writes it
        assert question_spelling(pair.question, start) == graph.written_name(ids[start]), pair.question
        assert question_spelling(pair.question, start) != start or start in ("BS 8500", "BS 4449"), pair.question
        assert pair.answer in ids  # the answer stays the graph's name (exact match against the tools' names)
        # the graph's one plural statement ("STRIP FOUNDATIONS are cast in ...") is never asked: neither "Strip
        # Foundations is cast in" nor "Which component are cast in" reads well
        assert not re.search(r"\b[Ww]hich (\w+ ){1,2}are\b", pair.question) and " are " not in pair.question, \
            pair.question
    plural = [r for r in range(len(graph.keywords)) if {graph.names[graph.src[r]], graph.names[graph.dst[r]]}
              == {"GRADE 30 CONCRETE", "STRIP FOUNDATIONS"}]
    assert plural and all(graph.phrasebook.relation(r) is None for r in plural)
    singular = [r for r in range(len(graph.keywords)) if {graph.names[graph.src[r]], graph.names[graph.dst[r]]}
                == {"GRADE 30 CONCRETE", "GROUND FLOOR SLAB"}]  # "The GROUND FLOOR SLAB is cast in ..."
    assert singular and all(graph.phrasebook.relation(r) is not None for r in singular)
    assert any("BS 8500" in p.question for p in pairs)


def test_questions_on_a_rendering_write_names_in_the_source_case(lakes: Params) -> None:
    source = {name.upper(): name for row in LAKES_TRIPLES for name in (row[0], row[2])}
    pairs = read_qa_pairs("lakes_lightrag", lakes)
    assert len(pairs) >= 20
    for pair in pairs:
        assert pair.answer in source and all(name in source for name in pair.path)  # the graph's upper-case names
        assert question_spelling(pair.question, pair.path[0]) == written_name(
            pair.path[0], [source[pair.path[0]]]), pair.question
        for name in pair.path:
            if name == "NATO":  # upper case in the source too: no text writes it otherwise, so it is title-cased
                continue
            for start, end in find_name(pair.question, name) or []:
                assert pair.question[start:end] == source[name], (name, pair.question)
        assert not re.search(r"\b[Ww]hich (\w+ ){1,2}are\b", pair.question), pair.question
    named = " ".join(p.question for p in pairs)
    # the descriptions' casing, not the title case ("SS Cyril ...") an upper-case name would get without them
    assert "Ss Cyril and Methodius University" in named and "Galičica National Park" in named
    # a triples graph (shared labels) names entities as stored; the rendering title-cases what no text writes lower
    triples_graph, rendered = relation_graph("lakes", lakes), relation_graph("lakes_lightrag", lakes)
    assert triples_graph.shared_labels and not rendered.shared_labels
    assert triples_graph.written_name(triples_graph.names.index("NATO")) == "NATO"
    assert rendered.written_name(rendered.names.index("NATO")) == "Nato"
    assert rendered.written_name(rendered.names.index("GALIČICA NATIONAL PARK")) == "Galičica National Park"


# ----- 8. the question's spelling --------------------------------------------------------------------------------
def test_question_spelling_finds_the_questions_own_spelling_of_a_graph_name() -> None:
    assert question_spelling("Which entity decays to Radium-213?", "RADIUM-213") == "Radium-213"
    assert question_spelling("Which material is Strip Foundations cast in?", "STRIP FOUNDATIONS") == \
        "Strip Foundations"
    assert question_spelling("Which entity decays to Radium-213?", "POLONIUM-217") == "POLONIUM-217"
    assert question_spelling("Which entity decays to Radium-2134?", "RADIUM-213") == "RADIUM-213"  # a whole name
    assert question_spelling("Is radium-213 the same as Radium-213?", "RADIUM-213") == "radium-213"  # the first


# ----- 9. answers copied from the tools, missing entities, repeated calls ------------------------------------------
def episode(answer: str | None, calls: list[ToolCallRecord], finish: str = "answer") -> Trajectory:
    return Trajectory(qa_id="q", domain="chemistry", question="Which isotope does Francium-217 decay to?",
                      gold_answers=["RADIUM-213"], protocol="omne", messages=[], answer=answer, finish=finish,
                      tool_calls=calls)


def record(response: str, ok: bool = True, error_type: str | None = None, name: str = "node_info") -> ToolCallRecord:
    return ToolCallRecord(round=0, text=f'{name}(node_name="x")', name=name, arguments={"node_name": "x"}, ok=ok,
                          error_type=None if ok else error_type, response=response)


MATCHER = "Found 3 entities matching 'radium 213':\n1. RADIUM-213 [isotope]\n2. Radium-213m [isotope]\n3. RADON-213"
NOT_FOUND = 'Entity "Radium-213" not found in KG; the closest names are "RADIUM-213", "RADON-213"'


def test_answer_from_tools_needs_the_exact_name_in_a_successful_response() -> None:
    assert answer_from_tools(episode("RADIUM-213", [record(MATCHER)]))
    assert answer_from_tools(episode("  RADIUM-213\n", [record(MATCHER)]))  # surrounding whitespace is no retyping
    assert not answer_from_tools(episode("Radium-213", [record(MATCHER.replace("Radium-213m", "Rn"))]))  # case changed
    assert not answer_from_tools(episode("Radium-213", [record(NOT_FOUND, ok=False, error_type="entity_not_found"),
                                                        record(MATCHER.replace("Radium-213m", "Rn"))]))
    assert not answer_from_tools(episode("RADIUM", [record(MATCHER)]))  # a part of a name is not a name
    assert not answer_from_tools(episode("RADIUM-21", [record(MATCHER)]))
    assert not answer_from_tools(episode(None, [record(MATCHER)]))
    assert not answer_from_tools(episode("", [record(MATCHER)]))
    assert not answer_from_tools(episode("RADIUM-213", []))


def test_answer_in_last_thought_finds_the_answer_spelled_as_the_thought_before_it() -> None:
    def said(thought: str, answer: str | None) -> Trajectory:
        turns = [{"role": "assistant", "content": "<think>Francium-217 decays.</think><tool_call>x</tool_call>"},
                 {"role": "user", "content": "<tool_response>\nRADIUM-213\n</tool_response>"},
                 {"role": "assistant", "content": f"<think>{thought}</think>\n<answer> {answer}</answer>"}]
        return episode(answer, [record(MATCHER)]).model_copy(update={"messages": turns})

    assert answer_in_last_thought(said("That answers the question: RADIUM-213.", "RADIUM-213"))
    # the eighteenth run: thought NIST, answered Nation (the answer respelled on its way into the tag)
    assert not answer_in_last_thought(said("That answers the question: NIST.", "Nation"))
    assert not answer_in_last_thought(said("That answers the question: RADIUM-213.", "RADIUM-21"))  # a part of it
    assert not answer_in_last_thought(said("Francium-217 decays.", None))
    assert not answer_in_last_thought(episode("RADIUM-213", [record(MATCHER)]))  # no thought at all


def test_behaviour_counts_tool_answers_missing_entities_and_repeated_call_endings() -> None:
    failed = record(NOT_FOUND, ok=False, error_type="entity_not_found")
    trajectories = [
        episode("RADIUM-213", [record(MATCHER)]),  # copied from the tools
        episode("Radium-213", [record(MATCHER.replace("Radium-213m", "Rn"))]),  # retyped in another case
        episode("Radium-213", [failed, record("Entity: FRANCIUM-217\nType: isotope")]),  # only in a failed call
        episode(None, [failed, failed, record("No tail relations found", ok=False, error_type="no_results")],
                finish="repeated_call"),
        episode("   ", [], finish="max_rounds"),  # no answer
    ]
    got = behaviour(trajectories)
    assert isinstance(got, Behaviour)
    assert got.answered_episodes == 3
    assert got.answer_from_tools_share == pytest.approx(1 / 3)
    assert got.missing_entity_calls_per_sample == pytest.approx(3 / 5)  # three entity_not_found calls, five episodes
    assert got.missing_entity_call_share == pytest.approx(3 / 7)  # of seven calls
    assert got.repeated_call_finish_share == pytest.approx(1 / 5)
    assert got.finish == {"answer": 3, "max_rounds": 1, "repeated_call": 1}
    none = behaviour([episode(None, [], finish="max_rounds")])
    assert (none.answered_episodes, none.answer_from_tools_share, none.missing_entity_call_share) == (0, 0.0, 0.0)


def test_behaviour_counts_the_unshown_answers_sent_back_and_those_then_copied() -> None:
    copied = episode("RADIUM-213", [record(MATCHER)]).model_copy(update={"unshown_answers": ["RADIUM-2l3"]})
    stood = episode("RADIUM-2l3", [record(MATCHER)]).model_copy(update={"unshown_answers": ["RADIUM-2l3"]})
    got = behaviour([copied, stood, episode("RADIUM-213", [record(MATCHER)])])
    assert (got.unshown_answer_notes, got.unshown_answer_fixed) == (2, 1)
    assert got.answer_from_tools_share == pytest.approx(2 / 3)

