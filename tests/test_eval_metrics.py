"""Evaluation metrics on hand-built trajectories, with exact expected numbers."""

from __future__ import annotations

import pytest

from pipelines.agent.trajectory import ToolCallRecord, Trajectory
from pipelines.eval.answers import answer_set, exact_match, hit_at_1, normalise_answer, normalised_em, set_f1
from pipelines.eval.behaviour import OUTCOMES, behaviour, episode_outcome
from pipelines.eval.metrics import (
    aggregate,
    efficiency,
    evaluate_trajectories,
    group_scores,
    repeats_summary,
    score_trajectories,
)
from pipelines.eval.schema import EvalMetrics, Scores, hops_key
from pipelines.eval.triples import (  # _triple_alternatives: the readings behaviour() counts
    _triple_alternatives,
    exploration_scores,
    gold_triples,
    parse_triples,
    triple_named,
)
from pipelines.qa.models import GoldPath, GoldPathItem, PathEdge


def traj(qa_id: str = "q1", answer: str | None = "Paris", gold: list[str] | None = None, **kw) -> Trajectory:
    fields = dict(qa_id=qa_id, domain="geo", question="Which city?", gold_answers=gold or ["Paris"],
                  bucket="1-2", hops=2, protocol="omne", messages=[], answer=answer,
                  finish="answer" if answer is not None else "max_rounds")
    fields.update(kw)
    return Trajectory(**fields)


