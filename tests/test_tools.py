"""The agent's KG tools on the tiny solar domain: exact outputs, typed errors, look-ups, search, reload."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.agent.calls import ErrorType, ToolCall, ToolError, format_call, parse_call
from pipelines.agent.client import InProcessToolClient
from pipelines.agent.tools import (
    TOOL_SPECS,
    EpisodeState,
    KGToolbox,
    ToolResult,
    question_clauses,
    relation_phrase,
    walk_clause,
)
from pipelines.config import Params, load_params
from pipelines.domains import load_registry
from pipelines.eval.triples import parse_triples
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from tests.tool_support import build_solar_project, with_tools

ENTITIES = {  # name -> description, as in tests/data/solar/entities.csv
    "Sun": "The star at the centre of the Solar System.", "Earth": "Terrestrial planet with liquid water.",
    "Mars": "Terrestrial planet known as the Red Planet.", "Jupiter": "Gas giant and the largest planet.",
    "Saturn": "Gas giant with prominent rings.", "Uranus": "Ice giant tilted on its side.",
    "Neptune": "Ice giant and the outermost planet.", "Galileo Galilei": "Italian astronomer.",
    "William Herschel": "German-born British astronomer.", "Moon": "Earth's natural satellite.",
    "Phobos": "Inner moon of Mars.", "Deimos": "Outer moon of Mars.", "Io": "Volcanically active Galilean moon.",
    "Europa": "Icy Galilean moon.", "Ganymede": "Largest moon in the Solar System.",
    "Callisto": "Heavily cratered Galilean moon.", "Titan": "Moon with a thick atmosphere.",
    "Enceladus": "Icy moon with geysers.", "Titania": "Largest moon of Uranus.", "Triton": "Retrograde moon of Neptune.",
    "Christiaan Huygens": "Dutch astronomer and physicist.", "William Lassell": "English astronomer.",
    "Johann Galle": "German astronomer.", "Asaph Hall": "American astronomer.",
    # only named by triples: no type, no description
    "Pisa": "", "The Hague": "", "Hanover": "", "Goshen": "",
}

# node_info as the quick profile writes it (tools.relation_descriptions: false, tools.neighbor_types: true,
# tools.node_info_lines: from_entity): each relation by its label, read from the entity ("-[orbits]->" out of it,
# "<-[orbits]-" into it), the other end with its type (an untyped one, Pisa, bare)
JUPITER = """Entity: Jupiter
Type: planet
Relations (5):
1. -[orbits]-> Sun [star]
2. <-[orbits]- Callisto [moon]
3. <-[orbits]- Europa [moon]
4. <-[orbits]- Ganymede [moon]
5. <-[orbits]- Io [moon]"""

GALILEO = """Entity: Galileo Galilei
Type: person
Relations (5):
1. -[born in]-> Pisa
2. <-[discovered by]- Callisto [moon]
3. <-[discovered by]- Europa [moon]
4. <-[discovered by]- Ganymede [moon]
5. <-[discovered by]- Io [moon]"""

SUN_RELATIONS = [
    "1. <-[orbits]- Earth [planet]",
    "2. <-[orbits]- Jupiter [planet]",
    "3. <-[orbits]- Mars [planet]",
    "4. <-[orbits]- Neptune [planet]",
    "5. <-[orbits]- Saturn [planet]",
    "6. <-[orbits]- Uranus [planet]",
]

# ... and as the paper profile does (tools.relation_descriptions: true): the relation's description after it
JUPITER_PAPER = """Entity: Jupiter
Type: planet
Description: Gas giant and the largest planet.
Relations (5):
1. Jupiter -[orbits]-> Sun: Jupiter is the fifth planet from the Sun.
2. Callisto -[orbits]-> Jupiter: Callisto is a Galilean moon of Jupiter.
3. Europa -[orbits]-> Jupiter: Europa is a Galilean moon of Jupiter.
4. Ganymede -[orbits]-> Jupiter: Ganymede is a Galilean moon of Jupiter.
5. Io -[orbits]-> Jupiter: Io is a Galilean moon of Jupiter."""

GALILEO_PAPER = """Entity: Galileo Galilei
Type: person
Description: Italian astronomer.
Relations (5):
1. Galileo Galilei -[born in]-> Pisa: Galileo Galilei was born in Pisa in 1564.
2. Callisto -[discovered by]-> Galileo Galilei: Callisto was discovered by Galileo Galilei in 1610.
3. Europa -[discovered by]-> Galileo Galilei: Europa was discovered by Galileo Galilei in 1610.
4. Ganymede -[discovered by]-> Galileo Galilei: Ganymede was discovered by Galileo Galilei in 1610.
5. Io -[discovered by]-> Galileo Galilei: Io was discovered by Galileo Galilei in 1610."""

SUN_RELATIONS_PAPER = [
    "1. Earth -[orbits]-> Sun: Earth is the third planet from the Sun.",
    "2. Jupiter -[orbits]-> Sun: Jupiter is the fifth planet from the Sun.",
    "3. Mars -[orbits]-> Sun: Mars is the fourth planet from the Sun.",
    "4. Neptune -[orbits]-> Sun: Neptune is the eighth planet from the Sun.",
    "5. Saturn -[orbits]-> Sun: Saturn is the sixth planet from the Sun.",
    "6. Uranus -[orbits]-> Sun: Uranus is the seventh planet from the Sun.",
]
MATCH_LINE = re.compile(r"^(\d+)\. Entity: (.+?) Description: (.+)$")


def variant(toolbox: KGToolbox, **changes: object) -> KGToolbox:
    """A toolbox over the same artifacts with other ToolParams (shares the loaded encoder)."""
    return KGToolbox(with_tools(toolbox.params, **changes), encoder=toolbox.encoder)


def ok(toolbox: KGToolbox, call: str, **kwargs: object) -> str:
    result = toolbox.call(call, **kwargs)
    assert result.ok and result.error_type is None, result
    assert not result.content.startswith("<error>")
    return result.content


def failed(toolbox: KGToolbox, call: object, kind: ErrorType, **kwargs: object) -> str:
    result = toolbox.call(call, **kwargs)
    assert isinstance(result, ToolResult)
    assert not result.ok and result.error_type == kind, result
    assert result.content.startswith("<error>") and result.content.endswith("</error>")
    return result.content[len("<error>"):-len("</error>")]


# ----- entity_matcher ---------------------------------------------------------------------------------
def test_entity_matcher_lists_the_top_five_with_descriptions(toolbox: KGToolbox) -> None:
    # the Omne-R1 paper's five, with descriptions (params.yaml's quick values: 3, names only)
    box = variant(toolbox, entity_matcher_top_k=5, matcher_descriptions=True)
    lines = ok(box, 'entity_matcher(node_name="Jupiter", graph_type="solar")').split("\n")
    assert lines[0] == "Found 5 entities matching 'Jupiter':"
    assert lines[1] == "1. Entity: Jupiter Description: Gas giant and the largest planet."
    assert len(lines) == 6
    names = []
    for rank, line in enumerate(lines[1:], start=1):
        match = MATCH_LINE.match(line)
        assert match, line
        assert int(match[1]) == rank and match[2] in ENTITIES
        assert match[3] == (ENTITIES[match[2]] or "none")
        names.append(match[2])
    assert len(set(names)) == 5


@pytest.mark.parametrize("name", sorted(ENTITIES))
def test_entity_matcher_top_hit_for_an_exact_name_is_that_entity(toolbox: KGToolbox, name: str) -> None:
    lines = ok(toolbox, f'entity_matcher(node_name="{name}", graph_type="solar")').split("\n")
    assert lines[0] == f"Found {toolbox.tool_params.entity_matcher_top_k} entities matching '{name}':"
    described = ok(variant(toolbox, matcher_descriptions=True),
                   f'entity_matcher(node_name="{name}", graph_type="solar")')
    assert described.split("\n")[1] == f"1. Entity: {name} Description: {ENTITIES[name] or 'none'}"


def test_entity_matcher_lists_names_with_their_types_as_neighbours_are_written(toolbox: KGToolbox) -> None:
    """The quick profile's matcher: each hit's name and, when it has one, its type in square brackets; no
    descriptions (node_info shows the chosen entity's). Untyped Pisa stays bare; without neighbour types, names."""
    ganymede = ok(toolbox, 'entity_matcher(node_name="Ganymede", graph_type="solar")')
    assert ganymede.split("\n")[1] == "1. Ganymede [moon]"
    assert ok(toolbox, 'entity_matcher(node_name="Pisa", graph_type="solar")').split("\n")[1] == "1. Pisa"
    untyped = ok(variant(toolbox, neighbor_types=False), 'entity_matcher(node_name="Ganymede", graph_type="solar")')
    assert untyped.split("\n")[1] == "1. Ganymede"
    for line in ok(toolbox, 'entity_matcher(node_name="Jupiter", graph_type="solar")').split("\n")[1:]:
        assert "Description" not in line and re.fullmatch(r"\d\. [^\[\]]+( \[[a-z ]+\])?", line), line


def test_entity_matcher_top_k_follows_tool_params(toolbox: KGToolbox) -> None:
    three = ok(variant(toolbox, entity_matcher_top_k=3), 'entity_matcher(node_name="Io", graph_type="solar")')
    assert three.split("\n")[0] == "Found 3 entities matching 'Io':" and len(three.split("\n")) == 4
    everything = ok(variant(toolbox, entity_matcher_top_k=100, matcher_descriptions=True),
                    'entity_matcher("Io", "solar")').split("\n")
    assert everything[0] == "Found 28 entities matching 'Io':"
    assert {MATCH_LINE.match(line)[2] for line in everything[1:]} == set(ENTITIES)


def test_entity_matcher_refuses_an_empty_name(toolbox: KGToolbox) -> None:
    assert failed(toolbox, 'entity_matcher(node_name="   ", graph_type="solar")',
                  ErrorType.INVALID_ARGUMENT) == "entity_matcher: node_name is empty"


# ----- node_info ----------------------------------------------------------------------------------------
def test_node_info_lists_entity_type_and_every_relation_in_order(toolbox: KGToolbox) -> None:
    assert ok(toolbox, 'node_info(node_name="Jupiter", graph_type="solar")') == JUPITER
    assert ok(toolbox, 'node_info(node_name="Galileo Galilei", graph_type="solar")') == GALILEO
    assert ok(toolbox, 'node_info(node_name="Pisa", graph_type="solar")') == (
        "Entity: Pisa\nType: unknown\nRelations (1):\n"
        "1. <-[born in]- Galileo Galilei [person]")
    # a neighbour's name copied with its type finds the entity when the type is its own
    assert ok(toolbox, 'node_info(node_name="Sun [star]", graph_type="solar")').split("\n")[:2] == [
        'No entity is named "Sun [star]"; the closest is "Sun".', "Entity: Sun"]
    # tools.neighbor_types: false (the paper's tool) lists the names alone
    untyped = ok(variant(toolbox, neighbor_types=False), 'node_info(node_name="Jupiter", graph_type="solar")')
    assert untyped == JUPITER.replace(" [star]", "").replace(" [moon]", "")
    # the same call twice, or from a fresh toolbox, gives the same text
    assert variant(toolbox).call('node_info("Jupiter", "solar")').content == JUPITER
    # tools.node_info_descriptions: true (the paper's tool) gives the entity's description after its type
    described = ok(variant(toolbox, node_info_descriptions=True), 'node_info(node_name="Jupiter", graph_type="solar")')
    lines = JUPITER.split("\n")
    assert described.split("\n") == [*lines[:2], "Description: Gas giant and the largest planet.", *lines[2:]]
    assert "Description: none" in ok(variant(toolbox, node_info_descriptions=True),
                                     'node_info(node_name="Pisa", graph_type="solar")')


def test_node_info_lines_from_the_entity_and_as_triples_name_the_same_relations(toolbox: KGToolbox) -> None:
    """tools.node_info_lines: from_entity writes the entity's name once, at the top; triples (the paper profile's)
    names both ends on every line. The two list the same triples, as the metrics and rewards read them."""
    triples = variant(toolbox, node_info_lines="triples")
    for name, from_entity in [("Jupiter", JUPITER), ("Galileo Galilei", GALILEO)]:
        as_triples = ok(triples, f'node_info(node_name="{name}", graph_type="solar")')
        assert as_triples.split("\n")[:3] == from_entity.split("\n")[:3] and as_triples != from_entity
        assert parse_triples(as_triples) == parse_triples(from_entity) and len(parse_triples(from_entity)) == 5
    assert ok(triples, 'node_info(node_name="Jupiter", graph_type="solar")').split("\n")[3:5] == [
        "1. Jupiter -[orbits]-> Sun [star]", "2. Callisto [moon] -[orbits]-> Jupiter"]
    assert parse_triples(JUPITER)[:2] == [("Jupiter", "orbits", "Sun"), ("Callisto", "orbits", "Jupiter")]
    assert len(GALILEO) < len(ok(triples, 'node_info(node_name="Galileo Galilei", graph_type="solar")'))


def test_node_info_caps_neighbours_with_a_marker(toolbox: KGToolbox) -> None:
    capped = ok(variant(toolbox, node_info_max_neighbors=2), 'node_info(node_name="Jupiter", graph_type="solar")')
    assert capped.split("\n") == [*JUPITER.split("\n")[:5], "… 3 more relations not shown"]
    exact = ok(variant(toolbox, node_info_max_neighbors=5), 'node_info(node_name="Jupiter", graph_type="solar")')
    assert exact == JUPITER and "more relations not shown" not in exact
    one = ok(variant(toolbox, node_info_max_neighbors=1), 'node_info(node_name="Sun", graph_type="solar")')
    assert one.split("\n")[2:] == ["Relations (6):", SUN_RELATIONS[0], "… 5 more relations not shown"]


def test_node_info_lists_the_relations_closest_to_the_episode_question_first(toolbox: KGToolbox) -> None:
    """tools.node_info_order: question ranks each kind of relation (direction and label) by how close its label is
    to the episode's question, and lists the first relation of every kind before the second of any."""
    client = InProcessToolClient(variant(toolbox, node_info_order="question"))
    call = 'node_info(node_name="Galileo Galilei", graph_type="solar")'
    header = "Relations (5, closest to the question first):"
    moons = client.call(call, question="Which moons did Galileo Galilei discover?").content.split("\n")
    assert moons[2:] == [header, "1. <-[discovered by]- Callisto [moon]", "2. -[born in]-> Pisa",
                         "3. <-[discovered by]- Europa [moon]", "4. <-[discovered by]- Ganymede [moon]",
                         "5. <-[discovered by]- Io [moon]"]
    born = client.call(call, question="Where was Galileo Galilei born?").content.split("\n")
    assert born[:2] + born[3:] == GALILEO.split("\n")[:2] + GALILEO.split("\n")[3:] and born[2] == header
    # the cap keeps one relation of each kind before a second of any
    capped = InProcessToolClient(variant(toolbox, node_info_order="question", node_info_max_neighbors=2))
    assert capped.call(call, question="Which moons did Galileo Galilei discover?").content.split("\n")[3:] == [
        *moons[3:5], "… 3 more relations not shown"]
    # without a question, with one relation, or with tools.node_info_order: graph (the paper's) the order is the graph's
    assert client.call(call).content == GALILEO
    assert client.call('node_info(node_name="Pisa", graph_type="solar")', question="Who was born in Pisa?").content == (
        "Entity: Pisa\nType: unknown\nRelations (1):\n1. <-[born in]- Galileo Galilei [person]")
    graph_order = InProcessToolClient(variant(toolbox, node_info_order="graph"))
    assert graph_order.call(call, question="Where was Galileo Galilei born?").content == GALILEO


class NoEncoding:
    """Stands in for the sentence-transformers model where every vector must come from the disk cache."""

    def encode(self, texts: list[str], **_: object) -> None:
        raise AssertionError(f"encoded again: {texts}")


def test_graph_and_question_vectors_reach_the_disk_cache_and_model_queries_do_not(toolbox: KGToolbox) -> None:
    """The relation phrases node_info ranks and the episode's question go to the shared disk cache, so the next
    stage's process (a fresh toolbox) orders node_info without encoding; what the model wrote stays in memory."""
    ordered = with_tools(toolbox.params, node_info_order="question")
    call = 'node_info(node_name="Galileo Galilei", graph_type="solar")'
    question = "Which moons did Galileo Galilei discover?"
    first = InProcessToolClient(KGToolbox(ordered, encoder=toolbox.encoder)).call(call, question=question).content
    assert ok(toolbox, 'entity_matcher(node_name="moons of Galileo, spelt oddly", graph_type="solar")')
    disk, key = toolbox.encoder.cache, toolbox.encoder._key
    assert disk is not None and disk.directory.startswith(str(toolbox.params.artifacts_dir))
    assert disk.get(key(question)) is not None
    assert disk.get(key(relation_phrase(True, "discovered by", "Galileo Galilei", "moon"))) is not None
    assert disk.get(key(relation_phrase(False, "born in", "Galileo Galilei", "unknown"))) is not None
    assert disk.get(key("moons of Galileo, spelt oddly")) is None
    fresh = KGToolbox(ordered)
    fresh.encoder.__dict__["model"] = NoEncoding()  # the cached_property, set: loading the model is not allowed
    assert InProcessToolClient(fresh).call(call, question=question).content == first


YUKON = ("Yukon Territory is a state or province of a country, which shares a land border with a second country. "
         "Which currency does the second country use?")


def test_a_question_is_cut_into_the_clauses_a_walk_reads_in_turn() -> None:
    assert question_clauses(YUKON) == ["Yukon Territory is a state or province of a country",
                                       "which shares a land border with a second country.",
                                       "Which currency does the second country use?"]
    assert question_clauses("Which currency does the country whose capital is Lima use?") == [
        "Which currency does the country", "whose capital is Lima use?"]
    # a piece of one or two words joins the next; a question of one clause stays whole
    assert question_clauses("In which country or territory is Wolof spoken but not official?") == [
        "In which country or territory is Wolof spoken but not official?"]
    assert question_clauses("Where was Galileo Galilei born?") == ["Where was Galileo Galilei born?"]
    assert question_clauses("") == []
    # the walk starts at the clause naming the start, goes to the nearest statement left, and ends at the question;
    # an entity keeps its clause (a repeated call), and once every clause is walked none is left
    episode = EpisodeState(question=YUKON)
    assert walk_clause(episode, "geo", 7, "Yukon Territory") == question_clauses(YUKON)[0]
    assert walk_clause(episode, "geo", 8, "Canada") == question_clauses(YUKON)[1]
    assert walk_clause(episode, "geo", 7, "Yukon Territory") == question_clauses(YUKON)[0]
    assert walk_clause(episode, "geo", 9, "United States") == question_clauses(YUKON)[2]
    assert walk_clause(episode, "geo", 10, "US Dollar") is None
    assert walk_clause(EpisodeState(), "geo", 7, "Yukon Territory") is None
    assert relation_phrase(False, "orbits", "Jupiter", "star") == "Jupiter orbits a star"
    assert relation_phrase(True, "orbits", "Jupiter", "moon") == "a moon orbits Jupiter"
    assert relation_phrase(True, "decays to", "Barium-129", "unknown") == "an entity decays to Barium-129"


def test_node_info_ranks_a_label_that_runs_both_ways_by_the_way_the_question_reads(toolbox: KGToolbox) -> None:
    """Jupiter orbits the Sun and four moons orbit Jupiter: one label both ways. Each way is read with Jupiter on its
    side and the other end's type ("Jupiter orbits a star", "a moon orbits Jupiter"), so the question picks it."""
    client = InProcessToolClient(variant(toolbox, node_info_order="question"))
    call = 'node_info(node_name="Jupiter", graph_type="solar")'
    sun, moon = "-[orbits]-> Sun [star]", "<-[orbits]- Callisto [moon]"
    for question, first in [("Which moons orbit Jupiter?", moon), ("Which star does Jupiter orbit?", sun),
                            ("What does Jupiter orbit?", sun), ("Jupiter orbits a star. Which galaxy is it in?", sun)]:
        assert client.call(call, question=question).content.split("\n")[3] == f"1. {first}", question


def test_node_info_lists_the_way_back_of_a_walk_last(toolbox: KGToolbox) -> None:
    """Within one episode, the kind of relation that leads back to an entity node_info already listed ranks last,
    however close to the question: the question names the relation the walk came in by too."""
    client = InProcessToolClient(variant(toolbox, node_info_order="question"))
    question = "Which astronomer discovered Io?"
    galileo = 'node_info(node_name="Galileo Galilei", graph_type="solar")'
    alone = client.call(galileo, episode_id="fresh", question=question).content.split("\n")
    assert alone[3:5] == ["1. <-[discovered by]- Callisto [moon]", "2. -[born in]-> Pisa"]
    io = client.call('node_info(node_name="Io", graph_type="solar")', episode_id="walk", question=question).content
    assert io.split("\n")[3] == "1. -[discovered by]-> Galileo Galilei [person]"
    walked = client.call(galileo, episode_id="walk").content.split("\n")  # the episode keeps its question
    assert walked[3:] == ["1. -[born in]-> Pisa", *GALILEO.split("\n")[4:]]
    # another episode has walked nowhere
    assert client.call(galileo, episode_id="other", question=question).content.split("\n") == alone


def test_node_info_lists_everything_in_the_paper_profile(solar: Params, toolbox: KGToolbox) -> None:
    paper = load_params(solar.root / "params.yaml", "paper")
    assert paper.tools.node_info_max_neighbors is None and not paper.tools.neighbor_types
    box = KGToolbox(paper, encoder=toolbox.encoder)
    sun = ok(box, 'node_info(node_name="Sun", graph_type="solar")')
    assert sun.split("\n")[3:] == ["Relations (6):", *SUN_RELATIONS_PAPER]
    assert "not shown" not in sun
    assert ok(box, 'node_info(node_name="Jupiter", graph_type="solar")') == JUPITER_PAPER
    assert ok(box, 'node_info(node_name="Galileo Galilei", graph_type="solar")') == GALILEO_PAPER


# ----- KG-R1 actions --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("call", "expected"), [
    ('get_tail_relations(entity="Jupiter")', 'Tail relations for entity "Jupiter": orbits'),
    ('get_tail_relations(entity="Io")', 'Tail relations for entity "Io": discovered by, orbits'),
    ('get_tail_relations(entity="Galileo Galilei")', 'Tail relations for entity "Galileo Galilei": born in'),
    ('get_head_relations(entity="Jupiter")', 'Head relations for entity "Jupiter": orbits'),
    ('get_head_relations(entity="Galileo Galilei")', 'Head relations for entity "Galileo Galilei": discovered by'),
    ('get_head_relations(entity="Mars")', 'Head relations for entity "Mars": orbits'),
    ('get_head_relations(entity="Neptune")', 'Head relations for entity "Neptune": orbits'),
    ('get_head_relations("Pisa")', 'Head relations for entity "Pisa": born in'),
    ('get_head_entities(entity="Jupiter", relation="orbits")',
     'Head entities for entity "Jupiter" with relation "orbits": Callisto, Europa, Ganymede, Io'),
    ('get_head_entities(entity="Sun", relation="orbits")',
     'Head entities for entity "Sun" with relation "orbits": Earth, Jupiter, Mars, Neptune, Saturn, Uranus'),
    ('get_head_entities(entity="William Herschel", relation="discovered by")',
     'Head entities for entity "William Herschel" with relation "discovered by": Enceladus, Titania, Uranus'),
    ('get_head_entities("Asaph Hall", "discovered by")',
     'Head entities for entity "Asaph Hall" with relation "discovered by": Deimos, Phobos'),
    ('get_tail_entities(entity="Io", relation="orbits")', 'Tail entities for entity "Io" with relation "orbits": Jupiter'),
    ('get_tail_entities(entity="Triton", relation="discovered by")',
     'Tail entities for entity "Triton" with relation "discovered by": William Lassell'),
    ('get_tail_entities(entity="Galileo Galilei", relation="born in")',
     'Tail entities for entity "Galileo Galilei" with relation "born in": Pisa'),
])
def test_kg_r1_actions_give_flat_sorted_lists(toolbox: KGToolbox, call: str, expected: str) -> None:
    assert ok(toolbox, call) == expected
    assert ok(toolbox, call, graph_type="solar") == expected


