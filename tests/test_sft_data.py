"""SFT conversations: gold paths walked with the real tools, own correct rollouts, the ShareGPT contract."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from pipelines.agent.client import InProcessToolClient
from pipelines.agent.rollout import REPEAT_NOTE, UNSHOWN_ANSWER_NOTE, RolloutEngine, RolloutParams, Task
from pipelines.config import Params
from pipelines.eval.runner import load_split
from pipelines.llm.scripted import ScriptedChatClient
from pipelines.qa.models import PathEdge
from pipelines.text.names import mentions
from pipelines.train.sft_data import (
    TEMPLATE_VERSION,
    SFTConversation,
    build_sft_conversations,
    format_problems,
    omne_protocol,
    quoted_line,
    read_sft_conversations,
    trajectory_conversation,
)
from tests.test_eval import gold_policy


def test_template_conversations_walk_gold_paths_with_real_tool_responses(solar_qa: Params) -> None:
    result = build_sft_conversations(solar_qa, progress=False)
    records = read_sft_conversations(solar_qa)
    train = {p.id: p for p in load_split(solar_qa, "train")}
    assert records and result.manifest.rows["conversations"] == len(records)
    assert result.manifest.metadata["format_problems"] == 0
    assert result.manifest.params["template_version"] == TEMPLATE_VERSION  # a new template text rebuilds them
    for record in (r for r in records if not r.id.endswith("-r")):  # (recovery walks: their own test below)
        pair = train[record.id.rsplit("-t", 1)[0]]
        assert format_problems(record) == [] and record.golden_answer == pair.answer
        turns = record.conversations
        assert turns[0]["from"] == "human" and pair.question in turns[0]["value"]
        assert turns[-1]["value"].endswith(f"<answer> {pair.answer}</answer>")  # after a space, as the thinking
        observations = [t["value"] for t in turns if t["from"] == "observation"]
        assert observations[0].startswith("<tool_response>\nFound ") and pair.path[0] in observations[0]
        for node, response in zip(pair.path[1:], observations[1:], strict=True):
            assert node in response  # node_info of the previous entity lists the next one
        assert '"name": "node_info"' in record.tools and "<tools>" in record.system
        # the thinking: where the question starts, what each relation showed, then the answer
        thinks = [t["value"].split("</think>")[0].removeprefix("<think>") for t in turns if t["from"] == "gpt"]
        assert thinks[0].startswith(f"The question starts from {pair.path[0]}")  # (and asks for: its type)
        assert thinks[1].startswith(f"{pair.path[0]} is in the graph.")
        assert thinks[-1].endswith(f"That answers the question: {pair.answer}.")
    assert build_sft_conversations(solar_qa, progress=False).skipped


def test_template_tool_responses_are_those_of_an_episode_asking_the_question(solar_qa: Params) -> None:
    """The template walks its tools as one episode that knows the question (tools.node_info_order: question), so
    each node_info response is the one a rollout of that question gets: its relations ranked by the question and
    the way back listed last."""
    from pipelines.agent.tools import KGToolbox

    assert solar_qa.tools.node_info_order == "question"
    build_sft_conversations(solar_qa, progress=False)
    tools, protocol = InProcessToolClient(KGToolbox(solar_qa)), omne_protocol()
    replayed = ranked = 0
    for record in read_sft_conversations(solar_qa):
        if record.domain is not None:  # an aliased graph name: the calls name a graph the tools do not know
            continue
        turns = record.conversations
        calls = [t["value"].split("<tool_call>")[1].split("</tool_call>")[0] for t in turns if "<tool_call>" in t["value"]]
        observations = [t["value"] for t in turns if t["from"] == "observation"]
        for call, observation in zip(calls, observations, strict=True):
            result = tools.call(call, episode_id=f"replay-{record.id}", question=record.question)
            assert protocol.response_message(result.content) == observation, (record.id, call)
            ranked += "closest to the question first" in observation
        replayed += 1
    assert replayed and ranked


def with_thinking(params: Params, thinking: str) -> Params:
    return params.model_copy(update={"sft_data": params.sft_data.model_copy(update={"thinking": thinking})})


def gpt_thoughts(record: SFTConversation) -> list[str]:
    """The think text of each gpt turn."""
    return [t["value"].split("</think>")[0].removeprefix("<think>") for t in record.conversations if t["from"] == "gpt"]


def left_of_question(thoughts: list[str]) -> list[str]:
    """What each hop's thought says is left of the question (every thought after the first node_info but the last)."""
    return [t.split("So the question becomes: ", 1)[1] for t in thoughts[2:-1]]


def actions(record: SFTConversation) -> list[str]:
    """The conversation without its thinking: calls, answers and tool responses."""
    return [t["value"].split("</think>")[-1] for t in record.conversations]


def thinking_walks(solar_qa: Params, thinking: str, *, rebuilt: bool) -> list[tuple[Any, SFTConversation, list[str]]]:
    """The conversations built with ``sft_data.thinking: thinking``, each with its pair and what its thoughts say is
    left of the question after each hop but the last, the last thought answering. ``rebuilt``: the build must not be
    skipped (the conversations on disk were built with another thinking, which is part of the fingerprint)."""
    params = with_thinking(solar_qa, thinking)
    assert build_sft_conversations(params, progress=False).skipped is not rebuilt
    train = {p.id: p for p in load_split(params, "train")}
    walks = []
    for record in read_sft_conversations(params):
        pair = train[record.id.rsplit("-t", 1)[0]]
        thinks = gpt_thoughts(record)
        assert thinks[-1].endswith(f"That answers the question: {pair.answer}.")
        walks.append((pair, record, left_of_question(thinks)))
        assert len(walks[-1][2]) == pair.hops - 1
    assert any(left for _, _, left in walks)
    return walks


def test_remaining_question_thinking_reads_the_question_one_clause_per_hop(solar_qa: Params) -> None:
    relations = with_thinking(solar_qa, "relations")
    build_sft_conversations(relations, progress=False)
    plain = {r.id: r for r in read_sft_conversations(relations)}
    for pair, record, left in thinking_walks(solar_qa, "remaining_question", rebuilt=True):
        # after each hop but the last, what is left of the question: shorter each time, from the entity reached
        assert all(mentions(q, node) for q, node in zip(left, pair.path[1:], strict=False))
        assert all(len(a) > len(b) for a, b in zip([pair.question, *left], left, strict=False))
        # the same walk (calls and tool responses) as the plain conversation: only the thinking differs
        assert actions(record) == actions(plain[record.id])
        assert all("So the question becomes" not in t for t in gpt_thoughts(plain[record.id]))


