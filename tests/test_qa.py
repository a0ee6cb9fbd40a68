"""QA synthesis on real data: seeds vs networkx, template questions, validation, gold paths, dataset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import polars as pl
import pytest

from pipelines.config import Params, load_params
from pipelines.domains import load_registry
from pipelines.kg.build import build_knowledge_graph
from pipelines.kg.model import ENTITY_SCHEMA, RELATION_SCHEMA, KnowledgeGraph, normalise_key
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir
from pipelines.qa.build import (
    build_gold_paths,
    build_qa_dataset,
    build_qa_pairs,
    build_seed_subgraphs,
    read_gold_paths,
    read_qa_pairs,
    read_seed_subgraphs,
)
from pipelines.qa.dataset import dedupe, split_of
from pipelines.qa.models import PathEdge, QAPair, Validation, qa_id
from pipelines.qa.paths import RelationGraph, Step
from pipelines.qa.seeds import ball_nodes, sample_seed_subgraphs
from pipelines.qa.template import filled_questions, keyword_sentence, remaining_questions, write_question
from pipelines.qa.validate import check_pair
from pipelines.text.names import leaked_names, mentions
from pipelines.text.phrases import PhraseLexicon, RelationPhrases
from tests.conftest import CHEMISTRY_REGISTRY, PROJECT_ROOT, make_project


def graph_from_networkx(graph: nx.Graph) -> KnowledgeGraph:
    names = [f"N{i}" for i in range(graph.number_of_nodes())]
    entities = pl.DataFrame({"id": list(range(len(names))), "name": names, "key": [n.lower() for n in names],
                             "type": ["thing"] * len(names), "description": [""] * len(names),
                             "source_ids": [[] for _ in names]}, schema=ENTITY_SCHEMA)
    edges = sorted(graph.edges())
    relations = pl.DataFrame({"src": [a for a, _ in edges], "dst": [b for _, b in edges],
                              "keywords": ["linked"] * len(edges), "description": [""] * len(edges),
                              "weight": [1.0] * len(edges)}, schema=RELATION_SCHEMA)
    return KnowledgeGraph(entities=entities, relations=relations, directed=True)


@pytest.fixture(scope="module")
def random_graph() -> nx.Graph:
    return nx.gnm_random_graph(400, 700, seed=7)


def test_seed_balls_equal_networkx_bfs(random_graph: nx.Graph) -> None:
    kg = graph_from_networkx(random_graph)
    seeds = np.arange(kg.num_entities)
    for seed, ball in zip(seeds, ball_nodes(kg.adjacency(), seeds, depth=3, batch=64), strict=True):
        assert set(ball.tolist()) == set(nx.single_source_shortest_path_length(random_graph, int(seed), cutoff=3))


def test_sampled_seeds_are_exactly_the_eligible_ones(random_graph: nx.Graph, params: Params) -> None:
    kg = graph_from_networkx(random_graph)
    subgraphs = sample_seed_subgraphs(kg, "rand", params.seeds, count=10_000, random_seed=0)
    expected = {v for v in random_graph if 20 <= len(nx.ego_graph(random_graph, v, radius=3)) <= 400}
    assert {s.seed for s in subgraphs} == expected and expected
    assert all(s.nodes[0] == s.seed and 20 <= s.size <= 400 for s in subgraphs)
    again = sample_seed_subgraphs(kg, "rand", params.seeds, count=25, random_seed=0)
    assert [s.seed for s in again] == [s.seed for s in sample_seed_subgraphs(kg, "rand", params.seeds, 25, 0)]


def test_simple_paths_equal_networkx(random_graph: nx.Graph) -> None:
    kg = graph_from_networkx(random_graph)
    graph = RelationGraph(kg)
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(40):
        a, b = (int(x) for x in rng.choice(kg.num_entities, 2, replace=False))
        ours, truncated = graph.simple_paths(a, b, max_hops=4, limit=10_000)
        reference = sorted(nx.all_simple_paths(random_graph, a, b, cutoff=4), key=lambda p: (len(p), p))
        assert not truncated and ours == reference
        checked += bool(reference)
    assert checked > 5
    capped, truncated = graph.simple_paths(0, int(next(iter(random_graph[0]))), max_hops=4, limit=1)
    assert len(capped) == 1 and len(capped[0]) == 2


def test_question_is_written_from_relation_descriptions(tmp_path: Path) -> None:
    entities = pl.DataFrame({"id": [0, 1, 2], "name": ["Abu Dhabi", "United Arab Emirates", "UAE Dirham"],
                             "key": ["abu dhabi", "united arab emirates", "uae dirham"],
                             "type": ["city", "country", "currency"], "description": ["", "", ""],
                             "source_ids": [[], [], []]}, schema=ENTITY_SCHEMA)
    relations = pl.DataFrame({"src": [0, 1], "dst": [1, 2], "keywords": ["capital of", "uses currency"],
                              "description": ["Abu Dhabi is the capital of United Arab Emirates.",
                                              "United Arab Emirates uses the UAE Dirham."],
                              "weight": [1.0, 1.0]}, schema=RELATION_SCHEMA)
    graph = RelationGraph(KnowledgeGraph(entities=entities, relations=relations, directed=True))
    # the rules' phrases: statements from the shared description pattern, the other forms from the statement
    assert write_question(graph, 0, [Step(0, True)]) == "Which country is Abu Dhabi the capital of?"
    assert write_question(graph, 1, [Step(0, False)]) == "Which city is the capital of United Arab Emirates?"
    assert write_question(graph, 0, [Step(0, True), Step(1, True)]) == \
        "Which currency does the country of which Abu Dhabi is the capital use?"
    # read one hop at a time: what is left to ask once the first relation is walked
    two_hops = [Step(0, True), Step(1, True)]
    assert remaining_questions(graph, 0, two_hops) == ["Which currency does United Arab Emirates use?"]
    assert remaining_questions(graph, 0, [Step(0, True)]) == []
    assert keyword_sentence("A", "in block", "B") == "A is in B"
    assert keyword_sentence("A", "excludes", "B") == "A excludes B"
    assert keyword_sentence("A", "code also", "B") == "A has the code also B"


def test_a_sentence_that_starts_with_a_lower_case_name_keeps_the_name_as_written() -> None:
    names = ["iPhone", "Apple", "United States", "US Dollar"]
    entities = pl.DataFrame({"id": [0, 1, 2, 3], "name": names, "key": [n.lower() for n in names],
                             "type": ["product", "company", "country", "currency"], "description": [""] * 4,
                             "source_ids": [[], [], [], []]}, schema=ENTITY_SCHEMA)
    relations = pl.DataFrame({"src": [0, 1, 2], "dst": [1, 2, 3], "keywords": ["made by", "based in", "uses currency"],
                              "description": ["iPhone is made by Apple.", "Apple is based in United States.",
                                              "United States uses the US Dollar."], "weight": [1.0] * 3},
                             schema=RELATION_SCHEMA)
    graph = RelationGraph(KnowledgeGraph(entities=entities, relations=relations, directed=True))
    assert write_question(graph, 0, [Step(0, True), Step(1, True), Step(2, True)]) == \
        "iPhone is made by a company, which is based in a country. Which currency does that country use?"
    assert write_question(graph, 0, [Step(0, True)]) == "Which company is iPhone made by?"


def test_filled_questions_name_each_bridge_reached_in_the_questions_own_sentences() -> None:
    names = ["Thorium-222", "Uranium-226", "Plutonium-230", "Plutonium", "Actinides", "TestSuite", "BaseTestSuite",
             "unittest.suite", "unittest"]
    types = ["isotope", "isotope", "isotope", "element", "series", "class", "class", "module", "package"]
    entities = pl.DataFrame({"id": list(range(9)), "name": names, "key": [n.lower() for n in names], "type": types,
                             "description": [""] * 9, "source_ids": [[] for _ in names]}, schema=ENTITY_SCHEMA)
    relations = pl.DataFrame({"src": [1, 2, 2, 3, 5, 5, 7], "dst": [0, 1, 3, 4, 6, 7, 8],
                              "keywords": ["decays to", "decays to", "isotope of", "in series", "subclass of",
                                           "defined in", "submodule of"],
                              "description": ["Uranium-226 decays to Thorium-222.", "Plutonium-230 decays to "
                                              "Uranium-226.", "Plutonium-230 is an isotope of Plutonium.",
                                              "Plutonium belongs to the Actinides.", "TestSuite is a subclass of "
                                              "BaseTestSuite.", "TestSuite is defined in unittest.suite.",
                                              "unittest.suite is a submodule of unittest."], "weight": [1.0] * 7},
                             schema=RELATION_SCHEMA)
    graph = RelationGraph(KnowledgeGraph(entities=entities, relations=relations, directed=True))
    decays = [Step(0, False), Step(1, False), Step(2, True), Step(3, True)]
    question = write_question(graph, 0, decays)
    assert question == ("An isotope decays to the isotope that decays to Thorium-222. That isotope is an isotope of "
                        "an element. Which series does that element belong to?")
    # one name more after each hop, in the same sentences; the last hop's question is left to answer
    assert filled_questions(graph, 0, decays) == [
        "An isotope decays to Uranium-226. That isotope is an isotope of an element. Which series does that element "
        "belong to?",
        "Plutonium-230 decays to Uranium-226. Plutonium-230 is an isotope of an element. Which series does that "
        "element belong to?",
        "Plutonium-230 decays to Uranium-226. Plutonium-230 is an isotope of Plutonium. Which series does Plutonium "
        "belong to?"]
    # a name that ends like the one before it ("TestSuite", "BaseTestSuite") keeps the question's form (the
    # software domain's phrases: no head_noun, so the first hop is a sentence of its own)
    asked_forwards = PhraseLexicon(relations={
        "subclass of": RelationPhrases(statement="{head} is a subclass of {tail}"),
        "defined in": RelationPhrases(statement="{head} is defined in {tail}"),
        "submodule of": RelationPhrases(statement="{head} is a submodule of {tail}",
                                        ask_tail="Which {type} is {head} a submodule of?")})
    graph = RelationGraph(graph.kg, asked_forwards)
    classes = [Step(4, False), Step(5, True), Step(6, True)]
    assert write_question(graph, 6, classes) == ("A class is a subclass of BaseTestSuite. That class is defined in a "
                                                 "module. Which package is that module a submodule of?")
    assert filled_questions(graph, 6, classes) == [
        "TestSuite is a subclass of BaseTestSuite. TestSuite is defined in a module. Which package is that module a "
        "submodule of?",
        "TestSuite is a subclass of BaseTestSuite. TestSuite is defined in unittest.suite. Which package is "
        "unittest.suite a submodule of?"]
    assert filled_questions(graph, 6, classes[:1]) == []


def test_names_are_matched_as_whole_names() -> None:
    assert mentions("Actinium-205 decays to which isotope?", "Actinium-205")
    assert not mentions("Actinium-205 decays to which isotope?", "Actinium")
    assert leaked_names("Southern Asia is part of which continent?", ["Southern Asia", "Asia"], "Asia") == ["Asia"]
    assert leaked_names("What does Iron form?", ["Iron", "Rust"], "Rust") == []


@pytest.fixture(scope="module")
def chemistry(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """A project with the real chemistry domain, its KG built, and small QA targets."""
    root = make_project(tmp_path_factory.mktemp("chem") / "project", CHEMISTRY_REGISTRY)
    shutil.copytree(PROJECT_ROOT / "kg_assets" / "chemistry", root / "kg_assets" / "chemistry")
    text = (root / "params.yaml").read_text()
    text = text.replace("one_two_hop_per_domain: 150", "one_two_hop_per_domain: 40")
    text = text.replace("three_plus_per_domain: 150", "three_plus_per_domain: 40")
    (root / "params.yaml").write_text(text)
    params = load_params(root / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get("chemistry"), params)
    build_seed_subgraphs("chemistry", params)
    return params


def test_template_pairs_are_valid_unique_and_deterministic(chemistry: Params) -> None:
    result = build_qa_pairs("chemistry", chemistry)
    pairs = read_qa_pairs("chemistry", chemistry)
    stats = result.manifest.metadata["stats"]
    assert stats["pairs_1_2"] == 40 and stats["pairs_3_plus"] == 40
    graph = RelationGraph(read_kg(kg_dir(chemistry.artifacts_dir, "chemistry")))
    seeds = set(read_seed_subgraphs("chemistry", chemistry)["seed"].to_list())
    for pair in pairs:
        start = graph.entity_id(pair.start_entity)
        assert start in seeds and pair.path[0] == pair.start_entity and pair.path[-1] == pair.answer
        assert check_pair(graph, pair.path, pair.question, pair.answer, start, pair.bucket, strict=True,
                          max_hops=4).valid
        chain = [(e.keywords, graph.entity_id(e.src) == graph.entity_id(pair.path[i]))
                 for i, e in enumerate(pair.path_edges)]
        assert graph.follow(start, chain) == {graph.entity_id(pair.answer)}, pair.question  # one answer only
        assert pair.id == qa_id("chemistry", pair.question, pair.answer) and pair.generator == "template"
    assert len({p.id for p in pairs}) == len(pairs)
    first = (result.folder / "qa_pairs.jsonl").read_bytes()
    again = build_qa_pairs("chemistry", chemistry, force=True)
    assert (again.folder / "qa_pairs.jsonl").read_bytes() == first  # same params, same questions
    assert build_qa_pairs("chemistry", chemistry).skipped


def test_limit_caps_each_bucket(chemistry: Params) -> None:
    result = build_qa_pairs("chemistry", chemistry, limit=3, force=True)
    assert result.manifest.metadata["stats"]["pairs_1_2"] == 3 and result.manifest.metadata["stats"]["pairs_3_plus"] == 3
    build_qa_pairs("chemistry", chemistry, force=True)


def test_gold_paths_include_the_generator_path_and_verify_by_relation_chain(chemistry: Params) -> None:
    build_qa_pairs("chemistry", chemistry)
    result = build_gold_paths("chemistry", chemistry)
    golds = {g.qa_id: g for g in read_gold_paths("chemistry", chemistry)}
    pairs = read_qa_pairs("chemistry", chemistry)
    assert set(golds) == {p.id for p in pairs}
    for pair in pairs:
        gold = golds[pair.id]
        assert gold.paths[0].nodes == pair.path and gold.paths[0].valid
        wanted = [e.keywords for e in pair.path_edges]
        for item in gold.paths:
            assert item.nodes[0] == pair.start_entity and item.nodes[-1] == pair.answer
            assert len(set(item.nodes)) == len(item.nodes) and len(item.nodes) - 1 <= 4
            assert item.valid == ([e.keywords for e in item.edges] == wanted)
    assert result.manifest.rows["paths"] > result.manifest.rows["qa_pairs"]  # more than the generator's paths


def test_dataset_merges_dedupes_and_splits(chemistry: Params) -> None:
    build_qa_pairs("chemistry", chemistry)
    build_gold_paths("chemistry", chemistry)
    result = build_qa_dataset(chemistry, ["chemistry"])
    table = pl.read_parquet(result.folder / "qa.parquet")
    assert table.height == result.manifest.rows["pairs"] == 80
    assert set(table["split"].unique()) <= {"train", "val", "test"}
    assert table["id"].n_unique() == table.height
    for row in table.iter_rows(named=True):
        assert row["split"] == split_of(row["question"], chemistry.qa)
    lines = sum(len((result.folder / f"{s}.jsonl").read_text().splitlines()) for s in ("train", "val", "test"))
    assert lines == table.height
    stats = json.loads((result.folder / "stats.json").read_text())
    assert stats["domains"]["chemistry"]["1-2"] == 40 and stats["domains"]["chemistry"]["3+"] == 40
    assert build_qa_dataset(chemistry, ["chemistry"]).skipped


def _synthetic_pairs(counts: dict[str, int]) -> list[QAPair]:
    """``counts`` pairs per bucket with distinct questions (no graph needed: a split reads question and bucket)."""
    return [QAPair(id=qa_id("d", question, "A"), domain="d", question=question, answer="A", answers=["A"],
                   hops=hops, bucket=bucket, path=["S", "A"], path_edges=[], start_entity="S", qtype="chain",
                   generator="template", validation=Validation(valid=True))
            for bucket, n in counts.items() for hops in ([2] if bucket == "1-2" else [3])
            for question in (f"Which {bucket} question number {i} is this?" for i in range(n))]


def test_paper_profile_test_split_has_the_papers_1106_and_1453_questions() -> None:
    """At the paper profile's sizes (20 domains x 1,075 1/2-hop and x 2,600 3+ pairs) the test split holds exactly the
    Omne-R1 paper's 1,106 and 1,453 questions (section 4.1), the pairs of lowest split hash; the quick profile still
    splits by test_share, pair by pair, and its dataset fingerprint does not name the new setting."""
    from collections import Counter

    from pipelines.errors import ConfigError
    from pipelines.qa.dataset import assign_splits, split_hash

    paper = load_params(PROJECT_ROOT / "params.yaml", profile="paper").qa
    sizes = {"1-2": 20 * paper.one_two_hop_per_domain, "3+": 20 * paper.three_plus_per_domain}
    assert sizes == {"1-2": 21_500, "3+": 52_000}
    pairs = assign_splits(_synthetic_pairs(sizes), paper)
    counts = Counter((p.split, p.bucket) for p in pairs)
    assert counts["test", "1-2"] == 1106 and counts["test", "3+"] == 1453
    for bucket, n in sizes.items():  # validation: val_share of the bucket, after the test pairs
        assert abs(counts["val", bucket] - paper.val_share * n) < 5 * (paper.val_share * n) ** 0.5
        hashes = [split_hash(p.question, paper.random_seed) for p in pairs if p.bucket == bucket]
        ranked = sorted(zip(hashes, (p.split for p in pairs if p.bucket == bucket), strict=True))
        assert {split for _, split in ranked[:counts["test", bucket]]} == {"test"}  # the lowest hashes
    with pytest.raises(ConfigError, match="1106 test pairs of bucket 1-2 asked, but the dataset has 1075"):
        assign_splits(_synthetic_pairs({"1-2": 1075, "3+": 2600}), paper)  # one domain: nothing left to train on

    quick = load_params(PROJECT_ROOT / "params.yaml").qa
    shaping = quick.model_dump(include={"test_share", "test_per_bucket", "val_share", "random_seed"})  # build.py's
    assert quick.test_per_bucket is None and shaping == {"test_share": 0.1, "val_share": 0.1, "random_seed": 0}
    small = assign_splits(_synthetic_pairs({"1-2": 300, "3+": 300}), quick)
    assert all(p.split == split_of(p.question, quick) for p in small)


    def pair(domain: str, question: str) -> QAPair:
        return QAPair(id=qa_id(domain, question, "Iron"), domain=domain, question=question, answer="Iron",
                      answers=["Iron"], hops=1, bucket="1-2", path=["Rust", "Iron"],
                      path_edges=[PathEdge(src="Rust", keywords="made of", dst="Iron")], start_entity="Rust",
                      qtype="one_hop", generator="template", validation=Validation(valid=True))
    kept, report = dedupe([pair("a", "Rust is made of which element?"), pair("b", "rust is made of which element")])
    assert len(kept) == 1 and report.duplicates == 1


def test_entity_keys_resolve_names_case_insensitively(chemistry: Params) -> None:
    graph = RelationGraph(read_kg(kg_dir(chemistry.artifacts_dir, "chemistry")))
    assert graph.entity_id("  IRON ") == graph.key_to_id[normalise_key("Iron")]


# ------------------------------------------------------------------------------ LLM generator (scripted)

def _good_reply(graph: RelationGraph, seed_name: str, bucket: str, nodes: list[int]) -> str:
    from pipelines.qa.template import sample_template_path
    from pipelines.qa.validate import check_question

    seed = graph.entity_id(seed_name)
    rng = np.random.default_rng(seed)
    for hops in ([1, 2] if bucket == "1-2" else [3, 4]) * 5:
        steps = sample_template_path(graph, seed, hops, set(nodes), rng)
        if steps:
            path = [graph.names[n] for n in graph.path_nodes(seed, steps)]
            question = write_question(graph, seed, steps) or ""
            if not check_question(question, path, path[-1], graph.generic_words):
                return json.dumps({"path": path, "question": question, "answer": path[-1]})
    raise AssertionError(f"no path for {seed_name}")


def test_llm_generator_validates_judges_and_retries_with_feedback(chemistry: Params) -> None:
    import re

    from pipelines.llm.scripted import ScriptedChatClient
    from pipelines.qa.generate import generate_llm_pairs
    from pipelines.qa.prompts import GENERATOR_SYSTEM
    from pipelines.qa.seeds import read_seeds

    graph = RelationGraph(read_kg(kg_dir(chemistry.artifacts_dir, "chemistry")))
    def answerable(sub) -> bool:  # noqa: ANN001
        try:
            return all(_good_reply(graph, sub.seed_name, b, sub.nodes) for b in ("1-2", "3+"))
        except AssertionError:
            return False

    subgraphs = [s for s in read_seeds(read_seed_subgraphs("chemistry", chemistry)) if answerable(s)][:4]
    nodes_of = {s.seed_name: s.nodes for s in subgraphs}
    judged: list[str] = []
    rejected_once: set[str] = set()

    def reply(request) -> str:  # noqa: ANN001 - a ChatRequest
        messages = request.messages
        prompt = messages[1]["content"]
        if messages[0]["content"] != GENERATOR_SYSTEM:  # the judge
            question = re.search(r"^Question: (.*)$", prompt, re.M).group(1)
            judged.append(question)
            reject = mentions(question, subgraphs[2].seed_name) and subgraphs[2].seed_name not in rejected_once
            if reject:
                rejected_once.add(subgraphs[2].seed_name)
            return json.dumps({"valid": not reject, "reason": "reveals too much" if reject else "fine"})
        seed = re.search(r'around the entity "(.*)"\.', prompt).group(1)
        bucket = "1-2" if "1-hop or 2-hop" in prompt else "3+"
        good = _good_reply(graph, seed, bucket, nodes_of[seed])
        if len(messages) > 2:  # the repair round after a reply that was not JSON
            return good
        if "Your previous attempt was rejected" in prompt:
            return good
        if seed == subgraphs[0].seed_name:  # leaks the answer: rule feedback, then a retry
            value = json.loads(good)
            return json.dumps({**value, "question": f"{value['question']} Is it {value['answer']}?"})
        if seed == subgraphs[1].seed_name:
            return "Sure! Here is the question: {path: [...]"
        return good

    client = ScriptedChatClient(reply, model="scripted-gen")
    result = generate_llm_pairs(graph, subgraphs, chemistry.qa, chemistry.llm, "chemistry", client,
                                {"1-2": 4, "3+": 2}, progress=False)
    by_seed = {(a.seed_name, a.bucket): a for a in result.attempts}
    assert all(a.accepted for a in result.attempts), [a.attempts for a in result.attempts if not a.accepted]
    assert len(result.pairs) == 6 and {p.bucket for p in result.pairs} == {"1-2", "3+"}
    leaked = by_seed[(subgraphs[0].seed_name, "1-2")]
    assert len(leaked.attempts) == 2 and "gives away other path entities" in leaked.attempts[0].feedback
    assert leaked.attempts[0].path_valid is True
    retry_prompts = [r.messages[1]["content"] for r in client.requests if "Your previous attempt" in r.messages[1]["content"]]
    assert any("Path valid: True" in p and "gives away other path entities" in p for p in retry_prompts)
    assert len(by_seed[(subgraphs[1].seed_name, "1-2")].attempts) == 1  # repaired within the round
    rejected = by_seed[(subgraphs[2].seed_name, "1-2")]
    assert rejected.attempts[0].feedback.startswith("the judge rejected the question")
    for pair in result.pairs:
        start = graph.entity_id(pair.start_entity)
        assert check_pair(graph, pair.path, pair.question, pair.answer, start, pair.bucket, strict=True,
                          max_hops=4).valid
        assert pair.generator == "scripted-gen" and pair.validation.valid
    assert client.usage.by_tag["qa.generate"] >= 6 and client.usage.by_tag["qa.judge"] >= 6


def test_llm_generator_refills_a_failed_seed_and_says_when_the_seeds_run_out(chemistry: Params,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A seed whose every reply fails the rules gives way to the bucket's next unused seed, so the bucket fills; with
    no seed left the bucket stays short, and the result, the manifest's stats and the log say so."""
    import re

    from pipelines.llm.scripted import ScriptedChatClient
    from pipelines.qa.generate import generate_llm_pairs
    from pipelines.qa.prompts import GENERATOR_SYSTEM
    from pipelines.qa.seeds import read_seeds

    graph = RelationGraph(read_kg(kg_dir(chemistry.artifacts_dir, "chemistry")))

    def good(sub) -> str | None:  # noqa: ANN001
        try:
            return _good_reply(graph, sub.seed_name, "1-2", sub.nodes)
        except AssertionError:
            return None

    subgraphs = [s for s in read_seeds(read_seed_subgraphs("chemistry", chemistry)) if good(s)][:5]
    failing = {subgraphs[0].seed_name, subgraphs[2].seed_name}  # two of the first three seeds never pass the rules

    def reply(request) -> str:  # noqa: ANN001 - a ChatRequest
        if request.messages[0]["content"] != GENERATOR_SYSTEM:
            return json.dumps({"valid": True, "reason": "fine"})
        seed = re.search(r'around the entity "(.*)"\.', request.messages[1]["content"]).group(1)
        value = json.loads(good(next(s for s in subgraphs if s.seed_name == seed)))
        if seed in failing:  # the answer given away in every round
            value["question"] = f"{value['question'][:-1]}, {value['answer']}?"
        return json.dumps(value)

    targets = {"1-2": 3, "3+": 0}
    client = ScriptedChatClient(reply, model="scripted-gen")
    full = generate_llm_pairs(graph, subgraphs, chemistry.qa, chemistry.llm, "chemistry", client, targets,
                              progress=False)
    assert len(full.pairs) == 3 and full.short == {} and "short" not in full.stats()
    assert {p.seed for p in full.pairs} == {subgraphs[i].seed for i in (1, 3, 4)}  # seeds 4 and 5 replaced 1 and 3
    tried = {a.seed_name: a for a in full.attempts}
    assert [a.seed_name for a in full.attempts] == [s.seed_name for s in subgraphs]
    for name in failing:
        assert not tried[name].accepted and len(tried[name].attempts) == chemistry.qa.max_retries + 1
        assert all("gives away" in a.feedback for a in tried[name].attempts)

    client = ScriptedChatClient(reply, model="scripted-gen")
    with caplog.at_level("WARNING", logger="pipelines.qa.generate"):
        short = generate_llm_pairs(graph, subgraphs[:4], chemistry.qa, chemistry.llm, "chemistry", client, targets,
                                   progress=False)
    assert len(short.pairs) == 2 and len(short.attempts) == 4  # every seed tried, two of them good
    assert short.short == {"1-2": "2 of 3 pairs: every one of the 4 seeds was tried "
                                  "(raise qa.seeds_per_domain for more)"}
    assert short.stats()["short"] == short.short and "chemistry 1-2: 2 of 3 pairs" in caplog.text


