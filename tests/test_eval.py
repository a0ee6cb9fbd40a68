"""Evaluation end to end on the solar domain: scripted policies through the real tools score EM 1.0
and 0.0, baselines put their context in the prompt, and `omne eval` runs a real (tiny) local model."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pipelines.config import Params
from pipelines.eval.runner import SplitSource, evaluate, load_split, question_source
from pipelines.eval.source import QuestionSource
from pipelines.llm.base import ChatRequest
from pipelines.llm.scripted import ScriptedChatClient
from tests.conftest import cli_env


def gold_policy(params: Params):  # noqa: ANN201
    """Answers every question by walking its gold path with entity_matcher and node_info."""
    pairs = {p.question: p for split in ("train", "val", "test") for p in load_split(params, split)}

    def reply(request: ChatRequest) -> str:
        question = re.search(r"^Question: (.*)$", request.messages[1]["content"], re.M).group(1)
        pair = pairs[question]
        done = sum(m["role"] == "assistant" for m in request.messages)
        if done == 0:
            return (f"<think>Find {pair.path[0]}.</think><tool_call>entity_matcher(node_name=\"{pair.path[0]}\", "
                    f"graph_type=\"{pair.domain}\")</tool_call>")
        if done <= len(pair.path) - 1:
            node = pair.path[done - 1]
            return f"<think>{node} leads on.</think><tool_call>node_info(node_name=\"{node}\", graph_type=\"{pair.domain}\")</tool_call>"
        return f"<think>So it is {pair.answer}.</think><answer>{pair.answer}</answer>"

    return reply


def train_split(params: Params) -> SplitSource:
    """The train split's questions (all of them: 50 per bucket), what most tests here evaluate on."""
    return SplitSource.load(params, "train", 50)


def test_gold_path_policy_scores_one_and_a_wrong_policy_zero(solar_qa: Params) -> None:
    result = evaluate(solar_qa, "base", train_split(solar_qa),
                      client=ScriptedChatClient(gold_policy(solar_qa), model="gold-policy"), progress=False, name="gold")
    pairs = load_split(solar_qa, "train")
    metrics = result.metrics
    assert metrics.overall.n == len(pairs) > 0
    assert (metrics.overall.em, metrics.overall.f1, metrics.overall.hit1) == (1.0, 1.0, 1.0)
    assert metrics.behaviour.retrieval_rate == 1.0 and metrics.efficiency.kg_calls_per_sample >= 2
    assert all(t.correct for t in result.trajectories)
    folder = result.folder
    assert folder == solar_qa.artifacts_dir / "reports" / "gold"
    for name in ("metrics.json", "predictions.jsonl", "report.html", "manifest.json"):
        assert (folder / name).is_file()
    assert len((folder / "predictions.jsonl").read_text().splitlines()) == len(pairs)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kind"] == "eval_report" and any(k.endswith("train.jsonl") for k in manifest["inputs"])
    # the page shows how the evaluated domains' questions read (docs/qa.md, "Quality report")
    assert '<tr data-testid="quality-row" data-domain="solar" data-hops="all">' in (folder / "report.html").read_text()

    wrong = evaluate(solar_qa, "base", train_split(solar_qa),
                     client=ScriptedChatClient(lambda r: "<think>?</think><answer>Pluto</answer>"), progress=False,
                     name="wrong")
    assert wrong.metrics.overall.em == 0.0 and wrong.metrics.overall.answered == 1.0


def test_baselines_put_their_context_in_the_prompt(solar_qa: Params) -> None:
    pair = load_split(solar_qa, "train")[0]
    for baseline, marker in (("graph", "Knowledge-graph triples (head, relation, tail):"),
                             ("retrieval", "Knowledge-graph facts:")):
        client = ScriptedChatClient(lambda r: f"<answer>{pair.answer}</answer>")
        result = evaluate(solar_qa, "base", train_split(solar_qa), client=client, baseline=baseline, progress=False,
                          name=f"b-{baseline}")
        prompts = [r.messages[1]["content"] for r in client.requests]
        assert all(marker in p for p in prompts) and all("<tools>" not in r.messages[0]["content"]
                                                         for r in client.requests)
        assert result.metrics.baseline == baseline and result.trajectories[0].tool_calls == []
    direct = ScriptedChatClient(lambda r: "<answer>x</answer>")
    evaluate(solar_qa, "base", train_split(solar_qa), client=direct, baseline="direct", progress=False,
             name="b-direct")
    assert "Knowledge-graph" not in direct.requests[0].messages[1]["content"]


