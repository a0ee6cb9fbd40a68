"""Rule checks of a generated QA pair, run before any LLM judge (and alone for the template generator).

The Omne-R1 paper's rule: the path is connected in the KG and contains the answer. Our stricter
default (``qa.strict_path``) also wants the path to start at the seed and end at the answer. The
question must name the start entity and none of the other path entities. Each failure comes back
as feedback text, which is what the retry prompt shows the generator.
"""

from __future__ import annotations

from pydantic import BaseModel

from pipelines.qa.models import Bucket
from pipelines.qa.names import leaked_names, mentions
from pipelines.qa.paths import RelationGraph, Step

HOP_RANGES: dict[str, tuple[int, int]] = {"1-2": (1, 2), "3+": (3, 10_000)}


class RuleVerdict(BaseModel):
    path_valid: bool
    question_valid: bool
    feedback: list[str]
    node_ids: list[int] = []
    steps: list[tuple[int, bool]] = []  # (relation, forward) along the path when it is valid

    @property
    def valid(self) -> bool:
        return self.path_valid and self.question_valid


def resolve_steps(graph: RelationGraph, node_ids: list[int], preferred: list[str] | None = None) -> list[Step] | None:
    """One relation per consecutive pair (the one whose keywords the generator named, if any)."""
    steps = []
    for i, (a, b) in enumerate(zip(node_ids, node_ids[1:], strict=False)):
        options = graph.steps_between(a, b)
        if not options:
            return None
        wanted = preferred[i].casefold() if preferred and i < len(preferred) else None
        chosen = next((s for s in options if wanted and graph.keywords[s.relation].casefold() == wanted), options[0])
        steps.append(chosen)
    return steps


def check_path(graph: RelationGraph, path: list[str], answer: str, seed: int, bucket: Bucket, *,
               strict: bool, max_hops: int) -> tuple[list[int], list[str]]:
    """Entity ids of the path and the problems found (empty when the path is valid)."""
    problems: list[str] = []
    if len(path) < 2:
        return [], ["the path must list at least two entities, start ... answer"]
    ids = [graph.entity_id(name) for name in path]
    missing = [name for name, i in zip(path, ids, strict=True) if i is None]
    if missing:
        return [], [f"path entities not in the knowledge graph: {', '.join(repr(m) for m in missing)}"]
    node_ids = [int(i) for i in ids if i is not None]
    if len(set(node_ids)) != len(node_ids):
        problems.append("the path visits an entity twice")
    for a, b in zip(node_ids, node_ids[1:], strict=False):
        if not graph.steps_between(a, b):
            problems.append(f"no relation between {graph.names[a]!r} and {graph.names[b]!r}")
    answer_id = graph.entity_id(answer)
    if answer_id is None or answer_id not in node_ids:
        problems.append(f"the answer {answer!r} is not an entity on the path")
    if strict:
        if node_ids[0] != seed:
            problems.append(f"the path must start at {graph.names[seed]!r}")
        if answer_id is not None and node_ids[-1] != answer_id:
            problems.append("the answer must be the last entity of the path")
    low, high = HOP_RANGES[bucket]
    hops = len(node_ids) - 1
    if not low <= hops <= min(high, max_hops):
        problems.append(f"the path has {hops} hop(s); this question needs {low}-{min(high, max_hops)}")
    return node_ids, problems


def check_question(question: str, path: list[str], answer: str) -> list[str]:
    problems: list[str] = []
    if not question.strip():
        return ["the question is empty"]
    if path and not mentions(question, path[0]):
        problems.append(f"the question must name the start entity {path[0]!r}")
    leaked = leaked_names(question, path, answer)
    if leaked:
        problems.append(f"the question names other path entities: {', '.join(repr(n) for n in leaked)}")
    if question.count("?") > 1:
        problems.append("write one comprehensive question, not several sub-questions")
    return problems


def check_pair(graph: RelationGraph, path: list[str], question: str, answer: str, seed: int, bucket: Bucket, *,
               strict: bool, max_hops: int, relations: list[str] | None = None) -> RuleVerdict:
    node_ids, path_problems = check_path(graph, path, answer, seed, bucket, strict=strict, max_hops=max_hops)
    question_problems = check_question(question, path, answer)
    steps = resolve_steps(graph, node_ids, relations) if not path_problems else None
    return RuleVerdict(path_valid=not path_problems and steps is not None,
                       question_valid=not question_problems,
                       feedback=path_problems + question_problems, node_ids=node_ids,
                       steps=[(s.relation, s.forward) for s in steps or []])
