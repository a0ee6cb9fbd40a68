"""Two evaluation reports compared question by question (docs/evaluation.md, "Comparing two runs").

Two runs on the same questions are paired data: what tells them apart is the questions one run gets right and
the other wrong (the discordant ones). McNemar's exact test asks whether those split evenly between the runs,
as they would if both were equally accurate: a two-sided binomial test with p = 1/2 on the discordant questions
(scipy, :func:`pipelines.eval.stats.mcnemar_exact`). That is far sharper than comparing two EMs' intervals.

The unit is the question (``qa_id`` in predictions.jsonl), scored as the report scores it: right when any of its
samples is right (eval.samples > 1, the N-run union); with eval.repeats only the first repeat's episodes count,
as in metrics.json. Questions that only one report answered are left out and counted.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from pipelines.errors import ArtifactMissingError, OmneError
from pipelines.eval.report import PREDICTIONS_FILE
from pipelines.eval.schema import BUCKETS
from pipelines.eval.stats import mcnemar_exact

ALPHA = 0.05
TEST = "exact McNemar (two-sided binomial test on the questions only one run got right)"


class ComparisonError(OmneError, ValueError):
    """Two reports that cannot be compared: unreadable predictions, or no question in common."""


class PairedScores(BaseModel):
    """One group of shared questions: how the two runs' answers agree, their EMs and McNemar's exact p-value."""

    n: int  # shared questions in the group
    both: int  # right in both runs
    only_a: int  # right in A only
    only_b: int  # right in B only
    neither: int  # wrong in both
    em_a: float
    em_b: float
    p_value: float  # exact McNemar, two-sided (1.0 without discordant questions)


class Comparison(BaseModel):
    run_a: str
    run_b: str
    folder_a: str
    folder_b: str
    test: str = TEST
    alpha: float = ALPHA
    shared: int  # questions both reports answered
    only_in_a: int  # questions only report A answered (left out)
    only_in_b: int
    samples_a: int = 1  # the most samples a question has in the report (the union of which scores it)
    samples_b: int = 1
    overall: PairedScores
    by_bucket: dict[str, PairedScores]
    verdict: str


def report_folder(target: str | Path, reports: Path | None = None) -> Path:
    """A report's folder: ``target`` itself when it is a folder, else ``reports/target`` (a report name)."""
    path = Path(target)
    if path.is_dir():
        return path
    if reports is not None and (reports / str(target)).is_dir():
        return reports / str(target)
    where = f" nor {reports / str(target)}" if reports is not None else ""
    raise ArtifactMissingError(f"{target}: no such evaluation report (not a folder{where}); name one under "
                               "artifacts/reports/ or give its path (`omne eval --name NAME` writes one)")


def compare_reports(folder_a: Path, folder_b: Path, alpha: float = ALPHA) -> Comparison:
    """Pair two reports' questions, count the four outcomes overall and per bucket, and run McNemar's exact test."""
    a, samples_a, run_a = _questions(folder_a)
    b, samples_b, run_b = _questions(folder_b)
    shared = [qa for qa in a if qa in b]
    if not shared:
        raise ComparisonError(f"{folder_a} and {folder_b} share no question (no qa_id in common in their "
                              f"{PREDICTIONS_FILE}): evaluate both on the same split and sample")
    overall = _paired([(a[qa][0], b[qa][0]) for qa in shared])
    buckets: dict[str, list[tuple[bool, bool]]] = {}
    for qa in shared:
        bucket = a[qa][1] or b[qa][1]
        if bucket is not None:
            buckets.setdefault(bucket, []).append((a[qa][0], b[qa][0]))
    order = [k for k in BUCKETS if k in buckets] + sorted(k for k in buckets if k not in BUCKETS)
    return Comparison(
        run_a=run_a, run_b=run_b, folder_a=str(folder_a), folder_b=str(folder_b), alpha=alpha,
        shared=len(shared), only_in_a=len(a) - len(shared), only_in_b=sum(1 for qa in b if qa not in a),
        samples_a=samples_a, samples_b=samples_b, overall=overall,
        by_bucket={k: _paired(buckets[k]) for k in order}, verdict=verdict(overall, alpha, run_a, run_b),
    )


def verdict(scores: PairedScores, alpha: float = ALPHA, run_a: str = "", run_b: str = "") -> str:
    """One line: which run is better at level ``alpha``, or that the shared questions cannot tell them apart."""
    if scores.p_value < alpha and scores.only_a != scores.only_b:
        better, name = ("A", run_a) if scores.only_a > scores.only_b else ("B", run_b)
        label = f"{better} ({name})" if name else better
        return (f"{label} better (p={scores.p_value:.3g}, exact McNemar on {scores.n} shared questions: "
                f"{scores.only_a} right in A only, {scores.only_b} in B only)")
    return (f"no significant difference at {alpha:g} on {scores.n} shared questions (p={scores.p_value:.3g}, "
            f"exact McNemar: {scores.only_a} right in A only, {scores.only_b} in B only)")


def _paired(pairs: list[tuple[bool, bool]]) -> PairedScores:
    both = sum(1 for x, y in pairs if x and y)
    only_a = sum(1 for x, y in pairs if x and not y)
    only_b = sum(1 for x, y in pairs if y and not x)
    n = len(pairs)
    return PairedScores(n=n, both=both, only_a=only_a, only_b=only_b, neither=n - both - only_a - only_b,
                        em_a=(both + only_a) / n, em_b=(both + only_b) / n, p_value=mcnemar_exact(only_a, only_b))


def _questions(folder: Path) -> tuple[dict[str, tuple[bool, str | None]], int, str]:
    """qa_id -> (right, bucket) of a report, its most samples per question, and its run name (the folder's)."""
    path = folder / PREDICTIONS_FILE
    if not path.is_file():
        raise ArtifactMissingError(f"{folder}: not an evaluation report (no {PREDICTIONS_FILE}); "
                                   "`omne eval --name NAME` writes artifacts/reports/NAME/")
    seen: set[tuple[str, int]] = set()
    out: dict[str, tuple[bool, str | None]] = {}
    samples: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                qa, sample = str(record["qa_id"]), int(record.get("sample") or 0)
            except (ValueError, KeyError, TypeError) as exc:
                raise ComparisonError(f"{path}:{number}: not a prediction record ({exc})") from exc
            if (qa, sample) in seen:  # a later repeat (eval.repeats): metrics.json scores the first one
                continue
            seen.add((qa, sample))
            right, bucket = out.get(qa, (False, record.get("bucket")))
            out[qa] = (right or record.get("correct") is True, bucket)
            samples[qa] = samples.get(qa, 0) + 1
    if not out:
        raise ComparisonError(f"{path}: no predictions (an evaluation of no question)")
    return out, max(samples.values()), folder.name