def test_without_type_checks_the_thinking_names_no_type_and_the_walk_is_the_same(solar_qa: Params) -> None:
    assert solar_qa.tools.neighbor_types and solar_qa.sft_data.type_check
    build_sft_conversations(solar_qa, progress=False)
    checked = {r.id: r for r in read_sft_conversations(solar_qa)}
    unchecked = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(update={"type_check": False})})
    build_sft_conversations(unchecked, progress=False)
    records = read_sft_conversations(unchecked)
    assert {r.id for r in records} == set(checked)
    assert any("The question asks for" in t for r in checked.values() for t in gpt_thoughts(r))
    for record in records:
        assert not any("The question asks for" in t or " and asks for " in t for t in gpt_thoughts(record))
        assert actions(record) == actions(checked[record.id])  # the same calls and responses, types shown
    assert any(re.search(r"\[[a-z]+\]", t["value"]) for r in records for t in r.conversations
               if t["from"] == "observation")


def test_bracket_type_checks_copy_the_line_that_lists_the_entity_and_the_walk_is_the_same(solar_qa: Params) -> None:
    assert solar_qa.sft_data.type_check_form == "bracket"
    sentence = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"type_check_form": "sentence"})})
    build_sft_conversations(sentence, progress=False)
    sentences = {r.id: r for r in read_sft_conversations(sentence)}
    assert not build_sft_conversations(solar_qa, progress=False).skipped  # the form is part of the fingerprint
    records = read_sft_conversations(solar_qa)
    assert {r.id for r in records} == set(sentences)
    sentence_check = re.compile(r"; \S.* is an? \S+\.")
    assert any(sentence_check.search(t) for r in sentences.values() for t in gpt_thoughts(r))
    checks = 0
    for record in records:
        assert actions(record) == actions(sentences[record.id])
        response = ""
        for turn in record.conversations:
            if turn["from"] == "observation":
                response = turn["value"]
                continue
            if turn["from"] != "gpt":
                continue
            assert not sentence_check.search(turn["value"])  # no sentence-form check left
            for listed in re.findall(r"the response lists (.+? \[[^\]]+\])\.", turn["value"]):
                assert re.search(r"^\d+\. .*[-\]>] " + re.escape(listed) + "$", response, re.M), (record.id, listed)
                checks += 1
    assert checks > len(records) / 2
    assert any(re.search(r"asks for \[[^\]]+\]\. I look it up", t) for r in records for t in gpt_thoughts(r))


def test_filled_question_thinking_copies_the_question_with_each_entity_reached_named(solar_qa: Params) -> None:
    remaining = with_thinking(solar_qa, "remaining_question")
    build_sft_conversations(remaining, progress=False)
    rewritten = {r.id: r for r in read_sft_conversations(remaining)}
    for pair, record, left in thinking_walks(solar_qa, "filled_question", rebuilt=True):
        # each text names every entity reached so far, and asks what the question asks
        for i, text in enumerate(left):
            assert all(mentions(text, node) for node in pair.path[1:i + 2]), (record.id, text)
            assert text.rsplit(". ", 1)[-1].split()[0] == pair.question.rsplit(". ", 1)[-1].split()[0]
        # solar's multi-hop questions are 2-hop: the filled question is the last hop's, as remaining_question's
        # (3+ questions: tests/test_qa_readable.py, on the embedded domains); the walk is the same
        assert left == left_of_question(gpt_thoughts(rewritten[record.id]))
        assert actions(record) == actions(rewritten[record.id])


def test_misspelled_start_questions_walk_on_from_the_matchers_exact_name(solar_qa: Params) -> None:
    import re

    plain = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"recovery_fraction": 0.0, "loop_recovery_fraction": 0.0})})
    build_sft_conversations(plain, progress=False)
    plain_ids = {r.id for r in read_sft_conversations(plain)}
    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"misspelled_start_fraction": 1.0, "recovery_fraction": 0.0})})
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    train = {p.id: p for p in load_split(params, "train")}
    misspelled = [r for r in records if r.id.endswith("-m")]
    assert misspelled and result.manifest.rows["misspelled_start"] == len(misspelled)
    for record in misspelled:
        pair = train[record.id.rsplit("-t", 1)[0]]
        start = pair.path[0]
        calls = re.findall(r'(\w+)\(node_name="([^"]*)"', "".join(t["value"] for t in record.conversations
                                                                if t["from"] == "gpt"))
        (matcher, written), (tool, walked) = calls[0], calls[1]
        assert matcher == "entity_matcher" and written != start and tool == "node_info" and walked == start
        assert written in record.question and start not in record.question  # the question's spelling is looked up
        assert record.question == pair.question.replace(start, written)
        assert format_problems(record) == [] and start in record.conversations[2]["value"]  # the matcher shows it
    # the same pairs as without misspellings: one whose start cannot be misspelled or found keeps its plain form
    assert {r.id.removesuffix("-m") for r in records} == plain_ids


def test_recovery_conversations_copy_the_closest_name_after_not_found(solar_qa: Params) -> None:
    import re

    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"recovery_fraction": 1.0, "misspelled_start_fraction": 0.0})})
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    train = {p.id: p for p in load_split(params, "train")}
    recovered = [r for r in records if r.id.endswith("-r")]
    assert recovered and result.manifest.rows["not_found_recovery"] == len(recovered)
    for record in recovered:
        start = train[record.id.rsplit("-t", 1)[0]].path[0]
        gpt = [t["value"] for t in record.conversations if t["from"] == "gpt"]
        calls = [re.findall(r'(\w+)\(node_name="([^"]*)"', text)[0] for text in gpt[:2]]
        (first, written), (second, copied) = calls
        assert (first, second) == ("node_info", "node_info") and written != start and copied == start
        failed = record.conversations[2]["value"]
        assert "not found in KG; the closest names are" in failed and f'"{start}"' in failed
        assert f"The closest name listed is {start}; I copy it exactly." in gpt[1]
        assert format_problems(record) == []
    # a pair whose misspelling the index resolves itself (or does not list) keeps its plain form
    assert len(recovered) < len(records) and not any(r.id.endswith("-m") for r in records)


