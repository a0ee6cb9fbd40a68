"""QA generation for one domain: the template generator (offline) and the LLM generator with rule
checks, an LLM judge and the paper's retry rounds. Both return validated ``QAPair`` records and the
attempts behind them, so a reader can see why questions were rejected.

The LLM generator works in rounds over all pending seeds at once: one concurrent batch of
generation requests, rule checks, one batch of judge requests, and a retry round for the rest. A seed
that fails its last retry is replaced by the bucket's next unused seed, until the bucket is full or the
seeds run out (then ``GenerationResult.short`` says so). Every request goes through the client's disk
cache, so an interrupted run resumes for free.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel
from tqdm.auto import tqdm

from pipelines.config import LLMParams, QAParams
from pipelines.llm.base import ChatClient, ChatRequest
from pipelines.llm.structured import complete_json_many
from pipelines.qa import prompts
from pipelines.qa.models import Attempt, Bucket, QAPair, SeedSubgraph, Validation, bucket_of, qa_id
from pipelines.qa.paths import RelationGraph, Step
from pipelines.qa.template import sample_template_path, write_question
from pipelines.qa.validate import check_pair
from pipelines.text.names import normalise_text

log = logging.getLogger(__name__)
BUCKETS: tuple[Bucket, ...] = ("1-2", "3+")


class SeedAttempts(BaseModel):
    """Every round one seed went through for one bucket (kept in attempts.jsonl for auditing)."""

    domain: str
    seed: int
    seed_name: str
    bucket: Bucket
    accepted: bool
    attempts: list[Attempt]


class GenerationResult(BaseModel):
    pairs: list[QAPair]
    attempts: list[SeedAttempts]
    short: dict[Bucket, str] = {}  # buckets left below their target because the seeds ran out, and by how much

    def stats(self) -> dict[str, Any]:
        tried = len(self.attempts)
        return {
            "pairs": len(self.pairs),
            "pairs_1_2": sum(p.bucket == "1-2" for p in self.pairs),
            "pairs_3_plus": sum(p.bucket == "3+" for p in self.pairs),
            "seeds_tried": tried,
            "acceptance_rate": round(sum(a.accepted for a in self.attempts) / tried, 4) if tried else 0.0,
            "mean_attempts": round(sum(len(a.attempts) for a in self.attempts) / tried, 3) if tried else 0.0,
            **({"short": self.short} if self.short else {}),
        }


def shortfalls(domain: str, pairs: list[QAPair], targets: dict[Bucket, int], seeds: int) -> dict[Bucket, str]:
    """Each bucket that ended below its target, said plainly (and logged): the seeds ran out first."""
    short: dict[Bucket, str] = {}
    for bucket in BUCKETS:
        made = sum(p.bucket == bucket for p in pairs)
        if made < targets[bucket]:
            short[bucket] = (f"{made} of {targets[bucket]} pairs: every one of the {seeds} seeds was tried "
                             "(raise qa.seeds_per_domain for more)")
            log.warning("%s %s: %s", domain, bucket, short[bucket])
    return short


def hop_choices(bucket: Bucket, max_hops: int) -> list[int]:
    return [1, 2] if bucket == "1-2" else list(range(3, max_hops + 1))


def domain_rng(domain: str, random_seed: int) -> np.random.Generator:
    salt = int(hashlib.sha256(domain.encode()).hexdigest()[:8], 16)
    return np.random.default_rng([random_seed, salt])


class _Dedupe:
    """Questions already accepted in this domain (normalised question + answer)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def add(self, question: str, answer: str) -> bool:
        key = (normalise_text(question), normalise_text(answer))
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def make_pair(graph: RelationGraph, domain: str, seed: int, start: int, steps: list[Step], question: str,
              generator: str, attempts: int, reason: str, judge: str = "") -> QAPair:
    nodes = graph.path_nodes(start, steps)
    path = [graph.names[n] for n in nodes]
    answer = path[-1]
    hops = len(steps)
    return QAPair(
        id=qa_id(domain, question, answer), domain=domain, question=question, answer=answer, answers=[answer],
        hops=hops, bucket=bucket_of(hops), path=path, path_edges=graph.path_edges(steps), start_entity=path[0],
        qtype="one_hop" if hops == 1 else "chain" if generator == "template" else "multi_hop",
        generator=generator, validation=Validation(valid=True, reason=reason, attempts=attempts, judge=judge),
        seed=seed,
    )


def _seed_order(subgraphs: list[SeedSubgraph], passes: int) -> Iterator[tuple[int, SeedSubgraph]]:
    for round_index in range(passes):
        for subgraph in subgraphs:
            yield round_index, subgraph