def call(name: str | None, response: str = "", ok: bool = True, round: int = 0, **arguments) -> ToolCallRecord:
    text = f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})" if name else "garbage("
    return ToolCallRecord(round=round, text=text, name=name, arguments=arguments, ok=ok,
                          error_type=None if ok else "entity_not_found", response=response)


# a resolver that knows a few KG entities, one of them with a comma in its name
ENTITIES = {"paris": "Paris", "paris, texas": "Paris, Texas", "lyon": "Lyon", "washington, d.c.": "Washington, D.C."}


def resolve(name: str) -> str | None:
    return ENTITIES.get(name.strip().casefold())


# ----- answers -----------------------------------------------------------------------------------------
def test_exact_match_strips_whitespace_but_keeps_case() -> None:
    assert exact_match("  Paris \n", ["Lyon", "Paris"])
    assert not exact_match("paris", ["Paris"])
    assert normalised_em("paris", ["Paris"])
    assert normalised_em("The Paris.", ["paris"])
    assert not normalised_em("", [""])
    assert normalise_answer("  The  Eiffel Tower. ") == "eiffel tower"
    assert normalise_answer("An apple, a day") == "apple day"


def test_set_f1_multi_answer() -> None:
    predicted = answer_set("Paris, Lyon")
    assert predicted == ["paris", "lyon"]
    assert set_f1(predicted, ["Paris", "Marseille"]) == pytest.approx(0.5)  # P 1/2, R 1/2
    assert set_f1(["paris"], ["Paris", "Marseille"]) == pytest.approx(2 / 3)  # P 1, R 1/2
    assert set_f1(["Paris", "Marseille"], ["marseille", "PARIS"]) == 1.0
    assert set_f1(["Lyon"], ["Paris"]) == 0.0


def test_hit_at_1_depends_on_order() -> None:
    assert hit_at_1(["paris", "lyon"], ["Paris"])
    assert not hit_at_1(["lyon", "paris"], ["Paris"])
    assert hit_at_1(answer_set("Paris and Lyon"), ["Paris"])
    assert not hit_at_1(answer_set("Lyon and Paris"), ["Paris"])


def test_json_list_answers() -> None:
    assert answer_set('["Paris", "Lyon", "paris"]') == ["paris", "lyon"]
    assert answer_set("['Paris', 'Lyon']") == ["paris", "lyon"]
    assert answer_set('[["Paris"], "Lyon"]') == ["paris", "lyon"]
    # JSON items are explicit: a comma inside one stays inside it
    assert answer_set('["Paris, Texas", "Lyon"]') == ["paris texas", "lyon"]


def test_separators_and_list_markers() -> None:
    assert answer_set("1. Paris\n2. Lyon\n- Nice; Nice | Rome and Milan") == ["paris", "lyon", "nice", "rome", "milan"]
    assert answer_set("1,000") == ["1000"]  # a number's thousands comma is not a separator


def test_entity_with_comma_resolved_whole() -> None:
    assert answer_set("Paris, Texas") == ["paris", "texas"]  # without a resolver it is two answers
    assert answer_set("Paris, Texas", resolve) == ["paris texas"]
    assert answer_set("Lyon; Paris, Texas and Washington, D.C.", resolve) == ["lyon", "paris texas", "washington dc"]
    assert answer_set("Lyon, Paris", resolve) == ["lyon", "paris"]
    assert answer_set("Springfield, Lyon", resolve) == ["springfield", "lyon"]  # unresolvable stays text
    assert set_f1(answer_set("Paris, Texas", resolve), ["Paris, Texas"]) == 1.0


def test_empty_and_missing_predictions() -> None:
    assert answer_set(None) == []
    assert answer_set("   ") == []
    assert answer_set("[]") == []
    assert not exact_match(None, ["Paris"])
    assert set_f1([], ["Paris"]) == 0.0
    assert set_f1(["paris"], []) == 0.0
    assert not hit_at_1([], ["Paris"])
    none, empty = score_trajectories([traj("a", answer=None), traj("b", answer="")])
    assert (none.answered, none.em, none.f1, none.hit1) == (False, False, 0.0, False)
    assert (empty.answered, empty.em, empty.f1, empty.hit1) == (True, False, 0.0, False)
    assert aggregate([]) == Scores()


# ----- the interval beside EM -------------------------------------------------------------------------
def _wilson_by_formula(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval from its textbook formula: an independent check of scipy's."""
    p = k / n
    centre, half = p + z * z / (2 * n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def test_wilson_interval_known_cases() -> None:
    from pipelines.eval.stats import wilson_interval

    assert wilson_interval(0, 12) == (0.0, pytest.approx(0.2425, abs=1e-4))  # 0 right still leaves ~24% plausible
    low, high = wilson_interval(6, 12)
    assert (low, high) == (pytest.approx(0.2538, abs=1e-4), pytest.approx(0.7462, abs=1e-4))
    assert low + high == pytest.approx(1.0)  # symmetric around 1/2
    assert wilson_interval(12, 12) == (pytest.approx(0.7575, abs=1e-4), 1.0)
    for k, n in ((0, 12), (3, 12), (6, 12), (1, 1), (37, 200)):
        assert wilson_interval(k, n) == pytest.approx(_wilson_by_formula(k, n), abs=1e-9)
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no question: nothing is known
    with pytest.raises(ValueError, match="13 correct out of 12"):
        wilson_interval(13, 12)


def test_every_scores_group_carries_the_em_interval() -> None:
    right = [traj(f"r{i}", answer="Paris", bucket="1-2") for i in range(6)]
    wrong = [traj(f"w{i}", answer="Lyon", bucket="3+", hops=3) for i in range(6)]
    m = evaluate_trajectories(right + wrong, run="r", model="m", protocol="omne", split="test", wall_time_s=1.0)
    assert (m.overall.n, m.overall.em) == (12, 0.5)
    assert (m.overall.em_low, m.overall.em_high) == (pytest.approx(0.2538, abs=1e-4), pytest.approx(0.7462, abs=1e-4))
    one_two, three = m.by_bucket["1-2"], m.by_bucket["3+"]
    assert (one_two.em, one_two.em_high, three.em, three.em_low) == (1.0, 1.0, 0.0, 0.0)
    assert one_two.em_low == pytest.approx(_wilson_by_formula(6, 6)[0])
    assert three.em_high == pytest.approx(_wilson_by_formula(0, 6)[1])
    assert m.by_hops["3"] == three and m.by_domain["geo"] == m.overall
    # N-run union: n counts questions, not episodes; a question is right when any sample is
    union = evaluate_trajectories([traj("q", answer="Lyon", sample=0), traj("q", answer="Paris", sample=1),
                                   traj("p", answer="Lyon", sample=0), traj("p", answer="Lyon", sample=1)],
                                  run="u", model="m", protocol="omne", split="test", wall_time_s=1.0)
    assert (union.overall.n, union.overall.em) == (2, 0.5)
    assert (union.overall.em_low, union.overall.em_high) == pytest.approx(_wilson_by_formula(1, 2))


def test_scores_without_an_interval_get_it_from_n_and_em() -> None:
    """metrics.json written before the interval existed still reads, with the interval computed."""
    old = Scores.model_validate({"n": 12, "em": 0.0, "norm_em": 0.0, "f1": 0.1, "hit1": 0.0, "answered": 1.0})
    assert (old.em_low, old.em_high) == (0.0, pytest.approx(0.2425, abs=1e-4))
    assert Scores(n=12, em=0.5).em_low == pytest.approx(0.2538, abs=1e-4)
    assert (Scores().em_low, Scores().em_high) == (0.0, 1.0)
    given = Scores(n=12, em=0.5, em_low=0.1, em_high=0.9)  # values that are given are kept
    assert (given.em_low, given.em_high) == (0.1, 0.9)
    assert Scores.model_validate_json(given.model_dump_json()) == given


# ----- N-run union and grouping -----------------------------------------------------------------------
def test_n_run_union_raises_f1() -> None:
    gold = ["Paris", "Marseille"]
    first = traj("q", answer="Paris, Lyon", gold=gold, sample=0)
    second = traj("q", answer="Marseille", gold=gold, sample=1)
    (alone,) = score_trajectories([first])
    assert alone.f1 == pytest.approx(0.5)
    (union,) = score_trajectories([second, first])  # order of the records does not matter
    assert union.samples == 2
    assert union.predicted == ["paris", "lyon", "marseille"]  # sample order
    assert union.f1 == pytest.approx(0.8)  # P 2/3, R 1
    assert union.hit1  # sample 0's top answer is gold
    assert not alone.em and union.em  # sample 1's "Marseille" is exactly a gold answer


def test_n_run_union_em_and_hit_from_any_sample() -> None:
    (alone,) = score_trajectories([traj("q", answer="Lyon", sample=0)])
    assert (alone.em, alone.hit1) == (False, False)
    (union,) = score_trajectories([traj("q", answer="Lyon", sample=0), traj("q", answer=" Paris", sample=1)])
    assert (union.em, union.norm_em, union.hit1, union.f1) == (True, True, True, pytest.approx(2 / 3))


def test_group_counts_by_bucket_hops_domain() -> None:
    trajs = [
        traj("a", hops=1, bucket="1-2", domain="geo"),
        traj("b", hops=2, bucket="1-2", domain="geo", answer="Lyon"),
        traj("c", hops=3, bucket="3+", domain="bio"),
        traj("d", hops=4, bucket="3+", domain="bio", answer="Lyon"),
        traj("e", hops=6, bucket="3+", domain="bio"),
        traj("f", hops=None, bucket=None, domain="cwq"),  # an external question: no bucket, no hops
    ]
    scores = score_trajectories(trajs)
    by_bucket = group_scores(scores, "bucket")
    assert {k: v.n for k, v in by_bucket.items()} == {"1-2": 2, "3+": 3}
    assert by_bucket["3+"].em == pytest.approx(2 / 3)
    by_hops = group_scores(scores, "hops")
    assert list(by_hops) == ["1", "2", "3", ">=4"]
    assert {k: v.n for k, v in by_hops.items()} == {"1": 1, "2": 1, "3": 1, ">=4": 2}
    assert by_hops[">=4"].em == 0.5 and by_hops["2"].em == 0.0
    by_domain = group_scores(scores, "domain")
    assert {k: v.n for k, v in by_domain.items()} == {"bio": 3, "cwq": 1, "geo": 2}
    overall = aggregate(scores)
    assert overall.n == 6 and overall.em == pytest.approx(4 / 6) and overall.answered == 1.0
    assert hops_key(None) is None and hops_key(9) == ">=4"


# ----- behaviour ---------------------------------------------------------------------------------------
def test_repeated_invalid_calls_and_distributions() -> None:
    first = traj("a", tool_calls=[
        call("node_info", node_name="Paris", graph_type="geo"),
        call("node_info", node_name=" paris ", graph_type="geo"),  # same call up to case and space
        call("entity_matcher", node_name="Paris", graph_type="geo"),  # another tool: not a repeat
        call("node_info", node_name="Lyon", graph_type="geo", ok=False),
        call("node_info", node_name="Paris", graph_type="geo"),
    ], format_errors=["no_action"])
    second = traj("b", tool_calls=[call(None, ok=False), call(None, ok=False)],
                  format_errors=["fake_tool_response", "no_action"], finish="max_rounds")
    third = traj("c", answer="Paris")
    b = behaviour([first, second, third])
    assert b.repeated_tool_calls_per_sample == pytest.approx(3 / 3)  # 2 + 1 (the same garbage twice) + 0
    assert b.invalid_tool_calls_per_sample == pytest.approx(3 / 3)
    assert b.format_errors_per_sample == 1.0
    assert b.format_error_types == {"fake_tool_response": 1, "no_action": 2}
    assert b.first_tool == {"invalid": 1, "node_info": 1, "none": 1}
    assert b.tool_sequences["node_info>node_info>entity_matcher>node_info>node_info"] == 1
    assert b.tool_sequences["invalid>invalid"] == 1
    assert b.tool_calls_histogram == {"0": 1, "2": 1, "5": 1}
    assert b.finish == {"answer": 2, "max_rounds": 1}
    assert b.exploration_episodes == 0


def test_retrieval_rate_whole_names_in_successful_responses() -> None:
    found = traj("a", gold=["Sun"], tool_calls=[call("node_info", "Entity: Mercury\n1. Mercury -[orbits]-> Sun")])
    partial = traj("b", gold=["Sun"], tool_calls=[call("node_info", "Entity: Sunflower")])  # not the whole name
    echoed = traj("c", gold=["Sun"], tool_calls=[call("node_info", 'Entity "Sun" not found', ok=False)])
    silent = traj("d", gold=["Sun"])
    assert behaviour([found, partial, echoed, silent]).retrieval_rate == pytest.approx(0.25)


NODE_INFO = """Entity: Mercury
Type: planet
Description: The smallest planet.
Relations (3):
1. Mercury -[orbits]-> Sun: Mercury orbits the Sun.
2. Venus -[near]-> Mercury: neighbours
3. Mercury -[named after]-> Hermes"""


def gold_path(qa: str) -> GoldPath:
    return GoldPath(qa_id=qa, domain="geo", paths=[
        GoldPathItem(nodes=["Mercury", "Sun", "Solar System"], valid=True, edges=[
            PathEdge(src="Mercury", keywords="orbits", dst="Sun"),
            PathEdge(src="Sun", keywords="part of", dst="Solar System")]),
        GoldPathItem(nodes=["Mercury", "Hermes"], valid=False,  # rejected paths never count
                     edges=[PathEdge(src="Mercury", keywords="named after", dst="Hermes")]),
    ])


def test_parse_triples_formats() -> None:
    assert parse_triples(NODE_INFO) == [("Mercury", "orbits", "Sun"), ("Venus", "near", "Mercury"),
                                        ("Mercury", "named after", "Hermes")]
    assert parse_triples("1. Mercury -[orbits]-- Sun") == [("Mercury", "orbits", "Sun")]  # undirected graph
    # tools.neighbor_types: the other end written with its type is read by its name first, then as written
    typed = "1. Mercury -[orbits]-> Sun [star]\n2. Venus (planet) [planet] -[near]-> Mercury: neighbours"
    assert parse_triples(typed) == [("Mercury", "orbits", "Sun"), ("Venus (planet)", "near", "Mercury")]
    assert _triple_alternatives(typed)[0] == (("Mercury", "orbits", "Sun"), ("Mercury", "orbits", "Sun [star]"))
    search = 'Triples of "Sun" relevant to the question:\n(Sun, part of, Solar System)\n(Mercury, orbits, Sun)'
    assert parse_triples(search) == [("Sun", "part of", "Solar System"), ("Mercury", "orbits", "Sun")]
    kg_r1 = 'Tail entities for entity "Sun" with relation "has planet": Mercury, Venus, … 6 more'
    assert parse_triples(kg_r1) == [("Sun", "has planet", "Mercury"), ("Sun", "has planet", "Venus")]
    head = 'Head entities for entity "Sun" with relation "orbits": Mercury'
    assert parse_triples(head) == [("Mercury", "orbits", "Sun")]
    assert parse_triples('[["a", "r", "b"]]') == [("a", "r", "b")]
    assert parse_triples("Found 2 entities matching 'Sun':\n1. Entity: Sun Description: a star") == []


# tools.node_info_lines: from_entity (the project's): each relation read from the response's "Entity:" line
NODE_INFO_FROM_ENTITY = """No entity is named "mercury planet"; the closest is "Mercury".
Entity: Mercury
Type: planet
Description: The smallest planet.
Relations (5):
1. -[orbits]-> Sun [star]: Mercury orbits the Sun.
2. <-[near]- Venus (planet) [planet]: neighbours
3. -[named after]-> Hermes
… 2 more relations not shown"""


def test_parse_triples_reads_node_info_lines_from_the_entity() -> None:
    assert parse_triples(NODE_INFO_FROM_ENTITY) == [("Mercury", "orbits", "Sun"), ("Venus (planet)", "near", "Mercury"),
                                                    ("Mercury", "named after", "Hermes")]
    # the other end's type (tools.neighbor_types) is read off first, then as written; the entity's own name is plain
    assert _triple_alternatives(NODE_INFO_FROM_ENTITY)[:2] == (
        (("Mercury", "orbits", "Sun"), ("Mercury", "orbits", "Sun [star]")),
        (("Venus (planet)", "near", "Mercury"), ("Venus (planet) [planet]", "near", "Mercury")))
    # an undirected graph's "-[label]-- Other" lines, typed or not, start from the entity
    undirected = "Entity: Mercury\nType: planet\nRelations (2):\n1. -[orbits]-- Sun [star]\n2. -[near]-- Venus"
    assert parse_triples(undirected) == [("Mercury", "orbits", "Sun"), ("Mercury", "near", "Venus")]
    # each response's lines read from its own entity (several responses in one text)
    both = "Entity: Sun\nRelations (1):\n1. -[part of]-> Solar System [system]\n" + NODE_INFO_FROM_ENTITY
    assert parse_triples(both)[0] == ("Sun", "part of", "Solar System")
    assert parse_triples(both)[1:] == parse_triples(NODE_INFO_FROM_ENTITY)
    # the same relations in either layout score the same
    triples_layout = "\n".join(["Entity: Mercury", "1. Mercury -[orbits]-> Sun [star]: Mercury orbits the Sun.",
                                "2. Venus (planet) [planet] -[near]-> Mercury: neighbours",
                                "3. Mercury -[named after]-> Hermes"])
    assert _triple_alternatives(NODE_INFO_FROM_ENTITY) == _triple_alternatives(triples_layout)


def test_gold_triple_coverage_and_exploration_efficiency() -> None:
    assert gold_triples(gold_path("q")) == [("Mercury", "orbits", "Sun"), ("Sun", "part of", "Solar System")]
    think = "Mercury orbits the Sun. Venus is near Mercury. The sun is in the solar system."
    explored = traj("q1", gold=["Sun"], think_text=think,
                    tool_calls=[call("node_info", NODE_INFO, node_name="Mercury", graph_type="geo")])
    # gold: (Mercury, orbits, Sun) named, (Sun, part of, Solar System) not ("part of" missing) -> coverage 1/2
    # named KG triples: orbits (gold) and near; "named after"/Hermes is not named -> efficiency 1/2
    blank = traj("q2", gold=["Sun"], think_text="", tool_calls=[call("node_info", NODE_INFO)])
    no_gold = traj("q3", think_text=think, tool_calls=[call("node_info", NODE_INFO)])  # no gold path: left out
    b = behaviour([explored, blank, no_gold], gold_paths={"q1": gold_path("q1"), "q2": gold_path("q2")})
    assert b.exploration_episodes == 2
    assert b.gold_triple_coverage == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert b.exploration_efficiency == pytest.approx(0.25)  # (1/2 + 0: nothing named) / 2
    assert b.retrieval_rate == pytest.approx(2 / 3)  # q3's gold (Paris) is in no response
    (only,) = [behaviour([explored], gold_paths={"q1": gold_path("q1")})]
    assert (only.gold_triple_coverage, only.exploration_efficiency) == (0.5, 0.5)


def test_episode_outcomes_say_how_each_wrong_answer_went_wrong() -> None:
    gold = gold_path("q")  # Mercury -> Sun -> Solar System; the answer is "Solar System"
    opened = [call("entity_matcher", "Found 1", node_name="mercury", graph_type="geo"),
              call("node_info", NODE_INFO, node_name="Mercury", graph_type="geo")]
    retyped = [call("entity_matcher", "Found 1", node_name="Mercurry", graph_type="geo"),
               call("node_info", "not found", ok=False, node_name="Mercurry", graph_type="geo")]
    cases = {
        "correct": traj(answer="Solar System", gold=["Solar System"], tool_calls=opened),
        "stopped_on_path": traj(answer="sun", gold=["Solar System"], tool_calls=opened),  # a hop short
        "misspelled_answer": traj(answer="Solar Sytem", gold=["Solar System"], tool_calls=opened),
        "start_not_reached": traj(answer="Hermes", gold=["Solar System"], tool_calls=retyped),
        "no_answer": traj(answer=None, gold=["Solar System"], tool_calls=opened),
        "wrong_answer": traj(answer="Hermes", gold=["Solar System"], tool_calls=opened),
    }
    for expected, episode in cases.items():
        assert episode_outcome(episode, gold) == expected, expected
    assert list(OUTCOMES) == list(cases)
    assert episode_outcome(cases["correct"], None) is None  # nothing to compare with
    # without tools (a no-tool baseline) the start cannot be "not reached": a wrong answer is just wrong
    assert episode_outcome(traj(answer="Hermes", gold=["Solar System"]), gold) == "wrong_answer"
    b = behaviour(list(cases.values()) + [traj("other", answer="Paris")], gold_paths={"q1": gold})
    assert b.outcomes == dict.fromkeys(OUTCOMES, 1)  # "other" has no gold paths: not counted


def test_exploration_details() -> None:
    gold = [("Washington, D.C.", "capital of", "United States")]
    think = "Washington, D.C. is the capital of the United States; it is near Baltimore."
    # an ambiguous "(a, b, c, d)" line: the reading whose parts are all named is the one counted
    seen_text = "(Washington, D.C., capital of, United States)\n(Washington, D.C., near, Baltimore)"
    assert exploration_scores(think, gold, _triple_alternatives(seen_text)) == (1.0, 0.5)
    assert exploration_scores("", gold, []) == (0.0, 0.0)
    # relation labels are matched in their prose forms
    freebase = ("Ada", "people.person.place_of_birth", "Paris")
    assert triple_named("Paris was the birthplace; place of birth of Ada", freebase)
    assert triple_named("Paris and the treatment of Ada", ("Ada", "cure,treatment", "Paris"))
    assert not triple_named("Parisian Ada orbits", ("Ada", "orbits", "Paris"))  # whole names only


# ----- efficiency and the report -------------------------------------------------------------------------
def test_efficiency_means_and_sd() -> None:
    trajs = [
        traj("a", latency_s=1.0, turn_latency_s=[0.5, 0.5], generated_tokens=10, prompt_tokens=100, rounds=2,
             tool_calls=[call("node_info"), call("entity_matcher", ok=False)]),
        traj("b", latency_s=2.0, turn_latency_s=[1.0], generated_tokens=20, prompt_tokens=100, rounds=1,
             tool_calls=[call(None, ok=False)]),  # unparsed: never reached the KG
        traj("c", latency_s=3.0, turn_latency_s=[1.5, 0.5, 1.0], generated_tokens=30, prompt_tokens=100, rounds=3,
             tool_calls=[call("node_info"), call("node_info"), call("node_info")]),
    ]
    e = efficiency(trajs, wall_time_s=2.0)
    assert e.generated_tokens_mean == 20.0
    assert e.total_tokens_mean == 120.0
    assert e.latency_mean_s == 2.0
    assert e.latency_sd_s == pytest.approx(1.0)  # sample sd of 1, 2, 3
    assert e.latency_per_turn_mean_s == pytest.approx(5 / 6)  # pooled over the 6 turns
    assert e.turns_mean == 2.0
    assert e.samples_per_s == 1.5
    assert e.generated_tokens_per_s == 30.0
    assert e.kg_calls_per_sample == pytest.approx(5 / 3)
    untimed = efficiency([traj(latency_s=3.0, rounds=2), traj(latency_s=1.0, rounds=2)], wall_time_s=0.0)
    assert untimed.latency_per_turn_mean_s == 1.0 and untimed.samples_per_s == 0.0
    assert untimed.latency_sd_s == pytest.approx(2 ** 0.5)


def test_evaluate_trajectories_and_repeats() -> None:
    trajs = [
        traj("a", answer="Paris", sample=0, latency_s=1.0),
        traj("a", answer="Lyon", sample=1, latency_s=1.0),
        traj("b", answer="Lyon", hops=3, bucket="3+", sample=0, latency_s=1.0),
        traj("b", answer="Lyon", hops=3, bucket="3+", sample=1, latency_s=1.0),
    ]
    m = evaluate_trajectories(trajs, run="r", model="m", protocol="omne", split="test", wall_time_s=4.0)
    assert isinstance(m, EvalMetrics)
    assert m.samples == 2
    assert [t.correct for t in trajs] == [True, False, False, False]
    assert m.overall.n == 2 and m.overall.em == 0.5 and m.overall.hit1 == 0.5
    assert {k: v.n for k, v in m.by_bucket.items()} == {"1-2": 1, "3+": 1}
    assert list(m.by_hops) == ["2", "3"] and list(m.by_domain) == ["geo"]
    assert m.efficiency.samples_per_s == 1.0
    assert EvalMetrics.model_validate_json(m.model_dump_json()) == m

    summary = repeats_summary([Scores(n=1, em=0.5), Scores(n=1, em=0.7), Scores(n=1, em=0.9)])
    assert summary["em"]["mean"] == pytest.approx(0.7) and summary["em"]["sd"] == pytest.approx(0.2)
    assert summary["f1"] == {"mean": 0.0, "sd": 0.0}
    runs = repeats_summary([m, m])
    assert runs["em"] == {"mean": 0.5, "sd": 0.0}
    assert runs["efficiency.samples_per_s"]["mean"] == 1.0
    assert repeats_summary([]) == {}


def test_llm_judge_grades_free_form_answers_and_keeps_its_reasoning() -> None:
    import json as _json

    from pipelines.agent.trajectory import Trajectory
    from pipelines.config import LLMParams
    from pipelines.eval.judge import judge_answers
    from pipelines.llm.scripted import ScriptedChatClient

    def traj(qa_id: str, answer: str | None) -> Trajectory:
        return Trajectory(qa_id=qa_id, domain="d", question="Which moon orbits Mars?", gold_answers=["Phobos"],
                          protocol="omne", messages=[], answer=answer)

    trajs = [traj("exact", "Phobos"), traj("alias", "the moon Phobos"), traj("wrong", "Deimos"),
             traj("none", None), traj("broken", "Phobos I")]

    def reply(request) -> str:  # noqa: ANN001
        prediction = request.messages[1]["content"].split("Predicted answer: ")[1].split("\n")[0]
        if prediction == "Phobos I":
            return "I think so"
        return _json.dumps({"reasoning": "same moon" if "Phobos" in prediction else "another moon",
                            "verdict": "Phobos" in prediction})

    client = ScriptedChatClient(reply)
    summary = judge_answers(trajs, client, LLMParams(json_repair_rounds=1))
    verdicts = {t.qa_id: t.judge["verdict"] for t in trajs}
    assert verdicts == {"exact": True, "alias": True, "wrong": False, "none": False, "broken": False}
    assert summary.asked == 3 and summary.failed == 1 and summary.accuracy == 0.4
    assert trajs[1].judge["reasoning"] == "same moon" and trajs[0].judge["reasoning"] == "exact match"
    assert client.usage.by_tag["eval.judge"] == 4  # 3 questions + 1 repair round