def test_loop_recovery_conversations_repeat_a_call_untrained_and_walk_on_after_the_note(solar_qa: Params) -> None:
    import re

    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"recovery_fraction": 0.0, "misspelled_start_fraction": 0.0, "loop_recovery_fraction": 1.0})})
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    looped = [r for r in records if r.id.endswith("-l")]
    assert looped and len(looped) == len(records) == result.manifest.rows["loop_recovery"]
    for record in looped:
        turns = record.conversations
        untrained = [i for i, t in enumerate(turns) if t.get("train") == "false"]
        assert len(untrained) == 1 and format_problems(record) == []
        i = untrained[0]
        # the same node_info call as the turn before its response, answered with the rollout engine's note
        call = re.search(r"<tool_call>.*</tool_call>", turns[i - 2]["value"])[0]
        assert turns[i]["value"].endswith(call) and "<tool_call>node_info(" in call
        assert turns[i + 1]["value"] == f"<tool_response>\n{REPEAT_NOTE}\n</tool_response>"
        node = re.search(r'node_name="([^"]*)"', turns[i]["value"])[1]
        recovery = turns[i + 2]["value"]
        assert recovery.startswith(f"<think>The response above is all node_info shows for {node}. ")
        assert f'node_name="{node}"' not in recovery  # it walks on: another entity, or the answer
        # the looping thought reads the relation the recovery reads, then keeps the question it had: the question
        # itself at the start, else the previous turn's rewrite
        looping = re.search(r"<think>(.*)</think>", turns[i]["value"], re.S)[1]
        sentence, kept = looping.split(". So the question becomes: ")
        assert recovery.startswith(f"<think>The response above is all node_info shows for {node}. {sentence}.")
        before = re.search(r"So the question becomes: (.*?)</think>", turns[i - 2]["value"], re.S)
        assert kept == (before[1] if before else record.question)
        assert kept not in recovery
    # without the repeated turn, its note and the recovery's first sentence, each is the plain conversation
    build_sft_conversations(solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"recovery_fraction": 0.0, "misspelled_start_fraction": 0.0, "loop_recovery_fraction": 0.0})}),
        progress=False)
    plain = {r.id: r.conversations for r in read_sft_conversations(solar_qa)}
    for record in looped:
        turns = [dict(t) for t in record.conversations]
        i = next(i for i, t in enumerate(turns) if t.get("train") == "false")
        turns[i + 2]["value"] = re.sub(r"^<think>The response above is all node_info shows for .*?\. ", "<think>",
                                       turns[i + 2]["value"])
        assert turns[:i] + turns[i + 2:] == plain[record.id[:-2]]


def test_self_loops_read_the_relation_back_to_the_node_and_the_recovery_reads_it_right(solar_qa: Params) -> None:
    import re

    none = {"recovery_fraction": 0.0, "misspelled_start_fraction": 0.0, "loop_recovery_fraction": 1.0}
    relation = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(update=none)})
    build_sft_conversations(relation, progress=False)
    relation_loops = {r.id: r.conversations for r in read_sft_conversations(relation)}
    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={**none, "self_loop_share": 1.0})})
    result = build_sft_conversations(params, progress=False)
    assert not result.skipped and result.manifest.params["self_loop_share"] == 1.0
    records = read_sft_conversations(params)
    looped = [r for r in records if r.id.endswith("-l")]
    assert looped and len(looped) == result.manifest.rows["loop_recovery"]
    for record in looped:
        turns = record.conversations
        i = next(i for i, t in enumerate(turns) if t.get("train") == "false")
        node = re.search(r'node_name="([^"]*)"', turns[i]["value"])[1]
        following = re.search(r'node_name="([^"]*)"|<answer>(.*)</answer>', turns[i + 2]["value"])
        following = (following[1] or following[2]).strip()
        looping = re.search(r"<think>(.*)</think>", turns[i]["value"], re.S)[1]
        sentence = looping.split(". So the question becomes: ")[0]
        # the looping thought names the node where the right reading names the next one; the recovery reads it right
        assert following not in sentence and sentence.count(node) >= 2
        right = relation_loops[record.id][i]["value"]
        assert looping == re.search(r"<think>(.*)</think>", right, re.S)[1].replace(following, node)
        # only the untrained turn differs from the relation-reading loop's conversation
        assert turns[:i] + turns[i + 1:] == relation_loops[record.id][:i] + relation_loops[record.id][i + 1:]


def test_answer_recovery_conversations_answer_a_retyped_name_untrained_then_the_name_as_shown(solar_qa: Params) -> None:
    import re

    none = {"recovery_fraction": 0.0, "misspelled_start_fraction": 0.0, "loop_recovery_fraction": 0.0}
    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={**none, "answer_recovery_fraction": 1.0})})
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    retyped = [r for r in records if r.id.endswith("-a")]
    assert retyped and len(retyped) == result.manifest.rows["answer_recovery"]
    assert len(retyped) >= len(records) // 2  # the rest: answers no line lists by name, or that cannot be retyped
    for record in retyped:
        turns = record.conversations
        untrained = [i for i, t in enumerate(turns) if t.get("train") == "false"]
        assert untrained == [len(turns) - 3] and format_problems(record) == []
        i = untrained[0]
        wrong = re.search(r"<answer> (.*)</answer>", turns[i]["value"])[1]
        assert wrong != record.golden_answer and not re.search(re.escape(wrong) + r"(?![\w-])", turns[i - 1]["value"])
        assert turns[i + 1]["value"] == f"<tool_response>\n{UNSHOWN_ANSWER_NOTE.format(answer=wrong)}\n</tool_response>"
        recovery = turns[i + 2]["value"]
        assert recovery.startswith(f"<think>{wrong} is not how the response writes it. Line ")
        assert recovery.endswith(f"<answer> {record.golden_answer}</answer>")
        line = re.search(r"(Line \d+: .*?)\. That answers", recovery)[1]
        assert line.split(": ", 1)[1].split(" [")[0].endswith(record.golden_answer)  # the line lists the answer ...
        assert f"{line.split(': ', 1)[1]}" in turns[i - 1]["value"]  # ... as the last response writes it
    # without the retyped turn and its note, the turns before are the plain conversation's
    build_sft_conversations(solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(update=none)}),
                            progress=False)
    plain = {r.id: r.conversations for r in read_sft_conversations(solar_qa)}
    for record in retyped:
        assert record.conversations[:-3] == plain[record.id[:-2]][:-1]


