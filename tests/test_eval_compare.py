"""`omne eval compare`: two reports paired question by question, McNemar's exact test and the verdict, on real
report folders (written by `evaluate` with scripted policies on the solar split, or by `write_report`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pipelines.agent.trajectory import Trajectory
from pipelines.config import Params
from pipelines.errors import ArtifactMissingError
from pipelines.eval.compare import ComparisonError, compare_reports, report_folder
from pipelines.eval.metrics import evaluate_trajectories
from pipelines.eval.report import read_metrics, write_report
from pipelines.eval.runner import SplitSource, evaluate, load_split
from pipelines.eval.stats import mcnemar_exact
from pipelines.llm.base import ChatRequest
from pipelines.llm.scripted import ScriptedChatClient
from tests.conftest import cli_env


def omne(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["omne", *args], cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=300)


def answers_right_on(params: Params, right: set[str]):  # noqa: ANN201
    """A policy that answers at once: the gold answer for the questions in ``right``, a wrong one for the others."""
    pairs = {p.question: p for split in ("train", "val", "test") for p in load_split(params, split)}

    def reply(request: ChatRequest) -> str:
        pair = pairs[re.search(r"^Question: (.*)$", request.messages[1]["content"], re.M).group(1)]
        return f"<think>I know this.</think><answer>{pair.answer if pair.id in right else 'Pluto'}</answer>"

    return reply


@pytest.fixture(scope="module")
def two_runs(solar_qa: Params) -> tuple[Params, list[str]]:
    """Reports "all-right" (every train question right) and "first-right" (only the first, by id) of the split."""
    ids = sorted(p.id for p in load_split(solar_qa, "train"))
    for name, right in (("all-right", set(ids)), ("first-right", {ids[0]})):
        evaluate(solar_qa, "base", SplitSource.load(solar_qa, "train", 50),
                 client=ScriptedChatClient(answers_right_on(solar_qa, right), model=name), progress=False, name=name)
    return solar_qa, ids


def test_compare_two_evaluated_runs(two_runs: tuple[Params, list[str]]) -> None:
    params, ids = two_runs
    reports = params.artifacts_dir / "reports"
    n = len(ids)
    assert n >= 2
    c = compare_reports(reports / "all-right", reports / "first-right")
    assert (c.run_a, c.run_b, c.shared, c.only_in_a, c.only_in_b) == ("all-right", "first-right", n, 0, 0)
    o = c.overall
    assert (o.n, o.both, o.only_a, o.only_b, o.neither) == (n, 1, n - 1, 0, 0)
    assert (o.em_a, o.em_b) == (1.0, pytest.approx(1 / n))
    assert o.em_a == read_metrics(reports / "all-right").overall.em  # the report's own EM on the same questions
    assert o.p_value == pytest.approx(2 * 0.5 ** (n - 1))  # all n-1 discordant questions went A's way
    assert c.verdict.startswith(f"no significant difference at 0.05 on {n} shared questions")
    assert list(c.by_bucket) == ["1-2"] and c.by_bucket["1-2"] == o  # the solar train split is all 1-2 hop
    swapped = compare_reports(reports / "first-right", reports / "all-right")
    assert (swapped.overall.only_a, swapped.overall.only_b, swapped.overall.p_value) == (0, n - 1, o.p_value)
    itself = compare_reports(reports / "all-right", reports / "all-right")
    assert (itself.overall.both, itself.overall.p_value) == (n, 1.0)


def test_omne_eval_compare_cli(two_runs: tuple[Params, list[str]]) -> None:
    params, ids = two_runs
    n = len(ids)
    shown = omne(params.root, "eval", "compare", "all-right", "first-right")
    assert shown.returncode == 0, shown.stderr
    assert "omne eval compare: A = all-right, B = first-right" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if line.startswith("│ all"))
    assert [c.strip() for c in row.split("│")[1:-1]] == ["all", str(n), "1", str(n - 1), "0", "0", "1.000",
                                                          f"{1 / n:.3f}", f"{2 * 0.5 ** (n - 1):.3g}"]
    assert any(line.startswith("│ bucket 1-2") for line in shown.stdout.splitlines())
    assert f"no significant difference at 0.05 on {n} shared questions" in shown.stdout

    # --json, and report folders given as paths (from anywhere: no params.yaml needed then)
    folder = params.artifacts_dir / "reports"
    as_json = omne(Path("/"), "eval", "compare", "--json", str(folder / "first-right"), str(folder / "all-right"))
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["overall"] | {"p_value": 0} == {"n": n, "both": 1, "only_a": 0, "only_b": n - 1, "neither": 0,
                                                "em_a": pytest.approx(1 / n), "em_b": 1.0, "p_value": 0}
    assert data["test"].startswith("exact McNemar") and "1-2" in data["by_bucket"]

    missing = omne(params.root, "eval", "compare", "all-right", "no-such-run")
    assert missing.returncode == 2 and "no-such-run: no such evaluation report" in missing.stderr
    assert "Traceback" not in missing.stderr
    misplaced = omne(params.root, "eval", "--limit", "3", "compare", "all-right", "first-right")
    assert misplaced.returncode == 2 and "--limit: options of the evaluation itself" in misplaced.stderr
    helped = omne(params.root, "eval", "--help")
    assert helped.returncode == 0 and "--model" in helped.stdout and "compare" in helped.stdout
    assert "McNemar" in omne(params.root, "eval", "compare", "--help").stdout


def _report(root: Path, name: str, right: dict[str, set[int]], *, questions: int = 12, prefix: str = "q") -> Path:
    """A report of ``questions`` questions (the first half 1-2 hop, the rest 3+) written by write_report, as the
    runner writes one; ``right`` maps "s<sample>" (or "r1": a second repeat of sample 0) to the question numbers
    answered right. Like the runner, metrics.json scores the first repeat and predictions.jsonl holds them all."""
    first: list[Trajectory] = []
    later: list[Trajectory] = []
    for key, numbers in right.items():
        sample = int(key[1:]) if key.startswith("s") else 0
        for i in range(questions):
            bucket = "1-2" if i < questions // 2 else "3+"
            (later if key.startswith("r") else first).append(Trajectory(
                qa_id=f"{prefix}{i}", domain="solar", question=f"Question {i}?", gold_answers=["Sun"], bucket=bucket,
                hops=2 if bucket == "1-2" else 3, protocol="omne", messages=[],
                answer="Sun" if i in numbers else "Moon", sample=sample))
    metrics = evaluate_trajectories(first, run=name, model="m", protocol="omne", split="test", wall_time_s=1.0)
    for t in later:
        t.correct = t.answer == "Sun"
    return write_report(root / name, metrics, first + later, gold_paths=None, inputs={}, params={})


def test_a_significant_difference_overall_and_per_bucket(tmp_path: Path) -> None:
    strong = _report(tmp_path, "strong", {"s0": set(range(10))})  # 10 of 12 right
    weak = _report(tmp_path, "weak", {"s0": {0, 1}})  # 2 of 12, both also right in "strong"
    c = compare_reports(strong, weak)
    o = c.overall
    assert (o.n, o.both, o.only_a, o.only_b, o.neither) == (12, 2, 8, 0, 2)
    assert (o.em_a, o.em_b) == (pytest.approx(10 / 12), pytest.approx(2 / 12))
    assert o.p_value == pytest.approx(2 / 2 ** 8) == mcnemar_exact(8, 0)  # 0.0078
    assert c.verdict.startswith("A (strong) better (p=0.00781, exact McNemar on 12 shared questions: 8 right "
                                 "in A only, 0 in B only)")
    assert list(c.by_bucket) == ["1-2", "3+"]
    one_two, three = c.by_bucket["1-2"], c.by_bucket["3+"]
    assert (one_two.both, one_two.only_a, one_two.only_b, one_two.neither) == (2, 4, 0, 0)
    assert (three.both, three.only_a, three.only_b, three.neither) == (0, 4, 0, 2)
    assert one_two.p_value == three.p_value == pytest.approx(0.125)
    assert compare_reports(weak, strong).verdict.startswith("B (strong) better (p=0.00781")
    # a stricter level turns the same counts into no significant difference
    assert compare_reports(strong, weak, alpha=0.005).verdict.startswith(
        "no significant difference at 0.005 on 12 shared questions")


def test_mcnemar_exact_known_values() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == mcnemar_exact(0, 5) == pytest.approx(0.0625)
    assert mcnemar_exact(1, 5) == pytest.approx(0.21875)  # 2 * (1 + 5) / 64
    assert mcnemar_exact(3, 3) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_samples_count_as_the_report_scores_them(tmp_path: Path) -> None:
    """A question is right when any of its samples is (the N-run union); a later repeat does not change it."""
    union = _report(tmp_path, "union", {"s0": {0, 1}, "s1": {2, 3}})  # questions 0-3 right, each by one sample
    repeated = _report(tmp_path, "repeated", {"s0": {0, 1}, "r1": set(range(12))})  # repeat 2 all right: ignored
    c = compare_reports(union, repeated)
    assert (c.samples_a, c.samples_b) == (2, 1)
    assert (c.overall.both, c.overall.only_a, c.overall.only_b, c.overall.neither) == (2, 2, 0, 8)
    assert c.overall.em_a == read_metrics(union).overall.em == pytest.approx(4 / 12)
    assert c.overall.em_b == read_metrics(repeated).overall.em == pytest.approx(2 / 12)


def test_only_shared_questions_are_compared_and_none_shared_is_an_error(tmp_path: Path) -> None:
    base = _report(tmp_path, "base", {"s0": set(range(6))})
    fewer = _report(tmp_path, "fewer", {"s0": {0}}, questions=8)  # q0-q7: q0-q3 are 1-2 hop here, q4-q7 3+
    c = compare_reports(base, fewer)
    assert (c.shared, c.only_in_a, c.only_in_b) == (8, 4, 0)
    assert (c.overall.both, c.overall.only_a) == (1, 5)
    other = _report(tmp_path, "other", {"s0": {0}}, prefix="x")
    with pytest.raises(ComparisonError, match=r"base and .*other share no question"):
        compare_reports(base, other)


def test_a_missing_report_is_named(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    base = _report(reports, "base", {"s0": {0}})
    assert report_folder("base", reports) == base and report_folder(str(base)) == base
    with pytest.raises(ArtifactMissingError, match=r"nope: no such evaluation report .*reports/nope"):
        report_folder("nope", reports)
    empty = reports / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactMissingError, match=r"reports/empty: not an evaluation report \(no predictions.jsonl"):
        compare_reports(base, empty)
    (empty / "predictions.jsonl").write_text('{"qa_id": "q0", "correct": true}\nnot json\n', encoding="utf-8")
    with pytest.raises(ComparisonError, match=r"predictions.jsonl:2: not a prediction record"):
        compare_reports(base, empty)