def test_kg_r1_lists_are_capped_by_kg_r1_max_items(toolbox: KGToolbox) -> None:
    box = variant(toolbox, kg_r1_max_items=2)
    assert ok(box, 'get_head_entities(entity="Sun", relation="orbits")') == (
        'Head entities for entity "Sun" with relation "orbits": Earth, Jupiter, … 4 more')
    assert ok(box, 'get_tail_relations(entity="Io")') == 'Tail relations for entity "Io": discovered by, orbits'


def test_kg_r1_relation_names_are_normalised_and_reported_as_stored(toolbox: KGToolbox) -> None:
    assert ok(toolbox, 'get_head_entities(entity="jupiter", relation="  ORBITS ")') == (
        'Head entities for entity "Jupiter" with relation "orbits": Callisto, Europa, Ganymede, Io')


# ----- typed errors ---------------------------------------------------------------------------------------
def test_entity_not_found(toolbox: KGToolbox) -> None:
    # node_info names the entity_matcher's closest names, so that the next call copies one instead of retrying
    assert failed(toolbox, 'node_info(node_name="Vulcan", graph_type="solar")', ErrorType.ENTITY_NOT_FOUND) == (
        'Entity "Vulcan" not found in KG; the closest names are "Titan", "Neptune", "Saturn"')
    matcher = ok(toolbox, 'entity_matcher(node_name="Vulcan", graph_type="solar")').split("\n")[1:]
    assert [line.split(". ", 1)[1].split(" [")[0] for line in matcher] == ["Titan", "Neptune", "Saturn"]
    for call in ('get_tail_relations(entity="Vulcan")', 'get_head_relations(entity="Vulcan")',
                 'get_head_entities(entity="Vulcan", relation="orbits")',
                 'get_tail_entities(entity="Vulcan", relation="orbits")',
                 'search(entity="Vulcan", question="What orbits Vulcan?")'):
        assert failed(toolbox, call, ErrorType.ENTITY_NOT_FOUND) == 'Entity "Vulcan" not found in KG'