def test_path_thoughts_walk_the_path_relation_by_relation() -> None:
    from pipelines.train.sft_data import path_thoughts

    nodes = ["Shamal Darfur", "Sudan", "Khartoum"]
    edges = [PathEdge(src="Shamal Darfur", keywords="subdivision of", dst="Sudan"),
             PathEdge(src="Sudan", keywords="capital", dst="Khartoum")]
    assert path_thoughts(nodes, edges, "geography", "Khartoum") == [
        "The question starts from Shamal Darfur. I look it up in the geography knowledge graph first.",
        "Shamal Darfur is in the graph. Its relations show where the question leads.",
        "Shamal Darfur is subdivision of Sudan, so the question continues from Sudan. I look at its relations next.",
        "Sudan has the capital Khartoum. That answers the question: Khartoum."]
    one = path_thoughts(nodes[:2], edges[:1], "geography", "Sudan")
    assert len(one) == 3 and one[-1] == "Shamal Darfur is subdivision of Sudan. That answers the question: Sudan."


def test_path_reading_says_each_relation_and_what_is_left_of_the_question() -> None:
    import polars as pl

    from pipelines.kg.model import ENTITY_SCHEMA, RELATION_SCHEMA, KnowledgeGraph
    from pipelines.qa.paths import RelationGraph
    from pipelines.train.sft_data import path_reading, path_thoughts

    names = ["Abu Dhabi", "United Arab Emirates", "UAE Dirham", "Arabic"]
    entities = pl.DataFrame({"id": [0, 1, 2, 3], "name": names, "key": [n.lower() for n in names],
                             "type": ["city", "country", "currency", "language"], "description": [""] * 4,
                             "source_ids": [[]] * 4}, schema=ENTITY_SCHEMA)
    relations = pl.DataFrame({"src": [0, 1, 1], "dst": [1, 2, 3],
                              "keywords": ["capital of", "uses currency", "language"],
                              "description": ["Abu Dhabi is the capital of United Arab Emirates.",
                                              "United Arab Emirates uses the UAE Dirham.",
                                              "Arabic is a language of United Arab Emirates."],
                              "weight": [1.0] * 3}, schema=RELATION_SCHEMA)
    graph = RelationGraph(KnowledgeGraph(entities=entities, relations=relations, directed=True))
    edges = [PathEdge(src="Abu Dhabi", keywords="capital of", dst="United Arab Emirates"),
             PathEdge(src="United Arab Emirates", keywords="uses currency", dst="UAE Dirham")]
    reading = path_reading(graph, names[:3], edges)
    assert reading is not None
    assert reading.sentences == ["Abu Dhabi is the capital of United Arab Emirates",
                                 "United Arab Emirates uses the UAE Dirham"]
    assert reading.remaining == ["Which currency does United Arab Emirates use?"]
    assert path_thoughts(names[:3], edges, "geography", "UAE Dirham", reading)[2:] == [
        "Abu Dhabi is the capital of United Arab Emirates. So the question becomes: Which currency does United Arab "
        "Emirates use?",
        "United Arab Emirates uses the UAE Dirham. That answers the question: UAE Dirham."]
    assert path_reading(graph, ["Abu Dhabi", "Atlantis"], edges[:1]) is None  # not in the graph: plain thoughts
    # when node_info hides relation descriptions (tools.relation_descriptions: false) the thinking reads the labels
    labels = path_reading(graph, names[:3], edges, descriptions=False)
    assert labels is not None and labels.remaining == reading.remaining
    assert labels.sentences == ["Abu Dhabi is the capital of United Arab Emirates",  # the label's phrasing
                                "United Arab Emirates uses UAE Dirham"]
    # when node_info shows the neighbours' types (tools.neighbor_types) the thinking names the type the question
    # asks for, and writes it beside each hop's type just before choosing to walk on or to answer
    typed = path_reading(graph, names[:3], edges, descriptions=False, types=True)
    assert typed is not None and typed.types == ["city", "country", "currency"]
    thoughts = path_thoughts(names[:3], edges, "geography", "UAE Dirham", typed)
    assert thoughts[0] == ("The question starts from Abu Dhabi and asks for [currency]. I look it up in the geography "
                           "knowledge graph first.")
    assert thoughts[2:] == [
        "Abu Dhabi is the capital of United Arab Emirates. The question asks for [currency]; the response lists United "
        "Arab Emirates [country]. So the question becomes: Which currency does United Arab Emirates use?",
        "United Arab Emirates uses UAE Dirham. The question asks for [currency]; the response lists UAE Dirham "
        "[currency]. That answers the question: UAE Dirham."]
    # sft_data.type_check_form: sentence names the types as nouns
    assert path_thoughts(names[:3], edges, "geography", "UAE Dirham", typed, "sentence")[2:] == [
        "Abu Dhabi is the capital of United Arab Emirates. The question asks for a currency; United Arab Emirates is "
        "a country. So the question becomes: Which currency does United Arab Emirates use?",
        "United Arab Emirates uses UAE Dirham. The question asks for a currency; UAE Dirham is a currency. That "
        "answers the question: UAE Dirham."]
    # a bridge of the answer's type (every type of a LightRAG rendering is CATEGORY): the type decides nothing,
    # so no thought names or checks it, and the remaining question alone says when the walk has answered
    same = typed.model_copy(update={"types": ["city", "currency", "currency"]})
    assert path_thoughts(names[:3], edges, "geography", "UAE Dirham", same) == path_thoughts(
        names[:3], edges, "geography", "UAE Dirham", typed.model_copy(update={"types": []}))
    assert not any("asks for" in t or "too" in t for t in path_thoughts(names[:3], edges, "geography", "UAE Dirham",
                                                                       same))
    # a 1-hop question from an entity of the answer's type ("AMERICIUM-244 [CATEGORY] decays to CURIUM-244
    # [CATEGORY]"): the type tells nothing apart, only the relation does, so no thought names or checks it
    one_hop = typed.model_copy(update={"types": ["currency", "currency"], "sentences": reading.sentences[1:]})
    assert not any("asks for" in t for t in path_thoughts(names[1:3], edges[1:], "geography", "UAE Dirham", one_hop))
    checked = one_hop.model_copy(update={"types": ["country", "currency"]})
    assert path_thoughts(names[1:3], edges[1:], "geography", "UAE Dirham", checked)[-1] == (
        "United Arab Emirates uses the UAE Dirham. The question asks for [currency]; the response lists UAE Dirham "
        "[currency]. That answers the question: UAE Dirham.")
    untyped = typed.model_copy(update={"types": ["city", None, "currency"]})  # an untyped bridge: no check
    assert path_thoughts(names[:3], edges, "geography", "UAE Dirham", untyped)[2] == (
        "Abu Dhabi is the capital of United Arab Emirates. So the question becomes: Which currency does United Arab "
        "Emirates use?")


