"""Questions a person would write: relation phrases, the writer's forms, the leak rules and the readable-form
rules, on the three embedded domains and on a LightRAG-shaped graph (tests/lightrag_support.py)."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from pipelines.config import Params, load_params
from pipelines.domains import load_registry
from pipelines.kg.build import build_knowledge_graph
from pipelines.qa.build import build_qa_pairs, build_seed_subgraphs, read_qa_pairs, relation_graph
from pipelines.qa.validate import check_pair, form_problems, relative_depth
from pipelines.text.names import leaked_names, mentions, usable_name
from pipelines.text.phrases import (
    PhraseLexicon,
    RelationPhrases,
    derive_forms,
    edge_statement,
    label_statement,
    read_lexicon,
    shared_statement,
)
from tests.conftest import EMBEDDED_DOMAINS, PROJECT_ROOT, cli_env, embedded_domains_project, make_project
from tests.lightrag_support import write_lightrag_graphml

EMBEDDED = list(EMBEDDED_DOMAINS)


def test_rules_derive_every_form_from_a_statement() -> None:
    forms = derive_forms("{head} decays to {tail}")
    assert forms.ask_tail == "Which {type} does {head} decay to?"
    assert forms.ask_head == "Which {type} decays to {tail}?"
    assert forms.tail_noun == "the {type} to which {head} decays"
    assert forms.head_noun == "the {type} that decays to {tail}"
    capital = derive_forms("{head} is the capital of {tail}")
    assert capital.ask_tail == "Which {type} is {head} the capital of?"
    assert capital.tail_noun == "the {type} of which {head} is the capital"
    assert derive_forms("{head} uses {tail}").tail_noun == "the {type} that {head} uses"
    assert derive_forms("{head} is in {tail}").tail_noun == "the {type} of {head}"
    # a statement naming the tail first gives the mirrored forms
    spoken = derive_forms("{tail} is a language of {head}")
    assert spoken.ask_tail == "Which {type} is a language of {head}?"
    assert spoken.ask_head == "Which {type} is {tail} a language of?"
    # labels alone: a preposition label, a verb label, a noun label; appositive nouns before the tail dropped
    assert label_statement("in block") == "{head} is in {tail}"
    assert label_statement("excludes") == "{head} excludes {tail}"
    assert label_statement("code also") == "{head} has the code also {tail}"


def test_shared_statement_cuts_qualifiers_and_needs_most_edges_to_agree() -> None:
    sentences = [("Actinium-205 decays to Francium-201 by alpha decay (intensity about 100%).", "Actinium-205",
                  "Francium-201"),
                 ("Lead-182 decays to Mercury-178 by alpha decay (intensity 2%).", "Lead-182", "Mercury-178")]
    assert shared_statement("decays to", sentences) == "{head} decays to {tail}"
    subregions = [("Afghanistan is in the subregion Southern Asia.", "Afghanistan", "Southern Asia")]
    assert shared_statement("in subregion", subregions) == "{head} is in {tail}"
    # descriptions that never name both ends: the label speaks
    notes = [('Category R10 has the Excludes1 note "renal colic (N23)".', "Abdominal and pelvic pain",
              "Unspecified renal colic")]
    assert shared_statement("excludes", notes) == "{head} excludes {tail}"


def test_edge_statement_uses_a_sentence_naming_both_ends_never_the_keywords() -> None:
    text = "Ready-mix deliveries.<SEP>ACME CONCRETE LTD supplies GRADE 30 CONCRETE to the site."
    # what it says after its second end is left out: a 3+-hop question keeps only what relates the two
    assert edge_statement(text, "ACME CONCRETE LTD", "GRADE 30 CONCRETE") == "{head} supplies {tail}"
    assert edge_statement("Offcuts are collected weekly.<SEP>Skips on site.", "TIMBER", "WASTE CARRIER") is None
    long = "ACME " + "and many other firms " * 3 + "supply GRAVEL."
    assert edge_statement(long, "ACME", "GRAVEL") is None  # too long to read inside a 3+-hop question


def test_a_broken_phrases_file_is_an_error_naming_it(tmp_path: Path) -> None:
    from pipelines.errors import ConfigError

    path = tmp_path / "phrases.yaml"
    path.write_text("relations:\n  decays to:\n    statement: '{head} decays'\n")
    with pytest.raises(ConfigError, match="phrases.yaml.*statement names"):
        read_lexicon(path)
    path.write_text("relations:\n  decays to:\n    statement: '{head} decays to {tail}'\n"
                    "    ask_tail: 'Which {type} decays to {tail}?'\n")
    with pytest.raises(ConfigError, match="ask_tail"):
        read_lexicon(path)
    assert read_lexicon(tmp_path / "missing.yaml") == PhraseLexicon()
    assert RelationPhrases(statement="{tail} is spoken in {head}").statement.startswith("{tail}")


def test_leak_rules_catch_whole_names_distinctive_words_and_names_inside_the_start() -> None:
    # the answer inside the start's own name (the 43 of 80 chemistry 1-hop questions)
    assert leaked_names("Berkelium-235 is an isotope of which element with mass number 235?",
                        ["Berkelium-235", "Berkelium"], "Berkelium") == ["Berkelium"]
    assert leaked_names("Southern Asia is part of which continent?", ["Southern Asia", "Asia"], "Asia") == ["Asia"]
    # a distinctive word of a hidden name, singular or plural, case-insensitive
    assert leaked_names("Which group holds the pnictogen elements of Nitrogen?", ["Nitrogen", "Pnictogens"],
                        "Pnictogens") == ["Pnictogens"]
    # generic words (type nouns, phrase words, words of many names) are not evidence
    assert leaked_names("Which group of the periodic table is Phosphorus in?", ["Phosphorus", "Group 15"],
                        "Group 15", frozenset({"group"})) == []
    assert leaked_names("Which group of the periodic table is Phosphorus in?", ["Phosphorus", "Group 15"],
                        "Group 15") == ["Group 15"]  # without the domain's generic words, "group" gives it away
    assert leaked_names("Which town is near Ironbridge?", ["Ironbridge", "Iron"], "Iron") == []  # whole words
    assert leaked_names("What does Iron form?", ["Iron", "Rust"], "Rust") == []


def test_names_that_cannot_be_named_are_unusable() -> None:
    assert not usable_name("The") and not usable_name("IT") and not usable_name("Of the")
    assert not usable_name("2024") and not usable_name("Fe") and not usable_name("  ")
    assert usable_name("Iron") and usable_name("BS 8500") and usable_name("Group 15")


def test_form_rules_reject_the_unreadable_questions_the_old_writer_made() -> None:
    nested = ("The element that the isotope that the isotope that Molybdenum-83 decays to by beta-plus decay "
              "decays to is an isotope of belongs to which series series?")
    names = ["Molybdenum-83"]
    problems = form_problems(nested, names)
    assert any("nests" in p for p in problems) and any("repeats" in p for p in problems)
    assert relative_depth(nested, names) >= 2
    assert any("no object" in p for p in form_problems("Which element is X an isotope of with mass 83?", ["X"]))
    keywords = form_problems("Which material materials,build,spaces,rock GRADE 10 CONCRETE?", ["GRADE 10 CONCRETE"])
    assert any("keyword list" in p for p in keywords)
    assert any("words" in p for p in form_problems(" ".join(["word"] * 50) + "?", [], max_words=45))
    fine = "Roscommon is a state or province of a country, which is in a subregion. Which region is that subregion part of?"
    assert form_problems(fine, ["Roscommon"], max_words=45) == [] and relative_depth(fine, ["Roscommon"]) == 1
    assert form_problems("Which currency does the country whose capital is Lima use?", ["Lima"]) == []


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """The three embedded domains with their phrases files, QA pairs built at the quick profile's targets."""
    return embedded_domains_project(tmp_path_factory.mktemp("readable") / "project")