def test_relation_not_found_and_no_results(toolbox: KGToolbox) -> None:
    assert failed(toolbox, 'get_tail_entities(entity="Io", relation="eats")',
                  ErrorType.RELATION_NOT_FOUND) == 'Relation "eats" not found in KG'
    assert failed(toolbox, 'get_head_entities(entity="Io", relation="eats")', ErrorType.RELATION_NOT_FOUND)
    assert failed(toolbox, 'get_head_relations(entity="Io")',
                  ErrorType.NO_RESULTS) == 'No head relations found for entity "Io" in knowledge graph'
    assert failed(toolbox, 'get_tail_relations(entity="Sun")',
                  ErrorType.NO_RESULTS) == 'No tail relations found for entity "Sun" in knowledge graph'
    assert failed(toolbox, 'get_tail_entities(entity="Io", relation="born in")',
                  ErrorType.NO_RESULTS) == 'No tail entities found for entity "Io" with relation "born in"'
    assert failed(toolbox, 'get_head_entities(entity="Io", relation="orbits")',
                  ErrorType.NO_RESULTS) == 'No head entities found for entity "Io" with relation "orbits"'


def test_missing_fields_and_wrong_argument_count(toolbox: KGToolbox) -> None:
    assert failed(toolbox, 'node_info(node_name="Io")', ErrorType.MISSING_FIELDS) == (
        "node_info is missing required argument(s): graph_type")
    assert failed(toolbox, "get_head_entities()", ErrorType.MISSING_FIELDS) == (
        "get_head_entities is missing required argument(s): entity, relation")
    assert failed(toolbox, 'search(entity="Io")', ErrorType.MISSING_FIELDS) == (
        "search is missing required argument(s): question")
    assert failed(toolbox, 'get_tail_relations("Io", "orbits")', ErrorType.WRONG_ARGUMENT_COUNT) == (
        "get_tail_relations takes at most 1 argument(s) (entity), got 2")
    assert failed(toolbox, 'get_tail_relations(entity="Io", graph_type="solar")', ErrorType.WRONG_ARGUMENT_COUNT) == (
        "get_tail_relations got an unexpected argument 'graph_type'; its arguments are: entity")
    assert failed(toolbox, '{"name": "get_tail_relations", "arguments": {"entity": "Io", "x": 1}}',
                  ErrorType.WRONG_ARGUMENT_COUNT)