def test_thinking_quotes_only_what_the_tool_responses_show(solar_qa: Params) -> None:
    """Quick profile: relation lines without descriptions and the tools as signatures; a thought never quotes a
    relation description the model was not shown. Paper profile's settings: descriptions shown, and quoted."""
    import csv

    described = [row["description"].rstrip(".") for row in
                 csv.DictReader((solar_qa.root / "kg_assets" / "solar" / "triples.csv").open(encoding="utf-8"))]
    remaining = solar_qa.sft_data.model_copy(update={"thinking": "remaining_question"})
    quick = solar_qa.model_copy(update={"sft_data": remaining})
    assert (quick.tools.relation_descriptions, quick.tools.prompt_specs) == (False, "signatures")
    build_sft_conversations(quick, progress=False)
    records = read_sft_conversations(quick)
    text = "".join(t["value"] for r in records for t in r.conversations)
    assert records and not any(d in text for d in described)
    assert all("<tools>\nentity_matcher(node_name, graph_type): " in r.system and '"type": "function"' not in r.system
               for r in records)
    paper = quick.model_copy(update={"tools": quick.tools.model_copy(
        update={"relation_descriptions": True, "prompt_specs": "json"})})
    assert not build_sft_conversations(paper, progress=False).skipped  # both settings are in the fingerprint
    records = read_sft_conversations(paper)
    thoughts = "".join(t["value"].split("</think>")[0] for r in records for t in r.conversations if t["from"] == "gpt")
    shown = "".join(t["value"] for r in records for t in r.conversations if t["from"] == "observation")
    quoted = [d for d in described if d in thoughts]
    assert quoted and all(d in shown for d in quoted)
    assert all('<tools>\n{"type": "function", "function": {"name": "entity_matcher"' in r.system for r in records)


def test_thinking_after_node_info_quotes_the_line_that_lists_the_next_entity(solar_qa: Params) -> None:
    """Each thought after a node_info response starts with "Line k: <relation> <name> [type]", copied from line k of
    that response, and the name it quotes is the one the next call or the answer copies."""
    import re

    quoting = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"quote_relation_line": True})})
    build_sft_conversations(quoting, progress=False)
    records = read_sft_conversations(quoting)
    quotes = 0
    for record in records:
        turns = record.conversations
        for before, response, after in zip(turns[1:], turns[2:], turns[3:], strict=False):
            if before["from"] != "gpt" or "<tool_call>node_info(" not in before["value"] or after["from"] != "gpt":
                continue
            if "<error>" in response["value"]:  # a misspelling's "not found", or the repeat note: no line to quote
                continue
            think = after["value"].split("</think>")[0].removeprefix("<think>")
            think = re.sub(r"^The response above is all node_info shows for .*?\. (?=Line )", "", think)
            quoted = re.match(r"Line (\d+): (.*?\]-[->]? ?(.*?)(?: \[[^\]]*\])?)\. ", think)
            assert quoted, think
            rank, relation, name = quoted.groups()
            listed = next(line for line in response["value"].splitlines() if line.startswith(f"{rank}. "))
            assert listed.removeprefix(f"{rank}. ").startswith(relation)
            target = re.search(r'node_name="([^"]*)"|<answer> (.*)</answer>', after["value"])
            assert name in {target[1], target[2]}
            quotes += 1
    assert quotes >= len(records)  # every conversation reads at least one relation
    # off (the default), the thoughts are the reading alone, and the fingerprint is the one before the setting
    result = build_sft_conversations(solar_qa, progress=False)
    assert not result.skipped and "quote_relation_line" not in result.manifest.params
    text = "".join(t["value"] for r in read_sft_conversations(solar_qa) for t in r.conversations if t["from"] == "gpt")
    assert "Line 1: " not in text


def test_quoted_line_is_the_line_listing_that_exact_name_without_its_description() -> None:
    response = "\n".join(["Entity: PyMuPDF Version 1.2.0", "Type: parser", "Relations (4):",
                          "1. -[document detail,tool usage]-- CSWP.29.pdf [data]: the PDF it parsed",
                          "2. <-[mentions]- NIST.CSWP.29.pdf [document]: the paper mentions the version",
                          "3. -[mentions]-> NIST.CSWP.29.pdf",
                          "4. -[reference]-- Header: lists NIST.CSWP.29 in its header"])
    assert quoted_line(response, "NIST.CSWP.29.pdf") == "Line 2: <-[mentions]- NIST.CSWP.29.pdf [document]"
    assert quoted_line(response, "NIST.CSWP.29.pdf", "mentions") == "Line 2: <-[mentions]- NIST.CSWP.29.pdf [document]"
    assert quoted_line(response, "CSWP.29.pdf") == "Line 1: -[document detail,tool usage]-- CSWP.29.pdf [data]"
    assert quoted_line(response, "Header") == "Line 4: -[reference]-- Header"
    assert quoted_line(response, "NIST.CSWP.29") is None  # only part of a listed name, and in a description
    assert quoted_line(response, "PyMuPDF Version 1.2.0") is None  # the entity itself, not a listed neighbour
    triples = "1. Lenny -[emphasizes the role of]-> Channel DNA [concept]\n2. Lenny Rachitsky -[hosts]-> Lenny"
    assert quoted_line(triples, "Lenny") == "Line 2: Lenny Rachitsky -[hosts]-> Lenny"