def test_graph_baseline_contains_the_question_path(solar_qa: Params) -> None:
    pair = next(p for p in load_split(solar_qa, "train"))
    client = ScriptedChatClient(lambda r: "<answer>x</answer>")
    evaluate(solar_qa, "base", train_split(solar_qa), client=client, baseline="graph", progress=False,
             name="b-graph2")
    prompt = next(r.messages[1]["content"] for r in client.requests if pair.question in r.messages[1]["content"])
    triples = json.loads(prompt.split("Knowledge-graph triples (head, relation, tail):\n", 1)[1].split("\n\n")[0])
    for edge in pair.path_edges:
        assert [edge.src, edge.keywords, edge.dst] in triples


def test_an_explicit_split_source_asks_and_reports_what_the_options_do(solar_qa: Params) -> None:
    source = SplitSource.load(solar_qa, "train", 50)
    assert isinstance(source, QuestionSource) and source.summary(solar_qa.root) is None
    dataset = {f"artifacts/qa/dataset/{f}" for f in ("qa.parquet", "train.jsonl", "val.jsonl", "test.jsonl",
                                                     "gold_paths.jsonl", "stats.json", "generic_words.json")}
    assert set(source.inputs(solar_qa.root)) == dataset | {"artifacts/kg/solar/entities.parquet",
                                                          "artifacts/kg/solar/relations.parquet"}
    by_options, by_source = (ScriptedChatClient(lambda r: "<answer>x</answer>") for _ in range(2))
    options = evaluate(solar_qa, "base", question_source(solar_qa, split="train", limit=50), client=by_options,
                       baseline="graph", progress=False, name="by-options")
    sourced = evaluate(solar_qa, "base", source, client=by_source, baseline="graph", progress=False, name="by-source")
    assert [r.messages for r in by_source.requests] == [r.messages for r in by_options.requests]
    manifests = [json.loads((r.folder / "manifest.json").read_text()) for r in (options, sourced)]
    assert manifests[0]["inputs"] == manifests[1]["inputs"] and manifests[0]["params"] == manifests[1]["params"]
    # a time figure is metadata: it must not make the report's fingerprint differ from run to run
    assert all("wall_time_s" not in m["params"] and m["metadata"]["wall_time_s"] >= 0 for m in manifests)
    assert sourced.kgqa is None and sourced.metrics.split == "train"


