"""`qa.paraphrase: llm` against a scripted OpenAI-compatible server on 127.0.0.1 (the real client and its disk
cache): a good rewrite replaces the template question, one that gives the answer away, one that is not JSON and
one that changes nothing keep it; the pairs record it, the manifest counts it, a rerun is served from the cache,
and the paraphrased pairs go through gold paths, the dataset and its checks."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from pipelines.config import Params, load_params
from pipelines.llm.scripted import scripted_openai_app, serve_in_thread
from pipelines.qa.build import (
    build_gold_paths,
    build_qa_dataset,
    build_qa_pairs,
    read_generic_words,
    read_qa_dataset,
    read_qa_pairs,
    relation_graph,
)
from pipelines.qa.checks import check_pairs_pass_rules
from pipelines.qa.expectations import validate_qa_table
from pipelines.qa.models import QAPair, qa_id
from pipelines.qa.paraphrase import PARAPHRASES_FILE
from pipelines.qa.prompts import PARAPHRASE_SYSTEM
from tests.conftest import chemistry_project, cli_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Params:
    return chemistry_project(tmp_path_factory.mktemp("paraphrase") / "project")


def _with_paraphrase(params: Params, value: str) -> Params:
    path = params.root / "params.yaml"
    text = path.read_text()
    path.write_text(re.sub(r"(?m)^  paraphrase: \w+", f"  paraphrase: {value}", text))
    return load_params(path)


def test_paraphrase_accepts_good_rewrites_keeps_the_rest_and_reruns_from_cache(
        project: Params, monkeypatch: pytest.MonkeyPatch) -> None:
    template = build_qa_pairs("chemistry", project, limit=4, progress=False)
    pairs_file = template.folder / "qa_pairs.jsonl"
    template_bytes = pairs_file.read_bytes()
    assert "paraphrase" not in template.manifest.params and b"template_question" not in template_bytes
    originals = read_qa_pairs("chemistry", project)
    assert len(originals) == 8
    by_question = {p.question: p for p in originals}
    leak, not_json, same = originals[0], originals[5], originals[2]

    def handler(body: dict) -> str:
        assert body["messages"][0]["content"] == PARAPHRASE_SYSTEM and body["response_format"]["type"] == "json_object"
        question = re.search(r"^Question: (.*)$", body["messages"][1]["content"], re.M).group(1)
        pair = by_question[question]
        if pair is leak:  # names the answer: the rules reject it
            return json.dumps({"question": f"{question[:-1]}, perhaps {pair.answer}?"})
        if pair is not_json:  # also after the repair turn
            return "Sure! A more natural question would be: " + question
        if pair is same:
            return json.dumps({"question": question})
        return "```json\n" + json.dumps({"question": f"Quick question: {question}"}) + "\n```"

    monkeypatch.setenv("OMNE_LLM_MODEL", "scripted-model")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    params = _with_paraphrase(project, "llm")
    app = scripted_openai_app(handler)
    with serve_in_thread(app) as url:
        monkeypatch.setenv("OMNE_LLM_BASE_URL", f"{url}/v1")
        result = build_qa_pairs("chemistry", params, limit=4, progress=False)
        assert not result.skipped and result.manifest.params["paraphrase"]["backend"] == "openai"
        sent = app.state.log.total
        assert sent == len(originals) + params.llm.json_repair_rounds  # one request each, the repair turn
        prompt = next(b["messages"][1]["content"] for b in app.state.log.bodies  # requests run concurrently
                      if f"Question: {originals[0].question}\n" in b["messages"][1]["content"])
        assert f'Name "{originals[0].start_entity}" exactly' in prompt and f'stays "{originals[0].answer}"' in prompt
        assert f"at most {params.qa.max_question_words} words" in prompt and '{"question": "..."}' in prompt

        pairs = read_qa_pairs("chemistry", params)
        assert [p.template_question or p.question for p in pairs] == [p.question for p in originals]
        for pair, original in zip(pairs, originals, strict=True):
            if original in (leak, not_json, same):
                assert pair == original  # the template kept, untouched
                continue
            assert pair.question == f"Quick question: {original.question}"
            assert pair.template_question == original.question and pair.id == qa_id("chemistry", pair.question,
                                                                                    pair.answer)
            assert pair.validation.reason == "rule checks passed; paraphrased by scripted-model"
            assert (pair.path, pair.answer, pair.path_edges) == (original.path, original.answer, original.path_edges)
        meta = result.manifest.metadata["paraphrase"]
        assert meta == {"model": "scripted-model", "paraphrased": 5, "kept": 3,
                        "kept_why": {"no_reply": 1, "unchanged": 1, "rules": 1}}
        outcomes = {o["id"]: o for o in map(json.loads, (result.folder / PARAPHRASES_FILE).read_text().splitlines())}
        assert len(outcomes) == 8 and outcomes[leak.id]["kept"] == "rules"
        assert "gives away other path entities" in outcomes[leak.id]["detail"]
        assert outcomes[not_json.id]["kept"] == "no_reply" and outcomes[not_json.id]["proposed"] == ""
        assert check_pairs_pass_rules(relation_graph("chemistry", params), pairs, params).passed
        paraphrased = pairs_file.read_bytes()

        again = build_qa_pairs("chemistry", params, limit=4, force=True, progress=False)
        # every reply from the disk cache but not_json's two, which failed the JSON check and were not kept
        not_kept = 1 + params.llm.json_repair_rounds
        assert app.state.log.total == sent + not_kept
        assert pairs_file.read_bytes() == paraphrased and again.manifest.metadata["paraphrase"] == meta
        assert again.manifest.metadata["llm_usage"]["cached"] == sent - not_kept
        shown = subprocess.run(["omne", "qa", "generate", "--domain", "chemistry", "--limit", "4"], cwd=params.root,
                               env=cli_env(), capture_output=True, text=True, timeout=600)
        assert shown.returncode == 0, shown.stderr
        assert "up to date" in shown.stdout and "5 paraphrased by scripted-model (3 kept)" in shown.stdout

    # the paraphrased pairs go through gold paths, the dataset and its checks like any others
    build_gold_paths("chemistry", params, progress=False)
    build_qa_dataset(params, ["chemistry"])
    table = read_qa_dataset(params)
    assert table.filter(table["reason"].str.ends_with("paraphrased by scripted-model")).height == 5
    outcomes_ok = validate_qa_table(table, params.qa.max_hops, strict_path=params.qa.strict_path,
                                    generic_words=read_generic_words(params))
    assert all(o.passed for o in outcomes_ok), [o for o in outcomes_ok if not o.passed]

    # off again: the template questions, byte for byte, under the fingerprint they always had
    off = build_qa_pairs("chemistry", _with_paraphrase(project, "none"), limit=4, progress=False)
    assert not off.skipped and pairs_file.read_bytes() == template_bytes
    assert off.manifest.params == template.manifest.params and "paraphrase" not in off.manifest.metadata
    assert not (off.folder / PARAPHRASES_FILE).exists()


def test_old_pair_records_read_without_the_new_field() -> None:
    record = {"id": "x", "domain": "d", "question": "Q?", "answer": "A", "answers": ["A"], "hops": 1, "bucket": "1-2",
              "path": ["S", "A"], "path_edges": [{"src": "S", "keywords": "k", "dst": "A"}], "start_entity": "S",
              "qtype": "one_hop", "generator": "template", "validation": {"valid": True}, "split": None, "seed": 1}
    pair = QAPair.model_validate(record)
    assert pair.template_question is None and "template_question" not in json.loads(pair.model_dump_json())
    rewritten = pair.model_copy(update={"template_question": "T?"})
    assert QAPair.model_validate_json(rewritten.model_dump_json()).template_question == "T?"