def test_invalid_action_lists_the_valid_actions(toolbox: KGToolbox) -> None:
    message = failed(toolbox, 'get_neighbors(entity="Io")', ErrorType.INVALID_ACTION)
    assert message.startswith('invalid action "get_neighbors"; valid actions: ')
    assert message.split("valid actions: ")[1].split(", ") == list(TOOL_SPECS)
    assert failed(toolbox, '{"name": "rm", "arguments": {}}', ErrorType.INVALID_ACTION).startswith('invalid action "rm"')


def test_unknown_graph_type(toolbox: KGToolbox) -> None:
    assert failed(toolbox, 'node_info(node_name="Io", graph_type="mars")', ErrorType.UNKNOWN_GRAPH) == (
        'unknown graph_type "mars"; known graphs: solar')
    assert failed(toolbox, 'get_tail_relations(entity="Io")', ErrorType.UNKNOWN_GRAPH, graph_type="chemistry") == (
        'unknown graph_type "chemistry"; known graphs: solar')
    result = toolbox.call('entity_matcher(node_name="Io", graph_type="mars")')
    assert result.graph_type == "mars" and result.name == "entity_matcher"


@pytest.mark.parametrize(("call", "message"), [
    ('node_info(node_name=3, graph_type="solar")', "node_info: argument 'node_name' must be a string, got int"),
    ('node_info(node_name=True, graph_type="solar")', "node_info: argument 'node_name' must be a string, got bool"),
    ('node_info(node_name=None, graph_type="solar")',
     "node_info: argument 'node_name' must be a string, got NoneType"),
    ('node_info(node_name=["Io"], graph_type="solar")', "node_info: argument 'node_name' must be a string, got list"),
    ('node_info(node_name="Io", graph_type=1.5)', "node_info: argument 'graph_type' must be a string, got float"),
    ('search(entity="Io", question="q", backtrack="yes")',
     "search: argument 'backtrack' must be a boolean, got str"),
    ('search(entity="Io", question="q", backtrack=1)', "search: argument 'backtrack' must be a boolean, got int"),
    ('node_info(node_name=x, graph_type="solar")', 'arguments must be literal values such as "text", 3 or True'),
    ('{"name": "node_info", "arguments": {"node_name": {"a": 1}, "graph_type": "solar"}}',
     "node_info: argument 'node_name' must be a string, got dict"),
])
def test_invalid_argument_types(toolbox: KGToolbox, call: str, message: str) -> None:
    assert failed(toolbox, call, ErrorType.INVALID_ARGUMENT) == message