def test_correct_rollouts_convert_and_wrong_ones_do_not(solar_qa: Params, toolbox) -> None:  # noqa: ANN001
    pair = load_split(solar_qa, "train")[0]
    task = Task(qa_id=pair.id, domain="solar", question=pair.question, gold_answers=pair.answers)
    engine = RolloutEngine(ScriptedChatClient(gold_policy(solar_qa)), omne_protocol(), InProcessToolClient(toolbox),
                           RolloutParams())
    right = engine.run([task], progress=False)[0]
    record = trajectory_conversation(right, source="agent")
    assert record is not None and format_problems(record) == []
    assert [t["from"] for t in record.conversations][:4] == ["human", "gpt", "observation", "gpt"]
    wrong = RolloutEngine(ScriptedChatClient(["<think>?</think><answer>Pluto</answer>"]), omne_protocol(),
                          InProcessToolClient(toolbox), RolloutParams()).run([task], progress=False)[0]
    assert trajectory_conversation(wrong, source="agent") is None


def test_format_check_names_what_is_wrong() -> None:
    def record(turns: list[tuple[str, str]]) -> SFTConversation:
        return SFTConversation(id="x", graph_type="solar", question="q", golden_answer="a", system="s", tools="[]",
                               conversations=[{"from": f, "value": v} for f, v in turns])

    good = record([("human", "q"), ("gpt", "<think>t</think><tool_call>f()</tool_call>"), ("observation", "r"),
                   ("gpt", "<think>t</think><answer>a</answer>")])
    assert format_problems(good) == []
    assert format_problems(record([("human", "q"), ("observation", "r")]))[0].startswith("turn 1: 'observation'")
    two = record([("human", "q"), ("gpt", "<think>a</think><think>b</think><answer>a</answer>")])
    assert format_problems(two) == ["turn 1: 2 think blocks (one expected)"]
    both = record([("human", "q"), ("gpt", "<think>a</think><tool_call>f()</tool_call><answer>a</answer>")])
    assert "exactly one expected" in format_problems(both)[0]
    unfinished = record([("human", "q"), ("gpt", "<think>a</think><tool_call>f()</tool_call>")])
    assert format_problems(unfinished) == ["the last turn is not the gpt answer"]
    assert json.loads(good.model_dump_json())["conversations"][0] == {"from": "human", "value": "q"}


