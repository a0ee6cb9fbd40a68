"""The quality gate of a KG build: the KG checks (pipelines.kg.checks, the same functions and thresholds as
Dagster's asset checks) sorted into errors and warnings.

A failed blocking check is an error, a failed non-blocking one a warning that ``strict`` turns into an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipelines.config import Params
from pipelines.errors import KGSourceError
from pipelines.kg.checks import CheckOutcome, failed_checks, outcome_summary, run_kg_checks, self_retrieval_outcome
from pipelines.kg.store import read_kg
from pipelines.layout import kg_dir


class QualityError(KGSourceError):
    """A built KG failed a blocking check, or a warning under ``strict``."""


class Quality(BaseModel):
    """Failed checks of one build, as the lines the CLI prints."""

    warnings: list[str] = []
    errors: list[str] = []


def _sort(outcomes: list[CheckOutcome], strict: bool, *, blocking_is_error: bool = True) -> Quality:
    quality = Quality()
    for outcome in failed_checks(outcomes):
        fatal = strict or (blocking_is_error and outcome.spec.blocking)
        (quality.errors if fatal else quality.warnings).append(outcome_summary(outcome))
    return quality


def kg_quality(params: Params, domain: str, *, strict: bool = False, folder: Path | None = None) -> Quality:
    """Run the KG checks (KG_CHECKS, thresholds from params ``checks``, as Dagster's asset checks) on a built KG
    (``folder``: a staged build of it).

    A failed blocking check is an error (Dagster stops downstream work on it too); the others are
    warnings, errors under ``strict``.
    """
    return _sort(run_kg_checks(read_kg(folder or kg_dir(params.artifacts_dir, domain)), params.checks), strict)


def index_quality(params: Params, index_metadata: dict[str, Any], *, strict: bool = False) -> Quality:
    """The index's self-retrieval, as measured by its build: a warning (recall depends on the names, not
    on a defect of the import), an error under ``strict``."""
    if "self_retrieval" not in index_metadata:
        return Quality()
    return _sort([self_retrieval_outcome(index_metadata["self_retrieval"], params.index)], strict,
                 blocking_is_error=False)


def quality_error(name: str, quality: Quality, strict: bool) -> QualityError:
    why = " (--strict makes warnings errors)" if strict else ""
    return QualityError(f"domain {name!r}: the KG failed {len(quality.errors)} check(s){why}: "
                        + "; ".join(quality.errors))