def generate_template_pairs(graph: RelationGraph, subgraphs: list[SeedSubgraph], qa: QAParams, domain: str,
                            targets: dict[Bucket, int]) -> GenerationResult:
    """Deterministic template questions until each bucket's target is met or the seeds run out."""
    rng = domain_rng(domain, qa.random_seed)
    dedupe, pairs, records = _Dedupe(), [], []
    for bucket in BUCKETS:
        choices = hop_choices(bucket, qa.max_hops)
        made = 0
        progress = tqdm(total=targets[bucket], desc=f"{domain} {bucket} template", unit="q", leave=False)
        for index, (round_index, sub) in enumerate(_seed_order(subgraphs, len(choices))):
            if made >= targets[bucket]:
                break
            hops = choices[(index + round_index) % len(choices)]
            allowed, tries, accepted = set(sub.nodes), [], False
            for _ in range(qa.max_retries + 1):
                steps = sample_template_path(graph, sub.seed, hops, allowed, rng)
                if steps is None:
                    tries.append(Attempt(feedback=f"no {hops}-hop path with a unique answer inside the subgraph"))
                    break
                question = write_question(graph, sub.seed, steps) or ""
                path = [graph.names[n] for n in graph.path_nodes(sub.seed, steps)]
                verdict = check_pair(graph, path, question, path[-1], sub.seed, bucket, strict=qa.strict_path,
                                     max_hops=qa.max_hops, max_words=qa.max_question_words, name_rules=qa.name_rules)
                feedback = "; ".join(verdict.feedback)
                if verdict.valid and not dedupe.add(question, path[-1]):
                    verdict.question_valid, feedback = False, "duplicate of an accepted question"
                tries.append(Attempt(path=path, question=question, answer=path[-1], path_valid=verdict.path_valid,
                                     feedback=feedback))
                if verdict.valid:
                    pairs.append(make_pair(graph, domain, sub.seed, sub.seed, steps, question, "template",
                                           len(tries), "rule checks passed"))
                    made += 1
                    accepted = True
                    progress.update()
                    break
            records.append(SeedAttempts(domain=domain, seed=sub.seed, seed_name=sub.seed_name, bucket=bucket,
                                        accepted=accepted,
                                        attempts=tries))
        progress.close()
    return GenerationResult(pairs=pairs, attempts=records, short=shortfalls(domain, pairs, targets, len(subgraphs)))


# --------------------------------------------------------------------------------------------- LLM


def prompt_subgraph(graph: RelationGraph, sub: SeedSubgraph, qa: QAParams) -> str:
    """The seed's subgraph as generator input: relations nearest the seed first, at most max_prompt_relations."""
    nodes = set(sub.nodes)
    distance = graph.hop_distances(sub.seed, sub.depth)
    relations = sorted(
        {rel for n in sub.nodes for rel, other, _ in graph.incident[n] if other in nodes},
        key=lambda r: (min(distance[graph.src[r]], distance[graph.dst[r]]),
                       max(distance[graph.src[r]], distance[graph.dst[r]]), r),
    )[: qa.max_prompt_relations]
    triples = [(graph.names[graph.src[r]], graph.keywords[r], graph.names[graph.dst[r]]) for r in relations]
    descriptions = None
    if qa.show_descriptions:
        shown = dict.fromkeys(name for head, _, tail in triples for name in (head, tail))
        descriptions = {name: graph.descriptions[graph.entity_id(name)][:300] for name in shown}
    return prompts.subgraph_lines(triples, descriptions)


def _reply_fields(value: dict[str, Any]) -> None:
    """Validation of a generation reply's shape (fed back to the model in the repair round)."""
    problems = []
    if not isinstance(value.get("path"), list) or not all(isinstance(x, str) for x in value.get("path", [])):
        problems.append('"path" must be a list of entity names')
    for key in ("question", "answer"):
        if not isinstance(value.get(key), str) or not value.get(key, "").strip():
            problems.append(f'"{key}" must be a non-empty string')
    if problems:
        raise ValueError("; ".join(problems))


def _verdict_fields(value: dict[str, Any]) -> None:
    if not isinstance(value.get("valid"), bool):
        raise ValueError('"valid" must be true or false')


@dataclass(eq=False)  # hashed by identity: tasks are dict keys
class _Task:
    sub: SeedSubgraph
    bucket: Bucket
    prompt: str
    attempts: list[Attempt] = field(default_factory=list)
    proposal: tuple[list[int], list[Step], str] | None = None  # node ids, steps, question awaiting the judge


def _request(messages: list[dict[str, str]], llm: LLMParams, tag: str, temperature: float | None = None,
             seed: int | None = None) -> ChatRequest:
    return ChatRequest(messages=messages, temperature=llm.temperature if temperature is None else temperature,
                       max_tokens=llm.max_tokens, seed=seed, json_mode=True, tag=tag)