# Questions of the shape of the Omne-R1 paper's two examples (section 2), in words of our own: a 3+ question of 59
# words in four sentences whose start shares a word with the answer, and a 1/2-hop question that names its start
# without the start's trailing "(abbreviation)".
THREE_PLUS = ["Lady Ashcombe", "Wyvern Hall", "Thornbury", "Master Pell", "Countess Ashcombe"]
THREE_PLUS_QUESTION = ("Lady Ashcombe owned a manor that was central to wishes about keeping it sealed after her death. "
                       "This manor stood near a town known for disputes over inheritance. A country lawyer moved to "
                       "this town through family ties and later enforced the terms of a will for another noble "
                       "figure. Who received the manor through these estate settlement proceedings?")
ONE_TWO = ["Bee Wasting Syndrome (BWS)", "Varroa Mite", "Oxalic Solution"]
ONE_TWO_QUESTION = "Which chemical remedy controls the parasite that spreads Bee Wasting Syndrome in managed hives?"


def test_paper_profile_rules_accept_questions_shaped_like_the_papers_examples() -> None:
    """The LLM generator keeps both example-shaped questions under the paper profile's question rules
    (name_rules: paper, 80 words), and the quick profile's readable rules still reject them, saying why."""
    import re

    from pipelines.llm.scripted import ScriptedChatClient
    from pipelines.qa.generate import generate_llm_pairs
    from pipelines.qa.models import SeedSubgraph
    from pipelines.qa.prompts import GENERATOR_SYSTEM

    assert len(THREE_PLUS_QUESTION.split()) == 59 and THREE_PLUS_QUESTION.count(".") == 3
    names = [*THREE_PLUS, *ONE_TWO, "Old Mill", "River Dee"]
    edges = [(i, i + 1) for i in range(4)] + [(5, 6), (6, 7), (8, 9), (2, 8)]
    kg = KnowledgeGraph(entities=pl.DataFrame({
        "id": list(range(len(names))), "name": names, "key": [normalise_key(n) for n in names],
        "type": ["thing"] * len(names), "description": [""] * len(names), "source_ids": [[] for _ in names]},
        schema=ENTITY_SCHEMA), relations=pl.DataFrame({
        "src": [a for a, _ in edges], "dst": [b for _, b in edges], "keywords": ["linked to"] * len(edges),
        "description": [""] * len(edges), "weight": [1.0] * len(edges)}, schema=RELATION_SCHEMA), directed=True)
    graph = RelationGraph(kg)
    seeds = {name: SeedSubgraph(domain="d", seed=names.index(name), seed_name=name, depth=3, nodes=nodes,
                                size=len(nodes)) for name, nodes in [(THREE_PLUS[0], [0, 1, 2, 3, 4, 8, 9]),
                                                                     (ONE_TWO[0], [5, 6, 7])]}

    def reply(request) -> str:  # noqa: ANN001 - a ChatRequest
        if request.messages[0]["content"] != GENERATOR_SYSTEM:
            return json.dumps({"valid": True, "reason": "only the start is named"})
        seed = re.search(r'around the entity "(.*)"\.', request.messages[1]["content"]).group(1)
        path, question = (THREE_PLUS, THREE_PLUS_QUESTION) if seed == THREE_PLUS[0] else (ONE_TWO, ONE_TWO_QUESTION)
        return json.dumps({"path": path, "question": question, "answer": path[-1]})

    def generate(qa, seed: str, bucket: str):  # noqa: ANN001, ANN202
        targets = {"1-2": int(bucket == "1-2"), "3+": int(bucket == "3+")}
        return generate_llm_pairs(graph, [seeds[seed]], qa, load_params(PROJECT_ROOT / "params.yaml").llm, "d",
                                  ScriptedChatClient(reply), targets, progress=False)

    paper, quick = (load_params(PROJECT_ROOT / "params.yaml", profile=p).qa for p in ("paper", "quick"))
    assert (paper.name_rules, paper.max_question_words) == ("paper", 80) and quick.max_question_words == 45
    for seed, bucket, question, why in [
            (THREE_PLUS[0], "3+", THREE_PLUS_QUESTION, ["gives away other path entities: 'Countess Ashcombe'",
                                                        "the question has 59 words; at most 45"]),
            (ONE_TWO[0], "1-2", ONE_TWO_QUESTION, ["must name the start entity 'Bee Wasting Syndrome (BWS)'"])]:
        kept = generate(paper, seed, bucket)
        assert [(p.question, p.bucket, p.start_entity) for p in kept.pairs] == [(question, bucket, seed)]
        rejected = generate(quick, seed, bucket)
        assert rejected.pairs == [] and bucket in rejected.short
        assert all(reason in rejected.attempts[0].attempts[0].feedback for reason in why)


