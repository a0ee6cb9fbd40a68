"""Graph names an agent must read from its prompt, not memorise (issue "Breadth for transfer").

A model trained only on conversations that say ``Knowledge graph: chemistry`` learns the word "chemistry",
not that the name after ``Knowledge graph:`` is the one to pass as ``graph_type``: given a graph it never
saw by name, it calls the graphs it knows or invents one. A share of the SFT template conversations
(``sft_data.renamed_graph_share``) therefore shows its domain under an alias — a slug like the ones users
give their imported graphs (``site_notes``, ``argon_7``) — in the prompt, the thinking and every call,
while the tools answer from the real domain. The alias words come from the training pairs' own entity
names, so they change with the data and carry no hint of the domain they stand for.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from pipelines.domains import SLUG_PATTERN

_WORD = re.compile(r"[A-Za-z]{4,10}")


def alias_words(names: Iterable[str]) -> list[str]:
    """Lower-case ASCII words of 4-10 letters found in ``names`` (entity names), sorted and unique."""
    return sorted({w.lower() for name in names for w in _WORD.findall(name)})


def graph_alias(rng: random.Random, words: list[str], taken: Iterable[str]) -> str:
    """A slug ``[a-z0-9_]+`` of one or two of ``words`` (sometimes with a number) that is not in ``taken``.

    Raises ValueError when ``words`` is empty: without words there is no alias to draw."""
    if not words:
        raise ValueError("no words to draw a graph alias from (the training pairs name no entities)")
    blocked = set(taken)
    for _ in range(100):
        parts = rng.sample(words, k=min(len(words), rng.choice((1, 2, 2))))
        if rng.random() < 0.25:
            parts.append(str(rng.randint(1, 99)))
        alias = "_".join(parts)
        if alias not in blocked and SLUG_PATTERN.fullmatch(alias):
            return alias
    raise ValueError(f"could not draw a graph alias outside {sorted(blocked)} from {len(words)} words")
