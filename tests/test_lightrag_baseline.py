"""The LightRAG baseline (docs/evaluation.md): the real lightrag-hku library over the solar domain's graph, its
keywords written by the evaluated model (a scripted client, a scripted OpenAI-compatible server behind `omne eval`,
and a tiny random model), then the model answers from LightRAG's context with the no-tool baseline prompt."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pipelines.config import Params
from pipelines.eval.lightrag_baseline import INDEX_KIND, build_lightrag_index, custom_kg
from pipelines.eval.runner import SplitSource, evaluate, load_split
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir, lightrag_dir
from pipelines.llm.base import ChatRequest
from pipelines.llm.scripted import ScriptedChatClient, scripted_openai_app, serve_in_thread
from pipelines.manifest import read_manifest, sha256_files
from pipelines.qa.models import QAPair

CONTEXT_MARK = "Knowledge Graph Data (Entity)"


def keyword_reply(pairs: dict[str, QAPair], prompt: str) -> str:
    """LightRAG's keyword JSON for the question in its keyword prompt: the start entity as the low-level keyword,
    the first relation of the question's path as the high-level one (what a model that follows LightRAG writes)."""
    question = re.findall(r"User Query: (.*)", prompt)[-1].strip()
    pair = pairs[question]
    return json.dumps({"high_level_keywords": [pair.path_edges[0].keywords], "low_level_keywords": [pair.start_entity]})


def question_of(prompt: str) -> str:
    return re.search(r"^Question: (.*)$", prompt, re.M).group(1)


@pytest.fixture(scope="module")
def pairs(solar_qa: Params) -> dict[str, QAPair]:
    return {p.question: p for p in load_split(solar_qa, "train")}


def test_the_index_holds_the_domain_graph_and_is_reused(solar_qa: Params) -> None:
    kg = read_kg(kg_dir(solar_qa.artifacts_dir, "solar"))
    graph = custom_kg(solar_qa.artifacts_dir, "solar")
    assert len(graph.entities) == kg.entities.height and graph.skipped == {}
    moon = next(r for r in graph.relationships if {r["src_id"], r["tgt_id"]} == {"Moon", "Earth"})
    assert moon["description"].startswith("Moon orbits Earth.")  # LightRAG shows descriptions only: the triple leads
    first = build_lightrag_index(solar_qa, "solar")
    folder = lightrag_dir(solar_qa.artifacts_dir, "solar")
    assert first.folder == folder and first.manifest.kind == INDEX_KIND
    assert first.manifest.rows == {"entities": kg.entities.height, "relations": len(graph.relationships)}
    assert set(first.manifest.inputs) == {"artifacts/kg/solar/entities.parquet", "artifacts/kg/solar/relations.parquet"}
    assert {"graph_chunk_entity_relation.graphml", "vdb_entities.json", "vdb_relationships.json"} <= {
        p.name for p in (folder / "solar").iterdir()}
    assert build_lightrag_index(solar_qa, "solar").skipped  # current: reused