def test_overlong_calls_and_arguments_are_refused(toolbox: KGToolbox) -> None:
    long_call = f'node_info(node_name="{"a" * 5000}", graph_type="solar")'
    assert failed(toolbox, long_call, ErrorType.FORMAT_ERROR) == "the tool call is longer than 4000 characters"
    long_argument = f'node_info(node_name="{"a" * 1001}", graph_type="solar")'
    assert failed(toolbox, long_argument, ErrorType.INVALID_ARGUMENT) == (
        "node_info: argument 'node_name' is longer than 1000 characters")
    box = variant(toolbox, max_call_chars=40)
    assert failed(box, 'node_info(node_name="Jupiter", graph_type="solar")', ErrorType.FORMAT_ERROR) == (
        "the tool call is longer than 40 characters")
    assert ok(box, 'get_tail_relations("Io")')


@pytest.mark.parametrize("call", ["", "   ", "node_info", "node_info(", "1 + 2", "node_info.x()",
                                  "a.b()", "{not json", '{"arguments": {}}', "[1, 2]"])
def test_unparseable_calls_are_format_errors(toolbox: KGToolbox, call: str) -> None:
    result = toolbox.call(call)
    assert result.error_type == ErrorType.FORMAT_ERROR and result.name == "" and result.arguments == {}
    assert result.content.startswith("<error>")


