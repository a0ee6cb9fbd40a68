"""How a question mentions entity names: the rule behind "the start entity is named, the others hidden"
and behind de-duplication of questions that differ only in case, spacing or punctuation."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
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


# Function words: never a distinctive part of a name, and a name made only of them ("The", "Of the") cannot be
# named meaningfully in a question.
STOPWORDS = frozenset("""a an the this that these those it its of in on at to by for with from and or nor but not
is are was were be been being as into onto than then there here which who whom whose what when where why how
all any both each few more most other some such no only own same so too very can will just do does did has have
had i me my we our you your he him his she her they them their""".split())
_TOKEN = re.compile(r"[^\W_]+")


def find_name(text: str, name: str) -> list[tuple[int, int]] | None:
    """Spans of every whole mention of ``name`` in ``text`` (None for an empty name)."""
    if not name.strip():
        return None
    return [m.span() for m in _name_pattern(name).finditer(text)]


def tokens(text: str) -> list[str]:
    """The words of ``text`` as the leak rules compare them: NFKC, casefolded, split at anything not a letter
    or digit ("Berkelium-235" -> berkelium, 235), plurals reduced to the singular."""
    return [singular(t) for t in _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())]


def singular(word: str) -> str:
    """A crude singular, enough to match "isotopes" with "isotope" and "countries" with "country"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def usable_name(name: str) -> bool:
    """Whether an entity can be named in a question: not only function words ("The", "It"), not one or two
    characters, not a bare number. Entities that fail are never start, bridge or answer of a question."""
    words = tokens(name)
    if len(name.strip()) <= 2 or not words:
        return False
    if all(w.isdigit() for w in words):
        return False
    return not all(w in STOPWORDS for w in words)


def generic_words(names: list[str], extra: Iterable[str] = (), *, min_share: float = 0.01,
                  min_count: int = 10) -> frozenset[str]:
    """Words that say nothing about which entity is meant: function words, ``extra`` (type nouns and the
    words of the domain's relation phrases, which the writer puts into any question) and words found in at
    least ``min_share`` of the entity names ("disease" in a classification of diseases)."""
    counts: Counter[str] = Counter()
    for name in names:
        counts.update(set(tokens(name)))
    floor = max(min_count, min_share * len(names))
    frequent = {w for w, c in counts.items() if c >= floor}
    return frozenset(STOPWORDS | frequent | {w for text in extra for w in tokens(text)})


def distinctive(word: str, generic: frozenset[str]) -> bool:
    return len(word) >= 3 and not word.isdigit() and word not in STOPWORDS and word not in generic


def _contains(sequence: list[str], part: list[str]) -> bool:
    n = len(part)
    return n > 0 and any(sequence[i:i + n] == part for i in range(len(sequence) - n + 1))


def leaked_names(question: str, path: list[str], answer: str, generic: frozenset[str] = frozenset()) -> list[str]:
    """Path entities other than the start that the question gives away (the answer included): must be empty.

    A hidden name leaks when the question holds it whole, its words in a row, or one of its distinctive
    words (not function words nor ``generic``), case-insensitive, singular or plural, anywhere: inside the
    start's own name too ("Berkelium-235 is an isotope of which element?" gives "Berkelium" away), so such
    a start cannot make that question.
    """
    start = path[0] if path else ""
    hidden = [n for n in dict.fromkeys([*path[1:], answer]) if n and n.casefold() != start.casefold()]
    words = tokens(question)
    present = set(words)
    leaked = []
    for name in hidden:
        parts = tokens(name)
        if mentions(question, name) or _contains(words, parts) or \
                any(distinctive(p, generic) and p in present for p in parts):
            leaked.append(name)
    return leaked


def written_name(name: str, texts: Iterable[str] = ()) -> str:
    """``name`` as a person writes it in a question. A name in upper case (LightRAG's entity ids: "BUILDINGS
    DEPARTMENT") takes the casing of its first mention in ``texts`` (the descriptions LightRAG wrote it from) that
    is not in upper case; without one, each word is capitalised ("Buildings Department", "Radium-213"), function
    words after the first in lower case, and words of up to three letters kept as they are ("BS 8500", "UK").
    Any other name is kept as it is."""
    if not any(ch.isupper() for ch in name) or any(ch.islower() for ch in name):
        return name
    for text in texts:
        for start, end in find_name(text, name) or []:
            mention = text[start:end]
            if any(ch.islower() for ch in mention):
                return mention
    words = []
    for index, word in enumerate(name.split(" ")):
        letters = sum(ch.isalpha() for ch in word)
        if index and word.lower() in STOPWORDS:  # "OF" -> "of"
            words.append(word.lower())
        elif not index and word.lower() in {"the", "an"}:  # a leading article: "The" ("IT" stays an acronym)
            words.append(word[:1] + word[1:].lower())
        elif letters <= 3:
            words.append(word)
        else:
            words.append(re.sub(r"[^\W\d_]+", lambda m: m.group(0)[:1] + m.group(0)[1:].lower(), word))
    return " ".join(words)