def test_gold_paths_verified_by_the_llm(chemistry: Params) -> None:
    from pipelines.llm.scripted import ScriptedChatClient
    from pipelines.qa.gold import gold_paths

    build_qa_pairs("chemistry", chemistry)
    graph = RelationGraph(read_kg(kg_dir(chemistry.artifacts_dir, "chemistry")))
    pairs = [p for p in read_qa_pairs("chemistry", chemistry) if p.hops >= 2][:5]
    qa = chemistry.qa.model_copy(update={"gold_verify": "llm"})

    def verdict(request) -> str:  # noqa: ANN001 - accepts paths that go through an "isotope of" relation
        text = request.messages[1]["content"]
        return "not json" if "decays to" in text and len(text) % 2 else \
            json.dumps({"valid": "isotope of" in text, "reason": "follows the question" if "isotope of" in text else "no"})

    client = ScriptedChatClient(verdict)
    golds = gold_paths(graph, pairs, qa, client=client, llm=chemistry.llm, progress=False)
    asked = sum(len(g.paths) - 1 for g in golds)
    assert asked > 0 and client.usage.by_tag["qa.gold"] >= asked
    for gold in golds:
        assert gold.paths[0].valid and gold.paths[0].reason == "the generator's path"
        for item in gold.paths[1:]:
            uses_isotope = any(e.keywords == "isotope of" for e in item.edges)
            assert item.valid == (uses_isotope and item.reason == "follows the question") or \
                item.reason.startswith("no verdict")