# ----- normalised look-up and index fallback ------------------------------------------------------------
@pytest.mark.parametrize("spelling", ["  jupiter ", "JUPITER", "Jupiter\t", '"Jupiter"', "'jupiter'", "Ｊｕｐｉｔｅｒ"])
def test_every_tool_finds_a_normalised_name(toolbox: KGToolbox, spelling: str) -> None:
    name = repr(spelling)
    assert ok(toolbox, f"node_info(node_name={name}, graph_type='solar')") == JUPITER
    assert ok(toolbox, f"get_tail_relations(entity={name})") == 'Tail relations for entity "Jupiter": orbits'
    assert ok(toolbox, f"get_head_relations(entity={name})") == 'Head relations for entity "Jupiter": orbits'
    assert ok(toolbox, f"get_head_entities(entity={name}, relation='orbits')") == (
        'Head entities for entity "Jupiter" with relation "orbits": Callisto, Europa, Ganymede, Io')
    assert ok(toolbox, f"get_tail_entities(entity={name}, relation='orbits')") == (
        'Tail entities for entity "Jupiter" with relation "orbits": Sun')
    assert ok(toolbox, f"search(entity={name}, question='What orbits Jupiter?')").startswith(
        'Triples of "Jupiter" relevant to the question:')
    if spelling.strip() in ("jupiter", "JUPITER", "Jupiter"):  # the encoder is uncased; quotes change the text
        assert ok(toolbox, f"entity_matcher(node_name={name}, graph_type='solar')").split("\n")[1].startswith(
            "1. Jupiter [planet]")


def _score(toolbox: KGToolbox, text: str) -> tuple[str, float]:
    graph = toolbox.graph("solar")
    (best, score), = graph.nearest(toolbox._embed(text), 1)
    return graph.names[best], score


def test_node_info_falls_back_to_the_index_only_above_the_threshold(toolbox: KGToolbox) -> None:
    best, score = _score(toolbox, "Ganymed")
    assert best == "Ganymede" and score >= toolbox.tool_params.fuzzy_min_score  # default 0.9 accepts this one
    found = ok(toolbox, 'node_info(node_name="Ganymed", graph_type="solar")').split("\n")
    assert found[0] == 'No entity is named "Ganymed"; the closest is "Ganymede".'
    assert found[1:3] == ["Entity: Ganymede", "Type: moon"]
    stricter = variant(toolbox, fuzzy_min_score=min(1.0, score + 0.005))
    assert failed(stricter, 'node_info(node_name="Ganymed", graph_type="solar")',
                  ErrorType.ENTITY_NOT_FOUND).startswith('Entity "Ganymed" not found in KG; the closest names are '
                                                         '"Ganymede", ')
    # a poor match is refused at the default threshold, accepted when the threshold is below its score
    best, score = _score(toolbox, "Titan!")
    assert best == "Titan" and score < toolbox.tool_params.fuzzy_min_score
    failed(toolbox, 'node_info(node_name="Titan!", graph_type="solar")', ErrorType.ENTITY_NOT_FOUND)
    lenient = variant(toolbox, fuzzy_min_score=score - 0.005)
    assert ok(lenient, 'node_info(node_name="Titan!", graph_type="solar")').startswith(
        'No entity is named "Titan!"; the closest is "Titan".\nEntity: Titan\n')
    # search uses the same fallback
    assert ok(lenient, 'search(entity="Titan!", question="Who discovered Titan?")').startswith(
        'Triples of "Titan" relevant to the question:')
    failed(toolbox, 'search(entity="Titan!", question="Who discovered Titan?")', ErrorType.ENTITY_NOT_FOUND)


def test_kg_r1_actions_never_fall_back(toolbox: KGToolbox) -> None:
    anything = variant(toolbox, fuzzy_min_score=0.0)
    assert ok(anything, 'node_info(node_name="Ganymed", graph_type="solar")').startswith("No entity is named")
    for call in ('get_tail_relations(entity="Ganymed")', 'get_head_relations(entity="Ganymed")',
                 'get_tail_entities(entity="Ganymed", relation="orbits")',
                 'get_head_entities(entity="Ganymed", relation="orbits")'):
        assert failed(anything, call, ErrorType.ENTITY_NOT_FOUND) == 'Entity "Ganymed" not found in KG'


# ----- search ---------------------------------------------------------------------------------------------
def test_search_returns_the_triples_of_the_most_relevant_predicates(toolbox: KGToolbox) -> None:
    lines = ok(toolbox, 'search(entity="Io", question="Who discovered Io?")').split("\n")
    assert lines[0] == 'Triples of "Io" relevant to the question:'
    assert lines[1] == "(Io, discovered by, Galileo Galilei)"
    assert set(lines[1:]) == {"(Io, discovered by, Galileo Galilei)", "(Io, orbits, Jupiter)"}
    one = variant(toolbox, search_top_relations=1)
    assert ok(one, 'search(entity="Io", question="Who discovered Io?")').split("\n")[1:] == [
        "(Io, discovered by, Galileo Galilei)"]
    galileo = ok(one, 'search(entity="Galileo Galilei", question="Where was Galileo Galilei born?")')
    assert galileo.split("\n")[1:] == ["(Galileo Galilei, born in, Pisa)"]
    sun = ok(toolbox, 'search(entity="Sun", question="Which planets orbit the Sun?")').split("\n")
    assert len(sun) == 7 and all(line.endswith(", orbits, Sun)") for line in sun[1:])
    capped = ok(variant(toolbox, search_max_triples=2), 'search(entity="Sun", question="Which planets orbit the Sun?")')
    assert len(capped.split("\n")) == 3
    assert ok(toolbox, 'search(entity="Io", question="Who discovered Io?", backtrack=False)') == "\n".join(lines)


