"""The QA table's data-quality checks: a good table passes, each kind of defect fails and names its id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from pipelines.kg.checks import CheckOutcome
from pipelines.qa.expectations import (
    QA_TABLE_CHECKS,
    QA_TABLE_SCHEMA,
    check_table_expectations,
    qa_expectation_suite,
    qa_table,
    split_leakage,
    validate_qa_table,
)
from pipelines.qa.models import PathEdge, QAPair, Validation, bucket_of, qa_id

MAX_HOPS = 4


def pair(question: str, path: list[str], keywords: list[str], split: str, *, answer: str | None = None,
         qtype: str = "chain", domain: str = "geography") -> QAPair:
    answer = path[-1] if answer is None else answer
    hops = len(path) - 1
    return QAPair(
        id=qa_id(domain, question, answer), domain=domain, question=question, answer=answer, answers=[answer],
        hops=hops, bucket=bucket_of(hops), path=path,
        path_edges=[PathEdge(src=s, keywords=k, dst=d) for s, k, d in zip(path[:-1], keywords, path[1:], strict=True)],
        start_entity=path[0], qtype=qtype, generator="template",
        validation=Validation(valid=True, reason="", attempts=1), split=split, seed=7,
    )


GOOD = [
    pair("What is the capital of France?", ["France", "Paris"], ["capital"], "train", qtype="lookup"),
    pair("Which currency is used in Germany?", ["Germany", "Euro"], ["currency"], "train", qtype="lookup"),
    pair("Lima is the capital of a country; on which continent does that country lie?",
         ["Lima", "Peru", "South America"], ["capital of", "continent"], "train"),
    pair("Which river flows through the capital of Hungary?", ["Hungary", "Budapest", "Danube"],
         ["capital", "river"], "val"),
    pair("What is the official language of the country whose capital is Canberra?",
         ["Canberra", "Australia", "English"], ["capital of", "official language"], "test"),
    pair("In which region lies the capital of the country that contains Kyoto?",
         ["Kyoto", "Japan", "Tokyo", "Kantō"], ["located in", "capital", "region"], "train"),
    pair("Mount Kilimanjaro stands in a country; which currency does its northern neighbour use?",
         ["Mount Kilimanjaro", "Tanzania", "Kenya", "Kenyan shilling"], ["located in", "borders", "currency"],
         "test"),
    pair("Rio de Janeiro lies in a country whose official language came from another country; "
         "what is that other country's capital?",
         ["Rio de Janeiro", "Brazil", "Portuguese", "Portugal", "Lisbon"],
         ["located in", "official language", "language of", "capital"], "train"),
]


def ids_of(outcome: CheckOutcome, check: str) -> list[str]:
    """Offending ids the metadata names for one failed expectation (fails if it did not fail)."""
    failed = {f["check"]: f for f in outcome.metadata["failed"]}
    assert check in failed, f"{check} did not fail: {outcome.metadata['summary']}"
    assert failed[check]["unexpected_count"] >= 1
    return [e["id"] for e in failed[check]["examples"]]


def failed_checks(outcome: CheckOutcome) -> set[str]:
    return {f["check"] for f in outcome.metadata["failed"]}


def set_cell(table: pl.DataFrame, row_id: str, column: str, value: Any) -> pl.DataFrame:
    dtype = table.schema[column]
    return table.with_columns(pl.when(pl.col("id") == row_id).then(pl.lit(value, dtype=dtype))
                              .otherwise(pl.col(column)).alias(column))


@pytest.fixture(scope="module")
def good() -> pl.DataFrame:
    return qa_table(GOOD)


def test_qa_table_flattens_validation_with_fixed_schema(good: pl.DataFrame) -> None:
    assert good.schema == pl.Schema(QA_TABLE_SCHEMA)
    assert good.height == len(GOOD)
    assert good["valid"].all() and good["attempts"].to_list() == [1] * len(GOOD)
    assert "validation" not in good.columns
    assert good.row(0, named=True)["path_edges"] == [{"src": "France", "keywords": "capital", "dst": "Paris"}]
    assert qa_table([]).schema == good.schema


def test_good_table_passes_every_check(good: pl.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # GE must not write a project (gx/, data docs) anywhere
    outcomes = validate_qa_table(good, MAX_HOPS)
    assert [o.spec.name for o in outcomes] == list(QA_TABLE_CHECKS)
    assert all(o.spec.blocking for o in outcomes)
    expectations, leakage = outcomes
    assert expectations.passed, expectations.metadata["summary"]
    assert expectations.metadata["rows"] == len(GOOD)
    stats = expectations.metadata["statistics"]
    assert stats["unsuccessful_expectations"] == 0 and stats["evaluated_expectations"] >= 18
    assert expectations.metadata["failed"] == []
    assert leakage.passed and leakage.metadata["questions_in_several_splits"] == 0
    assert list(tmp_path.iterdir()) == []


def test_suite_follows_max_hops_and_strict_path() -> None:
    strict = qa_expectation_suite(3)
    checks = {e.meta["check"] for e in strict.expectations}
    assert {"id_not_null", "unique_id", "unique_question", "hops_range", "bucket_values", "split_values",
            "hops_match_bucket", "hops_match_path", "answer_is_last", "start_is_first", "start_named",
            "no_leaked_names", "answer_in_answers"} <= checks
    hops = next(e for e in strict.expectations if e.meta["check"] == "hops_range")
    assert (hops.min_value, hops.max_value) == (1, 3)
    loose = {e.meta["check"] for e in qa_expectation_suite(3, strict_path=False).expectations}
    assert "answer_on_path" in loose and "answer_is_last" not in loose


def test_empty_table_fails_with_clear_reason() -> None:
    outcome = check_table_expectations(qa_table([]), MAX_HOPS)
    assert not outcome.passed and "no QA pairs" in outcome.metadata["reason"]


def test_duplicate_id(good: pl.DataFrame) -> None:
    first, second = good["id"][0], good["id"][1]
    outcome = check_table_expectations(set_cell(good, second, "id", first), MAX_HOPS)
    assert not outcome.passed
    assert first in ids_of(outcome, "unique_id")


def test_duplicate_question_differing_in_case_and_punctuation(good: pl.DataFrame) -> None:
    again = pair("what is the capital of FRANCE", ["France", "Paris"], ["capital"], "train", qtype="lookup")
    assert again.id != GOOD[0].id
    outcome = check_table_expectations(qa_table([*GOOD, again]), MAX_HOPS)
    assert not outcome.passed and failed_checks(outcome) == {"unique_question"}
    assert {again.id, GOOD[0].id} <= set(ids_of(outcome, "unique_question"))


def test_hops_outside_bucket(good: pl.DataFrame) -> None:
    one_hop = GOOD[0].id
    outcome = check_table_expectations(set_cell(good, one_hop, "bucket", "3+"), MAX_HOPS)
    assert not outcome.passed and failed_checks(outcome) == {"hops_match_bucket"}
    assert ids_of(outcome, "hops_match_bucket") == [one_hop]
    assert outcome.metadata["failed"][0]["examples"][0]["value"] == {"hops": 1, "bucket": "3+"}


def test_hops_above_max_hops(good: pl.DataFrame) -> None:
    four_hops = GOOD[-1].id
    outcome = check_table_expectations(good, max_hops=3)
    failed = {f["check"]: f for f in outcome.metadata["failed"]}
    assert set(failed) == {"hops_range"}
    assert failed["hops_range"]["examples"] == [{"id": four_hops, "value": 4}]


def test_answer_not_last_on_path_fails_only_when_strict() -> None:
    mid = pair("Lima is the capital of which country?", ["Lima", "Peru", "South America"],
               ["capital of", "continent"], "train", answer="Peru")
    table = qa_table([*GOOD, mid])
    outcome = check_table_expectations(table, MAX_HOPS)
    assert not outcome.passed and failed_checks(outcome) == {"answer_is_last"}
    assert ids_of(outcome, "answer_is_last") == [mid.id]
    assert check_table_expectations(table, MAX_HOPS, strict_path=False).passed


def test_answer_off_path_fails_when_not_strict() -> None:
    off = pair("Lima is the capital of which country?", ["Lima", "Peru", "South America"],
               ["capital of", "continent"], "train", answer="Chile")
    outcome = check_table_expectations(qa_table([*GOOD, off]), MAX_HOPS, strict_path=False)
    assert ids_of(outcome, "answer_on_path") == [off.id]


def test_leaked_bridge_name() -> None:
    leak = pair("In which region lies Tokyo, the capital of the country that contains Osaka?",
                ["Osaka", "Japan", "Tokyo", "Kantō"], ["located in", "capital", "region"], "train")
    outcome = check_table_expectations(qa_table([*GOOD, leak]), MAX_HOPS)
    assert not outcome.passed and failed_checks(outcome) == {"no_leaked_names"}
    assert ids_of(outcome, "no_leaked_names") == [leak.id]
    (example,) = outcome.metadata["failed"][0]["examples"]
    assert example["leaked"] == ["Tokyo"]


def test_start_not_named() -> None:
    unnamed = pair("What is the capital of the French Republic?", ["France", "Paris"], ["capital"], "val")
    outcome = check_table_expectations(qa_table([*GOOD, unnamed]), MAX_HOPS)
    assert not outcome.passed and failed_checks(outcome) == {"start_named"}
    assert ids_of(outcome, "start_named") == [unnamed.id]


def test_null_question(good: pl.DataFrame) -> None:
    row = GOOD[3].id
    outcome = check_table_expectations(set_cell(good, row, "question", None), MAX_HOPS)
    assert not outcome.passed and failed_checks(outcome) == {"question_not_null"}
    assert ids_of(outcome, "question_not_null") == [row]


def test_bad_split_value(good: pl.DataFrame) -> None:
    row = GOOD[2].id
    outcome = check_table_expectations(set_cell(good, row, "split", "dev"), MAX_HOPS)
    failed = {f["check"]: f for f in outcome.metadata["failed"]}
    assert not outcome.passed and set(failed) == {"split_values"}
    assert failed["split_values"]["examples"] == [{"id": row, "value": "dev"}]
    assert "split_values: 1 unexpected" in outcome.metadata["summary"]


def test_same_question_in_train_and_test() -> None:
    again = pair("What is the capital of France", ["France", "Paris"], ["capital"], "test", qtype="lookup")
    outcome = split_leakage(qa_table([*GOOD, again]))
    assert not outcome.passed and outcome.metadata["questions_in_several_splits"] == 1
    (example,) = outcome.metadata["question_examples"]
    assert example["splits"] == ["test", "train"]
    assert set(example["ids"]) == {GOOD[0].id, again.id}
    assert outcome.metadata["ids_in_several_splits"] == 0


def test_same_id_in_two_splits(good: pl.DataFrame) -> None:
    moved = good.head(1).with_columns(split=pl.lit("val"))
    outcome = split_leakage(pl.concat([good, moved]))
    assert not outcome.passed and outcome.metadata["ids_in_several_splits"] == 1
    assert outcome.metadata["id_examples"] == [{"id": GOOD[0].id, "splits": ["train", "val"]}]