def test_qa_domains_select_what_the_dataset_merges_and_later_stages_name_what_it_left_out(twin_qa: Params,
                                                                                          tmp_path: Path) -> None:
    from click.testing import CliRunner

    from pipelines.cli import cli
    from pipelines.config import with_overrides
    from pipelines.errors import ArtifactMissingError, ConfigError
    from pipelines.eval.runner import load_split
    from pipelines.run import build_domain_artifacts, run_qa_domains

    root = shutil.copytree(twin_qa.root, tmp_path / "project")  # the shared project's dataset stays as it is
    command = ["--params", str(root / "params.yaml"), "qa", "build", "--no-checks"]
    held_out = CliRunner().invoke(cli, [*command, "--exclude-domain", "mirror"])
    assert held_out.exit_code == 0, held_out.output
    params = load_params(root / "params.yaml")
    manifest = json.loads((root / "artifacts" / "qa" / "dataset" / "manifest.json").read_text())
    assert manifest["params"]["domains"] == ["solar"]  # the selection is part of the dataset's fingerprint
    assert {p.domain for split in ("train", "val", "test") for p in load_split(params, split)} == {"solar"}
    assert "up to date" in CliRunner().invoke(cli, [*command, "--exclude-domain", "mirror"]).output
    # a stage selecting only the domain the dataset left out: an error that says why, not an empty stage
    with pytest.raises(ArtifactMissingError, match=r"no question of the domains eval\.domains/exclude_domains select "
                                                   r"\(mirror\); the split's domains: solar \(qa\.domains"):
        load_split(with_overrides(params, {"eval": {"domains": ["mirror"]}}), "train", "eval")
    unknown = CliRunner().invoke(cli, [*command, "--domain", "mars"])
    assert unknown.exit_code == 2 and "registered domains: solar, mirror" in unknown.output
    everything = CliRunner().invoke(cli, command)  # no selection: every domain with pairs, rebuilt
    assert everything.exit_code == 0 and "built:" in everything.output
    assert json.loads((root / "artifacts" / "qa" / "dataset" / "manifest.json").read_text())["params"]["domains"] == [
        "solar", "mirror"]

    # `omne run`: every domain's KG and index, QA only for the selected ones (all up to date here)
    only_mirror = with_overrides(params, {"qa": {"domains": ["mirror"]}})
    domains = load_registry(params.registry_path).domains
    rows = {row.domain: row for row in build_domain_artifacts(only_mirror, domains)}
    assert (rows["solar"].qa_state, rows["mirror"].qa_state) == ("-", "cached")
    assert run_qa_domains(only_mirror, domains) == ["mirror"]
    with pytest.raises(ConfigError, match=r"none of the run's domains \(solar\) is selected"):
        run_qa_domains(only_mirror, domains[:1])