def test_search_backtracks_to_the_parent_and_takes_its_next_candidate(toolbox: KGToolbox) -> None:
    episode = EpisodeState()
    first = ok(toolbox, 'search(entity="Io", question="Who discovered Io?")', episode=episode)
    assert first.split("\n")[1] == "(Io, discovered by, Galileo Galilei)"  # candidates: Galileo Galilei, Jupiter
    ok(toolbox, 'search(entity="Galileo Galilei", question="Who discovered Io?")', episode=episode)
    back = ok(toolbox, 'search(entity="", question="Who discovered Io?", backtrack=True)', episode=episode)
    header, *rest = back.split("\n")
    assert header == 'Backtracked from "Galileo Galilei" to "Io"; next candidate: "Jupiter".'
    assert rest[0] == 'Triples of "Jupiter" relevant to the question:'
    assert "(Io, orbits, Jupiter)" in rest
    assert [toolbox.graph("solar").names[f.entity] for f in episode.path] == ["Io", "Jupiter"]
    # Io has no candidate left
    assert failed(toolbox, 'search(entity="", question="", backtrack=True)', ErrorType.NO_RESULTS,
                  episode=episode) == '"Io" has no more candidates to try'
    assert failed(toolbox, 'search(entity="", question="", backtrack=True)', ErrorType.NO_RESULTS,
                  episode=episode) == "there is no previous entity to backtrack to"


def test_backtrack_without_a_parent_is_a_no_results_error(toolbox: KGToolbox) -> None:
    message = "there is no previous entity to backtrack to"
    assert failed(toolbox, 'search(entity="Io", question="q", backtrack=True)', ErrorType.NO_RESULTS) == message
    episode = EpisodeState()
    ok(toolbox, 'search(entity="Io", question="Who discovered Io?")', episode=episode)
    assert failed(toolbox, 'search(entity="Io", question="q", backtrack=True)', ErrorType.NO_RESULTS,
                  episode=episode) == message


# ----- written forms ------------------------------------------------------------------------------------
EQUIVALENT_FORMS = [
    ('node_info(node_name="Io", graph_type="solar")', {"name": "node_info",
                                                        "arguments": {"node_name": "Io", "graph_type": "solar"}}),
    ('get_head_entities("Jupiter", relation="orbits")', {"name": "get_head_entities",
                                                          "arguments": {"entity": "Jupiter", "relation": "orbits"}}),
    ('search(entity="Io", question="Who discovered Io?", backtrack=False)',
     {"name": "search", "arguments": {"entity": "Io", "question": "Who discovered Io?"}}),
    ('entity_matcher(node_name="galileo", graph_type="solar")',
     {"name": "entity_matcher", "arguments": {"node_name": "galileo", "graph_type": "solar"}}),
    ('node_info(node_name="Vulcan", graph_type="solar")',
     {"name": "node_info", "arguments": {"node_name": "Vulcan", "graph_type": "solar"}}),
    ('get_tail_relations(entity="Io", extra=1)', {"name": "get_tail_relations", "arguments": {"entity": "Io", "extra": 1}}),
]


@pytest.mark.parametrize(("python", "as_dict"), EQUIVALENT_FORMS)
def test_json_dict_and_python_forms_give_the_same_result(toolbox: KGToolbox, python: str, as_dict: dict) -> None:
    import json

    expected = toolbox.call(python)
    assert toolbox.call(json.dumps(as_dict)) == expected
    assert toolbox.call(as_dict) == expected
    openai_style = {"name": as_dict["name"], "arguments": json.dumps(as_dict["arguments"])}
    assert toolbox.call(json.dumps(openai_style)) == expected
    parsed = parse_call(python, TOOL_SPECS)
    if isinstance(parsed, ToolCall):
        assert toolbox.call(parsed) == expected


@pytest.mark.parametrize("text", [python for python, _ in EQUIVALENT_FORMS[:5]] + [
    "node_info(node_name='It\\'s \"quoted\" — ünïcødé \\n', graph_type='solar')",
    'search("Io", "Who?", True)', 'get_tail_entities(entity="a\\\\b", relation="\\t")',
])
def test_format_call_round_trips(text: str) -> None:
    parsed = parse_call(text, TOOL_SPECS)
    assert isinstance(parsed, ToolCall), parsed
    for style in ("python", "json"):
        again = parse_call(format_call(parsed, style), TOOL_SPECS)
        assert again == parsed
        assert format_call(again, style) == format_call(parsed, style)


def test_parse_call_binds_defaults_and_positional_arguments() -> None:
    parsed = parse_call('search("Io", "Who discovered Io?")', TOOL_SPECS)
    assert parsed == ToolCall(name="search", arguments={"entity": "Io", "question": "Who discovered Io?",
                                                        "backtrack": False})
    assert format_call(parsed) == 'search(entity="Io", question="Who discovered Io?", backtrack=False)'
    assert isinstance(parse_call('search("Io", "q", entity="x")', TOOL_SPECS), ToolError)


# ----- reload and robustness ----------------------------------------------------------------------------
def test_toolbox_serves_a_rebuilt_kg(tmp_path: Path, toolbox: KGToolbox) -> None:
    params = build_solar_project(tmp_path / "project")
    live = KGToolbox(params, encoder=toolbox.encoder, reload_check_seconds=0)
    cached = KGToolbox(params, encoder=toolbox.encoder, reload_check_seconds=3600)
    for box in (live, cached):
        failed(box, 'get_tail_relations(entity="Pisa")', ErrorType.NO_RESULTS)
    triples = params.root / "kg_assets" / "solar" / "triples.csv"
    triples.write_text(triples.read_text() + "Pisa,located in,Italy,Pisa is a city in Italy.\n", encoding="utf-8")
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params, force=True)
    build_entity_index("solar", params, force=True)
    assert ok(live, 'get_tail_relations(entity="Pisa")') == 'Tail relations for entity "Pisa": located in'
    assert ok(live, 'get_tail_entities(entity="Pisa", relation="located in")') == (
        'Tail entities for entity "Pisa" with relation "located in": Italy')
    assert ok(live, 'entity_matcher(node_name="Italy", graph_type="solar")').split("\n")[1] == "1. Italy"
    assert live.graph("solar").num_entities == 29
    # within its check interval a toolbox keeps the graph it loaded
    failed(cached, 'get_tail_relations(entity="Pisa")', ErrorType.NO_RESULTS)


