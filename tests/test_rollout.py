"""The rollout engine: parsing of every model-output shape, caps, scripted policies through the real
tools, and batched generation equal to one-at-a-time under greedy decoding (tiny random llama)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.agent.client import InProcessToolClient
from pipelines.agent.protocols import DirectProtocol, KGR1Protocol, OmneProtocol, SearchProtocol
from pipelines.agent.rollout import REPEAT_NOTE, UNSHOWN_ANSWER_NOTE, RolloutEngine, RolloutParams, Task
from pipelines.agent.tools import KG_R1_TOOLS, OMNE_TOOLS, SEARCH_TOOLS, TOOL_SPECS
from pipelines.llm.base import ChatRequest
from pipelines.llm.scripted import ScriptedChatClient


def omne(max_rounds: int = 7, mode: str = "think") -> OmneProtocol:
    return OmneProtocol([TOOL_SPECS[n] for n in OMNE_TOOLS], max_rounds=max_rounds, mode=mode)


@pytest.mark.parametrize(("text", "kind", "errors"), [
    ('<think>find it</think><tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>',
     "tool_call", []),
    ("<think>done</think><answer> Phobos </answer>", "answer", []),
    ("Phobos is the answer.", "none", ["no_action"]),
    ('<think>a</think><tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call><answer>X</answer>',
     "tool_call", []),
    ('<think>a</think><answer>X</answer><tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>',
     "answer", []),
    ("<think>still thinking", "none", ["unterminated_think", "no_action"]),
    ('<think>go <tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>', "tool_call",
     ["unterminated_think"]),
    ("<think>x</think><answer>  </answer>", "answer", ["empty_answer"]),
    ("<think>x</think><tool_response>Mars orbits Phobos</tool_response><answer>Phobos</answer>", "none",
     ["fake_tool_response", "no_action"]),
    ('<tool_call>entity_matcher(node_name="Mars", graph_type="solar")</tool_call>', "tool_call",
     ["call_without_think"]),
])
def test_every_model_output_shape_parses(text: str, kind: str, errors: list[str]) -> None:
    action = omne().parse(text)
    assert action.kind == kind and action.errors == errors
    if kind == "answer":
        assert action.answer == text.split("<answer>")[1].split("</answer>")[0].strip()
    assert "<tool_response>" not in action.text  # an imitated response never enters the conversation


def test_two_calls_in_one_turn_take_the_first() -> None:
    text = ('<think>a</think><tool_call>entity_matcher(node_name="Mars", graph_type="solar")</tool_call>'
            '<tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>')
    action = omne().parse(text)
    assert action.call.startswith("entity_matcher") and "several_calls" in action.errors


def test_other_protocols_parse_their_tags() -> None:
    kg = KGR1Protocol([TOOL_SPECS[n] for n in KG_R1_TOOLS], max_rounds=6).parse(
        '<think>t</think><kg-query>get_tail_relations("Mars")</kg-query>')
    assert kg.kind == "tool_call" and kg.call == 'get_tail_relations("Mars")'
    assert KGR1Protocol([], max_rounds=6).parse("<information>fake</information><answer>x</answer>").errors[0] == \
        "fake_tool_response"
    search = SearchProtocol([TOOL_SPECS[n] for n in SEARCH_TOOLS], max_rounds=4)
    action = search.parse("<think>I need Mars <search>Mars</search>")
    assert action.kind == "tool_call" and action.call == "Mars"
    assert json.loads(search.search_call("Mars", "Which moon?"))["arguments"] == {"entity": "Mars", "question": "Which moon?"}


def test_system_prompts_name_no_registered_graph() -> None:
    """The prompts' examples use placeholders: a real graph named there (it was graph_type="chemistry") is a name
    a small model copies into its calls on every other graph (docs/sft.md, "Graph names"). The omne example is
    still a well-formed call of a listed tool."""
    import re

    from pipelines.agent.calls import ToolCall, parse_call
    from pipelines.domains import load_registry
    from tests.conftest import PROJECT_ROOT

    names = load_registry(PROJECT_ROOT / "kg_assets" / "domains.yaml").names
    prompts = [omne().system_prompt(), KGR1Protocol([TOOL_SPECS[n] for n in KG_R1_TOOLS], max_rounds=6).system_prompt(),
               SearchProtocol([TOOL_SPECS[n] for n in SEARCH_TOOLS], max_rounds=4).system_prompt()]
    named = {name for prompt in prompts for name in names if re.search(rf"\b{re.escape(name)}\b", prompt)}
    assert len(names) >= 8 and not named
    example = re.search(r"e\.g\. <tool_call>(.*?)</tool_call>", prompts[0]).group(1)
    call = parse_call(example, {n: TOOL_SPECS[n] for n in OMNE_TOOLS})
    assert isinstance(call, ToolCall) and call.name == "node_info" and call.arguments["graph_type"].startswith("<")


def _gold_path_policy(path: list[str], answer: str, domain: str):  # noqa: ANN202
    """A scripted model that finds the start entity, walks the gold path with node_info, answers."""

    def reply(request: ChatRequest) -> str:
        done = sum(m["role"] == "assistant" for m in request.messages)
        responses = [m["content"] for m in request.messages if m["content"].startswith("<tool_response>")]
        if done == 0:
            return f'<think>Find {path[0]}.</think><tool_call>entity_matcher(node_name="{path[0]}", graph_type="{domain}")</tool_call>'
        if done <= len(path) - 1:
            assert path[done - 1] in responses[-1]  # the real tool response names the entity reached
            return (f"<think>Look at {path[done - 1]}.</think>"
                    f'<tool_call>node_info(node_name="{path[done - 1]}", graph_type="{domain}")</tool_call>')
        assert answer in responses[-1]
        return f"<think>The answer is {answer}.</think><answer>{answer}</answer>"

    return reply


def test_a_policy_following_the_gold_path_answers_right_and_a_wrong_one_does_not(toolbox) -> None:  # noqa: ANN001
    tools = InProcessToolClient(toolbox)
    task = Task(qa_id="q1", domain="solar", question="Which moon orbits the planet Mars?", gold_answers=["Phobos"],
                bucket="1-2", hops=1)
    right = RolloutEngine(ScriptedChatClient(_gold_path_policy(["Mars", "Phobos"], "Phobos", "solar")), omne(),
                          tools, RolloutParams()).run([task], progress=False)[0]
    assert right.answer == "Phobos" and right.finish == "answer" and right.rounds == 3
    assert [c.name for c in right.tool_calls] == ["entity_matcher", "node_info"]
    assert all(c.ok for c in right.tool_calls) and "Phobos" in right.tool_calls[1].response
    roles = [m["role"] for m in right.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert right.messages[3]["content"].startswith("<tool_response>\n") and "<tools>" in right.messages[0]["content"]
    assert "Find Mars." in right.think_text and right.generated_tokens > 0

    wrong = RolloutEngine(ScriptedChatClient(["<think>Guess.</think><answer>Deimos</answer>"]), omne(), tools,
                          RolloutParams()).run([task], progress=False)[0]
    assert wrong.answer == "Deimos" and wrong.tool_calls == [] and wrong.rounds == 1


def test_the_engine_gives_the_tools_each_episode_question(toolbox) -> None:  # noqa: ANN001
    """Each call carries its episode's question, so node_info lists the relations closest to it first
    (tools.node_info_order: question, as in the project's params)."""
    assert toolbox.tool_params.node_info_order == "question"
    call = '<think>Look.</think><tool_call>node_info(node_name="Galileo Galilei", graph_type="solar")</tool_call>'
    tasks = [Task(qa_id=f"q{i}", domain="solar", question=question, gold_answers=["Pisa"], bucket="1-2", hops=1)
             for i, question in enumerate(["Which moons did Galileo Galilei discover?",
                                           "Where was Galileo Galilei born?"])]
    moons, born = RolloutEngine(ScriptedChatClient([call, "<answer>Pisa</answer>"] * 2), omne(),
                                InProcessToolClient(toolbox), RolloutParams(batch_size=1)).run(tasks, progress=False)
    assert moons.tool_calls[0].response.split("\n")[0] == born.tool_calls[0].response.split("\n")[0] == (
        "Entity: Galileo Galilei")
    assert moons.tool_calls[0].response.split("\n")[3] == "1. <-[discovered by]- Callisto [moon]"
    assert born.tool_calls[0].response.split("\n")[3] == "1. -[born in]-> Pisa"


def test_round_cap_and_fake_responses_are_never_executed(toolbox) -> None:  # noqa: ANN001
    tools = InProcessToolClient(toolbox)
    task = Task(qa_id="q", domain="solar", question="?", gold_answers=["Sun"])
    looping = ScriptedChatClient(lambda r: '<think>again</think><tool_call>node_info(node_name="Mars", '
                                           'graph_type="solar")</tool_call>')
    capped = RolloutEngine(looping, omne(max_rounds=3), tools, RolloutParams()).run([task], progress=False)[0]
    assert capped.finish == "max_rounds" and capped.rounds == 3 and len(capped.tool_calls) == 3 and capped.answer is None
    faker = ScriptedChatClient(["<think>x</think><tool_response>Sun</tool_response><tool_call>node_info("
                                'node_name="Sun", graph_type="solar")</tool_call>'])
    faked = RolloutEngine(faker, omne(), tools, RolloutParams()).run([task], progress=False)[0]
    assert faked.tool_calls == [] and faked.finish == "no_action" and "fake_tool_response" in faked.format_errors
    assert "<tool_response>" not in faked.messages[-1]["content"]


def test_a_call_repeated_past_max_same_call_ends_the_episode_and_a_new_call_resets_the_count(toolbox) -> None:  # noqa: ANN001
    tools = InProcessToolClient(toolbox)
    task = Task(qa_id="q", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"])
    mars = '<think>again</think><tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>'
    looped = RolloutEngine(ScriptedChatClient(lambda r: mars), omne(), tools,
                           RolloutParams(max_same_call=2)).run([task], progress=False)[0]
    # the first call runs, the second (the same) gets the repeat note unrun, the third ends the episode unexecuted
    # (it is still the last assistant turn)
    assert looped.finish == "repeated_call" and looped.rounds == 3 and len(looped.tool_calls) == 2
    first, repeat = looped.tool_calls
    assert first.ok and first.response.startswith("Entity: Mars")
    assert not repeat.ok and repeat.error_type == "repeated_call" and repeat.response == REPEAT_NOTE
    assert repeat.name == "node_info" and repeat.arguments == first.arguments
    assert looped.messages[-2] == {"role": "user", "content": f"<tool_response>\n{REPEAT_NOTE}\n</tool_response>"}
    assert looped.messages[-1]["role"] == "assistant" and "node_info" in looped.messages[-1]["content"]
    sun = '<think>other</think><tool_call>node_info(node_name="Sun", graph_type="solar")</tool_call>'
    script = [mars, mars, sun, mars, mars, "<think>Phobos.</think><answer>Phobos</answer>"]
    recovered = RolloutEngine(ScriptedChatClient(script), omne(), tools,
                              RolloutParams(max_same_call=2)).run([task], progress=False)[0]
    assert recovered.finish == "answer" and len(recovered.tool_calls) == 5 and recovered.answer == "Phobos"
    assert [c.error_type for c in recovered.tool_calls] == [None, "repeated_call", None, None, "repeated_call"]
    unlimited = RolloutEngine(ScriptedChatClient(lambda r: mars), omne(max_rounds=5), tools,
                              RolloutParams()).run([task], progress=False)[0]
    assert unlimited.finish == "max_rounds" and len(unlimited.tool_calls) == 5


def test_an_answer_no_response_showed_is_sent_back_once_with_the_note(toolbox) -> None:  # noqa: ANN001
    tools = InProcessToolClient(toolbox)
    task = Task(qa_id="q", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"])
    mars = '<think>Mars.</think><tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>'
    spliced, copied = "<think>Mars.</think><answer>Marsobos</answer>", "<think>Phobos.</think><answer>Phobos</answer>"
    noted = RolloutParams(unshown_answer_note=True)
    fixed = RolloutEngine(ScriptedChatClient([mars, spliced, copied]), omne(), tools, noted).run(
        [task], progress=False)[0]
    assert fixed.answer == "Phobos" and fixed.finish == "answer" and fixed.rounds == 3
    assert fixed.unshown_answers == ["Marsobos"] and len(fixed.tool_calls) == 1  # the note is no tool call
    note = UNSHOWN_ANSWER_NOTE.format(answer="Marsobos")
    assert fixed.messages[-3]["content"].endswith("<answer>Marsobos</answer>")
    assert fixed.messages[-2] == {"role": "user", "content": f"<tool_response>\n{note}\n</tool_response>"}
    # once per episode: a second unshown answer stands, as written
    stands = RolloutEngine(ScriptedChatClient([mars, spliced, spliced]), omne(), tools, noted).run(
        [task], progress=False)[0]
    assert stands.answer == "Marsobos" and stands.finish == "answer" and stands.unshown_answers == ["Marsobos"]
    # a name the response showed, and any answer without the switch, end the episode at once
    for script, params in (([mars, copied], noted), ([mars, spliced], RolloutParams())):
        direct = RolloutEngine(ScriptedChatClient(script), omne(), tools, params).run([task], progress=False)[0]
        assert direct.rounds == 2 and direct.unshown_answers == [] and direct.finish == "answer"
    # an answer given before any call is sent back too: no response showed it
    guessed = RolloutEngine(ScriptedChatClient([copied, mars, copied]), omne(), tools, noted).run(
        [task], progress=False)[0]
    assert guessed.unshown_answers == ["Phobos"] and guessed.answer == "Phobos" and len(guessed.tool_calls) == 1
    # a protocol without tools never gets the note
    plain = RolloutEngine(ScriptedChatClient([copied]), DirectProtocol(), None, noted).run([task], progress=False)[0]
    assert plain.answer == "Phobos" and plain.rounds == 1


def test_search_protocol_injects_triples_into_the_same_reasoning(toolbox) -> None:  # noqa: ANN001
    tools = InProcessToolClient(toolbox)
    search = SearchProtocol([TOOL_SPECS[n] for n in SEARCH_TOOLS], max_rounds=4)
    script = ScriptedChatClient(lambda r: "<think>Mars first <search>Mars</search>" if not r.prefix else
                                "then it is clear.</think><answer>Phobos</answer>")
    traj = RolloutEngine(script, search, tools, RolloutParams()).run(
        [Task(qa_id="s", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"])],
        progress=False)[0]
    assert traj.answer == "Phobos" and len(traj.tool_calls) == 1 and traj.tool_calls[0].name == "search"
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant"]
    final = traj.messages[-1]["content"]
    assert "<searched_triples>" in final and final.index("<searched_triples>") < final.index("<answer>")
    assert script.requests[1].prefix.endswith("</searched_triples>\n")


def test_no_think_mode_prefixes_an_empty_think() -> None:
    client = ScriptedChatClient(["<answer>Sun</answer>"])
    traj = RolloutEngine(client, DirectProtocol(mode="no_think"), None, RolloutParams()).run(
        [Task(qa_id="d", domain="solar", question="What does Earth orbit?", gold_answers=["Sun"])], progress=False)[0]
    assert client.requests[0].prefix == "<think>\n\n</think>\n" and traj.answer == "Sun"
    assert traj.messages[-1]["content"].startswith("<think>\n\n</think>\n")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.model_support import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def test_batched_rollouts_equal_one_at_a_time_under_greedy(tiny_llama: Path, toolbox) -> None:  # noqa: ANN001
    from pipelines.llm.local import TransformersChatClient

    tasks = [Task(qa_id=str(i), domain="solar", question=q, gold_answers=["Phobos"]) for i, q in enumerate(
        ["Which moon orbits Mars?", "What orbits the Sun?", "Phobos?", "Which planet has the moon Deimos?",
         "Name a moon.", "Mars"])]
    tools = InProcessToolClient(toolbox)
    params = RolloutParams(max_new_tokens=24, batch_size=6)
    batched = RolloutEngine(TransformersChatClient(tiny_llama, batch_size=6, device="cpu"), omne(max_rounds=2),
                            tools, params).run(tasks, progress=False)
    single = RolloutEngine(TransformersChatClient(tiny_llama, batch_size=1, device="cpu"), omne(max_rounds=2),
                           tools, params.model_copy(update={"batch_size": 1})).run(tasks, progress=False)
    for a, b in zip(batched, single, strict=True):
        assert a.messages == b.messages and a.generated_tokens == b.generated_tokens and a.finish == b.finish
    assert all(t.generated_tokens <= 24 * t.rounds for t in batched)
    assert {t.finish for t in batched} <= {"max_tokens", "no_action", "answer", "max_rounds"}


def test_token_cap_ends_an_episode(tiny_llama: Path, toolbox) -> None:  # noqa: ANN001
    from pipelines.llm.local import TransformersChatClient

    client = TransformersChatClient(tiny_llama, batch_size=2, device="cpu")
    traj = RolloutEngine(client, omne(), InProcessToolClient(toolbox), RolloutParams(max_new_tokens=5)).run(
        [Task(qa_id="t", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"])],
        progress=False)[0]
    # a random model writes no tags: the first turn either hits the 5-token cap or ends (EOS) before it
    assert traj.rounds == 1 and not traj.tool_calls and traj.answer is None
    assert (traj.finish, traj.generated_tokens) == ("max_tokens", 5) or \
        (traj.finish == "no_action" and traj.generated_tokens <= 5)


def test_a_peft_adapter_folder_loads_on_its_base(tiny_llama: Path, tmp_path: Path, solar) -> None:  # noqa: ANN001
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.agent.models import load_agent_model

    base = AutoModelForCausalLM.from_pretrained(tiny_llama)
    torch.manual_seed(1)
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(adapter)
    assert not (adapter / "config.json").exists() and (adapter / "adapter_config.json").is_file()
    reference = solar.model_copy(update={"agent": solar.agent.model_copy(update={"backend": "transformers"})})
    client = load_agent_model(str(adapter), reference)  # the transformers backend holds the merged weights
    plain = load_agent_model(str(tiny_llama), reference)
    request = ChatRequest(messages=[{"role": "user", "content": "Which moon orbits Mars?"}], max_tokens=8)
    adapted, original = client.complete(request), plain.complete(request)
    assert client.model.startswith("adapter-") and plain.model.startswith("tiny-llama-")
    assert adapted.completion_tokens >= 1 and original.completion_tokens >= 1
    merged = dict(client.lm.named_parameters())["model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(merged, dict(plain.lm.named_parameters())["model.layers.0.self_attn.q_proj.weight"])


def test_rollouts_through_an_openai_compatible_endpoint(toolbox) -> None:  # noqa: ANN001
    from pipelines.config import LLMParams
    from pipelines.llm.openai_client import OpenAIChatClient
    from pipelines.llm.scripted import scripted_openai_app, serve_in_thread

    def handler(body: dict) -> dict:
        assert body["stop"] == ["</tool_call>", "</answer>"]
        turns = sum(m["role"] == "assistant" for m in body["messages"])
        # like the OpenAI API, the reply ends right before the matched stop string
        text = ('<think>Look up Mars.</think><tool_call>node_info(node_name="Mars", graph_type="solar")' if turns == 0
                else "<think>Phobos orbits Mars.</think><answer>Phobos")
        return {"text": text, "finish_reason": "stop"}

    app = scripted_openai_app(handler, latency_s=0.2)  # slow enough that concurrent requests overlap
    with serve_in_thread(app) as url:
        client = OpenAIChatClient(LLMParams(concurrency=4), base_url=f"{url}/v1", model="endpoint-model")
        tasks = [Task(qa_id=str(i), domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"])
                 for i in range(3)]
        trajs = RolloutEngine(client, omne(), InProcessToolClient(toolbox), RolloutParams(batch_size=3)).run(
            tasks, progress=False)
    for traj in trajs:
        assert traj.answer == "Phobos" and [c.name for c in traj.tool_calls] == ["node_info"]
        assert traj.messages[2]["content"].endswith("</tool_call>") and traj.tool_calls[0].ok
    assert app.state.log.total == 6 and app.state.log.max_in_flight >= 2