def test_evaluate_cached_reuses_a_current_report_and_re_evaluates_a_changed_one(solar_qa: Params, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.config import with_overrides
    from pipelines.eval import runner
    from pipelines.manifest import read_manifest

    model = tmp_path / "fake-model"  # a model folder (its identity is its files) whose client is scripted
    model.mkdir()
    (model / "config.json").write_text("{}")
    loaded: list[str] = []

    def load(spec: str, params: Params, *, endpoint: str | None = None) -> ScriptedChatClient:
        loaded.append(spec)
        return ScriptedChatClient(lambda r: "<answer>x</answer>", model="fake")

    monkeypatch.setattr(runner, "load_agent_model", load)

    def cached(params: Params, **options: bool) -> runner.EvalResult:
        return runner.evaluate_cached(params, str(model), name="cached", split="train", limit=50, progress=False,
                                      **options)

    first = cached(solar_qa)
    manifest = read_manifest(first.folder)
    assert not first.skipped and len(loaded) == 1 and first.trajectories
    assert manifest.metadata["wall_time_s"] >= 0 and "wall_time_s" not in manifest.params  # time: metadata only
    assert manifest.params["model"].startswith("fake-model-") and "prompt_version" in manifest.params
    again = cached(solar_qa)
    assert again.skipped and len(loaded) == 1 and again.trajectories == []  # same inputs and settings: reused
    assert again.metrics.overall == first.metrics.overall and read_manifest(first.folder) == manifest
    longer = with_overrides(solar_qa, {"agent": {"max_new_tokens": solar_qa.agent.max_new_tokens + 1}})
    assert not cached(longer).skipped and len(loaded) == 2  # a changed setting re-evaluates
    assert cached(longer).skipped and len(loaded) == 2
    (model / "config.json").write_text('{"retrained": true}')  # a new checkpoint: a new identity
    assert not cached(longer).skipped and len(loaded) == 3
    assert not cached(longer, force=True).skipped and len(loaded) == 4


def test_omne_eval_cli_runs_a_local_model(solar_qa: Params, tmp_path: Path) -> None:
    from tests.model_support import build_tiny_llama

    model = build_tiny_llama(tmp_path / "tiny-llama")
    result = subprocess.run(["omne", "eval", "--model", str(model), "--split", "train", "--limit", "2",
                             "--name", "tiny"], cwd=solar_qa.root, env=cli_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "omne evaluation" in result.stdout and "report:" in result.stdout
    metrics = json.loads((solar_qa.artifacts_dir / "reports" / "tiny" / "metrics.json").read_text())
    assert metrics["model"].startswith("tiny-llama-") and metrics["overall"]["n"] >= 1
    # where the backend's time went: its counters over this evaluation, in metrics.json, the console and the page
    work = metrics["efficiency"]["generation"]
    assert work["backend"] == solar_qa.agent.backend and work["prompt_positions_computed"] > 0 < work["prefill_s"]
    assert work["decode_steps"] > 0 < work["decode_s"] and 0 < work["mean_live_rows"] <= solar_qa.agent.batch_size
    assert f"tiny: generation ({work['backend']}): prefill" in result.stdout
    assert 'data-key="generation"' in (solar_qa.artifacts_dir / "reports" / "tiny" / "report.html").read_text()


def test_llm_judge_runs_beside_exact_match(solar_qa: Params, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.llm.scripted import scripted_openai_app, serve_in_thread

    judged = scripted_openai_app(lambda body: json.dumps({"reasoning": "same entity", "verdict": True}))
    params = solar_qa.model_copy(update={"eval": solar_qa.eval.model_copy(update={"judge": True}),
                                         "llm": solar_qa.llm.model_copy(update={"cache": False})})
    with serve_in_thread(judged) as url:
        monkeypatch.setenv("OMNE_LLM_BASE_URL", f"{url}/v1")
        monkeypatch.setenv("OMNE_LLM_MODEL", "judge-model")
        result = evaluate(params, "base", train_split(params),
                          client=ScriptedChatClient(lambda r: "<answer>the planet Pluto</answer>"), progress=False,
                          name="judged")
    assert result.metrics.overall.em == 0.0
    assert result.metrics.efficiency.generation is None  # a scripted client has no backend counters
    assert result.metrics.judge == {"accuracy": 1.0, "asked": result.metrics.overall.n, "failed": 0}
    assert judged.state.log.total == result.metrics.overall.n
    assert all(t.judge == {"verdict": True, "reasoning": "same entity"} for t in result.trajectories)


def test_eval_domains_evaluates_only_that_domains_questions(twin_qa: Params) -> None:
    from pipelines.config import with_overrides

    params = with_overrides(twin_qa, {"eval": {"domains": ["mirror"]}})
    mirror = [p for p in load_split(twin_qa, "train") if p.domain == "mirror"]
    result = evaluate(params, "base", train_split(params),
                      client=ScriptedChatClient(gold_policy(params), model="gold-policy"), progress=False,
                      name="mirror-only")
    metrics = result.metrics
    assert {t.domain for t in result.trajectories} == {"mirror"} and metrics.overall.n == len(mirror) > 0
    assert metrics.domains == ["mirror"] and set(metrics.by_domain) == {"mirror"} and metrics.overall.em == 1.0
    manifest = json.loads((result.folder / "manifest.json").read_text())
    assert manifest["params"]["eval"]["domains"] == ["mirror"]  # the report records the selection
    assert json.loads((result.folder / "metrics.json").read_text())["domains"] == ["mirror"]
    assert '<b>domains</b> mirror</span>' in (result.folder / "report.html").read_text()

    everything = evaluate(twin_qa, "base", train_split(twin_qa),
                          client=ScriptedChatClient(gold_policy(twin_qa), model="gold-policy"), progress=False,
                          name="both")
    assert everything.metrics.domains == ["mirror", "solar"]  # eval.domains unset: every domain of the split
    assert "domains" not in json.loads((everything.folder / "manifest.json").read_text())["params"]["eval"]