def test_renamed_graph_conversations_call_the_alias_and_get_the_real_domains_answers(solar_qa: Params) -> None:
    import re

    from pipelines.eval.behaviour import behaviour

    plain_params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"renamed_graph_share": 0.0})})
    build_sft_conversations(plain_params, progress=False)
    plain = {r.id: r for r in read_sft_conversations(plain_params)}
    assert all(r.graph_type == "solar" and r.domain is None for r in plain.values())
    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"renamed_graph_share": 1.0})})
    result = build_sft_conversations(params, progress=False)  # the share is in the fingerprint: rebuilt
    records = read_sft_conversations(params)
    assert not result.skipped and result.manifest.rows["renamed_graph"] == len(records) == len(plain)
    aliases = {r.graph_type for r in records}
    assert len(aliases) > 1 and "solar" not in aliases  # drawn per conversation, never a registered name
    for record in records:
        alias = record.graph_type
        assert record.domain == "solar" and re.fullmatch(r"[a-z0-9_]+", alias)
        turns = record.conversations
        assert turns[0]["value"].startswith(f"Knowledge graph: {alias}\n")
        gpt = "".join(t["value"] for t in turns if t["from"] == "gpt")
        assert re.findall(r'graph_type="([^"]*)"', gpt) == [alias] * (len(turns) // 2 - 1)  # every call
        assert f"in the {alias} knowledge graph" in gpt and "solar" not in gpt.lower()
        # the tools answered from the real domain: the same responses as the conversation under its own name
        assert [t["value"] for t in turns if t["from"] == "observation"] == [
            t["value"] for t in plain[record.id].conversations if t["from"] == "observation"]
    # a model that calls a graph by a name it memorised instead: typed error listing the known graphs, counted
    from pipelines.agent.client import InProcessToolClient
    from pipelines.agent.tools import KGToolbox

    tools = InProcessToolClient(KGToolbox(solar_qa))
    pair = load_split(solar_qa, "train")[0]
    task = Task(qa_id=pair.id, domain="solar", question=pair.question, gold_answers=pair.answers)
    calls = ['<think>a</think><tool_call>entity_matcher(node_name="Sun", graph_type="chemistry")</tool_call>',
             '<think>b</think><tool_call>entity_matcher(node_name="Sun", graph_type="solar")</tool_call>',
             "<think>c</think><answer>Sun</answer>"]
    trajectory = RolloutEngine(ScriptedChatClient(calls), omne_protocol(), tools, RolloutParams()).run(
        [task], progress=False)[0]
    unknown = trajectory.tool_calls[0]
    assert unknown.error_type == "unknown_graph" and "known graphs: solar" in unknown.response
    scores = behaviour([trajectory])
    assert scores.unknown_graph_calls_per_sample == 1.0 and scores.unknown_graph_call_share == 0.5
    assert scores.other_graph_calls_per_sample == 0.0


def test_graph_aliases_are_slugs_drawn_from_entity_words_and_never_a_taken_name() -> None:
    import random

    from pipelines.train.graph_names import alias_words, graph_alias

    words = alias_words(["Abu Dhabi", "UAE Dirham", "Jupiter", "Io", "Hale-Bopp (comet)"])
    assert words == ["bopp", "comet", "dhabi", "dirham", "hale", "jupiter"]  # 4-10 letters: no "Abu", "UAE", "Io"
    rng = random.Random(0)
    drawn = [graph_alias(rng, words, taken=["jupiter"]) for _ in range(200)]
    assert all(a != "jupiter" and all(part in words or part.isdigit() for part in a.split("_")) for a in drawn)
    assert len(set(drawn)) > 50 and any("_" in a for a in drawn) and any("_" not in a for a in drawn)
    assert drawn == [graph_alias(r, words, taken=["jupiter"]) for r in [random.Random(0)] for _ in range(200)]
    with pytest.raises(ValueError, match="no words"):
        graph_alias(rng, [], taken=[])


def test_balanced_sample_gives_every_domain_the_same_share_of_each_bucket_and_text_graphs_theirs() -> None:
    from collections import Counter

    from pipelines.train.sft_data import balanced_sample
    from tests.test_qa_expectations import pair

    pairs = [pair(f"Q{d}{i}?", ["A", f"B{d}{i}"], ["r"], "train", domain=d) for d in ("big", "mid") for i in
             range({"big": 40, "mid": 12}[d])]
    pairs += [pair(f"Q{i} deep?", ["A", "B", "C", f"D{i}"], ["r", "s", "t"], "train", domain="small") for i in range(3)]
    chosen = balanced_sample(pairs, per_bucket=20, seed=0)
    by = Counter((p.bucket, p.domain) for p in chosen)
    assert by == {("1-2", "big"): 10, ("1-2", "mid"): 10, ("3+", "small"): 3}  # in turn, not by size
    assert len({p.id for p in chosen}) == len(chosen)
    assert [p.id for p in balanced_sample(pairs, 20, 0)] == [p.id for p in chosen]  # stable per seed
    assert [p.id for p in balanced_sample(pairs, 20, 1)] != [p.id for p in chosen]
    few = balanced_sample(pairs, per_bucket=5, seed=0)
    assert Counter(p.domain for p in few if p.bucket == "1-2") == {"big": 3, "mid": 2}
    mixed = balanced_sample(pairs, per_bucket={"1-2": 7, "3+": 2}, seed=0)  # a count per bucket
    assert Counter((p.bucket, p.domain) for p in mixed) == {("1-2", "big"): 4, ("1-2", "mid"): 3, ("3+", "small"): 2}
    # graphs built from text take their share of each bucket (sft_data.text_graph_share), the others the rest
    shared = balanced_sample(pairs, per_bucket=20, seed=0, text_graphs=frozenset({"mid"}), text_graph_share=0.2)
    assert Counter((p.bucket, p.domain) for p in shared) == {("1-2", "big"): 16, ("1-2", "mid"): 4, ("3+", "small"): 3}
    # a group that runs short leaves its places to the other: "small" alone is in its 3+ bucket
    short = balanced_sample(pairs, per_bucket=30, seed=0, text_graphs=frozenset({"big"}), text_graph_share=0.9)
    assert Counter((p.bucket, p.domain) for p in short) == {("1-2", "big"): 27, ("1-2", "mid"): 3, ("3+", "small"): 3}
    short = balanced_sample(pairs, per_bucket=30, seed=0, text_graphs=frozenset({"mid"}), text_graph_share=0.9)
    assert Counter((p.bucket, p.domain) for p in short) == {("1-2", "big"): 18, ("1-2", "mid"): 12, ("3+", "small"): 3}


def test_a_count_per_bucket_must_name_both_buckets() -> None:
    from pipelines.config import SFTDataParams

    assert SFTDataParams(max_per_bucket={"1-2": 110, "3+": 190}).max_per_bucket == {"1-2": 110, "3+": 190}
    with pytest.raises(ValidationError, match="both buckets"):
        SFTDataParams(max_per_bucket={"3+": 190})
    with pytest.raises(ValidationError):
        SFTDataParams(max_per_bucket={"1-2": 0, "3+": 190})  # counts are positive


def test_conversations_come_only_from_the_train_pairs_of_the_selected_domains(twin_qa: Params) -> None:
    from click.testing import CliRunner

    from pipelines.cli import cli
    from pipelines.config import with_overrides

    domain_of = {p.id: p.domain for p in load_split(twin_qa, "train")}
    assert set(domain_of.values()) == {"solar", "mirror"}
    everything = build_sft_conversations(twin_qa, progress=False)
    assert not {"domains", "exclude_domains"} & set(everything.manifest.params)  # unset: fingerprints as before
    assert {domain_of[r.id.rsplit("-t", 1)[0]] for r in read_sft_conversations(twin_qa)} == {"solar", "mirror"}

    held_out = with_overrides(twin_qa, {"sft_data": {"exclude_domains": ["mirror"]}})
    result = build_sft_conversations(held_out, progress=False)
    assert not result.skipped and result.manifest.params["exclude_domains"] == ["mirror"]  # a new selection rebuilds
    records = read_sft_conversations(held_out)
    assert records and {domain_of[r.id.rsplit("-t", 1)[0]] for r in records} == {"solar"}
    assert {r.domain or r.graph_type for r in records} == {"solar"}  # the tools answered from solar alone
    assert build_sft_conversations(held_out, progress=False).skipped

    # the command line: --domain sets sft_data.domains for this run
    command = ["--params", str(twin_qa.root / "params.yaml"), "sft", "data"]
    only = CliRunner().invoke(cli, [*command, "--domain", "mirror"])
    assert only.exit_code == 0 and "built:" in only.output, only.output
    assert {domain_of[r.id.rsplit("-t", 1)[0]] for r in read_sft_conversations(twin_qa)} == {"mirror"}
    unknown = CliRunner().invoke(cli, [*command, "--exclude-domain", "venus"])
    assert unknown.exit_code == 2 and "unknown domain(s) 'venus'; registered domains: solar, mirror" in unknown.output


def _stage1_folder(params: Params, trajectories: list, steps: list[int]) -> None:  # noqa: ANN001
    """Save ``trajectories`` as RL stage 1 keeps them (the keeper's file moved into the model folder, listed in
    its manifest), without training a model."""
    from pipelines.atomic import atomic_directory
    from pipelines.layout import model_dir, rl_model_name
    from pipelines.manifest import new_manifest, sha256_files, write_manifest
    from pipelines.train.rl.keep import CorrectRollouts

    folder = model_dir(params.artifacts_dir, rl_model_name(1))
    keeper = CorrectRollouts.beside(folder)
    for trajectory, step in zip(trajectories, steps, strict=True):
        keeper.keep([trajectory], [1.0], step)
    with atomic_directory(folder) as tmp:
        kept = keeper.move_into(tmp)
        write_manifest(tmp, new_manifest("rl_stage1_model", files=sha256_files([kept], tmp)))


def test_agent_source_mixes_stage1_rollouts_of_train_questions_once_per_walk(solar_qa: Params, toolbox) -> None:  # noqa: ANN001
    from pipelines.errors import ArtifactMissingError
    from pipelines.layout import model_dir, rl_model_name
    from pipelines.manifest import new_manifest, write_manifest

    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"sources": ["template", "agent"]})})
    stage1 = model_dir(params.artifacts_dir, rl_model_name(1))
    with pytest.raises(ArtifactMissingError, match=r"run RL stage 1 first \(`omne rl --stage 1`\)"):
        build_sft_conversations(params, progress=False)
    stage1.mkdir(parents=True)
    write_manifest(stage1, new_manifest("rl_stage1_model"))  # a stage 1 saved before it kept its rollouts
    with pytest.raises(ArtifactMissingError, match="trained before it kept its correct rollouts"):
        build_sft_conversations(params, progress=False)

    train, test = load_split(params, "train"), load_split(params, "test")
    tools = InProcessToolClient(toolbox)

    def rollout(pair, reply=None, sample: int = 0):  # noqa: ANN001, ANN202
        client = ScriptedChatClient(reply or gold_policy(params))
        task = Task(qa_id=pair.id, domain=pair.domain, question=pair.question, gold_answers=pair.answers,
                    bucket=pair.bucket, sample=sample)
        return RolloutEngine(client, omne_protocol(), tools, RolloutParams()).run([task], progress=False)[0]

    gold = gold_policy(params)

    def other_thinking(request) -> str:  # noqa: ANN001 - the same calls and answer, other words in the thinking
        return gold(request).replace("<think>", "<think>Again: ", 1)

    first, second = train[0], train[1]
    rollouts = [rollout(first), rollout(first, sample=1), rollout(first, other_thinking), rollout(second),
                rollout(test[0])]
    assert all(r.answer in r.gold_answers for r in rollouts)
    _stage1_folder(params, rollouts, steps=[1, 1, 2, 2, 3])
    result = build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    agent = {r.id: r for r in records if r.source == "agent"}
    assert set(agent) == {f"{first.id}-agent0", f"{second.id}-agent0"}  # one per distinct walk
    assert all(format_problems(r) == [] for r in agent.values())
    assert agent[f"{first.id}-agent0"].conversations[1]["value"].startswith("<think>Find ")  # the earliest step's
    assert not any(r.id.startswith(test[0].id) for r in records)  # a test question never trains
    templates = {r.id.rsplit("-t", 1)[0] for r in records if r.source == "template"}
    assert {first.id, second.id} <= templates  # a question with both patterns keeps both
    stats = result.manifest.metadata["agent"]
    assert stats["rollouts"] == 5 and stats["kept"] == 2
    assert stats["dropped"] == {"duplicate": 2, "not_train_split": 1}
    by_source = result.manifest.metadata["stats"]["by_source"]
    assert by_source == {"agent": 2, "template": len(records) - 2}
    assert build_sft_conversations(params, progress=False).skipped
    _stage1_folder(params, rollouts[:1], steps=[1])  # new stage-1 rollouts: the data is rebuilt from them
    rebuilt = build_sft_conversations(params, progress=False)
    assert not rebuilt.skipped and rebuilt.manifest.metadata["agent"]["kept"] == 1


