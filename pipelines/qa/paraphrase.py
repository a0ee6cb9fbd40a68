"""LLM paraphrase of template questions (``qa.paraphrase: llm``; docs/qa.md, "Paraphrase").

The offline writer's questions are correct but read like templates. With ``qa.paraphrase: llm`` the configured
LLM client rewrites each one (one concurrent batch, every request through the disk cache, a JSON repair round);
the rewrite must pass the very rules the template passed (``validate.check_question``: the start named, no other
path entity given away, one question, readable forms, ``qa.max_question_words``) and must not duplicate another
question of the domain. The path, the answer and the gold paths are the template's, so only the wording can
change; the prompt asks for the same question and answer. A rewrite that fails, or a reply that is not the JSON
asked for, keeps the template text, and every outcome is recorded (``paraphrases.jsonl`` beside the pairs).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from pipelines.config import LLMParams, QAParams
from pipelines.llm.base import ChatClient, ChatRequest
from pipelines.llm.structured import complete_json_many
from pipelines.qa import prompts
from pipelines.qa.models import QAPair, qa_id
from pipelines.qa.paths import RelationGraph
from pipelines.qa.validate import check_question
from pipelines.text.names import normalise_text

PARAPHRASES_FILE = "paraphrases.jsonl"
KEPT = ("no_reply", "unchanged", "rules", "duplicate")  # why a template question was kept


class ParaphraseOutcome(BaseModel):
    """What became of one template question: the rewrite proposed, and whether it replaced the template."""

    id: str  # the template pair's id (the paraphrased pair gets the id of its new question)
    template: str
    proposed: str = ""
    accepted: bool = False
    kept: str = ""  # why the template was kept (one of KEPT); "" when accepted
    detail: str = ""  # the reply's problem or the rules' feedback


class ParaphraseResult(BaseModel):
    pairs: list[QAPair]
    outcomes: list[ParaphraseOutcome]
    model: str

    def stats(self) -> dict[str, Any]:
        kept = Counter(o.kept for o in self.outcomes if not o.accepted)
        return {"model": self.model, "paraphrased": sum(o.accepted for o in self.outcomes),
                "kept": sum(kept.values()), "kept_why": {why: kept[why] for why in KEPT if kept[why]}}


def _question_field(value: dict[str, Any]) -> None:
    if not isinstance(value.get("question"), str) or not value["question"].strip():
        raise ValueError('"question" must be a non-empty string')


def paraphrase_request(graph: RelationGraph, pair: QAPair, qa: QAParams, llm: LLMParams) -> ChatRequest:
    relations = [edge.keywords for edge in pair.path_edges]
    messages = prompts.paraphrase_messages(pair.question, pair.start_entity, pair.answer, relations,
                                           qa.max_question_words)
    return ChatRequest(messages=messages, temperature=llm.temperature, max_tokens=llm.max_tokens,
                       seed=qa.random_seed, json_mode=True, tag="qa.paraphrase")


def paraphrase_pairs(graph: RelationGraph, pairs: list[QAPair], qa: QAParams, llm: LLMParams, client: ChatClient,
                     *, domain: str = "", progress: bool = True) -> ParaphraseResult:
    """Each pair with its question rewritten by ``client`` where the rewrite passes the rules, else as it was."""

    requests = [paraphrase_request(graph, pair, qa, llm) for pair in pairs]
    results = complete_json_many(client, requests, repair_rounds=llm.json_repair_rounds, validate=_question_field,
                                 progress=progress, desc=f"{domain} paraphrase".strip())
    seen = {(normalise_text(p.question), normalise_text(p.answer)) for p in pairs}
    out, outcomes = [], []
    for pair, result in zip(pairs, results, strict=True):
        outcome = ParaphraseOutcome(id=pair.id, template=pair.question)
        outcomes.append(outcome)
        if result.value is None:
            outcome.kept, outcome.detail = "no_reply", result.error
            out.append(pair)
            continue
        proposed = " ".join(str(result.value["question"]).split())
        outcome.proposed = proposed
        key = (normalise_text(proposed), normalise_text(pair.answer))
        problems = check_question(proposed, pair.path, pair.answer, graph.generic_words, qa.max_question_words,
                                  qa.name_rules)
        if not proposed.endswith("?"):
            problems.append("the rewrite does not end with a question")
        if key[0] == normalise_text(pair.question):
            outcome.kept = "unchanged"
        elif problems:
            outcome.kept, outcome.detail = "rules", "; ".join(problems)
        elif key in seen:
            outcome.kept, outcome.detail = "duplicate", "the rewrite is another question of the domain"
        if outcome.kept:
            out.append(pair)
            continue
        seen.add(key)
        outcome.accepted = True
        reason = f"{pair.validation.reason}; paraphrased by {client.model}" if pair.validation.reason else \
            f"paraphrased by {client.model}"
        out.append(pair.model_copy(update={
            "id": qa_id(pair.domain, proposed, pair.answer), "question": proposed, "template_question": pair.question,
            "validation": pair.validation.model_copy(update={"reason": reason})}))
    return ParaphraseResult(pairs=out, outcomes=outcomes, model=client.model)
