"""The QA quality report (`omne qa report`, pipelines/qa/report.py) on the three embedded domains: its figures
against an independent recount on the built dataset, the guess rule, the samples, the CLI and report.html."""

from __future__ import annotations

import json
import re
import subprocess

import polars as pl
import pytest

from pipelines.config import Params
from pipelines.qa.build import build_gold_paths, build_qa_dataset
from pipelines.qa.report import ALL_HOPS, domain_quality, guessable_flags, qa_quality_report
from tests.conftest import EMBEDDED_DOMAINS, cli_env, embedded_domains_project

DOMAINS = EMBEDDED_DOMAINS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """A project with the three embedded domains and their QA dataset (60 + 60 questions per domain at most)."""
    params = embedded_domains_project(tmp_path_factory.mktemp("qareport") / "project", per_bucket=60)
    for domain in DOMAINS:
        build_gold_paths(domain, params, progress=False)
    build_qa_dataset(params, list(DOMAINS))
    return params


def _table(params: Params) -> pl.DataFrame:
    return pl.read_parquet(params.artifacts_dir / "qa" / "dataset" / "qa.parquet")


def _named(question: str, name: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", question, re.IGNORECASE) is not None


def test_report_figures_match_a_recount_of_the_dataset(built: Params) -> None:
    report = qa_quality_report(built, samples=10)
    table = _table(built).with_columns(words=pl.col("question").str.count_matches(r"\S+"))
    assert [d.domain for d in report.domains] == list(DOMAINS) and report.questions == table.height
    recount = table.group_by("domain", "hops").agg(n=pl.len(), max_words=pl.col("words").max())
    expected = {(r["domain"], str(r["hops"])): (r["n"], r["max_words"]) for r in recount.iter_rows(named=True)}
    rows = {(r.domain, r.hops): r for r in report.rows() if r.hops != ALL_HOPS}
    assert {k: (r.questions, r.words_max) for k, r in rows.items()} == expected
    for domain in report.domains:
        mine = table.filter(pl.col("domain") == domain.domain)
        overall = domain.overall
        assert overall.hops == ALL_HOPS and overall.questions == mine.height
        assert overall.words_max == mine["words"].max() and overall.words_median == mine["words"].median()
        assert sum(r.questions for r in domain.rows[:-1]) == mine.height
        assert sorted(int(r.hops) for r in domain.rows[:-1]) == sorted(mine["hops"].unique().to_list())
        assert 0 <= overall.guessable <= overall.questions
    # the template writer leaks nothing, and no hidden name is named whole (the simplest recount of a leak)
    assert all(r.leaks == 0 and r.form_problems == 0 for r in report.rows())
    for row in table.iter_rows(named=True):
        assert not any(_named(row["question"], n) for n in {*row["path"][1:], row["answer"]} - {row["path"][0]})
    assert max(r.words_max for r in report.rows()) <= built.qa.max_question_words


def test_samples_are_the_buckets_own_questions_the_same_every_time(built: Params) -> None:
    report = qa_quality_report(built, samples=10)
    table = _table(built)
    by_id = {r["id"]: r for r in table.iter_rows(named=True)}
    for domain in report.domains:
        assert set(domain.samples) == {"1-2", "3+"}
        for bucket, samples in domain.samples.items():
            available = table.filter((pl.col("domain") == domain.domain) & (pl.col("bucket") == bucket)).height
            assert len(samples) == min(10, available) and len({s.id for s in samples}) == len(samples)
            for sample in samples:
                row = by_id[sample.id]
                assert (row["domain"], row["bucket"], row["question"], row["answer"], row["hops"]) == \
                    (domain.domain, bucket, sample.question, sample.answer, sample.hops)
    assert qa_quality_report(built, samples=10) == report  # deterministic
    other = qa_quality_report(built.model_copy(update={"qa": built.qa.model_copy(update={"random_seed": 7})}),
                              samples=10)
    assert [s.id for d in other.domains for s in d.samples["3+"]] != \
        [s.id for d in report.domains for s in d.samples["3+"]]
    only = qa_quality_report(built, ["geography"], samples=3)
    assert [d.domain for d in only.domains] == ["geography"]
    assert all(len(s) == 3 for s in only.domains[0].samples.values())


def test_guess_is_the_majority_answer_of_the_other_questions_of_the_group() -> None:
    answers = ["f-block", "f-block", "F-block", "d-block", "Iron", "Lead", "Tin", "Zinc"]
    groups = ["block", "block", "block", "block", "el", "el", "solo", "pair"]
    # three f-block answers: each one's others still hold two f-block against one d-block; the d-block one
    # is guessed wrong; "el" has two different answers (each other's guess is wrong); a lone question has no guess
    assert guessable_flags(answers, groups) == [True, True, True, False, False, False, False, False]
    assert guessable_flags(["A", "B", "A", "B"], ["g"] * 4) == [False] * 4  # one of each left: a tie, no guess
    assert guessable_flags(["A", "A"], ["g", "g"]) == [True, True]


def test_a_leak_a_nested_clause_and_a_long_question_are_counted() -> None:
    def row(question: str, hops: int = 2) -> dict:
        path = ["Lima", "Peru", "Sol"][: hops + 1]
        return {"id": question, "question": question, "answer": path[-1], "path": path, "hops": hops,
                "bucket": "1-2", "split": "test",
                "path_edges": [{"src": a, "keywords": "k", "dst": b} for a, b in zip(path, path[1:], strict=False)]}

    rows = [row("Which currency does the country whose capital is Lima use?"),
            row("Which currency does Peru, whose capital is Lima, use?"),  # names the bridge
            row("Which currency does the country that has the city that is Lima use?"),  # a clause in a clause
            row("Which currency " + "really " * 40 + "does the country of Lima use?")]
    quality = domain_quality("toy", rows, generic=frozenset(), asked={}, max_words=45, samples=2, seed=0)
    overall = quality.overall
    assert overall.questions == 4 and overall.leaks == 1 and overall.depth_max == 2 and overall.depth_ge2 == 1
    assert overall.form_problems == 2 and overall.guessable == 4 and overall.words_max == len(rows[3]["question"].split())
    assert len(quality.samples["1-2"]) == 2 and quality.samples["3+"] == []


def test_cli_report_json_and_table(built: Params) -> None:
    def omne(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["omne", "qa", "report", *args], cwd=built.root, env=cli_env(), capture_output=True,
                              text=True, timeout=600)

    listed = omne("--json", "--samples", "2", "--domain", "chemistry")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data == qa_quality_report(built, ["chemistry"], samples=2).model_dump(mode="json")
    assert [d["domain"] for d in data["domains"]] == ["chemistry"] and data["samples_per_bucket"] == 2
    printed = omne("--samples", "1")
    assert printed.returncode == 0, printed.stderr
    assert "omne QA quality" in printed.stdout and "guessable" in printed.stdout
    assert all(domain in printed.stdout for domain in DOMAINS)
    missing = omne("--domain", "nowhere")
    assert missing.returncode == 2 and "'nowhere': not in the QA dataset" in missing.stderr


def test_eval_report_html_shows_the_quality_table(built: Params, tmp_path) -> None:  # noqa: ANN001
    from pipelines.eval.report import write_report
    from tests.test_eval_report import metrics, trajectories

    quality = qa_quality_report(built, samples=0)
    folder = write_report(tmp_path / "run", metrics(), trajectories(), gold_paths=None, inputs={}, params={},
                          qa_quality=quality)
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert 'data-testid="quality-table"' in page and page.count('data-testid="quality-row"') == len(quality.rows())
    plain = write_report(tmp_path / "plain", metrics(), trajectories(), gold_paths=None, inputs={}, params={})
    assert 'data-testid="questions"' not in (plain / "report.html").read_text(encoding="utf-8")
