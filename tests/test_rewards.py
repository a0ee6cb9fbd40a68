"""Reward functions on hand-made completions with hand-computed values: each formula, each format check,
fake tool responses earning nothing, the LLM judge (scripted) and the TRL-facing registry."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from pipelines.agent.protocols import OmneProtocol, SearchProtocol
from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
from pipelines.agent.tools import OMNE_TOOLS, SEARCH_TOOLS, TOOL_SPECS, ToolResult
from pipelines.agent.trajectory import Trajectory
from pipelines.errors import ConfigError
from pipelines.llm.base import ChatRequest
from pipelines.llm.scripted import ScriptedChatClient
from pipelines.train.rewards import (
    REWARD_PROTOCOLS,
    REWARDS,
    RewardOptions,
    TurnRewards,
    build_reward_functions,
    check_reward_protocols,
    eog_reward,
    grounding_reward,
    kg_hopper_reward,
    kg_r1_reward,
    kg_r1_scores,
    kg_reasoner_reward,
    omne_format_checks,
    omne_stage1_reward,
    omne_stage3_reward,
    parse_episode,
    prediction,
    repetitions,
    think_text,
    training_step,
    trajectory_messages,
    weighted_turn_rewards,
)


def A(text: str) -> dict[str, str]:  # noqa: N802 - short message builders keep the cases readable
    return {"role": "assistant", "content": text}


def U(text: str) -> dict[str, str]:  # noqa: N802
    return {"role": "user", "content": text}


def T(text: str) -> dict[str, str]:  # noqa: N802
    return {"role": "tool", "content": text}


# ----- omne protocol --------------------------------------------------------------------------------------------
MATCH = '<tool_call>entity_matcher(node_name="Mars", graph_type="solar")</tool_call>'
INFO = '<tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>'
R1 = U("<tool_response>\nFound 1 entities matching 'Mars':\n1. Entity: Mars\n</tool_response>")
R2 = U("<tool_response>\nMars -[orbited by]-> Phobos: a moon\n</tool_response>")


def omne_episode(final: str = "<think>Phobos orbits Mars.</think><answer>Phobos</answer>",
                 first: str = f"<think>Find Mars.</think>{MATCH}") -> list[dict[str, str]]:
    return [A(first), R1, A(f"<think>Look at Mars.</think>{INFO}"), R2, A(final)]


def stage1(completion, answers=("Phobos",)) -> float:  # noqa: ANN001
    return omne_stage1_reward([completion], answers=[list(answers)])[0]


def test_stage1_perfect_episode_and_wrong_answer() -> None:
    assert omne_format_checks(parse_episode(omne_episode(), "tool_response")).score == 1.0
    assert stage1(omne_episode()) == pytest.approx(1.0)
    assert stage1(omne_episode(), answers=["Deimos"]) == pytest.approx(0.1)  # format × 0.1
    assert stage1("<think>I know it.</think><answer> Phobos </answer>") == pytest.approx(1.0)  # plain string


@pytest.mark.parametrize(("case", "failed"), [
    # answer before think: think_before_actions fails
    (omne_episode(final="<answer>Phobos</answer><think>Phobos orbits Mars.</think>"), "think_before_actions"),
    (omne_episode(first=MATCH), "think_before_actions"),  # a call with no think before it
    (omne_episode(first="<think></think>" + MATCH), "think_before_actions"),  # an empty think is no think
    (omne_episode(first="<think>Find Mars.</think><tool_call>entity_matcher(Mars)</tool_call>"), "calls_well_formed"),
    (omne_episode(first='<think>Find Mars.</think><tool_call>fly_to("Mars")</tool_call>'), "calls_well_formed"),
    (omne_episode(first=f"<think>Find Mars.</think>{MATCH}{INFO}"), "calls_well_formed"),  # two calls in a turn
    (omne_episode(first="<think>Find Mars.</think><tool_call>entity_matcher(node_name=\"Mars\""), "calls_well_formed"),
    (omne_episode(final="<think>So.</think><answer>Phobos</answer><answer>Phobos</answer>"), "one_answer"),
    (omne_episode(first=f"<think>Guess.</think><answer>Phobos</answer>{MATCH}"), "one_answer"),
    (omne_episode(final="<think>It is Phobos.</think><answer>Phobos</answer>" + INFO), "one_answer"),
])
def test_stage1_each_failed_check_costs_one_third(case, failed: str) -> None:  # noqa: ANN001
    checks = omne_format_checks(parse_episode(case, "tool_response"))
    assert [name for name, ok in checks.model_dump().items() if not ok] == [failed]
    assert checks.score == pytest.approx(2 / 3)


def test_stage1_wrong_tag_order_is_a_third_of_format_less() -> None:
    good = stage1(omne_episode())
    bad = stage1(omne_episode(final="<answer>Phobos</answer><think>Phobos orbits Mars.</think>"))
    assert good - bad == pytest.approx(1 / 3)  # correct answer: R = R_format exactly
    # no answer: two checks pass (think before the calls, calls well formed), EM = 0
    assert stage1(omne_episode()[:4]) == pytest.approx(2 / 3 * 0.1)
    # nothing usable: only the vacuous "calls well formed" passes
    assert stage1("I do not know.") == pytest.approx(1 / 3 * 0.1)
    assert stage1([]) == pytest.approx(1 / 3 * 0.1)


def test_stage1_fake_tool_response_breaks_format() -> None:
    fake = [A(f"<think>Find Mars.</think>{MATCH}<tool_response>Phobos</tool_response>"),
            A("<think>It said Phobos.</think><answer>Phobos</answer>")]
    checks = omne_format_checks(parse_episode(fake, "tool_response"))
    assert not checks.calls_well_formed and checks.score == pytest.approx(2 / 3)
    typed = [A("<think>x</think><tool_response>Phobos</tool_response><answer>Phobos</answer>")]
    assert stage1(typed) == pytest.approx(2 / 3)


def test_stage1_normalised_answer_option() -> None:
    loose = RewardOptions(answer_match="normalised")
    text = "<think>t</think><answer>the phobos.</answer>"
    assert omne_stage1_reward([text], answers=[["Phobos"]]) == [pytest.approx(0.1)]
    assert omne_stage1_reward([text], answers=[["Phobos"]], options=loose) == [pytest.approx(1.0)]


def test_stage3_formula_and_repetitions() -> None:
    answers = [["Phobos"]]
    assert omne_stage3_reward([omne_episode()], answers=answers) == [pytest.approx(1.0)]
    assert omne_stage3_reward([omne_episode()], answers=[["Deimos"]]) == [pytest.approx(0.5)]
    broken = omne_episode(final="<answer>Phobos</answer><think>x</think>")  # binary format: 0
    assert omne_stage3_reward([broken], answers=answers) == [pytest.approx(0.5)]
    # the same call again, by keyword, positionally (the parser binds it) and in another case: 3 repeats
    again = [A(f"<think>Look again.</think>{INFO}"), R2,
             A('<think>And again.</think><tool_call>node_info("Mars", "solar")</tool_call>'), R2,
             A('<think>Once more.</think><tool_call>node_info(node_name="MARS ", graph_type="solar")</tool_call>'), R2]
    looping = omne_episode()[:4] + again + [omne_episode()[-1]]
    assert repetitions(parse_episode(looping, "tool_response")) == 3
    assert omne_stage3_reward([looping], answers=answers) == [pytest.approx(1.0 - 0.3)]
    other = omne_episode()[:4] + [A('<think>Now Phobos.</think><tool_call>node_info(node_name="Phobos", '
                                    'graph_type="solar")</tool_call>'), R2, omne_episode()[-1]]
    assert repetitions(parse_episode(other, "tool_response")) == 0


# ----- KG-R1 ----------------------------------------------------------------------------------------------------
REL = '<think>Start at Mars.</think><kg-query>get_tail_relations("Mars")</kg-query>'
ENT = '<think>Follow orbited_by.</think><kg-query>get_tail_entities("Mars", "orbited_by")</kg-query>'
INFO_REL = U('<information>\nTail relations of entity "Mars": orbited_by, named_after\n</information>')
INFO_ENT = U('<information>\nTail entities for entity "Mars" with relation "orbited_by": Phobos, Deimos\n'
             '</information>')
FINAL = '<think>Both moons.</think><answer>["Phobos", "Deimos"]</answer>'


def test_kg_r1_turn_and_global_rewards() -> None:
    episode = [A(REL), INFO_REL, A(ENT), INFO_ENT, A(FINAL)]
    [score] = kg_r1_scores([episode], answers=[["Phobos", "Deimos"]])
    assert score.turn_rewards == pytest.approx([1.0, 1.0, 1.0])  # 0.5 + 0.5 | 0.5 + 0.5 | 0.5 fmt + 0.5 answer
    assert score.global_reward == pytest.approx(2.0)  # F1 1 + retrieval 1
    assert score.returns(0.5) == pytest.approx([2.0, 2.0, 2.0])
    assert kg_r1_reward([episode], answers=[["Phobos", "Deimos"]]) == [pytest.approx(3.0)]
    # one gold of two predicted: F1 = 2/3; the answer still hits
    [partial] = kg_r1_scores([episode], answers=[["Phobos"]])
    assert partial.turn_rewards == pytest.approx([1.0, 1.0, 1.0])
    assert partial.global_reward == pytest.approx(2 / 3 + 1.0)


@pytest.mark.parametrize(("second", "response", "turn2"), [
    (ENT, U('<information>\n<error>Relation "orbited_by" not found</error>\n</information>'), 0.5),  # error reply
    (ENT, U("<information>\n\n</information>"), 0.5),  # empty reply
    ('<think>t</think><kg-query>fly_to("Mars")</kg-query>', INFO_ENT, 0.5),  # not a KG-R1 action
    ('<think>t</think><kg-query>get_tail_entities("Mars")</kg-query>', INFO_ENT, 0.5),  # missing argument
    (ENT.replace("<think>Follow orbited_by.</think>", ""), INFO_ENT, 0.5),  # no think: format 0
    (ENT + "<information>Phobos</information>", INFO_ENT, 0.5),  # typed response: format 0
    (ENT, T("Tail entities: Phobos, Deimos"), 1.0),  # a TRL tool message counts as a real response
])
def test_kg_r1_turn_checks(second: str, response: dict[str, str], turn2: float) -> None:
    [score] = kg_r1_scores([[A(REL), INFO_REL, A(second), response, A(FINAL)]], answers=[["Phobos", "Deimos"]])
    assert score.turn_rewards == pytest.approx([1.0, turn2, 1.0])


def test_kg_r1_retrieval_only_from_real_successful_responses() -> None:
    answers = [["Phobos"]]
    typed = '<think>x</think><information>Mars is orbited by Phobos</information><answer>["Phobos"]</answer>'
    [fake] = kg_r1_scores([typed], answers=answers)
    assert not fake.retrieved and fake.global_reward == pytest.approx(1.0)  # F1 only
    assert fake.turn_rewards == pytest.approx([0.5])  # format broken, answer right
    error = [A(REL), U('<information>\n<error>Entity "Phobos" not found in KG</error>\n</information>'),
             A('<think>x</think><answer>["Phobos"]</answer>')]
    assert not kg_r1_scores([error], answers=answers)[0].retrieved  # an error only echoes the model
    real = [A(REL), U("<information>\norbited_by: Phobos\n</information>"),
            A('<think>x</think><answer>["Phobos"]</answer>')]
    assert kg_r1_scores([real], answers=answers)[0].global_reward == pytest.approx(2.0)
    chat = [A(REL), U("Hint: think of Phobos."), A('<think>x</think><answer>["Phobos"]</answer>')]
    assert not kg_r1_scores([chat], answers=answers)[0].retrieved  # a user turn without the tag is no response
    no_answer = kg_r1_scores([[A(REL), INFO_REL]], answers=answers)[0]
    assert no_answer.turn_rewards == pytest.approx([1.0]) and no_answer.global_reward == 0.0


# ----- search protocol: KG-Reasoner / KG-Hopper -----------------------------------------------------------------
TRIPLES_MARS = T("<searched_triples>\n(Mars, orbited by, Phobos)\n</searched_triples>")
TRIPLES_PHOBOS = T("<searched_triples>\n(Phobos, discovered by, Asaph Hall)\n</searched_triples>")


def search_episode(end: str = " so it is Phobos.</think><answer>Phobos</answer>") -> list[dict[str, str]]:
    return [A("<think>Mars first <search>Mars</search>"), TRIPLES_MARS, A(" then <search>Phobos</search>"),
            TRIPLES_PHOBOS, A(end)]


def test_kg_reasoner_formula() -> None:
    answers = [["Phobos"]]
    assert kg_reasoner_reward([search_episode()], answers=answers) == [pytest.approx(0.8 + 0.5 + 1.0)]  # capped
    one = [A("<think>Mars first <search>Mars</search>"), TRIPLES_MARS,
           A(" so it is Phobos.</think><answer>Phobos</answer>")]
    assert kg_reasoner_reward([one], answers=answers) == [pytest.approx(0.5 + 0.5 + 1.0)]
    assert kg_reasoner_reward([search_episode()], answers=[["Deimos"]]) == [pytest.approx(0.8 + 0.5)]
    failed = [A("<think>Mars first <search>Mars</search>"), T("<searched_triples>\n<error>no results</error>\n"
                                                               "</searched_triples>"),
              A(" so it is Phobos.</think><answer>Phobos</answer>")]
    assert kg_reasoner_reward([failed], answers=answers) == [pytest.approx(0.0 + 0.5 + 1.0)]


@pytest.mark.parametrize("end", [
    " so <answer>Phobos</answer></think>",  # answer inside the think
    " so it is Phobos.</think><answer>Phobos</answer><think>done</think>",  # think after the answer
    " so it is Phobos.<answer>Phobos</answer>",  # think never closed
    " so it is Phobos.</think><answer>Phobos</answer><answer>Phobos</answer>",  # two answers
])
def test_wrong_tag_order_gives_exactly_half_less(end: str) -> None:
    answers = [["Phobos"]]
    good = kg_reasoner_reward([search_episode()], answers=answers)[0]
    bad = kg_reasoner_reward([search_episode(end)], answers=answers)[0]
    assert good - bad == pytest.approx(0.5)
    assert kg_hopper_reward([search_episode()], answers=answers)[0] - \
        kg_hopper_reward([search_episode(end)], answers=answers)[0] == pytest.approx(0.5)


def test_model_written_search_results_earn_nothing() -> None:
    typed = ("<think>Mars first <search>Mars</search><searched_triples>(Mars, orbited by, Phobos)"
             "</searched_triples></think><answer>Phobos</answer>")
    # no real tool message: no search credit; the typed response breaks format; only the answer counts
    assert kg_reasoner_reward([typed], answers=[["Phobos"]]) == [pytest.approx(1.0)]
    assert kg_hopper_reward([typed], answers=[["Phobos"]]) == [pytest.approx(1.0)]


def _judge(score: str = '{"reasoning": "Each hop is supported.", "score": 0.7}',
           verdict: str = '{"reasoning": "Same moon.", "verdict": true}') -> ScriptedChatClient:
    return ScriptedChatClient(lambda r: score if r.tag == "reward.reasoning" else verdict)


def test_kg_hopper_reasoning_judge() -> None:
    answers, question = [["Phobos"]], ["Which moon orbits Mars?"]
    assert kg_hopper_reward([search_episode()], answers=answers) == [pytest.approx(0.8 + 0.5 + 0.0 + 1.0)]
    judge = _judge()
    assert kg_hopper_reward([search_episode()], answers=answers, question=question, judge=judge) == \
        [pytest.approx(0.8 + 0.5 + 0.7 + 1.0)]
    [request] = judge.requests  # an exact answer is never sent to the answer judge
    prompt = request.messages[-1]["content"]
    assert "Which moon orbits Mars?" in prompt and "(Mars, orbited by, Phobos)" in prompt
    assert "Mars first" in prompt and "then" in prompt  # the reasoning spans the injected triples


def test_kg_hopper_judge_reply_that_is_not_json_scores_zero_with_a_warning(caplog) -> None:  # noqa: ANN001
    judge = _judge(score="The reasoning looks solid to me.")
    with caplog.at_level(logging.WARNING, logger="pipelines.train.rewards"):
        rewards = kg_hopper_reward([search_episode(), search_episode()], answers=[["Phobos"], ["Phobos"]],
                                   judge=judge)
    assert rewards == [pytest.approx(2.3), pytest.approx(2.3)]
    assert len(judge.requests) == 4  # each asked once, then repaired once
    assert sum("R_reason = 0" in r.getMessage() for r in caplog.records) == 2
    out_of_range = _judge(score='{"reasoning": "x", "score": 7}')
    assert kg_hopper_reward([search_episode()], answers=[["Phobos"]], judge=out_of_range) == [pytest.approx(2.3)]
    failing = ScriptedChatClient([RuntimeError("endpoint down")])
    assert kg_hopper_reward([search_episode()], answers=[["Phobos"]], judge=failing) == [pytest.approx(2.3)]


def test_kg_hopper_semantic_answer_match() -> None:
    loose = search_episode(" so it is Phobos.</think><answer>the moon Phobos</answer>")
    answers = [["Phobos"]]
    assert kg_hopper_reward([loose], answers=answers) == [pytest.approx(1.3)]  # exact only: wrong
    yes = _judge(score='{"reasoning": "weak", "score": 0}')
    assert kg_hopper_reward([loose], answers=answers, judge=yes, question=["Which moon?"]) == [pytest.approx(2.3)]
    asked = [r for r in yes.requests if r.tag == "reward.answer"]
    assert len(asked) == 1 and "Predicted answer: the moon Phobos" in asked[0].messages[-1]["content"]
    no = _judge(score='{"reasoning": "weak", "score": 0}', verdict='{"reasoning": "No.", "verdict": false}')
    assert kg_hopper_reward([loose], answers=answers, judge=no) == [pytest.approx(1.3)]
    garbled = _judge(score='{"reasoning": "weak", "score": 0}', verdict="yes!")
    assert kg_hopper_reward([loose], answers=answers, judge=garbled) == [pytest.approx(1.3)]


# ----- EoG ------------------------------------------------------------------------------------------------------
GOLD = [["Mars", "orbited by", "Phobos"], ["Phobos", "discovered by", "Asaph Hall"]]


def test_eog_outcome_then_path_from_step_k() -> None:
    text = "<think>MARS is orbited by phobos.</think><answer>Phobos</answer>"  # names one gold triple of two
    columns = {"answers": [["Phobos"]], "gold_triples": [GOLD]}
    assert eog_reward([text], trainer_state=SimpleNamespace(global_step=74), **columns) == [pytest.approx(1.0)]
    assert eog_reward([text], trainer_state=SimpleNamespace(global_step=75), **columns) == \
        [pytest.approx(0.8 * 1.0 + 0.2 * 0.5)]
    both = "<think>Mars is orbited by Phobos; Phobos was discovered by Asaph Hall.</think><answer>Phobos</answer>"
    assert eog_reward([both], step=100, **columns) == [pytest.approx(1.0)]
    assert eog_reward([both], step=100, options=RewardOptions(eog_path_start_step=200), **columns) == [1.0]


def test_eog_outcome_is_answer_set_f1() -> None:
    late = SimpleNamespace(global_step=1000)
    two = "<think>x</think><answer>Phobos, Deimos</answer>"
    assert eog_reward([two], answers=[["Phobos"]]) == [pytest.approx(2 / 3)]
    assert eog_reward(["<think>Mars is orbited by Phobos.</think>Phobos"], answers=[["Phobos"]],
                      gold_triples=[GOLD], trainer_state=late) == [pytest.approx(0.2 * 0.5)]  # no answer tags
    assert eog_reward(["<think>x</think><answer> </answer>"], answers=[["Phobos"]]) == [0.0]
    # no validated gold triples: outcome only, even late
    assert eog_reward([two], answers=[["Phobos"]], gold_triples=[[]], trainer_state=late) == [pytest.approx(2 / 3)]


def test_eog_path_reads_the_think_text_only() -> None:
    late = SimpleNamespace(global_step=1000)
    named_in_response = [A("<think>Look at Mars.</think>" + INFO), R2,
                         A("<think>So it is the moon.</think><answer>Phobos</answer>")]
    assert eog_reward([named_in_response], answers=[["Phobos"]], gold_triples=[GOLD[:1]], trainer_state=late) == \
        [pytest.approx(0.8)]
    whole_names = "<think>Marsh is orbited by Phobos-2.</think><answer>Phobos</answer>"  # not whole names
    assert eog_reward([whole_names], answers=[["Phobos"]], gold_triples=[GOLD[:1]], trainer_state=late) == \
        [pytest.approx(0.8)]


# ----- trajectories from the rollout engine -------------------------------------------------------------------
class _FixedTools:
    """Tool results from a table (the reward reads only what the engine writes; no KG is needed)."""

    def __init__(self, results: dict[str, ToolResult]) -> None:
        self.results = results

    def batch(self, requests) -> list[ToolResult]:  # noqa: ANN001
        return [next(r for key, r in self.results.items() if key in str(q.call)) for q in requests]


def test_rollout_trajectories_are_scored_through_the_adapter() -> None:
    task = Task(qa_id="s", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"])
    search = SearchProtocol([TOOL_SPECS[n] for n in SEARCH_TOOLS], max_rounds=4)
    tools = _FixedTools({"Mars": ToolResult(name="search", arguments={}, ok=True,
                                            content="(Mars, orbited by, Phobos)")})
    script = ScriptedChatClient(lambda r: "<think>Mars first <search>Mars</search>" if not r.prefix else
                                " so it is Phobos.</think><answer>Phobos</answer>")
    traj = RolloutEngine(script, search, tools, RolloutParams()).run([task], progress=False)[0]
    messages = trajectory_messages(traj)
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert "<searched_triples>" not in messages[0]["content"] + messages[2]["content"]
    assert kg_reasoner_reward([traj]) == [pytest.approx(0.5 + 0.5 + 1.0)]  # gold answers from the trajectory
    reasoning = think_text(parse_episode(traj, "searched_triples"))
    assert reasoning.split() == ["Mars", "first", "<search>Mars</search>", "so", "it", "is", "Phobos."]

    omne = OmneProtocol([TOOL_SPECS[n] for n in OMNE_TOOLS], max_rounds=7)
    tools = _FixedTools({"entity_matcher": ToolResult(name="entity_matcher", arguments={}, ok=True,
                                                      content="1. Entity: Mars"),
                         "node_info": ToolResult(name="node_info", arguments={}, ok=True,
                                                 content="Mars -[orbited by]-> Phobos")})
    turns = iter([f"<think>Find Mars.</think>{MATCH}", f"<think>Look at Mars.</think>{INFO}",
                  "<think>Mars is orbited by Phobos.</think><answer>Phobos</answer>"])
    traj = RolloutEngine(ScriptedChatClient(lambda r: next(turns)), omne, tools, RolloutParams()).run(
        [task], progress=False)[0]
    assert [m["role"] for m in trajectory_messages(traj)] == ["assistant", "user"] * 2 + ["assistant"]
    assert omne_stage1_reward([traj]) == [pytest.approx(1.0)]
    assert omne_stage3_reward([traj], answers=[["Deimos"]]) == [pytest.approx(0.5)]  # the column wins
    assert eog_reward([traj], gold_triples=[GOLD[:1]], step=75) == [pytest.approx(1.0)]
    assert prediction(parse_episode(traj, "tool_response")) == "Phobos"


def test_trajectory_without_assistant_turns_scores_zero() -> None:
    empty = Trajectory(qa_id="e", domain="solar", question="?", gold_answers=["Sun"], protocol="omne",
                       messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])
    assert trajectory_messages(empty) == []
    assert omne_stage3_reward([empty]) == [0.0]


# ----- grounding (the graphs users bring) -------------------------------------------------------------------------
GARBLED = '<tool_call>node_info(node_name="MARZ", graph_type="solar")</tool_call>'
NOT_FOUND = U('<tool_response>\n<error>Entity "MARZ" not found in KG; the closest names are "Mars"</error>\n'
              '</tool_response>')


def test_grounding_penalises_unseen_answers_missing_entities_and_retried_failures() -> None:
    assert grounding_reward([omne_episode()]) == [0.0]  # Phobos copied from node_info's response
    assert grounding_reward([omne_episode("<think>x</think><answer>PHOBOS</answer>")]) == [pytest.approx(-0.5)]
    assert grounding_reward([omne_episode("<think>x</think><answer>Deimos</answer>")]) == [pytest.approx(-0.5)]
    assert grounding_reward([omne_episode("<think>x</think>")]) == [0.0]  # no answer: the answer rewards judge it
    recovered = [A(f"<think>x</think>{GARBLED}"), NOT_FOUND, A(f"<think>Mars, as listed.</think>{INFO}"), R2,
                 A("<think>x</think><answer>Phobos</answer>")]
    assert grounding_reward([recovered]) == [pytest.approx(-0.25)]  # one call named a missing entity
    looped = [A(f"<think>x</think>{GARBLED}"), NOT_FOUND, A(f"<think>again</think>{GARBLED}"), NOT_FOUND,
              A("<think>x</think><answer>MARZ</answer>")]
    # two missing-entity calls, one retried failure, an answer only an error echoed: capped at -1
    assert grounding_reward([looped]) == [pytest.approx(-1.0)]
    assert grounding_reward([looped], options=RewardOptions(grounding_unseen_penalty=0.0,
                                                           grounding_retry_penalty=0.1)) == [pytest.approx(-0.6)]
    assert omne_stage3_reward([recovered], answers=[["Phobos"]]) == [pytest.approx(1.0)]  # no repetition there


# ----- registry ---------------------------------------------------------------------------------------------------
def test_registry_builds_named_weighted_trl_functions() -> None:
    assert set(REWARDS) == {"omne_stage1", "omne_stage3", "kg_r1", "kg_reasoner", "kg_hopper", "eog", "grounding"}
    stage1, path = build_reward_functions(["omne_stage1", "eog"], [1.0, 0.5], eog_path_start_step=0)
    assert (stage1.__name__, path.__name__) == ("omne_stage1", "eog")
    text = "<think>Mars is orbited by Phobos.</think><answer>Phobos</answer>"
    trl = {"prompts": [[U("Which moon orbits Mars?")]], "completion_ids": [[1, 2]],
           "trainer_state": SimpleNamespace(global_step=0), "log_extra": lambda *a: None,
           "log_metric": lambda *a: None, "answers": [["Phobos"]], "gold_triples": [GOLD]}
    assert stage1(completions=[text], **trl) == [pytest.approx(1.0)]
    assert path(completions=[text], **trl) == [pytest.approx(0.5 * (0.8 + 0.2 * 0.5))]  # weight × R, K = 0
    [hopper] = build_reward_functions(["kg_hopper"], judge=_judge())
    assert hopper(completions=[search_episode()], **trl) == [pytest.approx(3.0)]
    with pytest.raises(ValueError, match="unknown reward"):
        build_reward_functions(["omne_stage2"])
    with pytest.raises(ValueError, match="weight"):
        build_reward_functions(["eog"], [1.0, 2.0])
    with pytest.raises(ValidationError):
        build_reward_functions(["eog"], eog_lambda=0.3)  # a typo is an error, not a silent default


def test_turn_rewards_of_the_configured_rewards_are_weighted_and_summed() -> None:
    """credit: turn: r_t from the rewards with a per-turn form (KG-R1), R their weighted global rewards plus the
    weighted whole reward of the others; G_t = r_t + λ·R."""
    episode, answers = [A(REL), INFO_REL, A(ENT), INFO_ENT, A(FINAL)], [["Phobos", "Deimos"]]
    kg_r1, stage1 = build_reward_functions(["kg_r1", "omne_stage1"], [2.0, 1.0])
    assert not hasattr(stage1, "turn_scores")  # no per-turn form: it adds to the global reward only
    [weighted] = kg_r1.turn_scores([episode], answers=answers)  # KG-R1's (1, 1, 1) and 2, times its weight 2
    assert weighted.turn_rewards == pytest.approx([2.0, 2.0, 2.0]) and weighted.global_reward == pytest.approx(4.0)
    [kg] = kg_r1_scores([episode], answers=answers)
    combined = weighted_turn_rewards([kg, TurnRewards(global_reward=0.3)], [2.0, 0.5], turns=4)
    assert combined.turn_rewards == pytest.approx([2.0, 2.0, 2.0, 0.0])  # a turn KG-R1 did not score adds 0
    assert combined.global_reward == pytest.approx(2.0 * 2.0 + 0.5 * 0.3)
    assert combined.returns(0.5) == pytest.approx([2.0 + 2.075] * 3 + [2.075])
    alone = weighted_turn_rewards([kg], [1.0], turns=3)  # rewards: [kg_r1] is KG-R1's own credit
    assert alone.returns(0.7) == pytest.approx(kg.returns(0.7))
    assert weighted_turn_rewards([kg, TurnRewards(global_reward=1.0)], [1.0, 1.0], turns=2).turn_rewards == \
        pytest.approx([1.0, 1.0])  # as many turns as the episode has


@pytest.mark.parametrize("reward", sorted(REWARDS))
def test_a_reward_is_refused_on_a_protocol_whose_tags_it_does_not_read(reward: str) -> None:
    assert set(REWARD_PROTOCOLS) == set(REWARDS)
    supported = REWARD_PROTOCOLS[reward]
    for protocol in ("omne", "kg_r1", "search"):
        if protocol in supported:
            check_reward_protocols([reward], protocol)
            continue
        with pytest.raises(ConfigError) as refused:
            check_reward_protocols(["eog", reward], protocol, where="rl.stage3.rewards")
        message = str(refused.value)
        assert message.startswith("rl.stage3.rewards:") and f"{reward!r}" in message and f"{protocol!r}" in message
        assert all(name in message for name in supported)


def test_rewards_of_one_protocol_misjudge_another_protocols_perfect_episode() -> None:
    """Why the pairs are refused: a rule reward reads its own protocol's tags, so a perfect episode of another
    protocol loses the credit for its calls and format."""
    kg_episode = [A(REL), INFO_REL, A(ENT), INFO_ENT, A(FINAL)]
    answers = [["Phobos", "Deimos"]]
    assert kg_r1_reward([kg_episode], answers=answers)[0] > kg_r1_reward([omne_episode(
        final='<think>Both.</think><answer>["Phobos", "Deimos"]</answer>')], answers=answers)[0]
    assert kg_reasoner_reward([search_episode()], answers=[["Phobos"]])[0] > \
        kg_reasoner_reward([omne_episode()], answers=[["Phobos"]])[0]
    assert stage1(omne_episode()) > omne_stage1_reward([kg_episode], answers=answers)[0]


def test_options_hold_the_paper_defaults() -> None:
    options = RewardOptions()
    assert (options.result_floor, options.repetition_penalty) == (0.1, 0.1)
    assert (options.kg_r1_format_weight, options.kg_r1_kg_weight, options.kg_r1_answer_weight) == (0.5, 0.5, 0.5)
    assert (options.kg_r1_f1_weight, options.kg_r1_retrieval_weight) == (1.0, 1.0)
    assert (options.search_step, options.search_cap, options.search_format_weight) == (0.5, 0.8, 0.5)
    assert (options.eog_path_start_step, options.eog_path_weight) == (75, 0.2)
    assert training_step({}) == 0 and training_step({"trainer_state": SimpleNamespace(global_step=9)}) == 9


def test_judge_requests_are_json_mode_chat_requests() -> None:
    judge = _judge()
    kg_hopper_reward([search_episode()], answers=[["Phobos"]], judge=judge)
    assert all(isinstance(r, ChatRequest) and r.json_mode and r.temperature == 0.0 for r in judge.requests)


def test_eog_gold_triples_from_a_gold_path() -> None:
    from pipelines.qa.models import GoldPath

    edge = {"src": "Mars", "keywords": "orbited by", "dst": "Phobos"}
    gold = GoldPath(qa_id="q", domain="solar", paths=[
        {"nodes": ["Mars", "Phobos"], "edges": [edge], "valid": True},
        {"nodes": ["Mars", "Deimos"], "edges": [{"src": "Mars", "keywords": "orbited by", "dst": "Deimos"}],
         "valid": False},  # an invalid path feeds no reward
    ])
    text = "<think>Mars is orbited by Phobos.</think><answer>Phobos</answer>"
    for cell in (gold, gold.model_dump()):
        assert eog_reward([text], answers=[["Phobos"]], gold_triples=[cell], step=75) == [pytest.approx(1.0)]