def test_an_exception_in_a_handler_is_a_server_error(toolbox: KGToolbox, monkeypatch: pytest.MonkeyPatch) -> None:
    box = variant(toolbox)

    def boom(*_: object) -> str:
        raise RuntimeError("boom")

    monkeypatch.setitem(box._handlers, "node_info", boom)
    assert failed(box, 'node_info(node_name="Io", graph_type="solar")',
                  ErrorType.SERVER_ERROR) == "the tool failed: RuntimeError"
    graph = box.graph("solar")
    monkeypatch.delattr(graph, "vectors")
    assert failed(box, 'entity_matcher(node_name="Io", graph_type="solar")',
                  ErrorType.SERVER_ERROR) == "the tool failed: AttributeError"
    monkeypatch.setattr(graph, "vectors", None, raising=False)  # no index: a typed error, not a crash
    assert failed(box, 'entity_matcher(node_name="Io", graph_type="solar")', ErrorType.SERVER_ERROR)
    # the shared toolbox is untouched
    assert ok(toolbox, 'entity_matcher(node_name="Io", graph_type="solar")').startswith(
        f"Found {toolbox.tool_params.entity_matcher_top_k} entities")


def test_a_registered_but_unbuilt_domain_is_a_typed_error(tmp_path: Path, toolbox: KGToolbox) -> None:
    from tests.conftest import TINY_REGISTRY, make_project

    root = make_project(tmp_path / "unbuilt", TINY_REGISTRY)
    box = KGToolbox(load_params(root / "params.yaml"), encoder=toolbox.encoder)
    message = failed(box, 'node_info(node_name="Io", graph_type="solar")', ErrorType.SERVER_ERROR)
    assert message.startswith('graph "solar" is not available:') and "omne kg build" in message


# ----- regressions of bugs found by these tests ---------------------------------------------------
def test_lone_surrogates_in_arguments_are_not_server_errors(toolbox: KGToolbox) -> None:
    """A lone surrogate (valid in a Python or JSON string literal: "\\ud800") cannot be embedded or sent
    as JSON: it is refused as an invalid argument, never a server error."""
    calls = ['entity_matcher(node_name="\\ud800", graph_type="solar")',
             'node_info(node_name="Jupiter\\udcff", graph_type="solar")',
             'search(entity="Io", question="\\ud83d?")']
    assert [toolbox.call(call).error_type for call in calls] == [ErrorType.INVALID_ARGUMENT] * 3


def test_call_never_raises_even_for_non_text(toolbox: KGToolbox) -> None:
    """KGToolbox.call never raises, also for values that are not str/dict/ToolCall."""
    raised = []
    for call in (None, 3, ["node_info"], b'get_tail_relations(entity="Io")'):
        try:
            result = toolbox.call(call)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - the point of the test
            raised.append(f"{call!r}: {type(exc).__name__}")
        else:
            assert not result.ok and result.error_type == ErrorType.FORMAT_ERROR
    assert raised == []


def test_a_rebuilt_kg_is_never_paired_with_a_stale_index(tmp_path: Path, toolbox: KGToolbox) -> None:
    """Regression (was a bug): DomainGraph.load (pipelines/agent/kg_view.py:63-86, _load_vectors at :125) reloads the KG as soon as its
    manifest changes and pairs it, by row id, with whatever index is on disk. After `omne kg build` (new
    entity ids) and before `omne kg index`, entity_matcher and the node_info/search fallback silently answer
    with the wrong entities (measured: "Jupiter" -> "Johann Galle", "Io" -> "Hanover", node_info("Ganymed")
    -> "closest is Galileo Galilei"). A stale index should be refused (typed error) or the old pair kept."""
    params = build_solar_project(tmp_path / "project")
    live = KGToolbox(params, encoder=toolbox.encoder, reload_check_seconds=0)
    assert ok(live, 'entity_matcher(node_name="Jupiter", graph_type="solar")').split("\n")[1] == "1. Jupiter [planet]"
    triples = params.root / "kg_assets" / "solar" / "triples.csv"
    triples.write_text(triples.read_text() + "Apollo,visited,Moon,Apollo 11 landed on the Moon.\n", encoding="utf-8")
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params, force=True)  # KG only
    wrong = []
    for name in ("Jupiter", "Io", "Sun", "Triton"):
        result = live.call(f'entity_matcher(node_name="{name}", graph_type="solar")')
        if result.ok and re.sub(r" \[[a-z ]+\]$", "", result.content.split("\n")[1]) != f"1. {name}":
            wrong.append(f"{name} -> {result.content.split(chr(10))[1]}")
    fallback = live.call('node_info(node_name="Ganymed", graph_type="solar")')
    if fallback.ok and "Entity: Ganymede" not in fallback.content:
        wrong.append(f"Ganymed -> {fallback.content.split(chr(10))[0]}")
    assert wrong == []


def test_a_self_loop_is_listed_once(tmp_path: Path, toolbox: KGToolbox) -> None:
    """Regression (was a bug): node_info (pipelines/agent/tools.py:233) and search's _relevant_triples (tools.py:302) concatenate
    the outgoing and the incoming relations of an entity, so a self-loop (kept by the KG build) is listed and
    counted twice: 'Relations (4)' with '3. Io -[resonates with]-> Io' repeated as 4., and search prints the
    triple '(Io, resonates with, Io)' twice (using up search_max_triples)."""
    from tests.conftest import make_project

    root = make_project(tmp_path / "project")
    triples = root / "kg_assets" / "solar" / "triples.csv"
    triples.write_text(triples.read_text() + "Io,resonates with,Io,Io is in resonance with itself.\n", encoding="utf-8")
    params = load_params(root / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params)
    build_entity_index("solar", params)
    box = KGToolbox(params, encoder=toolbox.encoder)
    assert ok(box, 'get_tail_entities(entity="Io", relation="resonates with")') == (
        'Tail entities for entity "Io" with relation "resonates with": Io')
    info = ok(box, 'node_info(node_name="Io", graph_type="solar")').split("\n")
    loop = "-[resonates with]-> Io [moon]"
    searched = ok(box, 'search(entity="Io", question="What does Io resonate with?")').split("\n")
    assert (info[2], sum(line.endswith(loop) for line in info)) == ("Relations (3):", 1)
    assert searched.count("(Io, resonates with, Io)") == 1