@pytest.mark.parametrize("domain", EMBEDDED)
def test_embedded_questions_are_readable_and_leak_nothing(embedded: Params, domain: str) -> None:
    graph = relation_graph(domain, embedded)
    pairs = read_qa_pairs(domain, embedded)
    assert sum(p.bucket == "1-2" for p in pairs) == embedded.qa.one_two_hop_per_domain
    assert sum(p.bucket == "3+" for p in pairs) >= (30 if domain == "geography" else embedded.qa.three_plus_per_domain)
    for pair in pairs:
        names = [*pair.path, pair.answer]
        assert not leaked_names(pair.question, pair.path, pair.answer, graph.generic_words), pair.question
        assert form_problems(pair.question, names, max_words=45) == [], pair.question
        assert relative_depth(pair.question, names) <= 1, pair.question
        assert all(usable_name(n) for n in pair.path), pair.path
        start = graph.entity_id(pair.start_entity)
        assert check_pair(graph, pair.path, pair.question, pair.answer, start, pair.bucket, strict=True,
                          max_hops=4, max_words=45).valid
        for junk in ("(intensity", "with mass number", '"', "relation to"):  # qualifiers and labels pasted in
            assert junk not in pair.question, pair.question
    words = [len(p.question.split()) for p in pairs if p.bucket == "3+"]
    assert statistics.median(words) <= 25 and max(words) <= 45
    # 3+ hops: the start named once, at most three sentences, one question at the end
    for pair in (p for p in pairs if p.bucket == "3+"):
        assert pair.question.count(pair.start_entity) == 1 and pair.question.count("?") == 1
        assert pair.question.endswith("?") and len([s for s in pair.question.split(". ") if s]) <= 3


