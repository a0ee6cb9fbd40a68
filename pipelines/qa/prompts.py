"""Prompts of LLM question generation, the retry block, the judge and gold-path verification.

They follow the requirements of the Omne-R1 paper's appendix (subgraph shown as
``Relations(entity_1 - entity_2: the relation):`` lines, the answer the only node that fits, 2-3
path nodes for 1/2-hop and 4 or more for 3+, one comprehensive English question, JSON only); the
wording is ours.
"""

from __future__ import annotations

import json

from pipelines.qa.models import Attempt, Bucket

GENERATOR_SYSTEM = "You write multi-hop questions that are grounded in a knowledge graph. You reply with JSON only."
JUDGE_SYSTEM = "You check multi-hop questions written from a knowledge graph. You reply with JSON only."

TWO_HOP_HINTS = """Question types that work well (HotpotQA-style 2-hop questions):
- Infer the bridge entity: the question describes an unnamed entity through the start entity, then asks
  about it. Example: "Which currency is used in the country whose capital is Abu Dhabi?"
- Find the answer by checking several properties: the answer is the one entity that satisfies every
  condition stated. Example: "Which element in group 3 was discovered in France?"
- Infer a property through a bridge entity: the question asks for a property of an entity that is
  reached through another one. Example: "In which continent lies the country that Callao is a city in?"
"""


def subgraph_lines(triples: list[tuple[str, str, str]], descriptions: dict[str, str] | None = None) -> str:
    """The subgraph as the Omne-R1 paper shows it to the generator."""
    lines = ["Relations(entity_1 - entity_2: the relation):"]
    lines += [f"{head} - {tail}: {keywords}" for head, keywords, tail in triples]
    if descriptions:
        lines.append("")
        lines.append("Entities(entity: description):")
        lines += [f"{name}: {text}" for name, text in descriptions.items() if text]
    return "\n".join(lines)


def generation_prompt(domain: str, seed: str, bucket: Bucket, subgraph: str, max_hops: int) -> str:
    if bucket == "1-2":
        size, kind = "2 or 3 entities (1 or 2 hops)", "a 1-hop or 2-hop"
    else:
        size, kind = f"4 to {max_hops + 1} entities (3 or more hops)", "a multi-hop (3 or more hops)"
    rules = [
        f'Choose a path of connected entities from the relations above. It starts at "{seed}", ends at the '
        f"answer, and has {size}.",
        "The answer must be the only entity in the knowledge graph that fits the question.",
        f'Name the start entity "{seed}" in the question. Do not name any other entity of the path, and '
        "never the answer.",
        "Ask one comprehensive question that needs every hop of the path; do not split it into sub-questions.",
        "Write the question in English.",
        f'Reply with JSON only, exactly: {{"path": ["{seed}", ..., "<answer>"], "question": "...", '
        '"answer": "<answer>"}. Use the entity names exactly as they are written above.',
    ]
    body = [f'This is a subgraph of the "{domain}" knowledge graph around the entity "{seed}".', "", subgraph, "",
            f"Write {kind} question that starts from \"{seed}\".", "Requirements:"]
    body += [f"{i}. {rule}" for i, rule in enumerate(rules, 1)]
    if bucket == "1-2":
        body += ["", TWO_HOP_HINTS]
    return "\n".join(body)


def retry_block(previous: Attempt) -> str:
    """The paper's retry block: what was proposed, whether its path was valid, and the feedback."""
    return "\n".join([
        "Your previous attempt was rejected.",
        f"Previous path: {json.dumps(previous.path, ensure_ascii=False)}",
        f"Previous question: {previous.question}",
        f"Path valid: {previous.path_valid}",
        f"Feedback: {previous.feedback}",
        "Write a new path and question that fix these problems, with the same JSON format.",
    ])


def generation_messages(prompt: str, previous: Attempt | None) -> list[dict[str, str]]:
    content = prompt if previous is None else f"{prompt}\n\n{retry_block(previous)}"
    return [{"role": "system", "content": GENERATOR_SYSTEM}, {"role": "user", "content": content}]


def _triples(edges: list[tuple[str, str, str]]) -> str:
    return "\n".join(f"({head}, {keywords}, {tail})" for head, keywords, tail in edges)


def judge_messages(question: str, answer: str, path: list[str],
                   edges: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    """The judge checks the paper's three criteria on a pair that passed the rule checks."""
    content = "\n".join([
        "A question was written from this path of a knowledge graph.",
        f"Path: {' -> '.join(path)}",
        "Relations on the path:",
        _triples(edges),
        f"Question: {question}",
        f"Answer: {answer}",
        "",
        "Check three criteria:",
        f'1. The question names the start entity "{path[0]}".',
        "2. The question does not reveal any other entity of the path, and not the answer.",
        "3. The question is truly multi-hop: answering it needs every relation of the path "
        "(for a 1-hop path: it needs that relation).",
        'Reply with JSON only: {"valid": true or false, "reason": "<one sentence>"}.',
    ])
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": content}]


def gold_path_messages(question: str, answer: str, edges: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    """EoG's verification of a candidate gold path against the question's intent."""
    content = "\n".join([
        f"Question: {question}",
        f"Answer: {answer}",
        "Candidate reasoning path in the knowledge graph:",
        _triples(edges),
        "",
        "Does this path follow what the question asks, step by step, from the start entity to the answer?",
        'Reply with JSON only: {"valid": true or false, "reason": "<one sentence>"}.',
    ])
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": content}]


PARAPHRASE_SYSTEM = ("You rewrite questions so that they read as a person would write them, without changing what "
                     "they ask. You reply with JSON only.")


def paraphrase_messages(question: str, start: str, answer: str, relations: list[str],
                        max_words: int) -> list[dict[str, str]]:
    """Ask for a natural rewrite of a template question (qa.paraphrase: llm): same meaning and answer, the start
    named as written, nothing else of the path named, short readable forms; JSON ``{"question": ...}``."""
    content = "\n".join([
        "Rewrite this question so that it reads naturally, as a person would ask it.",
        f"Question: {question}",
        f"It follows these relations of a knowledge graph, in order: {' -> '.join(relations)}",
        "",
        "Requirements:",
        f'1. Ask exactly the same thing, so that the answer stays "{answer}": keep every step, add no condition.',
        f'2. Name "{start}" exactly as it is written above. Name no other entity, and never the answer or any '
        "word of it.",
        f"3. Write one question of at most {max_words} words (two or three short sentences that end with one "
        "question are fine). Do not put a relative clause inside another one.",
        '4. Reply with JSON only, exactly: {"question": "..."}',
    ])
    return [{"role": "system", "content": PARAPHRASE_SYSTEM}, {"role": "user", "content": content}]
