"""Data-quality checks of the QA table (artifacts/qa/dataset/qa.parquet), before it can feed training.

The column rules run as a Great Expectations 1.x suite (dagster-ge supports only GE < 1, so GE is
called directly); the rules GE cannot express on its own (path/bucket consistency, name leaks) are
computed in polars as boolean columns that the suite expects to be all True. Split leakage is plain
polars. Both return ``CheckOutcome`` objects whose metadata names the offending ids, so a failed
check says which records to fix, not only that something is wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from pipelines.config import NameRules
from pipelines.kg.checks import CheckOutcome, CheckSpec
from pipelines.qa.models import QAPair
from pipelines.qa.validate import form_problems, leaks, names_start
from pipelines.text.names import normalise_text

if TYPE_CHECKING:  # GE costs ~3 s to import: only the functions that validate load it
    from great_expectations import ExpectationSuite

QA_TABLE_CHECKS: dict[str, CheckSpec] = {spec.name: spec for spec in [
    CheckSpec(name="qa_table_expectations", description="the QA table passes the Great Expectations suite: "
              "required fields present, unique ids and questions, hops within 1..qa.max_hops and matching "
              "bucket and path, answer at the end of the path, start named, no other path entity named",
              blocking=True),
    CheckSpec(name="split_leakage", description="no question (normalised text) and no id is in two splits",
              blocking=True),
]}

BUCKETS = ["1-2", "3+"]
SPLITS = ["train", "val", "test"]
EXAMPLES = 5  # offending ids/values reported per failed expectation

_EDGE = pl.Struct({"src": pl.String, "keywords": pl.String, "dst": pl.String})
QA_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.String(), "domain": pl.String(), "question": pl.String(), "answer": pl.String(),
    "answers": pl.List(pl.String), "hops": pl.Int64(), "bucket": pl.String(), "path": pl.List(pl.String),
    "path_edges": pl.List(_EDGE), "start_entity": pl.String(), "qtype": pl.String(), "generator": pl.String(),
    "valid": pl.Boolean(), "reason": pl.String(), "attempts": pl.Int64(), "split": pl.String(),
    "seed": pl.Int64(),
}
_REQUIRED = ["id", "domain", "question", "answer", "answers", "hops", "bucket", "path", "start_entity", "split"]
_NOT_NULL = ["id", "domain", "question", "answer", "path", "bucket", "hops", "split", "start_entity"]

# derived boolean columns, each expected all True; null where an input is null (the not-null
# expectations report those rows, so one defect fails one expectation)
_DERIVED_WHY = {
    "hops_match_bucket": "bucket is '1-2' exactly when hops <= 2",
    "hops_match_path": "hops == len(path) - 1",
    "answer_is_last": "answer == path[-1]",
    "answer_on_path": "answer is on the path after the start",
    "start_is_first": "start_entity == path[0]",
    "start_named": "the question names the start entity",
    "no_leaked_names": "the question gives away no path entity other than the start (the answer included): "
                       "not its name, nor a distinctive word of it (docs/qa.md, \"Leak rules\")",
    "question_readable": "no clause nested in a clause, no word twice in a row, no preposition without an object, "
                         "no keyword list",
    "answer_in_answers": "answer is one of answers",
}

_DERIVED_FROM = {
    "hops_match_bucket": ["hops", "bucket"],
    "hops_match_path": ["hops", "path"],
    "answer_is_last": ["answer", "path"],
    "answer_on_path": ["answer", "path"],
    "start_is_first": ["start_entity", "path"],
    "start_named": ["start_entity", "question"],
    "no_leaked_names": ["question", "path", "answer"],
    "question_readable": ["question", "path"],
    "answer_in_answers": ["answer", "answers"],
}


def qa_table(pairs: list[QAPair]) -> pl.DataFrame:
    """The QA table of ``pairs``, with ``validation`` flattened into valid/reason/attempts.

    The schema is fixed so that an empty list still gives every column with its type, and the
    parquet file has the same schema whichever pairs it holds.
    """
    rows = []
    for pair in pairs:
        row = pair.model_dump(mode="python", exclude={"validation"})
        row.update(valid=pair.validation.valid, reason=pair.validation.reason, attempts=pair.validation.attempts)
        rows.append(row)
    return pl.DataFrame(rows, schema=QA_TABLE_SCHEMA)


def _null_if(inputs: list[str], expr: pl.Expr) -> pl.Expr:
    """``expr`` with nulls read as False, but null where one of ``inputs`` is null (reported elsewhere)."""
    missing = pl.any_horizontal([pl.col(c).is_null() for c in inputs])
    return pl.when(missing).then(pl.lit(None, dtype=pl.Boolean)).otherwise(expr.fill_null(False))


def _norm(column: str) -> pl.Expr:
    return pl.col(column).map_elements(normalise_text, return_dtype=pl.String, skip_nulls=True)


def qa_validation_frame(table: pl.DataFrame, *, strict_path: bool = True,
                        generic_words: Mapping[str, frozenset[str]] | None = None,
                        name_rules: NameRules = "strict") -> pl.DataFrame:
    """The columns the suite checks: scalar fields, normalised text and the derived boolean columns.

    List columns are reduced here (GE's pandas engine hashes unexpected values, which arrays are not).
    """
    answer_rule = (
        _null_if(["answer", "path"], pl.col("path").list.last() == pl.col("answer")).alias("answer_is_last")
        if strict_path else
        _null_if(["answer", "path"], pl.col("path").list.slice(1).list.contains(pl.col("answer")))
        .alias("answer_on_path")
    )
    start_named = pl.struct("question", "start_entity").map_elements(
        lambda r: None if None in r.values() else names_start(r["question"], r["start_entity"], name_rules),
        return_dtype=pl.Boolean)
    generic = generic_words or {}
    no_leak = pl.struct("question", "path", "answer", "domain").map_elements(
        lambda r: None if None in (r["question"], r["path"], r["answer"]) else not leaks(
            r["question"], list(r["path"]), r["answer"], generic.get(r["domain"], frozenset()), name_rules),
        return_dtype=pl.Boolean)
    readable = pl.struct("question", "path").map_elements(
        lambda r: None if None in r.values() else not form_problems(r["question"], list(r["path"])),
        return_dtype=pl.Boolean)
    return table.select(
        "id", "domain", "question", "answer", "hops", "bucket", "split", "start_entity",
        pl.col("path").list.join(" -> ").alias("path"),
        _norm("question").alias("question_norm"),
        _norm("answer").alias("answer_norm"),
        _null_if(["hops", "bucket"], (pl.col("bucket") == "1-2") == (pl.col("hops") <= 2)).alias("hops_match_bucket"),
        _null_if(["hops", "path"], pl.col("hops") == pl.col("path").list.len().cast(pl.Int64) - 1)
        .alias("hops_match_path"),
        answer_rule,
        _null_if(["start_entity", "path"], pl.col("path").list.first() == pl.col("start_entity"))
        .alias("start_is_first"),
        _null_if(["question", "start_entity"], start_named).alias("start_named"),
        _null_if(["question", "path", "answer"], no_leak).alias("no_leaked_names"),
        _null_if(["question", "path"], readable).alias("question_readable"),
        _null_if(["answer"], pl.col("answers").list.contains(pl.col("answer"))).alias("answer_in_answers"),
    )


def qa_expectation_suite(max_hops: int, *, strict_path: bool = True) -> ExpectationSuite:
    """The GE suite of the QA table, on the columns of ``qa_validation_frame``.

    Each expectation's ``meta["check"]`` is the short name reported when it fails.
    """
    import great_expectations as gx
    from great_expectations import expectations as gxe

    suite = gx.ExpectationSuite(name="qa_table")

    def add(kind: type, check: str, why: str, **kwargs: Any) -> None:
        suite.add_expectation(kind(**kwargs, meta={"check": check, "why": why}))

    for column in _NOT_NULL:
        add(gxe.ExpectColumnValuesToNotBeNull, f"{column}_not_null", f"every pair has a {column}", column=column)
    add(gxe.ExpectColumnValuesToBeUnique, "unique_id", "ids identify pairs", column="id")
    add(gxe.ExpectColumnValuesToMatchRegex, "id_format", "ids are 16-hex stable hashes (models.qa_id)",
        column="id", regex=r"^[0-9a-f]{16}$")
    add(gxe.ExpectCompoundColumnsToBeUnique, "unique_question",
        "no two pairs ask the same question for the same answer (case, spacing and punctuation ignored)",
        column_list=["question_norm", "answer_norm"])
    add(gxe.ExpectColumnValuesToBeBetween, "hops_range", f"hops within 1..{max_hops} (qa.max_hops)",
        column="hops", min_value=1, max_value=max_hops)
    add(gxe.ExpectColumnValuesToBeInSet, "bucket_values", "bucket is 1-2 or 3+", column="bucket", value_set=BUCKETS)
    add(gxe.ExpectColumnValuesToBeInSet, "split_values", "split is train, val or test", column="split",
        value_set=SPLITS)
    answer_rule = "answer_is_last" if strict_path else "answer_on_path"
    for column in ["hops_match_bucket", "hops_match_path", answer_rule, "start_is_first", "start_named",
                   "no_leaked_names", "question_readable", "answer_in_answers"]:
        add(gxe.ExpectColumnValuesToBeInSet, column, _DERIVED_WHY[column], column=column, value_set=[True])
    return suite


def _plain(value: Any) -> Any:
    """JSON-safe metadata: GE hands back numpy scalars, tuples and NaN for missing values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _failure(result: Any) -> dict[str, Any]:
    """What a user needs from a failed expectation: which rule, how many rows, which ids and values."""
    config = result.expectation_config
    kwargs = config.kwargs
    columns = kwargs.get("column_list") or [kwargs.get("column")]
    details = result.result or {}
    examples = []
    for row in (details.get("partial_unexpected_index_list") or [])[:EXAMPLES]:
        values = {c: row.get(c) for c in columns if c != "id"}
        example: dict[str, Any] = {"id": row.get("id")}
        if values and not set(values) <= set(_DERIVED_WHY):
            example["value"] = values if len(values) > 1 else next(iter(values.values()))
        examples.append(example)
    failure = {
        "check": (config.meta or {}).get("check", config.type),
        "expectation": config.type,
        "columns": columns,
        "why": (config.meta or {}).get("why", ""),
        "unexpected_count": details.get("unexpected_count"),
        "examples": examples,
    }
    if result.exception_info and result.exception_info.get("raised_exception"):
        failure["error"] = result.exception_info.get("exception_message")
    return _plain(failure)


def _explain(failure: dict[str, Any], table: pl.DataFrame, generic: Mapping[str, frozenset[str]],
             name_rules: NameRules = "strict") -> dict[str, Any]:
    """A derived column's examples are all False: show the fields it was derived from instead."""
    fields = _DERIVED_FROM.get(failure["check"])
    if not fields or not failure["examples"]:
        return failure
    ids = [e["id"] for e in failure["examples"]]
    rows = {r["id"]: r for r in table.filter(pl.col("id").is_in(ids)).select("id", "domain", *fields).to_dicts()}
    for example in failure["examples"]:
        row = rows.get(example["id"])
        if row is None:
            continue
        example["value"] = _plain({f: row[f] for f in fields})
        if failure["check"] == "no_leaked_names" and None not in (row["question"], row["path"], row["answer"]):
            example["leaked"] = leaks(row["question"], row["path"], row["answer"],
                                      generic.get(row["domain"], frozenset()), name_rules)
        if failure["check"] == "question_readable" and None not in (row["question"], row["path"]):
            example["problems"] = form_problems(row["question"], list(row["path"]))
    return failure


def _quiet_context() -> Any:
    """An in-memory GE context: nothing written into the project, no data docs, analytics and progress bars off."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")  # GX 1.x's documented analytics switch
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
                               analytics_enabled=False, progress_bars=ProgressBarsConfig(globally=False))
    return gx.get_context(mode="ephemeral", project_config=config)


def check_table_expectations(table: pl.DataFrame, max_hops: int, *, strict_path: bool = True,
                             generic_words: Mapping[str, frozenset[str]] | None = None,
                             name_rules: NameRules = "strict") -> CheckOutcome:
    """Run the GE suite on ``table``; metadata lists every failed expectation with offending ids."""
    spec = QA_TABLE_CHECKS["qa_table_expectations"]
    missing = [c for c in _REQUIRED if c not in table.columns]
    if missing:
        return CheckOutcome(spec=spec, passed=False, metadata={
            "reason": f"the QA table lacks columns: {', '.join(missing)}", "rows": table.height})
    if table.height == 0:
        return CheckOutcome(spec=spec, passed=False, metadata={
            "reason": "no QA pairs: the QA table is empty", "rows": 0})

    import great_expectations as gx

    frame = qa_validation_frame(table, strict_path=strict_path, generic_words=generic_words,
                                name_rules=name_rules).to_pandas()
    context = _quiet_context()
    batch_definition = (context.data_sources.add_pandas("qa").add_dataframe_asset("qa_table")
                        .add_batch_definition_whole_dataframe("qa_table"))
    suite = context.suites.add(qa_expectation_suite(max_hops, strict_path=strict_path))
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name="qa_table", data=batch_definition, suite=suite))
    result = validation.run(
        batch_parameters={"dataframe": frame},
        result_format={"result_format": "SUMMARY", "unexpected_index_column_names": ["id"],
                       "partial_unexpected_count": EXAMPLES},
    )
    failed = [_explain(_failure(r), table, generic_words or {}, name_rules) for r in result.results if not r.success]
    summary = "; ".join(
        f"{f['check']}: {f['unexpected_count']} unexpected, e.g. {', '.join(str(e['id']) for e in f['examples'])}"
        for f in failed)
    return CheckOutcome(spec=spec, passed=bool(result.success), metadata={
        "rows": table.height,
        "invalid_rows": int((~table["valid"]).sum()) if "valid" in table.columns else 0,
        "statistics": _plain(dict(result.statistics)),
        "failed": failed,
        "summary": summary or "all expectations met",
    })


def split_leakage(table: pl.DataFrame) -> CheckOutcome:
    """No question (normalised text) and no id may sit in two splits: a test question seen in training
    would inflate every metric. Rows without a split are left to the expectations check."""
    spec = QA_TABLE_CHECKS["split_leakage"]
    rows = table.select("id", "question", "split").filter(pl.col("split").is_not_null())
    rows = rows.with_columns(_norm("question").fill_null("").alias("question_norm"))

    def leaks(key: str) -> pl.DataFrame:
        return (rows.group_by(key).agg(pl.col("split").unique().sort().alias("splits"),
                                       pl.col("id").unique().sort().alias("ids"))
                .filter(pl.col("splits").list.len() > 1).sort(key))

    by_question, by_id = leaks("question_norm"), leaks("id")
    return CheckOutcome(spec=spec, passed=by_question.height == 0 and by_id.height == 0, metadata={
        "rows": table.height,
        "questions_in_several_splits": by_question.height,
        "ids_in_several_splits": by_id.height,
        "question_examples": by_question.head(EXAMPLES).rename({"question_norm": "question"}).to_dicts(),
        "id_examples": by_id.head(EXAMPLES).select("id", "splits").to_dicts(),
    })


def validate_qa_table(table: pl.DataFrame, max_hops: int, *, strict_path: bool = True,
                      generic_words: Mapping[str, frozenset[str]] | None = None,
                      name_rules: NameRules = "strict") -> list[CheckOutcome]:
    """Every check of ``QA_TABLE_CHECKS`` on the QA table, in declaration order (``name_rules``: qa.name_rules)."""
    return [check_table_expectations(table, max_hops, strict_path=strict_path, generic_words=generic_words,
                                     name_rules=name_rules),
            split_leakage(table)]