def generate_llm_pairs(graph: RelationGraph, subgraphs: list[SeedSubgraph], qa: QAParams, llm: LLMParams,
                       domain: str, client: ChatClient, targets: dict[Bucket, int],
                       progress: bool = True) -> GenerationResult:
    """The Omne-R1 paper's generation loop: generate, check rules, judge, retry with feedback; a seed that fails
    ``qa.max_retries`` retries gives way to the bucket's next unused seed, so that the bucket fills up."""

    def new_task(bucket: Bucket, sub: SeedSubgraph) -> _Task:
        prompt = prompts.generation_prompt(domain, sub.seed_name, bucket, prompt_subgraph(graph, sub, qa), qa.max_hops)
        return _Task(sub=sub, bucket=bucket, prompt=prompt)

    unused = {bucket: iter(subgraphs[targets[bucket]:]) for bucket in BUCKETS}  # each bucket's spare seeds, in order
    tasks = [new_task(bucket, sub) for bucket in BUCKETS for sub in subgraphs[: targets[bucket]]]
    dedupe, pairs, done = _Dedupe(), [], []
    pending = list(tasks)
    round_index = 0
    while pending:
        requests = [_request(prompts.generation_messages(t.prompt, t.attempts[-1] if t.attempts else None), llm,
                             "qa.generate", seed=qa.random_seed + len(t.attempts)) for t in pending]
        results = complete_json_many(client, requests, repair_rounds=llm.json_repair_rounds, validate=_reply_fields,
                                     progress=progress, desc=f"{domain} generate r{round_index}")
        to_judge: list[_Task] = []
        for task, result in zip(pending, results, strict=True):
            task.proposal = None
            if result.value is None:
                task.attempts.append(Attempt(feedback=f"the reply was not the JSON asked for: {result.error}"))
                continue
            path = [str(x) for x in result.value["path"]]
            question, answer = str(result.value["question"]).strip(), str(result.value["answer"]).strip()
            verdict = check_pair(graph, path, question, answer, task.sub.seed, task.bucket, strict=qa.strict_path,
                                 max_hops=qa.max_hops, max_words=qa.max_question_words, name_rules=qa.name_rules)
            attempt = Attempt(path=path, question=question, answer=answer, path_valid=verdict.path_valid,
                              feedback="; ".join(verdict.feedback))
            task.attempts.append(attempt)
            if verdict.valid:
                steps = [Step(r, f) for r, f in verdict.steps]
                task.proposal = (verdict.node_ids, steps, question)
                to_judge.append(task)
        judged_ok = _judge(graph, to_judge, qa, llm, client, progress, domain, round_index)
        next_pending = []
        for task in pending:
            if task in judged_ok and task.proposal is not None:
                node_ids, steps, question = task.proposal
                answer = graph.names[node_ids[-1]]
                if dedupe.add(question, answer):
                    pairs.append(make_pair(graph, domain, task.sub.seed, node_ids[0], steps, question, client.model,
                                           len(task.attempts), "rule checks passed" +
                                           (" and the judge agreed" if qa.judge else ""), judged_ok[task]))
                    done.append(task)
                    continue
                task.attempts[-1].feedback = "duplicate of an accepted question; ask something else"
            if len(task.attempts) <= qa.max_retries:
                next_pending.append(task)
        # a seed given up is replaced while the bucket is short and spare seeds remain; not in a round where no
        # request got a reply (an endpoint that is down would otherwise be asked about every spare seed in turn)
        for bucket in BUCKETS if any(r.value is not None for r in results) else ():
            open_tasks = sum(t.bucket == bucket for t in next_pending) + sum(p.bucket == bucket for p in pairs)
            for sub in itertools.islice(unused[bucket], max(0, targets[bucket] - open_tasks)):
                tasks.append(new_task(bucket, sub))
                next_pending.append(tasks[-1])
        pending = next_pending
        round_index += 1
    records = [SeedAttempts(domain=domain, seed=t.sub.seed, seed_name=t.sub.seed_name, bucket=t.bucket,
                            accepted=t in done, attempts=t.attempts) for t in tasks]
    return GenerationResult(pairs=pairs, attempts=records, short=shortfalls(domain, pairs, targets, len(subgraphs)))


def _judge(graph: RelationGraph, tasks: list[_Task], qa: QAParams, llm: LLMParams, client: ChatClient,
           progress: bool, domain: str, round_index: int) -> dict[_Task, str]:
    """Tasks whose proposal the judge accepted, with its reason (all of them when the judge is off)."""
    if not qa.judge:
        return {t: "" for t in tasks}

    requests = []
    for task in tasks:
        node_ids, steps, question = task.proposal  # type: ignore[misc]
        edges = [(e.src, e.keywords, e.dst) for e in graph.path_edges(steps)]
        path = [graph.names[n] for n in node_ids]
        requests.append(_request(prompts.judge_messages(question, path[-1], path, edges), llm, "qa.judge",
                                 temperature=0.0))
    results = complete_json_many(client, requests, repair_rounds=llm.json_repair_rounds, validate=_verdict_fields,
                                 progress=progress, desc=f"{domain} judge r{round_index}")
    accepted: dict[_Task, str] = {}
    for task, result in zip(tasks, results, strict=True):
        reason = str((result.value or {}).get("reason", result.error))
        if result.value is not None and result.value["valid"]:
            accepted[task] = reason
        else:
            task.attempts[-1].feedback = f"the judge rejected the question: {reason}"
    return accepted
