"""SFT conversations (stage 2 data, Omne-R1 paper appendix A), in ShareGPT form:

    {id, graph_type, question, golden_answer, system, tools,
     conversations: [{from: human|gpt|observation, value}, ...]}

human / observation turns sit at even positions (0, 2, ...), gpt turns at odd ones, and every gpt
value holds one ``<think>…</think>`` plus either one ``<tool_call>…</tool_call>`` or the
``<answer>``. Sources:

(a) template trajectories: each training pair's validated gold path walked with the real tools —
    entity_matcher on the start entity, node_info along the path, then the answer — with the think
    text written from the path (deterministic, offline);
(b) correct trajectories of the agent itself: the exactly-correct rollouts RL stage 1 kept while training
    (``pipelines.train.rl.keep``, ``sft_data.sources: [template, agent]``; Omne-R1 mixes them with the template
    ones so that SFT does not teach a single reasoning pattern), train-split questions only, one per distinct
    walk (question, calls, answer) — any ``Trajectory`` with a correct answer and only valid calls converts;
(c) teacher-distilled trajectories: a strong model through the OpenAI-compatible client, kept only
    if every call is valid and the answer is right (KG-Hopper / EoG cold start).
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from pipelines.agent.client import ToolClient
from pipelines.agent.protocols import PROMPT_VERSION, OmneProtocol, tool_schemas
from pipelines.agent.rollout import REPEAT_NOTE, UNSHOWN_ANSWER_NOTE
from pipelines.agent.tools import OMNE_TOOLS, TOOL_SPECS, KGToolbox
from pipelines.agent.trajectory import Trajectory
from pipelines.domains import load_registry
from pipelines.errors import ArtifactMissingError
from pipelines.eval.answers import exact_match
from pipelines.kg.model import shown_type
from pipelines.layout import CONVERSATIONS_FILE, correct_rollouts_file, kg_dir, qa_dir, sft_conversations_dir
from pipelines.llm.factory import build_chat_client
from pipelines.manifest import ArtifactBuild, manifest_inputs, relative_path
from pipelines.qa.build import read_jsonl, relation_graph, write_jsonl
from pipelines.qa.models import GoldPath, QAPair
from pipelines.qa.paths import RelationGraph
from pipelines.qa.template import (
    filled_questions,
    indefinite,
    keyword_sentence,
    relation_sentence,
    remaining_questions,
    write_question,
)
from pipelines.qa.validate import edge_steps
from pipelines.text.names import find_name, mentions
from pipelines.train.graph_names import alias_words, graph_alias
from pipelines.train.llm_thinking import llm_thinking
from pipelines.train.rl.keep import read_kept_rollouts

RESPONSE = re.compile(r"^<tool_response>", re.S)
# The template trajectories' version, part of the conversations' fingerprint: bump it when the text they are
# written with changes, so that `make run`, Dagster and DVC rebuild them (and retrain what learns from them).
TEMPLATE_VERSION = 11  # what each version changed: CHANGELOG.md (sft_data.thinking, also in the fingerprint, picks
# the "relations" text or the "remaining_question" one)


class SFTConversation(BaseModel):
    id: str
    graph_type: str
    question: str
    golden_answer: str
    system: str
    tools: str  # the tools' JSON schemas, one per line (as in the system prompt)
    conversations: list[dict[str, str]]
    source: str = "template"  # template | agent | teacher
    bucket: str | None = None
    # the registered domain the tools answered from, when graph_type is an alias of it (pipelines/train/graph_names.py)
    domain: str | None = None


def omne_protocol(mode: str = "think", specs: str = "json") -> OmneProtocol:
    """The omne protocol the conversations are written in; ``specs``: tools.prompt_specs."""
    return OmneProtocol([TOOL_SPECS[n] for n in OMNE_TOOLS], max_rounds=7, mode=mode,  # type: ignore[arg-type]
                        specs=specs)  # type: ignore[arg-type]


def _call(name: str, entity: str, domain: str) -> str:
    return f"{name}(node_name={json.dumps(entity, ensure_ascii=False)}, graph_type={json.dumps(domain)})"


def answer_block(answer: str) -> str:
    """The answer as the thinking wrote it, after a space: a BPE tokenizer reads " NIST" (after "question:") as one
    token but "<answer>NIST" as "N" + "IST", and a small model that has to spell the name anew garbles it
    ("Nation"). Every parser strips the space."""
    return f"<answer> {answer}</answer>"


def _gpt(think: str, action: str, mode: str) -> str:
    thought = "" if mode == "no_think" else think
    return f"<think>{thought}</think>\n{action}" if mode != "no_think" else f"<think>\n\n</think>\n{action}"


class PathReading(BaseModel):
    """How a question reads along its path: each relation as the KG describes it ("Lead-182 decays to
    Mercury-178 by alpha decay"), and what is left to ask after each hop but the last."""

    sentences: list[str]
    remaining: list[str]
    # each node's type as node_info shows it beside a neighbour (tools.neighbor_types); empty when it does not
    types: list[str | None] = []


def path_reading(graph: RelationGraph, nodes: list[str], edges: list[Any], *, descriptions: bool = True,
                 types: bool = False, filled_from: str | None = None, phrased: bool = True) -> PathReading | None:
    """The reading of a gold path in its domain's graph; None when the graph does not hold the path.
    ``descriptions``: each hop may be read from the relation's description (when node_info shows them), else
    from its label's phrasing, so that a thought never quotes text the tool responses did not show; ``types``:
    whether node_info shows the neighbours' types (and so whether the thinking may check them); ``filled_from``: the
    question asked (``sft_data.thinking: filled_question``): what is left is that question with the entities reached
    named in it (``filled_questions``) when the template writer writes it for this path, else ``remaining_questions``'
    rewrite (the question of another valid path, a paraphrase); ``phrased``: node_info labels an undirected graph's
    relations with their phrase (tools.unlabelled_relations: phrase), and each hop is read with it."""
    ids = [graph.entity_id(n) for n in nodes]
    if any(i is None for i in ids):
        return None
    steps = edge_steps(graph, ids, edges)  # type: ignore[arg-type]
    if steps is None:
        return None
    filled = (filled_questions(graph, ids[0], steps)  # type: ignore[arg-type]
              if filled_from is not None and write_question(graph, ids[0], steps) == filled_from else None)  # type: ignore[arg-type]
    return PathReading(sentences=[relation_sentence(graph, step.relation, descriptions=descriptions, phrased=phrased)
                                  for step in steps],
                       remaining=filled or remaining_questions(graph, ids[0], steps),  # type: ignore[arg-type]
                       types=[shown_type(graph.types[i]) for i in ids] if types else [])  # type: ignore[index]


def asked_type(reading: PathReading | None) -> str | None:
    """The type the question asks for (its answer's, as node_info shows it), when it tells the answer from the
    path's other entities; None when types are not shown or the start or a bridge has that type too. A type every
    entity may share (a LightRAG graph's CATEGORY, nested sites) decides nothing: the fifteenth run's thinking wrote
    "X is a category too, but the question goes on from it" on a third of its conversations, and the model walked
    past answers it had reached; on a 1-hop question it taught "the question asks for a CATEGORY; Y is a CATEGORY",
    a choice by type where only the relation decides (docs/sft.md, "Conversations"). Without the check the relation
    and the remaining question say when to stop."""
    if reading is None or not reading.types:
        return None
    asked = reading.types[-1]
    return None if asked in reading.types[:-1] else asked


def type_word(kind: str, form: str = "bracket") -> str:
    """A type as the thinking writes it: as node_info's lines bracket it ("[language]"), or as a noun ("a
    language") in the ``sentence`` form (sft_data.type_check_form)."""
    return f"[{kind}]" if form == "bracket" else indefinite(kind)


def type_check(reading: PathReading, node: int, name: str, form: str = "bracket") -> str:
    """The thinking's check of what a hop reached against what the question asks for (the answer's type), the
    two types written side by side just before the choice between walking on and answering, so that a small model
    compares two words it has just written ("The question asks for [language]; the response lists Russia
    [territory]."); "" when either type is not shown or the asked type does not decide (``asked_type``). ``form``
    (sft_data.type_check_form): ``bracket`` writes the entity reached as node_info's line lists it, a copy of
    adjacent text; ``sentence`` ("...; Russia is a territory.") makes the model map a bracket to a noun, and in the
    twenty-second run 10-12 of 34 failed NIST episodes claimed a type no line gave ("Fig. 6 is a
    document_structure" beside ``Fig. 6 [content]``; docs/sft.md)."""
    asked = asked_type(reading)
    if asked is None or (reached := reading.types[node]) is None:
        return ""
    reached_as = f"the response lists {name} {type_word(reached, form)}" if form == "bracket" else (
        f"{name} is {type_word(reached, form)}")
    return f" The question asks for {type_word(asked, form)}; {reached_as}."


def path_thoughts(nodes: list[str], edges: list[Any], domain: str, answer: str,
                  reading: PathReading | None = None, type_form: str = "bracket") -> list[str]:
    """The think text of each gpt turn of a template trajectory along a path of ``len(edges)`` hops: where
    the question starts, then what each relation read showed and what is left of the question, then the answer.

    With a ``reading`` (``sft_data.thinking: remaining_question``) each hop's thinking says the relation as the
    KG describes it and what is left of the question, the nested question read one clause at a time, so that
    where the walk is and when the next relation answers are written out (with the reading's types, the type the
    question asks for is named first and checked at each hop: ``type_check``, written in ``type_form``); without
    one it names the relation read and the next entity. (A variant that counted the hops, "Hop i of n", did worse with
    SmolLM2-135M: the model wrote "2 hops" for every question and walked on past the answer; README, Stage 2.)"""
    hops, start = len(edges), nodes[0]
    sentences = reading.sentences if reading else [keyword_sentence(e.src, e.keywords, e.dst) for e in edges]
    asked = asked_type(reading)
    asks = f" and asks for {type_word(asked, type_form)}" if asked else ""
    thoughts = [f"The question starts from {start}{asks}. I look it up in the {domain} knowledge graph first.",
                f"{start} is in the graph. Its relations show where the question leads."]
    for i in range(1, hops):
        if reading:
            checked = type_check(reading, i, nodes[i], type_form)
            thoughts.append(f"{sentences[i - 1]}.{checked} So the question becomes: {reading.remaining[i - 1]}")
        else:
            thoughts.append(f"{sentences[i - 1]}, so the question continues from {nodes[i]}. I look at its "
                            f"relations next.")
    checked = type_check(reading, hops, answer, type_form) if reading else ""
    thoughts.append(f"{sentences[-1]}.{checked} That answers the question: {answer}.")
    return thoughts


_LISTED = re.compile(r"^(\d+)\. (.*)$")
_ARROW_END = re.compile(r"\](?:->|--|-) ")


def quoted_line(response: str, neighbour: str, label: str | None = None) -> str | None:
    """node_info's line that lists ``neighbour``, as the thinking quotes it before reading the relation ("Line 1:
    <-[outlines]- Target Profile"): the relation and the name as the tool wrote them, without the description.
    The thinking then copies the name from text it has just written beside the line's number, not from a response
    two turns up: of the twentieth run's NIST answers, 15% were names no tool showed, most of them a neighbour's
    name spliced into another ("Header.2.0"). Measured in the twenty-first run: no change (docs/sft.md, "Quoted
    lines"), so it is off by default. A line with ``label`` is preferred when several lines list the neighbour; None
    when no line lists it by that exact name (it is only in a description)."""
    found: list[tuple[bool, str]] = []
    for line in response.splitlines():
        listed = _LISTED.match(line)
        if listed is None:
            continue
        rank, text = listed.groups()
        for arrow in _ARROW_END.finditer(text):
            start = arrow.end()
            end = start + len(neighbour)
            rest = text[end:]
            if text[start:end] != neighbour or not (rest == "" or rest.startswith((" [", ":"))):
                continue
            if rest.startswith(" [") and (close := rest.find("]")) > 0:
                end += close + 1
            relation = text[:end]
            found.append((label is not None and f"[{label}]" in text[:start], f"Line {rank}: {relation}"))
            break
    if not found:
        return None
    return next((quote for labelled, quote in found if labelled), found[0][1])


def looping_thought(reading: PathReading, node: int, question: str, *, names: tuple[str, str] | None = None) -> str:
    """What a looping model thinks before it calls node_info on the node it has just read, again: the right relation
    read, then the question it had, unchanged, as if that relation left it where it was ("Target Profile outlines
    Desired Outcomes. So the question becomes: Which entity does Target Profile outline?"; 13 of the eighteenth
    run's 16 NIST loops, docs/sft.md, "Repeated calls"). Never a target (the turn is untrained): the recovery after
    the note reads the same relation and goes on, so the model learns that what follows the note differs.
    ``names`` (the node read, the next one): the relation read back to the node itself instead ("Header is contained
    within Header"), the other half of the twenty-third run's NIST loops, after which copying the looping thought's
    reading cannot lead on (``sft_data.self_loop_share``)."""
    asked = question if node == 0 else reading.remaining[node - 1]
    sentence = reading.sentences[node]
    if names is not None:
        read, following = names
        sentence = sentence.replace(following, read)
    return f"{sentence}. So the question becomes: {asked}"


def misspelled_name(name: str, rng: random.Random) -> str | None:
    """``name`` written as a user (or a small model retyping it) might: lowercase, one letter dropped, doubled
    or swapped with the next, or the last word of a 3+ word name left off. None when nothing changes."""
    kinds = ["lowercase", "drop", "double", "swap"] + (["last_word"] if len(name.split()) >= 3 else [])
    kind = rng.choice(kinds)
    if kind == "lowercase":
        variant = name.lower()
    elif kind == "last_word":
        variant = name.rsplit(" ", 1)[0]
    else:
        letters = [i for i in range(1, len(name) - 1) if name[i].isalpha() and name[i + 1].isalpha()]
        if not letters:
            return None
        i = rng.choice(letters)
        variant = {"drop": name[:i] + name[i + 1:], "double": name[:i + 1] + name[i:],
                   "swap": name[:i] + name[i + 1] + name[i] + name[i + 2:]}[kind]
    return variant if variant != name else None


def question_spelling(question: str, name: str) -> str:
    """How ``question`` writes the entity ``name``: a LightRAG graph's "RADIUM-213" is "Radium-213" in its
    questions (pipelines.text.names.written_name), and the model looks up what it reads, then copies the graph's
    spelling from the matcher's answer. ``name`` itself when the question does not name it."""
    spans = find_name(question, name) or []
    return question[spans[0][0]:spans[0][1]] if spans else name


def template_conversation(pair: QAPair, gold: GoldPath | None, tools: ToolClient, *, mode: str = "think",
                          path_index: int = 0, misspell: random.Random | None = None,
                          graph: RelationGraph | None = None, graph_name: str | None = None,
                          specs: str = "json", relation_descriptions: bool = True,
                          neighbor_types: bool = False, filled_question: bool = False,
                          recover: bool = False, relation_phrases: bool = True,
                          loop_at: int | None = None, quote_lines: bool = False,
                          retype_answer: random.Random | None = None, type_form: str = "bracket",
                          self_loop: bool = False) -> SFTConversation | None:
    """Walk the pair's validated gold path with the real tools; None when a tool response does not show the
    next entity (e.g. node_info capped), so that no conversation teaches a step the tools do not support.

    ``misspell``: the question writes the start entity as ``misspelled_name`` draws it with this generator;
    the model looks that spelling up with entity_matcher and walks on from the exact name the matcher shows
    (None when the name cannot be misspelled, the question does not name it once, or the matcher does not
    show it). ``graph``: the domain's relation graph, for the thinking's reading of the path (``path_reading``).
    ``graph_name``: the name the conversation gives the graph (an alias of the domain: prompt, thinking and calls
    say it, the tools answer from the domain); None: the domain's own name. ``specs``: how the system prompt lists
    the tools (tools.prompt_specs); ``relation_descriptions``: whether node_info shows them (tools.
    relation_descriptions), and so whether the thinking may quote them; ``neighbor_types``: whether node_info shows
    the neighbours' types (tools.neighbor_types), and so whether the thinking checks them (``type_check``, in
    ``type_form``: sft_data.type_check_form);
    ``filled_question``: what is left of the question is the question with the entities reached named in it
    (``sft_data.thinking: filled_question``; ``path_reading``). ``recover`` (with ``misspell``): the first call is
    node_info on the misspelling, which fails with the closest names listed, and the next copies the exact name
    (``sft_data.recovery_fraction``; None when the index resolves the misspelling itself or does not list the name).
    ``relation_phrases``: node_info labels unlabelled relations with their phrase (tools.unlabelled_relations), and
    the thinking reads them so. ``loop_at``: the node_info call on the path's node of that index is made twice in a
    row, the second time as an untrained turn (``"train": "false"``: what a looping model writes, never a target;
    with a reading its thinking is ``looping_thought``'s), answered with the rollout engine's ``REPEAT_NOTE``; the
    next turn reads the response above and walks on (``sft_data.loop_recovery_fraction``). ``quote_lines``: each
    thinking after a node_info response first quotes the line that lists the next entity (``quoted_line``; None
    when no line lists it by its exact name; ``sft_data.quote_relation_line``). ``retype_answer``: the first answer
    is the answer as ``misspelled_name`` retypes it with this generator, an untrained turn, answered with the rollout
    engine's ``UNSHOWN_ANSWER_NOTE``; the next turn quotes the line of the last response that lists the answer and
    answers it as written there (``sft_data.answer_recovery_fraction``; None when the name cannot be retyped or no
    line lists it). ``self_loop`` (with ``loop_at``): the looping thought reads the relation back to the node itself
    (``looping_thought``'s ``names``; None when its reading does not name the next node).
    """
    protocol = omne_protocol(mode, specs)
    valid = [p for p in (gold.paths if gold else []) if p.valid]
    if gold is not None and not valid:
        return None
    nodes = valid[path_index].nodes if valid else pair.path
    edges = valid[path_index].edges if valid else pair.path_edges
    domain, start = pair.domain, nodes[0]
    shown = graph_name or domain
    question, query = pair.question, question_spelling(pair.question, start)
    start_as = misspelled_name(start, misspell) if misspell is not None else None
    if misspell is not None:
        if start_as is None or pair.question.count(start) != 1:
            return None
        question, query = pair.question.replace(start, start_as), start_as
    turns: list[dict[str, str]] = [{"from": "human", "value": protocol.user_prompt(question, shown)}]

    episode_id = uuid.uuid4().hex  # the conversation's tool episode: node_info may order by the question it knows

    def observe(name: str, entity: str, must_show: str) -> str | None:
        """The tool's response text; None when the call fails or the response does not show ``must_show``."""
        result = tools.call(_call(name, entity, domain), graph_type=domain, episode_id=episode_id, question=question)
        if not result.ok or not mentions(result.content, must_show):
            return None
        return result.content

    hops = len(edges)
    if loop_at is not None:
        loop_at = min(loop_at, hops - 1)
    reading = (path_reading(graph, nodes, edges, descriptions=relation_descriptions, types=neighbor_types,
                            filled_from=pair.question if filled_question else None, phrased=relation_phrases)
               if graph is not None else None)
    thoughts = path_thoughts(nodes, edges, shown, pair.answer, reading, type_form)
    thoughts[0] = thoughts[0].replace(start, query, 1)
    if recover:  # node_info on the misspelling first: "not found", the closest names listed, the exact one copied
        if start_as is None:
            return None
        first = tools.call(_call("node_info", query, domain), graph_type=domain, episode_id=episode_id,
                           question=question)
        if first.ok or not mentions(first.content, start):  # the index resolved it itself, or does not list it
            return None
        call = _call("node_info", query, shown)
        turns.append({"from": "gpt", "value": _gpt(thoughts[0], f"<tool_call>{call}</tool_call>", mode)})
        turns.append({"from": "observation", "value": protocol.response_message(first.content)})
        thoughts[1] = (f"{query} is not in the graph, and the same call would fail again. The closest name listed is "
                       f"{start}; I copy it exactly.")
    else:
        call = _call("entity_matcher", query, shown)
        turns.append({"from": "gpt", "value": _gpt(thoughts[0], f"<tool_call>{call}</tool_call>", mode)})
        response = observe("entity_matcher", query, start)
        if response is None:
            return None
        turns.append({"from": "observation", "value": protocol.response_message(response)})
    for i, node in enumerate(nodes[:hops]):
        call = _call("node_info", node, shown)
        turns.append({"from": "gpt", "value": _gpt(thoughts[i + 1], f"<tool_call>{call}</tool_call>", mode)})
        response = observe("node_info", node, nodes[i + 1])
        if response is None:
            return None
        turns.append({"from": "observation", "value": protocol.response_message(response)})
        quote = ""
        if quote_lines:
            if (line := quoted_line(response, nodes[i + 1], edges[i].keywords)) is None:
                return None
            quote = f"{line}. "
            thoughts[i + 2] = quote + thoughts[i + 2]
        if i == loop_at:  # the same call again (not trained on), the note, then the walk goes on from the response
            if self_loop and (reading is None or nodes[i + 1] not in reading.sentences[i]):
                return None
            looping = (quote + looping_thought(reading, i, question, names=(node, nodes[i + 1]) if self_loop else None)
                       if reading else thoughts[i + 1])
            turns.append({"from": "gpt", "value": _gpt(looping, f"<tool_call>{call}</tool_call>", mode),
                          "train": "false"})
            turns.append({"from": "observation", "value": protocol.response_message(REPEAT_NOTE)})
            thoughts[i + 2] = f"The response above is all node_info shows for {node}. {thoughts[i + 2]}"
    if retype_answer is not None:  # a retyped answer (not trained on), the note, then the name as the response has it
        retyped = misspelled_name(pair.answer, retype_answer)
        line = quoted_line(response, pair.answer, edges[-1].keywords) if retyped and hops else None
        if line is None or retyped is None:
            return None
        turns.append({"from": "gpt", "value": _gpt(thoughts[-1].replace(pair.answer, retyped),
                                                   answer_block(retyped), mode), "train": "false"})
        turns.append({"from": "observation",
                      "value": protocol.response_message(UNSHOWN_ANSWER_NOTE.format(answer=retyped))})
        thoughts[-1] = (f"{retyped} is not how the response writes it. {line}. That answers the question: "
                        f"{pair.answer}.")
    turns.append({"from": "gpt", "value": _gpt(thoughts[-1], answer_block(pair.answer), mode)})
    suffix = (("-r" if recover else "-m") if start_as else "-l" if loop_at is not None
              else "-a" if retype_answer is not None else "")
    return SFTConversation(id=f"{pair.id}-t{path_index}{suffix}", graph_type=shown,
                           question=question, golden_answer=pair.answer, system=protocol.system_prompt(),
                           tools=tool_schemas(protocol.tools), conversations=turns, source="template",
                           bucket=pair.bucket, domain=domain if shown != domain else None)


def trajectory_conversation(traj: Trajectory, *, source: str) -> SFTConversation | None:
    """A correct trajectory with only valid calls, as a ShareGPT conversation (None otherwise)."""
    if not traj.answer or not exact_match(traj.answer, traj.gold_answers):
        return None
    if any(not c.ok for c in traj.tool_calls) or traj.format_errors:
        return None
    system = next((m["content"] for m in traj.messages if m["role"] == "system"), "")
    turns = []
    for message in traj.messages:
        if message["role"] == "system":
            continue
        if message["role"] == "assistant":
            turns.append({"from": "gpt", "value": message["content"]})
        elif RESPONSE.match(message["content"]):
            turns.append({"from": "observation", "value": message["content"]})
        else:
            turns.append({"from": "human", "value": message["content"]})
    protocol = omne_protocol(traj.mode)
    return SFTConversation(id=f"{traj.qa_id}-{source}{traj.sample}", graph_type=traj.domain, question=traj.question,
                           golden_answer=traj.gold_answers[0], system=system, tools=tool_schemas(protocol.tools),
                           conversations=turns, source=source, bucket=traj.bucket)


class AgentSourceStats(BaseModel):
    """What became of stage 1's kept rollouts in the SFT data (the manifest's ``metadata.agent``)."""

    file: str
    rollouts: int
    kept: int
    dropped: dict[str, int]  # reason -> rollouts left out


def stage1_rollouts_inputs(params: Any) -> dict[str, str]:
    """The stage-1 correct-rollouts file as an input of the SFT data (path -> sha256 from the stage-1 manifest);
    a clear error when RL stage 1 has not run (the agent source reads its rollouts)."""

    path = correct_rollouts_file(params.artifacts_dir)
    inputs = manifest_inputs(path.parent, params.root, "sft_data.sources has 'agent', which reads RL stage 1's "
                             "correct rollouts: run RL stage 1 first (`omne rl --stage 1`)", only={path.name})
    if not inputs:
        raise ArtifactMissingError(f"{path}: RL stage 1 ({path.parent}) was trained before it kept its correct "
                                   "rollouts, which sft_data.sources 'agent' reads: run `omne rl --stage 1` again")
    return inputs


def walk_key(traj: Trajectory) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """What makes two rollouts the same for the SFT data: the question, the calls (name and arguments) and the
    answer; the thinking may differ."""
    calls = tuple((c.name or c.text, json.dumps(c.arguments, sort_keys=True)) for c in traj.tool_calls)
    return traj.qa_id, calls, (traj.answer or "").strip()


def agent_conversations(rollouts: list[Any], train_ids: set[str], mode: str,
                        template: list[SFTConversation]) -> tuple[list[SFTConversation], dict[str, int]]:
    """Stage 1's kept rollouts (``KeptRollout``) as ``agent`` conversations, earliest step first: train-split
    questions only, omne protocol in the data's mode, valid calls and the ShareGPT format, one per distinct walk
    (``walk_key``) and none identical to a template conversation (a question may have both: two patterns). Returns
    the conversations and the dropped rollouts by reason."""
    dropped: dict[str, int] = {}
    seen: set[Any] = set()
    template_turns = {json.dumps(r.conversations) for r in template}
    per_question: dict[str, int] = {}
    records: list[SFTConversation] = []
    for row in sorted(rollouts, key=lambda r: (r.step, r.qa_id, r.trajectory.sample)):
        traj: Trajectory = row.trajectory
        record = None
        if traj.qa_id not in train_ids:
            reason = "not_train_split"  # a val/test question (or one no longer in the dataset) never trains
        elif traj.protocol != "omne" or traj.mode != mode:
            reason = "other_protocol_or_mode"
        elif (record := trajectory_conversation(traj, source="agent")) is None:
            reason = "not_correct_or_failed_call"
        elif format_problems(record):
            reason = "format"
        elif walk_key(traj) in seen or json.dumps(record.conversations) in template_turns:
            reason = "duplicate"
        else:
            seen.add(walk_key(traj))
            number = per_question[traj.qa_id] = per_question.get(traj.qa_id, -1) + 1
            records.append(record.model_copy(update={"id": f"{traj.qa_id}-agent{number}"}))
            continue
        dropped[reason] = dropped.get(reason, 0) + 1
    return records, dict(sorted(dropped.items()))


def stage1_conversations(params: Any, train_ids: set[str], template: list[SFTConversation]
                         ) -> tuple[list[SFTConversation], AgentSourceStats]:
    """The ``agent`` source: RL stage 1's correct rollouts (``pipelines.layout.correct_rollouts_file``)."""

    path = correct_rollouts_file(params.artifacts_dir)
    rollouts = read_kept_rollouts(path)
    records, dropped = agent_conversations(rollouts, train_ids, params.sft_data.mode, template)
    return records, AgentSourceStats(file=relative_path(path, params.root), rollouts=len(rollouts),
                                     kept=len(records), dropped=dropped)


def format_problems(record: SFTConversation) -> list[str]:
    """What breaks the ShareGPT contract (the conversation-format asset check)."""
    problems: list[str] = []
    turns = record.conversations
    if not turns:
        return ["no turns"]
    for index, turn in enumerate(turns):
        role = turn.get("from")
        expected = ("human",) if index == 0 else ("gpt",) if index % 2 == 1 else ("observation", "human")
        if role not in expected:
            problems.append(f"turn {index}: {role!r} where {' or '.join(expected)} belongs")
            continue
        if role == "gpt":
            value = turn.get("value", "")
            thinks = len(re.findall(r"<think>.*?</think>", value, re.S))
            calls = len(re.findall(r"<tool_call>.*?</tool_call>", value, re.S))
            answers = len(re.findall(r"<answer>.*?</answer>", value, re.S))
            if thinks != 1:
                problems.append(f"turn {index}: {thinks} think blocks (one expected)")
            if calls + answers != 1:
                problems.append(f"turn {index}: {calls} tool calls and {answers} answers (exactly one expected)")
    if turns[-1].get("from") != "gpt" or "<answer>" not in turns[-1].get("value", ""):
        problems.append("the last turn is not the gpt answer")
    return problems


def conversation_stats(records: list[SFTConversation]) -> dict[str, Any]:
    calls = [sum(1 for t in r.conversations if t["from"] == "gpt") - 1 for r in records]
    return {"conversations": len(records), "by_source": _count(r.source for r in records),
            "by_bucket": _count(str(r.bucket) for r in records),
            "tool_calls_mean": round(sum(calls) / len(calls), 3) if calls else 0.0}


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def _in_turn(queues: list[list[QAPair]], wanted: int) -> list[QAPair]:
    """Up to ``wanted`` pairs taken one per queue in turn (popped from the queues)."""
    taken: list[QAPair] = []
    while len(taken) < wanted and any(queues):
        for queue in queues:
            if queue and len(taken) < wanted:
                taken.append(queue.pop(0))
    return taken


def balanced_sample(pairs: list[QAPair], per_bucket: int | Mapping[str, int], seed: int,
                    text_graphs: frozenset[str] = frozenset(), text_graph_share: float | None = None) -> list[QAPair]:
    """At most ``per_bucket`` pairs of each bucket (one count for all, or one per bucket), taken from the
    domains in turn (a shuffled order within each), so that every domain has the same share of the
    conversations whatever its number of pairs: with many domains the quick profile trains on all of them in
    the same time. With ``text_graph_share`` the domains in ``text_graphs`` (graphs built from text) take that
    share of each bucket, in turn among themselves, and the others the rest; a group that runs short leaves its
    places to the other."""
    rng = random.Random(seed)
    chosen: list[QAPair] = []
    for bucket in sorted({p.bucket for p in pairs}):
        wanted = per_bucket if isinstance(per_bucket, int) else per_bucket[bucket]
        queues: dict[str, list[QAPair]] = {}
        for domain in sorted({p.domain for p in pairs if p.bucket == bucket}):
            members = sorted((p for p in pairs if p.bucket == bucket and p.domain == domain), key=lambda p: p.id)
            rng.shuffle(members)
            queues[domain] = members
        if text_graph_share is None:
            chosen += _in_turn(list(queues.values()), wanted)
            continue
        text = [q for d, q in queues.items() if d in text_graphs]
        other = [q for d, q in queues.items() if d not in text_graphs]
        taken = _in_turn(text, round(wanted * text_graph_share))
        taken += _in_turn(other, wanted - len(taken))
        chosen += taken + _in_turn(text, wanted - len(taken))  # the structured graphs ran short
    return chosen


def build_sft_conversations(params: Any, *, force: bool = False, teacher: Any = None, thinker: Any = None,
                            progress: bool = True) -> Any:
    """artifacts/sft/conversations.jsonl (+ manifest): the configured sources over the train split.

    ``teacher`` is a ChatClient for source (c); without one the teacher source is left out (and said so
    in the manifest). ``thinker`` is the ChatClient of ``sft_data.thinking: llm`` (default: the one params.llm
    describes, ``build_chat_client``). Source (b), ``agent``, reads RL stage 1's kept rollouts and fails with
    ArtifactMissingError when stage 1 has not run (every entry point runs stage 1 before this step). Rebuilt only
    when the QA dataset, its domains' KGs, the stage-1 rollouts (with ``agent``) or the sft_data params change.
    """
    from pipelines.agent.client import InProcessToolClient
    from pipelines.eval.runner import load_gold_paths, load_split

    settings = params.sft_data
    folder = sft_conversations_dir(params.artifacts_dir)
    dataset_dir = qa_dir(params.artifacts_dir, "dataset")
    inputs = manifest_inputs(dataset_dir, params.root, "the QA dataset (run `omne qa build`)",
                             only={"train.jsonl", "gold_paths.jsonl"})
    pairs = load_split(params, "train", "sft_data")  # the domains sft_data.domains / exclude_domains select
    domains = sorted({p.domain for p in pairs})
    for domain in domains:  # the graphs the tools answer from (and remaining_question thinking reads)
        inputs |= manifest_inputs(kg_dir(params.artifacts_dir, domain), params.root, f"knowledge graph of {domain!r}")
    if "agent" in settings.sources:
        inputs |= stage1_rollouts_inputs(params)
    thinker = llm_thinker(params, thinker)
    shaping = {**settings.result_settings(), "tools": params.section("tools"), "template_version": TEMPLATE_VERSION,
               "prompt_version": PROMPT_VERSION, "sampling": "domains_in_turn",
               "teacher": getattr(teacher, "model", None)}
    if thinker is not None:  # (only then: the fingerprints of the other thinking modes stay as they were)
        shaping["thinker"] = getattr(thinker, "model", None)
    build = ArtifactBuild(folder, "sft_conversations", inputs, shaping)
    if manifest := build.reusable(force):
        return build.result(manifest, skipped=True)
    train_ids = {p.id for p in pairs}  # (the agent source: every train question, not only the sampled ones)
    registry = load_registry(params.registry_path)
    if settings.max_per_bucket is not None:
        pairs = balanced_sample(pairs, settings.max_per_bucket, settings.seed, text_graphs=registry.text_built,
                                text_graph_share=settings.text_graph_share)
    golds = load_gold_paths(params)
    toolbox = KGToolbox(params, domains)
    toolbox.load_all()
    tools = InProcessToolClient(toolbox)
    graphs = ({d: relation_graph(d, params) for d in domains}
              if settings.thinking in ("remaining_question", "filled_question", "llm")
              else {})  # (llm rewrites remaining_question's)
    words = alias_words(name for p in pairs for name in (p.path[0], p.answer))
    registered = registry.names
    records: list[SFTConversation] = []
    skipped = 0
    writing = {"mode": settings.mode, "specs": params.tools.prompt_specs,
               "relation_descriptions": params.tools.relation_descriptions,
               "neighbor_types": params.tools.neighbor_types and settings.type_check,
               "relation_phrases": params.tools.unlabelled_relations == "phrase",
               "filled_question": settings.thinking == "filled_question",
               "quote_lines": settings.quote_relation_line, "type_form": settings.type_check_form}
    if "template" in settings.sources:
        from tqdm.auto import tqdm

        for pair in tqdm(pairs, desc="sft template", unit="qa", disable=not progress):
            gold = golds.get(pair.id)
            valid = [p for p in (gold.paths if gold else []) if p.valid][: settings.paths_per_pair] or [None]
            for index in range(len(valid)):
                record = None
                rng = random.Random(f"{settings.seed}:{pair.id}:{index}")
                naming = random.Random(f"{settings.seed}:{pair.id}:{index}:graph")  # own draws: adding it moved nothing
                shown = (graph_alias(naming, words, registered)
                         if naming.random() < settings.renamed_graph_share else None)
                draw = rng.random()
                if draw < settings.recovery_fraction:
                    record = template_conversation(pair, gold, tools, misspell=rng, recover=True, **writing,
                                                   path_index=index, graph=graphs.get(pair.domain), graph_name=shown)
                elif draw < settings.recovery_fraction + settings.misspelled_start_fraction:
                    record = template_conversation(pair, gold, tools, misspell=rng, **writing, path_index=index,
                                                   graph=graphs.get(pair.domain), graph_name=shown)
                elif draw < (settings.recovery_fraction + settings.misspelled_start_fraction
                             + settings.loop_recovery_fraction):
                    record = template_conversation(pair, gold, tools, **writing, path_index=index,
                                                   graph=graphs.get(pair.domain), graph_name=shown,
                                                   loop_at=rng.randrange(pair.hops),
                                                   self_loop=settings.self_loop_share > 0
                                                   and rng.random() < settings.self_loop_share)
                elif draw < (settings.recovery_fraction + settings.misspelled_start_fraction
                             + settings.loop_recovery_fraction + settings.answer_recovery_fraction):
                    record = template_conversation(pair, gold, tools, **writing, path_index=index,
                                                   graph=graphs.get(pair.domain), graph_name=shown, retype_answer=rng)
                if record is None:
                    record = template_conversation(pair, gold, tools, **writing, path_index=index,
                                                   graph=graphs.get(pair.domain), graph_name=shown)
                if record is None:
                    skipped += 1
                else:
                    records.append(record)
    thinking_stats: dict[str, Any] = {}
    if thinker is not None:

        records, thinking_stats = llm_thinking(records, thinker, params.llm, progress=progress)
    agent_stats: dict[str, Any] = {}
    if "agent" in settings.sources:
        agent_records, agent_source = stage1_conversations(params, train_ids, records)
        records += agent_records
        agent_stats = agent_source.model_dump()
    teacher_stats: dict[str, Any] = {}
    if "teacher" in settings.sources:
        if teacher is None:
            teacher_stats = {"left_out": "no teacher client (set sft_data.teacher_model and an endpoint)"}
        else:
            from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task

            engine = RolloutEngine(teacher, omne_protocol(settings.mode, params.tools.prompt_specs), tools,
                                   RolloutParams.of_agent(params.agent, temperature=0.0))
            trajectories = engine.run([Task(qa_id=p.id, domain=p.domain, question=p.question, gold_answers=p.answers,
                                            bucket=p.bucket, hops=p.hops) for p in pairs], progress=progress)
            kept = [c for t in trajectories if (c := trajectory_conversation(t, source="teacher")) is not None]
            teacher_stats = {"rollouts": len(trajectories), "kept": len(kept)}
            records += kept
    problems = {r.id: format_problems(r) for r in records}
    bad = {k: v for k, v in problems.items() if v}
    with build.writing() as draft:
        write_jsonl(draft.folder / CONVERSATIONS_FILE, records)
        draft.record(files=[draft.folder / CONVERSATIONS_FILE],
                     rows={"conversations": len(records), "skipped_pairs": skipped,
                           "misspelled_start": sum(r.id.endswith("-m") for r in records),
                           "not_found_recovery": sum(r.id.endswith("-r") for r in records),
                           "loop_recovery": sum(r.id.endswith("-l") for r in records),
                           "answer_recovery": sum(r.id.endswith("-a") for r in records),
                           "renamed_graph": sum(r.domain is not None for r in records)},
                     metadata={"stats": conversation_stats(records), "format_problems": len(bad),
                               "format_examples": dict(list(bad.items())[:5]), "agent": agent_stats,
                               "teacher": teacher_stats, "llm_thinking": thinking_stats})
    return build.result()


def llm_thinker(params: Any, thinker: Any = None) -> Any:
    """The ChatClient that writes the template thinking with ``sft_data.thinking: llm`` (``thinker`` when given,
    else params.llm's, behind its disk cache); None for the other thinking modes and in no_think mode."""
    if params.sft_data.thinking != "llm" or params.sft_data.mode == "no_think":
        return None
    if thinker is not None:
        return thinker

    return build_chat_client(params)


def read_sft_conversations(params: Any) -> list[SFTConversation]:

    return read_jsonl(sft_conversations_dir(params.artifacts_dir) / CONVERSATIONS_FILE, SFTConversation)