@pytest.mark.parametrize("domain", EMBEDDED)
def test_filled_questions_keep_the_questions_sentences_and_name_each_entity_reached(embedded: Params,
                                                                                   domain: str) -> None:
    from pipelines.qa.template import filled_questions, remaining_questions, write_question
    from pipelines.qa.validate import edge_steps
    from pipelines.train.sft_data import path_reading

    graph = relation_graph(domain, embedded)
    checked = 0
    for pair in (p for p in read_qa_pairs(domain, embedded) if p.bucket == "3+"):
        ids = [graph.entity_id(n) for n in pair.path]
        steps = edge_steps(graph, ids, pair.path_edges)
        assert steps is not None and write_question(graph, ids[0], steps) == pair.question  # the writer's own
        filled = filled_questions(graph, ids[0], steps)
        assert filled is not None and len(filled) == pair.hops - 1
        last = pair.question.rsplit(". ", 1)[-1].split()[0]
        for k, text in enumerate(filled, start=1):
            # the same sentences (a named bridge never merges or splits one), the same question at the end
            plain = text
            for name in pair.path[1:k + 1]:  # (a name may hold ". ": "Montana (U.S. state)")
                plain = plain.replace(name, "N")
            assert len(plain.split(". ")) == len(pair.question.split(". ")), (pair.question, text)
            assert text.endswith("?") and text.rsplit(". ", 1)[-1].split()[0] == last, text
            assert all(mentions(text, name) for name in pair.path[1:k + 1]), (pair.question, text)
            assert text != (filled[k - 2] if k > 1 else pair.question)
        # the SFT thinking (sft_data.thinking: filled_question) reads them for the question the writer wrote, and
        # remaining_question's rewrite for any other text (a paraphrase)
        reading = path_reading(graph, pair.path, pair.path_edges, filled_from=pair.question)
        paraphrased = path_reading(graph, pair.path, pair.path_edges, filled_from=f"Tell me: {pair.question}")
        assert reading is not None and paraphrased is not None and reading.remaining == filled
        assert paraphrased.remaining == remaining_questions(graph, ids[0], steps) != filled
        checked += 1
    assert checked >= 30