def test_the_baseline_answers_from_lightrags_context_and_reuses_the_index(solar_qa: Params,
                                                                         pairs: dict[str, QAPair]) -> None:
    def reply(request: ChatRequest) -> str:
        if request.tag == "lightrag.keywords":
            return keyword_reply(pairs, request.messages[-1]["content"])
        return f"<think>From the context.</think><answer>{pairs[question_of(request.messages[1]['content'])].answer}</answer>"

    client = ScriptedChatClient(reply, model="lightrag-policy")
    result = evaluate(solar_qa, "base", SplitSource.load(solar_qa, "train", 50), client=client, baseline="lightrag",
                      progress=False, name="lr")
    keyword_requests = [r for r in client.requests if r.tag == "lightrag.keywords"]
    answers = [r for r in client.requests if r.tag != "lightrag.keywords"]
    assert len(keyword_requests) == len(answers) == len(pairs)  # one LightRAG query and one answer per question
    assert all(r.json_mode for r in keyword_requests)  # LightRAG asks for a JSON object
    for request in answers:
        system, prompt = request.messages[0]["content"], request.messages[1]["content"]
        assert "<tools>" not in system and "knowledge-graph context retrieved" in system
        pair = pairs[question_of(prompt)]
        context = prompt.split("Knowledge graph: solar", 1)[0]
        # LightRAG's context, from the domain's graph: the question's start entity and its path's first relation
        assert CONTEXT_MARK in context and f'"entity": "{pair.start_entity}"' in context
        edge = pair.path_edges[0]
        assert f"{edge.src} {edge.keywords} {edge.dst}." in context
    assert result.metrics.baseline == "lightrag" and result.metrics.overall.em == 1.0
    assert result.folder == solar_qa.artifacts_dir / "reports" / "lr" and (result.folder / "report.html").is_file()
    manifest = json.loads((result.folder / "manifest.json").read_text())
    assert manifest["params"]["baseline"] == "lightrag" and manifest["params"]["lightrag"]["mode"] == "hybrid"
    summary = manifest["metadata"]["lightrag"]
    assert summary["outcomes"]["keywords"] == summary["questions"] == len(pairs) and summary["empty_keyword_share"] == 0
    assert set(summary["indexes"]) == {"solar"} and summary["keyword_requests"] == len(pairs)
    assert summary["keyword_batches"] == [len(pairs)]  # the questions' keyword requests went to the model together

    # a rerun reuses the index and leaves its files as built (the queries write nothing into it)
    index = lightrag_dir(solar_qa.artifacts_dir, "solar")
    again = evaluate(solar_qa, "base", SplitSource.load(solar_qa, "train", 50), client=ScriptedChatClient(reply),
                     baseline="lightrag", progress=False, name="lr-again")
    assert again.lightrag["indexes"] == {"solar": "reused"} and again.metrics.overall.em == 1.0
    files = read_manifest(index).files
    assert sha256_files([index / name for name in files], index) == files


def test_keywords_a_model_cannot_write_leave_it_to_lightrags_fallback(solar_qa: Params,
                                                                      pairs: dict[str, QAPair]) -> None:
    client = ScriptedChatClient(lambda r: "Sure! The keywords are planets." if r.tag == "lightrag.keywords"
                                else "<answer>Sun</answer>")
    result = evaluate(solar_qa, "base", SplitSource.load(solar_qa, "train", 50), client=client, baseline="lightrag",
                      progress=False, name="lr-garbled")
    short = sum(len(q) < 50 for q in pairs)  # LightRAG searches with a short question itself, gives up on a long one
    assert 0 < short < len(pairs)
    assert result.lightrag["outcomes"] == {"keywords": 0, "question": short, "none": len(pairs) - short,
                                           "no_match": 0, "failed": 0}
    assert result.lightrag["empty_keyword_share"] == 1.0
    for request in (r for r in client.requests if r.tag != "lightrag.keywords"):
        prompt = request.messages[1]["content"]
        assert (CONTEXT_MARK in prompt) == (len(question_of(prompt)) < 50)  # no context: the question alone


