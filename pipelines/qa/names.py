"""How a question mentions entity names: the rule behind "the start entity is named, the others hidden"
and behind de-duplication of questions that differ only in case, spacing or punctuation."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_PUNCT = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    """NFKC, casefold, punctuation dropped, whitespace collapsed: the form two questions are compared in."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _SPACES.sub(" ", _PUNCT.sub(" ", text)).strip()


@lru_cache(maxsize=65536)
def _name_pattern(name: str) -> re.Pattern[str]:
    # a name counts only as a whole: "Actinium" is not mentioned by "Actinium-205"
    return re.compile(r"(?<![\w-])" + re.escape(name.strip()) + r"(?![\w-])", re.IGNORECASE)


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` contains ``name`` as a whole name (case-insensitive, not inside a longer name)."""
    return bool(name.strip()) and _name_pattern(name).search(text) is not None


def leaked_names(question: str, path: list[str], answer: str) -> list[str]:
    """Path entities other than the start that the question names (the answer included): must be empty.

    A hidden name inside the start's own name counts too ("Southern Asia ... which continent?"
    gives "Asia" away), so such questions are rejected rather than excused.
    """
    start = path[0] if path else ""
    hidden = [n for n in dict.fromkeys([*path[1:], answer]) if n and n.casefold() != start.casefold()]
    return [n for n in hidden if mentions(question, n)]
