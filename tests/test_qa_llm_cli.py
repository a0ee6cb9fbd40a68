"""`omne qa generate --generator llm` end to end against a scripted OpenAI-compatible server on
127.0.0.1: prompts, validation and judging through the real client, the disk cache on rerun, and a
run killed with SIGKILL that resumes without losing or paying twice for a reply."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from pipelines.config import Params, load_params
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir
from pipelines.llm.scripted import scripted_openai_app, serve_in_thread
from pipelines.qa.paths import RelationGraph
from pipelines.qa.prompts import GENERATOR_SYSTEM
from pipelines.qa.template import sample_template_path, write_question
from pipelines.qa.validate import check_question
from tests.conftest import chemistry_project, cli_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Params:
    return chemistry_project(tmp_path_factory.mktemp("llmqa") / "project")


def make_handler(graph: RelationGraph, nodes_of: dict[str, list[int]]):  # noqa: ANN201
    """Replies like a careful model: a real path and a template question; the judge accepts."""

    def handler(body: dict) -> str:
        messages = body["messages"]
        prompt = messages[1]["content"]
        if messages[0]["content"] != GENERATOR_SYSTEM:
            return json.dumps({"valid": True, "reason": "names the start only and needs every hop"})
        seed_name = re.search(r'around the entity "(.*)"\.', prompt).group(1)
        seed = graph.entity_id(seed_name)
        hop_options = [1, 2] if "1-hop or 2-hop" in prompt else [3, 4]
        rng = np.random.default_rng(seed)
        for hops in hop_options * 5:
            steps = sample_template_path(graph, seed, hops, set(nodes_of.get(seed_name, [])), rng)
            if steps:
                path = [graph.names[n] for n in graph.path_nodes(seed, steps)]
                question = write_question(graph, seed, steps) or ""
                if check_question(question, path, path[-1], graph.generic_words):
                    continue  # a careful model does not give the answer away
                return "```json\n" + json.dumps({"path": path, "question": question, "answer": path[-1]}) + "\n```"
        return json.dumps({"path": [seed_name], "question": f"What is {seed_name}?", "answer": seed_name})

    return handler


def _generate(params: Params, url: str, *extra: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    env = cli_env(OMNE_LLM_BASE_URL=f"{url}/v1", OMNE_LLM_MODEL="scripted-model", OPENAI_API_KEY="test-key")
    args = ["omne", "qa", "generate", "--domain", "chemistry", "--generator", "llm", "--limit", "10", *extra]
    if not wait:
        return subprocess.Popen(args, cwd=params.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    return subprocess.run(args, cwd=params.root, env=env, capture_output=True, text=True, timeout=600)


def _handler_for(params: Params):  # noqa: ANN202
    import polars as pl

    graph = RelationGraph(read_kg(kg_dir(params.artifacts_dir, "chemistry")))
    seeds = pl.read_parquet(params.artifacts_dir / "qa" / "seeds" / "chemistry" / "seed_subgraphs.parquet")
    return make_handler(graph, dict(zip(seeds["seed_name"].to_list(), seeds["nodes"].to_list(), strict=True)))


def test_llm_generation_runs_through_the_endpoint_and_reruns_from_cache(project: Params) -> None:
    app = scripted_openai_app(_handler_for(project))
    with serve_in_thread(app) as url:
        first = _generate(project, url)
        assert first.returncode == 0, first.stderr[-3000:]
        sent = app.state.log.total
        assert sent > 0 and "LLM requests" in first.stdout
        pairs_file = project.artifacts_dir / "qa" / "pairs" / "chemistry" / "qa_pairs.jsonl"
        pairs = [json.loads(line) for line in pairs_file.read_text().splitlines()]
        assert pairs and all(p["generator"] == "scripted-model" and p["validation"]["valid"] for p in pairs)
        # --limit 10 seeds per bucket; an isotope with no decay makes no question (its element is in its name)
        assert 0 < sum(p["bucket"] == "1-2" for p in pairs) <= 10
        manifest = json.loads((pairs_file.parent / "manifest.json").read_text())
        usage = manifest["metadata"]["llm_usage"]
        assert usage["requests"] >= len(pairs) * 2 and usage["prompt_tokens"] > 0  # generation + judge
        content = pairs_file.read_bytes()

        again = _generate(project, url, "--force")
        assert again.returncode == 0, again.stderr[-3000:]
        assert app.state.log.total == sent  # every reply came from the disk cache
        assert pairs_file.read_bytes() == content


def test_a_killed_generation_resumes_without_losing_or_repeating_replies(project: Params) -> None:
    pairs_dir = project.artifacts_dir / "qa" / "pairs" / "chemistry"
    shutil.rmtree(project.artifacts_dir / "cache" / "llm", ignore_errors=True)
    quick = scripted_openai_app(_handler_for(project))
    with serve_in_thread(quick) as url:  # the reference: an uninterrupted run
        assert _generate(project, url, "--force").returncode == 0
    reference = (pairs_dir / "qa_pairs.jsonl").read_bytes()
    shutil.rmtree(project.artifacts_dir / "cache" / "llm")
    shutil.rmtree(pairs_dir)

    slow = scripted_openai_app(_handler_for(project), latency_s=0.3)
    with serve_in_thread(slow) as url:
        run = _generate(project, url, wait=False)
        deadline = time.monotonic() + 120
        while slow.state.log.total < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
        assert run.returncode == -signal.SIGKILL
        before_kill = dict(slow.state.log.received)
        assert not (pairs_dir / "qa_pairs.jsonl").exists()  # nothing half-written
        resumed = _generate(project, url)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (pairs_dir / "qa_pairs.jsonl").read_bytes() == reference
    # every conversation was sent as often as in the uninterrupted run, except the ones in flight at
    # the kill (at most `concurrency`), which were sent once more: nothing lost, nothing paid twice
    expected = quick.state.log.received
    extra = {key: n - expected[key] for key, n in slow.state.log.received.items() if n != expected[key]}
    assert set(slow.state.log.received) == set(expected)
    assert all(n == 1 for n in extra.values()), extra
    assert len(extra) <= load_params(project.root / "params.yaml").llm.concurrency
    assert all(key in before_kill for key in extra)
