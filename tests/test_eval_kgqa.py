"""External KGQA sets: every supported layout loads (and a bad record names file:line and what is
missing), the KG is built into its own workspace, each episode's tools see only the 2-hop subgraph
around its topic entities, and `evaluate` on a KGQA file scores Hit@1 / F1 on answer sets."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from pipelines.agent.client import HttpToolClient, InProcessToolClient
from pipelines.agent.requests import CallRequest
from pipelines.agent.scope import Scope, subgraph_entities
from pipelines.agent.server import create_app
from pipelines.agent.tools import EpisodeState, KGToolbox
from pipelines.config import Params, load_params
from pipelines.domains import load_registry
from pipelines.eval.contexts import GRAPH_HEADER, graph_context, neighbourhood
from pipelines.eval.kgqa import resolve_question
from pipelines.eval.kgqa_formats import KGQAFormatError, load_kgqa, read_kgqa
from pipelines.eval.kgqa_workspace import build_kgqa_domain, kgqa_params, slug
from pipelines.eval.runner import evaluate, question_source
from pipelines.llm.base import ChatRequest
from pipelines.llm.scripted import ScriptedChatClient
from pipelines.manifest import read_manifest
from tests.conftest import DATA, cli_env, make_project
from tests.tool_support import ServerThread, with_tools

KGQA = DATA / "kgqa"
OBAMA = Scope(seeds=["Barack Obama"], hops=2)
# how the scripted policy walks each question of simple.jsonl: the relation of each hop
PLANS = {
    "q1": ["people.person.place_of_birth"],
    "q2": ["people.person.children"],
    "q3": ["people.person.education"],
    "q4": ["people.person.place_of_birth", "location.location.containedby"],
    "q5": ["people.person.education", "location.location.containedby"],
    "q6": ["people.person.parents", "people.person.nationality"],
    "q7": ["government.politician.party"],
    "q8": ["location.location.containedby"],
}


@pytest.fixture(scope="module")
def kgqa_project(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """A project (solar as its only registered domain) with the KGQA files copied under external/."""
    root = make_project(tmp_path_factory.mktemp("kgqa") / "project")
    shutil.copytree(KGQA, root / "external")
    return load_params(root / "params.yaml")


@pytest.fixture(scope="module")
def mini(kgqa_project: Params) -> tuple[Params, KGToolbox]:
    """The mini KG built in the KGQA workspace, and a toolbox over it."""
    where, name = build_kgqa_domain(kgqa_project, kgqa_project.root / "external" / "mini_kg.tsv")
    assert name == "mini_kg"
    toolbox = KGToolbox(where, [name])
    toolbox.load_all()
    return where, toolbox


# ----- loading ------------------------------------------------------------------------------------------

def test_the_simple_form_loads_with_ids_topics_and_every_answer() -> None:
    items = load_kgqa(KGQA / "simple.jsonl")
    assert [i.id for i in items] == [f"q{n}" for n in range(1, 9)]
    q2 = items[1]
    assert q2.topic_entities == ["Barack Obama"] and q2.answers == ["Malia Obama", "Sasha Obama"]
    assert q2.origin == "simple.jsonl:2"


def test_webqsp_takes_the_union_of_parses_keeps_value_answers_and_skips_unanswered() -> None:
    read = read_kgqa(KGQA / "webqsp.json")
    children, born = read.items
    assert children.id == "WebQTest-1" and children.question == "what are the names of barack obama's children?"
    assert children.topic_entities == ["Barack Obama"] and children.alternatives["Barack Obama"] == ["m.02mjmr"]
    assert children.answers == ["Malia Obama", "Sasha Obama"]  # P0 and P1, deduplicated
    assert born.answers == ["1961-08-04"]  # a value answer (EntityName null): its AnswerArgument
    assert read.skipped == ["webqsp.json:68: no answer"]  # the line where that record starts


def test_cwq_reads_topic_entity_maps_aliases_and_falls_back_to_the_sparql_ids() -> None:
    state, cities, father = load_kgqa(KGQA / "cwq.json")
    assert state.topic_entities == ["Michelle Obama"] and state.alternatives["Michelle Obama"] == ["m.025s5v9"]
    assert state.answers == ["Illinois"] and state.alternatives["Illinois"] == ["m.03v0t", "Land of Lincoln", "IL"]
    assert cities.answers == ["Princeton, New Jersey", "Cambridge"]
    assert "Princeton" in cities.alternatives["Princeton, New Jersey"]
    assert father.topic_entities == ["m.02mjmr"] and father.origin == "cwq.json:50"  # no topic_entity field


def test_grailqa_reads_entity_nodes_of_the_graph_query_and_value_answers() -> None:
    city, count = load_kgqa(KGQA / "grailqa.json")
    assert city.id == "2101535001000" and city.topic_entities == ["University of Delaware"]
    assert city.answers == ["Newark"] and city.alternatives["Newark"] == ["m.0fvwz"]
    assert count.answers == ["2"]


def test_qald_reads_the_english_question_uri_answers_and_sparql_resources() -> None:
    read = read_kgqa(KGQA / "qald.json")
    spouse, capital = read.items
    assert spouse.question == "Who is the spouse of Joe Biden?"
    assert spouse.topic_entities == ["Joe Biden"] and spouse.answers == ["Jill Biden"]
    assert capital.topic_entities == ["Kenya"] and capital.answers == ["Nairobi"]
    assert "http://dbpedia.org/resource/Nairobi" in capital.alternatives["Nairobi"]
    assert len(read.skipped) == 1 and "yes/no" in read.skipped[0]


def test_rog_style_parquet_reads_q_entity_and_answer_lists(tmp_path: Path) -> None:
    path = tmp_path / "rog_webqsp.parquet"
    pl.DataFrame({"id": ["WebQTest-0"], "question": ["what are obama's children called"],
                  "answer": [["Malia Obama", "Sasha Obama"]], "q_entity": [["Barack Obama"]],
                  "a_entity": [["Malia Obama", "Sasha Obama"]],
                  "graph": [[["Barack Obama", "people.person.children", "Malia Obama"]]]}).write_parquet(path)
    (item,) = load_kgqa(path)
    assert item.topic_entities == ["Barack Obama"] and item.answers == ["Malia Obama", "Sasha Obama"]
    assert item.origin == "rog_webqsp.parquet:row 1"


@pytest.mark.parametrize(("line", "message"), [
    ('{"question": "who?", "topic_entities": ["Barack Obama"]}', "no answers (expected one of: answers"),
    ('{"topic_entities": ["Barack Obama"], "answers": ["Honolulu"]}', "no question"),
    ('{"question": "who?", "answers": ["Honolulu"]}', "no topic entities (expected one of: topic_entities"),
    ('{"question": "who?", "topic_entities": ["Barack Obama"], "answers": ', "not valid JSON"),
    ('["who?", "Barack Obama", "Honolulu"]', "a JSON list, expected an object"),
    ('{"id": "q1", "question": "again?", "topic_entities": ["Barack Obama"], "answers": ["Honolulu"]}',
     "id 'q1' already used by bad.jsonl:1"),
])
def test_a_record_that_cannot_be_read_names_file_line_and_what_is_missing(tmp_path: Path, line: str,
                                                                          message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "q1", "question": "where?", "topic_entities": ["Barack Obama"], "answers": ["Honolulu"]})
    path.write_text(f"{good}\n{line}\n", encoding="utf-8")
    with pytest.raises(KGQAFormatError) as error:
        load_kgqa(path)
    assert str(error.value).startswith(f"{path}:2: ") and message in str(error.value)


def test_a_bad_record_of_a_json_file_names_the_line_it_starts_on(tmp_path: Path) -> None:
    records = json.loads((KGQA / "cwq.json").read_text())
    del records[2]["answers"]
    path = tmp_path / "cwq_bad.json"
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if '"WebQTrn-12_c3"' in text) - 1
    with pytest.raises(KGQAFormatError, match=rf"^{re.escape(str(path))}:{line}: no answers"):
        load_kgqa(path)


def test_files_with_nothing_to_evaluate_are_errors(tmp_path: Path) -> None:
    for name, text, message in (("empty.jsonl", "\n", "no questions"),
                                ("object.json", '{"Version": 1}', "without a list of questions"),
                                ("table.csv", "question,answers\n", "unsupported KGQA file format")):
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(KGQAFormatError, match=message):
            load_kgqa(tmp_path / name)
    with pytest.raises(KGQAFormatError, match="not found"):
        load_kgqa(tmp_path / "missing.jsonl")


# ----- the KG and its workspace --------------------------------------------------------------------------

def test_the_kg_is_built_in_its_own_workspace_and_reused_when_unchanged(kgqa_project: Params, mini) -> None:  # noqa: ANN001
    where, toolbox = mini
    assert where.artifacts_dir == kgqa_project.artifacts_dir / "kgqa"
    assert load_registry(where.registry_path).names == ["mini_kg"]
    assert load_registry(kgqa_project.registry_path).names == ["solar"]  # the training pipeline never sees it
    graph = toolbox.graph("mini_kg")
    assert graph.num_entities == 41 and graph.vectors is not None
    before = (read_manifest(where.artifacts_dir / "kg" / "mini_kg").created_at,
              read_manifest(where.artifacts_dir / "index" / "mini_kg").created_at)
    again, name = build_kgqa_domain(kgqa_project, kgqa_project.root / "external" / "mini_kg.tsv")
    after = (read_manifest(again.artifacts_dir / "kg" / "mini_kg").created_at,
             read_manifest(again.artifacts_dir / "index" / "mini_kg").created_at)
    assert (name, after) == ("mini_kg", before)
    assert build_kgqa_domain(kgqa_project, None, "mini_kg")[1] == "mini_kg"  # a built domain, by name
    assert slug("WebQSP test-set (2015)") == "webqsp_test_set_2015" and kgqa_params(kgqa_project).paths.artifacts \
        == "artifacts/kgqa"


def test_resolution_uses_aliases_and_ids_and_reports_what_the_kg_lacks(mini) -> None:  # noqa: ANN001
    _, toolbox = mini
    graph = toolbox.graph("mini_kg")
    state, cities, father = load_kgqa(KGQA / "cwq.json")
    resolved = resolve_question(graph, cities)
    assert resolved.topics == ["Michelle Obama"] and resolved.answers == ["Princeton", "Cambridge"]  # via aliases
    assert resolved.answer_in_subgraph and resolved.scope == Scope(seeds=["Michelle Obama"], hops=2)
    unresolved = resolve_question(graph, father)  # only a Freebase id, which this KG does not use
    assert unresolved.topics == [] and unresolved.prompt_topics == ["m.02mjmr"]
    assert unresolved.answer_in_kg and not unresolved.answer_in_subgraph and unresolved.subgraph == frozenset()


# ----- the subgraph restriction ----------------------------------------------------------------------------

def _call(toolbox: KGToolbox, text: str, scope: Scope | None = OBAMA):  # noqa: ANN202
    return toolbox.call(text, graph_type="mini_kg", episode=EpisodeState(graph_type="mini_kg", scope=scope))


def test_the_subgraph_is_every_entity_within_two_hops_either_way(mini) -> None:  # noqa: ANN001
    _, toolbox = mini
    graph = toolbox.graph("mini_kg")
    names = {graph.names[i] for i in subgraph_entities(graph, [graph.lookup("Barack Obama")], 2)}
    assert {"Honolulu", "Malia Obama", "Democratic Party", "Hawaii", "Kenya", "Joe Biden", "Illinois"} - names \
        == {"Illinois"}  # Illinois is 3 hops away (Obama - Michelle - Chicago - Illinois)
    assert not names & {"United States", "Nairobi", "Jill Biden", "Springfield", "Kansas"}
    assert {graph.names[i] for i in subgraph_entities(graph, [graph.lookup("Kenya")], 0)} == {"Kenya"}


def test_the_graph_walk_stops_at_its_radius_and_stays_within_the_subgraph(mini) -> None:  # noqa: ANN001
    graph = mini[1].graph("mini_kg")
    obama = graph.lookup("Barack Obama")
    one = list(neighbourhood(graph, [obama], hops=1))
    assert sorted(one) == sorted(int(r) for r in graph.incident(obama))
    two = list(neighbourhood(graph, [obama], hops=2))
    assert two[:len(one)] == one and len(set(two)) == len(two) > len(one)  # nearest first, each relation once
    inside = subgraph_entities(graph, [obama], 1)
    walked = list(neighbourhood(graph, [obama], within=inside))
    # every relation with both ends inside the 1-hop subgraph (those between neighbours too), and no other
    assert sorted(walked) == [r for r in range(len(graph.rel_src))
                              if int(graph.rel_src[r]) in inside and int(graph.rel_dst[r]) in inside]
    path = ["Barack Obama", "made-up relation", "Honolulu"]
    triples = json.loads(graph_context(graph, [obama], 3, hops=2, first=[path]).removeprefix(GRAPH_HEADER))
    assert len(triples) == 3 and path in triples and triples == sorted(triples)


def test_node_info_lists_only_neighbours_inside_the_scope(mini) -> None:  # noqa: ANN001
    _, toolbox = mini
    whole = _call(toolbox, 'node_info(node_name="Hawaii", graph_type="mini_kg")', scope=None).content
    scoped = _call(toolbox, 'node_info(node_name="Hawaii", graph_type="mini_kg")').content
    assert "United States" in whole and "Relations (3):" in whole
    assert "United States" not in scoped and "Relations (2):" in scoped and "Honolulu" in scoped
    kenya = _call(toolbox, 'node_info(node_name="Kenya", graph_type="mini_kg")').content
    assert "Barack Obama Sr." in kenya and "Nairobi" not in kenya


def test_entities_outside_the_scope_are_not_found_by_any_tool(mini) -> None:  # noqa: ANN001
    _, toolbox = mini
    for text in ('node_info(node_name="United States", graph_type="mini_kg")',
                 'get_tail_relations(entity="Nairobi")', 'get_head_entities(entity="Jill Biden", relation="x")',
                 'search(entity="Nairobi", question="What is the capital of Kenya?")'):
        result = _call(toolbox, text)
        assert not result.ok and result.error_type.value == "entity_not_found", (text, result.content)
        assert _call(toolbox, text, scope=None).error_type != result.error_type  # found without the scope
    matched = _call(toolbox, 'entity_matcher(node_name="Nairobi", graph_type="mini_kg")').content
    listed = re.compile(r"^\d+\. Nairobi( \[[^\]]+\])?$", re.M)  # a matcher line naming Nairobi (typed or not)
    assert not listed.search(matched) and re.match(r"Found [1-9]\d* entities", matched)
    unscoped = _call(toolbox, 'entity_matcher(node_name="Nairobi", graph_type="mini_kg")', scope=None).content
    assert listed.match(unscoped.split("\n")[1])


def test_kg_r1_and_search_see_only_relations_inside_the_scope(mini) -> None:  # noqa: ANN001
    _, toolbox = mini
    relations = _call(toolbox, 'get_tail_relations(entity="Hawaii")').content
    assert relations == 'Tail relations for entity "Hawaii": location.administrative_division.capital'
    empty = _call(toolbox, 'get_tail_entities(entity="Hawaii", relation="location.location.containedby")')
    assert not empty.ok and empty.error_type.value == "no_results"
    assert "United States" in _call(toolbox, 'get_tail_entities(entity="Hawaii", '
                                             'relation="location.location.containedby")', scope=None).content
    searched = _call(toolbox, 'search(entity="Hawaii", question="Which country is Hawaii in?")').content
    assert "Honolulu" in searched and "United States" not in searched


def test_a_scope_is_kept_by_the_episode_in_process_and_over_http(mini) -> None:  # noqa: ANN001
    _, toolbox = mini
    outside = 'node_info(node_name="United States", graph_type="mini_kg")'
    local = InProcessToolClient(toolbox)
    assert not local.call(outside, episode_id="e1", scope=OBAMA).ok
    assert not local.call(outside, episode_id="e1").ok  # later calls of the episode keep its scope
    assert local.call(outside, episode_id="e2").ok
    with ServerThread(create_app(toolbox)) as running:
        http = HttpToolClient(running.url)
        try:
            assert not http.call(outside, episode_id="h1", scope=OBAMA).ok
            results = http.batch([CallRequest(call=outside, episode_id="h1"),
                                  CallRequest(call=outside, episode_id="h2", scope=Scope(seeds=["Hawaii"], hops=1)),
                                  CallRequest(call=outside, episode_id="h3")])
            assert [r.ok for r in results] == [False, True, True]
        finally:
            http.close()


# ----- evaluation ------------------------------------------------------------------------------------------

# node_info's relation lines read from its entity (tools.node_info_lines: from_entity): "3. -[label]-> Tail"
_ENTITY = re.compile(r"^Entity: (.+)$", re.M)
_RELATION = re.compile(r"^\d+\. -\[(.+?)\]-> (.+?)(?::|$)", re.M)


def walking_policy(request: ChatRequest) -> str:
    """Reads the topic entity from the prompt and follows each question's relations with node_info,
    reading the next entities from the tool responses; answers with every entity it reached."""
    prompt = request.messages[1]["content"]
    graph_type = re.search(r"^Knowledge graph: (.+)$", prompt, re.M).group(1)
    topic = re.search(r"^Topic entities: (.+)$", prompt, re.M).group(1)
    question = re.search(r"^Question: (.+)$", prompt, re.M).group(1)
    plan = PLANS[next(q.id for q in load_kgqa(KGQA / "simple.jsonl") if q.question == question)]
    responses = [m["content"] for m in request.messages[2:] if m["role"] == "user"]
    pending, reached, level = [topic], [], 0
    for response in responses:
        queried = pending.pop(0)
        head = _ENTITY.search(response)
        reached += [tail for relation, tail in _RELATION.findall(response)
                    if head and head.group(1) == queried and relation == plan[level] and tail not in reached]
        if not pending:
            pending, reached, level = reached, [], level + 1
    if level == len(plan):
        return f"<think>Reached {len(pending)}.</think><answer>{'; '.join(pending)}</answer>"
    return (f"<think>Follow {plan[level]} from {pending[0]}.</think>"
            f'<tool_call>node_info(node_name="{pending[0]}", graph_type="{graph_type}")</tool_call>')


def _evaluate(params: Params, policy, name: str, limit: int):  # noqa: ANN001, ANN202
    source = question_source(params, kgqa=params.root / "external" / "simple.jsonl",
                             triples=params.root / "external" / "mini_kg.tsv", limit=limit)
    return evaluate(params, "base", source, client=ScriptedChatClient(policy, model=name), progress=False, name=name)


def test_a_policy_that_walks_to_every_answer_scores_hit1_and_f1_one(kgqa_project: Params, mini) -> None:  # noqa: ANN001
    # node_info lists every relation, so the policy can reach every answer (the quick profile lists 8: two of Barack
    # Obama's four schools would be left out, and F1 with them)
    every_relation = with_tools(kgqa_project, node_info_max_neighbors=None)
    result = _evaluate(every_relation, walking_policy, "kgqa-walk", limit=20)  # all 8 (quick profile: eval.limit 6)
    metrics = result.metrics
    assert metrics.overall.n == 8 and (metrics.overall.hit1, metrics.overall.f1) == (1.0, 1.0)
    capped = _evaluate(kgqa_project, walking_policy, "kgqa-walk-capped", limit=20).metrics.overall
    assert capped.hit1 == 1.0 and capped.f1 < 1.0  # the cap hides answers of a question with many
    assert metrics.split == "kgqa-simple" and metrics.by_bucket == {} and metrics.by_hops == {}
    assert set(metrics.by_domain) == {"mini_kg"}
    by_id = {t.qa_id: t for t in result.trajectories}
    assert by_id["q3"].answer == "Columbia University; Harvard Law School; Occidental College; Punahou School"
    assert by_id["q5"].gold_answers == ["Princeton", "Cambridge"] and len(by_id["q5"].tool_calls) == 3
    assert "Topic entities: Michelle Obama" in by_id["q4"].messages[1]["content"]
    assert all(call.ok for t in result.trajectories for call in t.tool_calls)
    assert result.kgqa["topic_found"] == 1.0 and result.kgqa["answer_in_subgraph"] == 1.0
    folder = result.folder
    assert folder == kgqa_project.artifacts_dir / "reports" / "kgqa-walk"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["params"]["kgqa"]["domain"] == "mini_kg" and "external/simple.jsonl" in manifest["inputs"]
    assert any(k.endswith("kgqa/kg/mini_kg/relations.parquet") for k in manifest["inputs"])
    assert len((folder / "predictions.jsonl").read_text().splitlines()) == 8

    first_only = _evaluate(kgqa_project, lambda r: re.sub(r"<answer>([^;<]+)[^<]*</answer>", r"<answer>\1</answer>",
                                                          walking_policy(r)), "kgqa-first", limit=8)
    assert first_only.metrics.overall.hit1 == 1.0 and first_only.metrics.overall.f1 < 1.0  # multi-answer recall


def test_episodes_cannot_reach_entities_outside_their_subgraph(kgqa_project: Params, mini) -> None:  # noqa: ANN001
    def policy(request: ChatRequest) -> str:
        if len(request.messages) == 2:
            return '<think>?</think><tool_call>node_info(node_name="Nairobi", graph_type="mini_kg")</tool_call>'
        return "<think>Not there.</think><answer>Nairobi</answer>"

    result = _evaluate(kgqa_project, policy, "kgqa-outside", limit=3)
    assert len(result.trajectories) == 3
    for trajectory in result.trajectories:
        (call,) = trajectory.tool_calls
        assert not call.ok and call.error_type == "entity_not_found", call.response
    assert result.metrics.overall.hit1 == 0.0


def test_the_graph_baseline_puts_the_scoped_subgraph_in_the_prompt(kgqa_project: Params, mini) -> None:  # noqa: ANN001
    client = ScriptedChatClient(lambda r: "<answer>Honolulu</answer>")
    source = question_source(kgqa_project, kgqa=kgqa_project.root / "external" / "simple.jsonl", kgqa_domain="mini_kg",
                             limit=20)
    evaluate(kgqa_project, "base", source, client=client, baseline="graph", progress=False, name="kgqa-graph")
    prompt = next(r.messages[1]["content"] for r in client.requests if "barack obama born" in r.messages[1]["content"])
    triples = json.loads(prompt.split("(head, relation, tail):\n", 1)[1].split("\n\n")[0])
    assert ["Barack Obama", "people.person.place_of_birth", "Honolulu"] in triples
    assert "Topic entities: Barack Obama" in prompt
    assert not any("Nairobi" in t or "United States" in t for t in triples)


# ----- the CLI -----------------------------------------------------------------------------------------------

def _omne(params: Params, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["omne", "eval", *args], cwd=params.root, env=cli_env(), capture_output=True, text=True,
                          timeout=300)


def test_cli_help_lists_the_kgqa_options(kgqa_project: Params) -> None:
    result = _omne(kgqa_project, "--help")
    assert result.returncode == 0
    for option in ("--kgqa", "--triples", "--kgqa-domain", "--kgqa-hops"):
        assert option in result.stdout


def test_cli_errors_are_one_line_and_exit_2(kgqa_project: Params) -> None:
    missing = _omne(kgqa_project, "--kgqa", "external/simple.jsonl", "--triples", "external/nowhere.tsv")
    assert missing.returncode == 2 and "nowhere.tsv" in missing.stderr and "does not exist" in missing.stderr
    alone = _omne(kgqa_project, "--triples", "external/mini_kg.tsv")
    assert alone.returncode == 2 and "only apply with --kgqa" in alone.stderr
    (kgqa_project.root / "external" / "broken.jsonl").write_text('{"question": "who?", "answers": ["x"]}\n')
    broken = _omne(kgqa_project, "--kgqa", "external/broken.jsonl", "--triples", "external/mini_kg.tsv")
    assert broken.returncode == 2 and "broken.jsonl:1: no topic entities" in broken.stderr
    assert "Traceback" not in broken.stderr