def test_llm_thinking_rewrites_template_thoughts_unless_they_name_the_answer_early(solar_qa: Params) -> None:
    """sft_data.thinking: llm with a scripted LLM: in turn a good rewrite, one that names the answer in its first
    thought, and a reply that is no JSON (also after the repair round); only the first replaces the template's."""
    import re

    from pipelines.llm.base import ChatRequest

    base = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(update={"thinking": "remaining_question"})})
    build_sft_conversations(base, progress=False)
    plain = {r.id: r for r in read_sft_conversations(base)}
    firsts: list[str] = []

    def llm(request: ChatRequest) -> str:
        prompt = request.messages[1]["content"]
        if len(request.messages) > 2:  # the repair round of a bad reply: still bad
            return "no JSON, sorry"
        firsts.append(prompt)
        count = int(re.search(r'\{"thoughts": \[(\d+) strings', prompt).group(1))
        answer = re.search(r"may name the answer \((.*)\)\. Reply as", prompt).group(1)
        kind = (len(firsts) - 1) % 3
        if kind == 2:
            return "no JSON, sorry"
        thoughts = [f"Own words {i}." for i in range(count - 1)] + [f"It is {answer}."]
        if kind == 1:
            thoughts[0] = f"Surely {answer}."
        return json.dumps({"thoughts": thoughts})

    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(update={"thinking": "llm"})})
    result = build_sft_conversations(params, thinker=ScriptedChatClient(llm, model="writer"), progress=False)
    records = read_sft_conversations(params)
    stats = result.manifest.metadata["llm_thinking"]
    n = len(firsts)
    assert n == len(records) == len(plain) >= 3 and result.manifest.params["thinker"] == "writer"
    assert stats == {"model": "writer", "rewritten": (n + 2) // 3,
                     "template_kept": {"bad_reply": n // 3, "states_answer_early": (n + 1) // 3}}
    rewritten = [r for r in records if "Own words 0." in r.conversations[1]["value"]]
    assert len(rewritten) == stats["rewritten"]
    for record in records:
        same = plain[record.id]
        assert format_problems(record) == []
        # the calls and tool responses are the template's; only the thinking differs, where it was rewritten
        actions = [t["value"].split("</think>")[-1] for t in record.conversations]
        assert actions == [t["value"].split("</think>")[-1] for t in same.conversations]
        assert (record in rewritten) == (record.conversations != same.conversations)
        thinks = [t["value"] for t in record.conversations if t["from"] == "gpt"]
        assert not any(f"Surely {record.golden_answer}" in t for t in thinks)  # a leak never trains