def test_a_phrase_fixed_in_the_file_changes_its_questions(embedded: Params) -> None:
    path = embedded.registry_path.parent / "geography" / "phrases.yaml"
    original = path.read_text()
    before = build_qa_pairs("geography", embedded, progress=False)
    try:
        path.write_text(original.replace("Which {type} has {head} as its capital?",
                                         "Which {type} is governed from {head}?"))
        after = build_qa_pairs("geography", embedded, progress=False)
        assert not after.skipped and after.manifest.inputs != before.manifest.inputs
        questions = [p.question for p in read_qa_pairs("geography", embedded)]
        assert any("is governed from" in q for q in questions)
        assert not any("as its capital" in q for q in questions)
    finally:
        path.write_text(original)
        build_qa_pairs("geography", embedded, progress=False)


def test_qa_phrases_drafts_the_file_and_keeps_edits(embedded: Params) -> None:
    root = embedded.root
    result = subprocess.run(["omne", "qa", "phrases", "--domain", "medicine"], cwd=root, env=cli_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "excludes:" in result.stdout and "asks to code {tail} first" in result.stdout  # the file's own edits
    path = root / "kg_assets" / "medicine" / "phrases.yaml"
    saved = path.read_text()
    try:
        path.unlink()
        written = subprocess.run(["omne", "qa", "phrases", "--domain", "medicine", "--write"], cwd=root,
                                 env=cli_env(), capture_output=True, text=True, timeout=300)
        assert written.returncode == 0, written.stderr
        drafted = read_lexicon(path)
        assert set(drafted.relations) == set(read_lexicon(PROJECT_ROOT / "kg_assets/medicine/phrases.yaml").relations)
        assert drafted.relations["excludes"].statement == "{head} excludes {tail}"
    finally:
        path.write_text(saved)


LIGHTRAG_REGISTRY = """domains:
  construction:
    description: A construction specification (LightRAG graph).
    source:
      kind: lightrag_graphml
      path: kg_assets/construction/graph_chunk_entity_relation.graphml
"""


@pytest.fixture(scope="module")
def construction(tmp_path_factory: pytest.TempPathFactory) -> Params:
    root = make_project(tmp_path_factory.mktemp("lightrag") / "project", LIGHTRAG_REGISTRY)
    folder = root / "kg_assets" / "construction"
    folder.mkdir(parents=True)
    write_lightrag_graphml(folder / "graph_chunk_entity_relation.graphml")
    text = (root / "params.yaml").read_text().replace("min_nodes: 20", "min_nodes: 10")
    (root / "params.yaml").write_text(text)
    params = load_params(root / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get("construction"), params)
    build_seed_subgraphs("construction", params)
    build_qa_pairs("construction", params, progress=False)
    return params


def test_lightrag_questions_come_from_edge_sentences_not_keyword_lists(construction: Params) -> None:
    graph = relation_graph("construction", construction)
    assert not graph.shared_labels
    pairs = read_qa_pairs("construction", construction)
    assert sum(p.bucket == "1-2" for p in pairs) >= 10 and sum(p.bucket == "3+" for p in pairs) >= 3
    keyword_lists = {k for k in graph.keywords if "," in k}
    for pair in pairs:
        assert not any(k in pair.question for k in keyword_lists), pair.question
        assert not {"The", "IT", "2024"} & set(pair.path), pair.path  # junk entities are never on a path
        assert not leaked_names(pair.question, pair.path, pair.answer, graph.generic_words), pair.question
        assert form_problems(pair.question, [*pair.path, pair.answer], max_words=45) == [], pair.question
        assert {"TIMBER", "WASTE CARRIER"} != {e.src for e in pair.path_edges} | {e.dst for e in pair.path_edges}
        for edge in pair.path_edges:  # every hop is said with a sentence of that edge's description
            assert edge.keywords != "waste,offcuts"
    attempts = (construction.artifacts_dir / "qa" / "pairs" / "construction" / "attempts.jsonl").read_text()
    assert all(json.loads(line)["domain"] == "construction" for line in attempts.splitlines())
