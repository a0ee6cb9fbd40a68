"""The two statistics evaluation reports lean on (docs/evaluation.md, "Metrics" and "Comparing two runs"), both
from scipy: the Wilson score interval of an accuracy, and McNemar's exact test of two runs on the same questions."""

from __future__ import annotations

CONFIDENCE = 0.95  # of the intervals beside EM


def wilson_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of ``correct`` successes in ``n`` trials; (0, 1) when ``n`` is 0 (nothing known).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0/n or n/n (0 of 12 right
    still leaves up to ~0.24 plausible), which is what small evaluation samples need.
    """
    if n <= 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # scipy is slow to import: only when an interval is asked for

    if not 0 <= correct <= n:
        raise ValueError(f"{correct} correct out of {n} is not a proportion")
    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided p-value of McNemar's exact test: the discordant pairs (right in one run only) are
    binomial(only_a + only_b, 1/2) when the two runs are equally accurate; 1.0 without discordant pairs."""
    if only_a < 0 or only_b < 0:
        raise ValueError("discordant counts cannot be negative")
    if only_a + only_b == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(only_a, only_a + only_b, 0.5, alternative="two-sided").pvalue)