def test_omne_eval_baseline_lightrag_with_an_endpoint(solar_qa: Params, pairs: dict[str, QAPair]) -> None:
    from pipelines.cli import cli

    def handler(body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        if body.get("response_format"):
            return keyword_reply(pairs, prompt)
        return f"<answer>{pairs[question_of(body['messages'][1]['content'])].answer}</answer>"

    with serve_in_thread(scripted_openai_app(handler)) as url:
        result = CliRunner().invoke(cli, ["--params", str(solar_qa.root / "params.yaml"), "eval", "--baseline",
                                          "lightrag", "--model", "scripted-model", "--endpoint", f"{url}/v1",
                                          "--split", "train", "--name", "lr-cli"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"lightrag (hybrid): {len(pairs)} questions: keywords {len(pairs)}; no keyword from the model for 0%" \
        in result.output
    metrics = json.loads((solar_qa.artifacts_dir / "reports" / "lr-cli" / "metrics.json").read_text())
    assert metrics["baseline"] == "lightrag" and metrics["overall"]["em"] == 1.0


def test_a_tiny_local_model_writes_lightrags_keywords(solar_qa: Params, tiny: Path) -> None:
    from pipelines.agent.models import load_agent_model

    params = solar_qa.model_copy(update={
        "agent": solar_qa.agent.model_copy(update={"backend": "transformers", "max_new_tokens": 8}),
        "lightrag": solar_qa.lightrag.model_copy(update={"keyword_tokens": 16})})
    model = load_agent_model(str(tiny), params)
    result = evaluate(params, str(tiny), SplitSource.load(params, "train", 2), client=model, baseline="lightrag",
                      progress=False, name="lr-tiny")
    summary = result.lightrag
    assert sum(summary["outcomes"].values()) == summary["questions"] == result.metrics.overall.n
    assert summary["keyword_requests"] == summary["questions"]  # the random model's replies, whatever LightRAG made
    assert model.usage.by_tag.get("lightrag.keywords") == summary["questions"]


def test_the_papers_lightrag_rows_are_this_baselines_reports(solar_qa: Params, pairs: dict[str, QAPair]) -> None:
    from pipelines.paper import lightrag_row

    client = ScriptedChatClient(lambda r: "{}" if r.tag == "lightrag.keywords" else "<answer>Sun</answer>")
    report = evaluate(solar_qa, "base", SplitSource.load(solar_qa, "train", 50), client=client, baseline="lightrag",
                      progress=False, name="lr-paper").folder
    asked = []

    class Builds:  # what lightrag_row asks of PaperBuilds: the base model's report of a baseline in a mode
        params = solar_qa

        def base_report(self, mode: str, baseline: str) -> Path:
            asked.append((mode, baseline))
            return report

    row = lightrag_row(Builds(), "lightrag-no-think", ["LightRAG (w/o think)"], 2, "no_think")  # type: ignore[arg-type]
    assert asked == [("no_think", "lightrag")] and row.report == "artifacts/reports/lr-paper"
    assert row.scores["1-2"].n == len(pairs) and row.cells[-1] == "EM" and row.paper == {"1-2": 59.2, "3+": 46.8}


def test_an_external_kgqa_set_gets_an_index_in_its_workspace(tmp_path: Path) -> None:
    import shutil

    from pipelines.config import load_params
    from pipelines.eval.runner import question_source
    from pipelines.layout import kgqa_workspace
    from tests.conftest import DATA, make_project

    root = make_project(tmp_path / "project")
    shutil.copytree(DATA / "kgqa", root / "external")
    params = load_params(root / "params.yaml")

    def reply(request: ChatRequest) -> str:
        if request.tag == "lightrag.keywords":
            return json.dumps({"high_level_keywords": ["place of birth"], "low_level_keywords": ["Barack Obama"]})
        return "<answer>Honolulu</answer>"

    client = ScriptedChatClient(reply)
    source = question_source(params, kgqa=root / "external" / "simple.jsonl", triples=root / "external" / "mini_kg.tsv",
                             limit=2)
    result = evaluate(params, "base", source, client=client, baseline="lightrag", progress=False, name="kgqa-lr")
    index = lightrag_dir(kgqa_workspace(params.artifacts_dir), "mini_kg")  # beside the set's KG, not the project's
    assert read_manifest(index).kind == INDEX_KIND and result.lightrag["indexes"] == {"mini_kg": "built"}
    prompts = [r.messages[1]["content"] for r in client.requests if r.tag != "lightrag.keywords"]
    assert len(prompts) == 2 and all('"entity": "Barack Obama"' in p and "Honolulu" in p for p in prompts)
    assert all("Topic entities: " in p for p in prompts), prompts[0][-300:]
