"""Answer matching (docs/evaluation.md, "Metrics"): the Omne-R1 paper's EM, SQuAD-normalised EM, a prediction
split into an answer set, answer-set F1 and Hit@1.

Apart from the per-question scores of :mod:`pipelines.eval.metrics` because training matches answers the same way
(SFT data, RL rewards, the keep rule, validation) on single answers, with no trajectories or reports.
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

Resolver = Callable[[str], str | None]

__all__ = ["Resolver", "answer_set", "exact_match", "hit_at_1", "normalise_answer", "normalised_em", "set_f1"]

_PUNCT = re.compile(r"[^\w\s]|_")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPACES = re.compile(r"\s+")
# a list separator: newline, ";", "|", a comma that is not inside a number ("1,000"), or " and "
_SEPARATORS = re.compile(r"(\n|;|\||(?<!\d),|,(?!\d)|\s+and\s+)")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_QUOTES = "\"'`“”‘’«»"
_MAX_SPAN = 6  # pieces a resolver may glue back together into one entity ("Paris, Texas")


def exact_match(prediction: str | None, golds: Sequence[str]) -> bool:
    """The Omne-R1 paper's EM: the prediction equals a gold answer after whitespace strip (nothing else)."""
    if prediction is None:
        return False
    pred = prediction.strip()
    return any(pred == gold.strip() for gold in golds)


def normalise_answer(text: str | None) -> str:
    """SQuAD-style normal form (NFKC, case-folded, punctuation and articles dropped, spaces collapsed).

    Forgives surface differences that say nothing about correctness ("The Eiffel Tower." vs
    "eiffel tower"), so normalised EM and set F1 measure the answer, not its typography.
    """
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _ARTICLES.sub(" ", _PUNCT.sub("", text))
    return _SPACES.sub(" ", text).strip()


def normalised_em(prediction: str | None, golds: Sequence[str]) -> bool:
    """EM after :func:`normalise_answer` on both sides (an empty normal form never matches)."""
    pred = normalise_answer(prediction)
    return bool(pred) and any(pred == normalise_answer(gold) for gold in golds)


def _clean_item(item: str) -> str:
    item = _LIST_MARKER.sub("", item.strip())
    return item.strip().strip(_QUOTES).strip()


def _list_items(text: str) -> list[str] | None:
    """Items of a JSON (or Python-literal) list answer like ``["a", "b"]``; None when it is not one."""
    if not (text.startswith("[") and text.endswith("]")):
        return None
    for loader in (json.loads, ast.literal_eval):
        try:
            value = loader(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list | tuple):
            out: list[str] = []
            stack = list(reversed(value))
            while stack:  # flatten nested lists, keep order
                item = stack.pop()
                if isinstance(item, list | tuple):
                    stack.extend(reversed(item))
                elif item is not None and str(item).strip():
                    out.append(str(item))
            return out
    return None


def _segment(text: str, resolve: Resolver | None) -> list[str]:
    """Split ``text`` at list separators, but keep together the longest run of pieces that the
    resolver recognises as one entity (so "Paris, Texas" stays whole when it is a KG entity)."""
    parts = _SEPARATORS.split(text)
    pieces, seps = parts[0::2], parts[1::2]
    atoms: list[str] = []
    i = 0
    while i < len(pieces):
        taken = False
        if resolve is not None:
            last = min(len(pieces) - 1, i + _MAX_SPAN - 1)
            for j in range(last, i, -1):  # longest span first
                if any(s == "\n" for s in seps[i:j]):
                    continue  # an entity never spans lines
                span = pieces[i] + "".join(seps[k] + pieces[k + 1] for k in range(i, j))
                span = _clean_item(span)
                if span and resolve(span) is not None:
                    atoms.append(span)
                    i, taken = j + 1, True
                    break
        if not taken:
            atoms.append(pieces[i])
            i += 1
    return atoms


def answer_set(prediction: str | None, resolve: Resolver | None = None) -> list[str]:
    """The prediction as an ordered, de-duplicated list of normalised answers (first = top answer).

    Accepts a JSON/Python list, or answers separated by newlines, ";", "|", "," or " and ". With a
    resolver (name -> canonical KG entity name, or None) the whole string and then the longest runs
    of pieces are tried as entity names first, so an entity whose name holds a comma is not split;
    resolved items become their canonical entity, the rest stay normalised text.
    """
    if prediction is None or not prediction.strip():
        return []
    text = prediction.strip()
    items = _list_items(text)
    if items is None:
        whole = _clean_item(text)
        if resolve is not None and whole and resolve(whole) is not None:
            items = [whole]
        else:
            items = _segment(text, resolve)
    out: list[str] = []
    seen: set[str] = set()
    for item in items:
        item = _clean_item(item)
        if not item:
            continue
        canonical = resolve(item) if resolve is not None else None
        value = normalise_answer(canonical if canonical is not None else item)
        if value and value not in seen:
            seen.add(value)
            out.append(value)
    return out


def _norm_set(items: Iterable[str]) -> set[str]:
    return {n for n in (normalise_answer(i) for i in items) if n}


def set_f1(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Answer-set F1 over normalised sets: rewards partial credit on multi-answer questions."""
    pred, ref = _norm_set(predicted), _norm_set(gold)
    if not pred or not ref:
        return 0.0
    tp = len(pred & ref)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(pred), tp / len(ref)
    return 2 * precision * recall / (precision + recall)


def hit_at_1(predicted: Sequence[str], gold: Sequence[str]) -> bool:
    """Whether the model's first answer is a gold answer (order matters, the rest is ignored)."""
    if not predicted:
        return False
    first = normalise_answer(predicted[0])
    return bool(first) and first in _norm_set(gold)
