"""RL stages on TRL's GRPOTrainer with tool rollouts: episode encoding (which tokens the model wrote),
credit assignment (KG-R1 turn-level, PPO's GAE), the policy loss ignoring tool-response tokens, and real
tiny training runs (GRPO and PPO) that save an auditable model folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.agent.trajectory import ToolCallRecord, Trajectory
from pipelines.config import Params, RLStageParams
from pipelines.errors import ConfigError
from pipelines.train.rl import train_rl
from pipelines.train.rl.advantages import gae_advantages, turn_level_advantages
from pipelines.train.rl.data import rl_dataset, rl_questions
from pipelines.train.rl.episodes import encode_trajectory

RESPONSE = "<tool_response>\nEntity: Mars\nRelations (1):\n1. Phobos -[orbits]-> Mars\n</tool_response>"


def _trajectory() -> Trajectory:
    call = '<think>Find Mars.</think>\n<tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>'
    answer = "<think>Phobos orbits Mars.</think>\n<answer>Phobos</answer>"
    return Trajectory(
        qa_id="q1", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"], protocol="omne",
        messages=[{"role": "system", "content": "You answer questions."},
                  {"role": "user", "content": "Question: Which moon orbits Mars?"},
                  {"role": "assistant", "content": call}, {"role": "user", "content": RESPONSE},
                  {"role": "assistant", "content": answer}],
        tool_calls=[ToolCallRecord(round=0, text='node_info(node_name="Mars", graph_type="solar")', name="node_info",
                                   ok=True, response=RESPONSE)],
        answer="Phobos", finish="answer", rounds=2)


@pytest.fixture(scope="module")
def tokenizer(tiny: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def test_encoding_marks_only_the_models_own_tokens(tokenizer) -> None:
    traj = _trajectory()
    encoded = encode_trajectory(traj, tokenizer)
    full = tokenizer.apply_chat_template(traj.messages, tokenize=False)
    assert tokenizer.decode(encoded.prompt_ids + encoded.completion_ids) == full  # nothing lost or reordered
    model_text = tokenizer.decode([t for t, m in zip(encoded.completion_ids, encoded.env_mask, strict=True) if m])
    assert model_text == traj.messages[2]["content"] + traj.messages[4]["content"]
    env_text = tokenizer.decode([t for t, m in zip(encoded.completion_ids, encoded.env_mask, strict=True) if not m])
    assert RESPONSE in env_text and "<|im_start|>assistant" in env_text and "Find Mars" not in env_text
    assert len(encoded.turn_spans) == 2
    first = tokenizer.decode(encoded.completion_ids[slice(*encoded.turn_spans[0])])
    assert first == traj.messages[2]["content"]


def test_inline_responses_and_forced_prefixes_are_environment_tokens(tokenizer) -> None:
    injected = "<searched_triples>(Phobos, orbits, Mars)</searched_triples>"
    content = f"<think>\n\n</think>\n<think>Look.<search>Mars</search>\n{injected}\nSo Phobos.</think><answer>Phobos</answer>"
    traj = _trajectory().model_copy(update={
        "messages": _trajectory().messages[:2] + [{"role": "assistant", "content": content}],
        "tool_calls": [_trajectory().tool_calls[0].model_copy(update={"response": "(Phobos, orbits, Mars)"})]})
    encoded = encode_trajectory(traj, tokenizer, assistant_prefix="<think>\n\n</think>\n",
                                inline_response=lambda r: f"<searched_triples>{r}</searched_triples>")
    model_text = tokenizer.decode([t for t, m in zip(encoded.completion_ids, encoded.env_mask, strict=True) if m])
    assert "Phobos, orbits" not in model_text and "<search>Mars</search>" in model_text
    assert not model_text.startswith("<think>\n\n</think>") and model_text.endswith("<answer>Phobos</answer>")


def test_a_turn_the_model_left_empty_keeps_its_place_among_the_turn_spans(tokenizer) -> None:
    """Per-turn rewards count every assistant turn: span t must be turn t, an empty turn included."""
    traj = _trajectory()
    messages = [*traj.messages[:2], {"role": "assistant", "content": ""}, *traj.messages[2:]]
    encoded = encode_trajectory(traj.model_copy(update={"messages": messages}), tokenizer)
    (a, b), first, last = encoded.turn_spans
    assert len(encoded.turn_spans) == 3 and a == b and sum(encoded.env_mask[a:b]) == 0
    assert tokenizer.decode(encoded.completion_ids[slice(*first)]) == traj.messages[2]["content"]
    assert tokenizer.decode(encoded.completion_ids[slice(*last)]) == traj.messages[4]["content"]


def test_truncation_keeps_the_prompt_and_cuts_the_completion(tokenizer) -> None:
    encoded = encode_trajectory(_trajectory(), tokenizer, max_length=len(encode_trajectory(
        _trajectory(), tokenizer).prompt_ids) + 5)
    assert encoded.truncated and len(encoded.completion_ids) == 5 == len(encoded.env_mask)


def test_turn_level_advantages_normalise_over_the_groups_turns() -> None:
    # group of 2 rollouts: returns [1, 3] and [2]; pooled mean 2, std sqrt(2/3)
    adv = turn_level_advantages([[1.0, 3.0], [2.0]], [[(0, 2), (3, 5)], [(1, 4)]], group_size=2, length=6)
    std = (2 / 3) ** 0.5
    assert adv[0, :2].tolist() == pytest.approx([-1 / (std + 1e-4)] * 2)
    assert adv[0, 2].item() == 0.0 and adv[0, 3:5].tolist() == pytest.approx([1 / (std + 1e-4)] * 2)
    assert adv[1].tolist() == pytest.approx([0.0] * 6)  # G = mean: zero advantage


def test_gae_with_lambda_one_is_return_minus_value_on_model_tokens() -> None:
    values = torch.tensor([[0.5, 0.0, 0.2, 0.1]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0]])  # position 1 is a tool-response token
    adv, returns = gae_advantages(torch.tensor([1.0]), values * mask, mask, gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.5, 0.0, 0.8, 0.9])
    assert returns[0].tolist() == pytest.approx([1.0, 0.0, 1.0, 1.0])


def _tiny_params(solar_qa: Params, tiny: Path, **stage: object) -> Params:
    settings = dict(num_generations=2, questions_per_step=1, max_steps=2, max_new_tokens=12, max_rounds=2,
                    max_questions=4, val_questions=1, eval_every=1, learning_rate=1e-3,
                    backend="transformers")  # the reference path (tests script its client); onnx: its own tests
    settings.update(stage)
    rl = solar_qa.rl.model_copy(update={"stage1": solar_qa.rl.stage1.model_copy(update=settings)})
    agent = solar_qa.agent.model_copy(update={"base_model": str(tiny), "device": "cpu"})
    return solar_qa.model_copy(update={"rl": rl, "agent": agent})


def test_policy_loss_gradient_ignores_tool_response_tokens(solar_qa: Params, tiny: Path, tokenizer) -> None:
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from pipelines.train.rl.rollouts import ToolRollouts
    from pipelines.train.rl.trainers import ToolGRPOTrainer

    params = _tiny_params(solar_qa, tiny)
    encoded = encode_trajectory(_trajectory(), tokenizer)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    dataset = rl_dataset(rl_questions(params, 1)[:1], _protocol(params), {})
    trainer = ToolGRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                              args=GRPOConfig(output_dir=str(tiny.parent / "out"), use_cpu=True, report_to="none",
                                              num_generations=2, per_device_train_batch_size=2),
                              train_dataset=dataset, processing_class=tokenizer,
                              rollouts=ToolRollouts(_protocol(params), None, tokenizer, params.rl.stage1, {}, 4096),
                              stage=params.rl.stage1)
    completion = torch.tensor([encoded.completion_ids])
    inputs = {"prompt_ids": torch.tensor([encoded.prompt_ids]), "prompt_mask": torch.ones(1, len(encoded.prompt_ids),
                                                                                         dtype=torch.long),
              "completion_ids": completion, "completion_mask": torch.ones_like(completion),
              "tool_mask": torch.tensor([encoded.env_mask]), "advantages": torch.tensor([1.0]),
              "num_items_in_batch": torch.tensor(sum(encoded.env_mask))}
    captured = {}

    def keep(_module, _inputs, out) -> None:
        captured["logits"] = out

    # the final norm's output at position p feeds only the logits at p (no attention after it), so its
    # gradient there is the gradient through the log-prob of the token that p predicts
    hook = model.model.norm.register_forward_hook(keep)
    captured_grad = {}
    try:
        loss = trainer.compute_loss(model, inputs)
        captured["logits"].register_hook(lambda g: captured_grad.setdefault("g", g))
        loss.backward()
    finally:
        hook.remove()
    grad = captured_grad["g"][0, -completion.shape[1] - 1:-1].abs().sum(dim=-1)  # position t predicts token t
    env = torch.tensor(encoded.env_mask) == 0
    assert env.any() and torch.all(grad[env] == 0) and torch.all(grad[~env] > 0)


def _protocol(params: Params):
    from pipelines.eval.runner import make_protocol

    return make_protocol(params, "omne", None)


def test_grpo_stage1_trains_and_saves_an_auditable_model(solar_qa: Params, tiny: Path) -> None:
    params = _tiny_params(solar_qa, tiny, credit="turn", rewards=["omne_stage1", "eog"], resample="history")
    result = train_rl(params, 1, progress=False)
    folder = result.folder
    assert (folder / "config.json").is_file() and (folder / "training_curves.png").stat().st_size > 0
    state = json.loads((folder / "trainer_state.json").read_text())
    steps = [h for h in state["log_history"] if "reward" in h]
    assert len(steps) == 2 and all("rewards/omne_stage1/mean" in h and "rollout/tool_calls" in h for h in steps)
    assert all(0 < h["rollout/seconds"] < h["step_time"] for h in steps)  # TRL's step time holds the rollouts
    assert [h["step"] for h in state["log_history"] if "val_em" in h] == [0, 1, 2]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kind"] == "rl_stage1_model" and manifest["rows"]["steps"] == 2
    assert set(manifest["inputs"]) >= {"artifacts/qa/dataset/train.jsonl", "start_model"}
    assert train_rl(params, 1, progress=False).skipped  # same inputs and params: reused


def test_rl_lora_on_the_last_block_leaves_the_blocks_below_as_they_were(solar_qa: Params, tiny: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """rl.<stage>.lora_layers: the merged policy differs from its start in the adapted block only. The random tiny
    model earns the same (nothing) from every real reward, so a reward on the characters its replies use gives GRPO
    advantages to learn from."""
    from safetensors.torch import load_file

    from pipelines.train import rewards

    def distinct_characters(completions: list, **kwargs: object) -> list[float]:
        return [float(len(set("".join(m["content"] for m in t.messages if m["role"] == "assistant"))))
                for t in completions]

    monkeypatch.setitem(rewards.REWARDS, "distinct_characters", distinct_characters)
    monkeypatch.setitem(rewards.REWARD_PROTOCOLS, "distinct_characters", ("omne",))
    params = _tiny_params(solar_qa, tiny, lora_layers=1, val_questions=0, learning_rate=5e-2,
                          rewards=["distinct_characters"], max_new_tokens=24)
    folder = train_rl(params, 1, progress=False).folder
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["params"]["rl"]["lora_layers"] == 1
    start, trained = load_file(tiny / "model.safetensors"), load_file(folder / "model.safetensors")
    below = [k for k in start if ".layers.0." in k]
    assert below and all(torch.equal(start[k], trained[k]) for k in below)
    assert all(torch.equal(start[k], trained[k]) for k in start if "embed" in k or "norm" in k)
    assert any(not torch.equal(start[k], trained[k]) for k in start if ".layers.1." in k)  # it did learn


def test_hard_case_resampling_finds_each_questions_gold_path_conversation(solar_qa: Params) -> None:
    """``resample: hard_case`` measures the policy's loss on the question's stage-2 SFT conversation: every
    conversation is found by its question's id, a misspelled-start variant (id ``<qa>-t0-m``) included."""
    from pipelines.eval.runner import load_split
    from pipelines.train.rl.resampling import gold_conversations
    from pipelines.train.sft import sharegpt_to_messages
    from pipelines.train.sft_data import build_sft_conversations, read_sft_conversations

    params = solar_qa.model_copy(update={"sft_data": solar_qa.sft_data.model_copy(
        update={"misspelled_start_fraction": 1.0})})
    build_sft_conversations(params, progress=False)
    records = read_sft_conversations(params)
    assert any(r.id.endswith("-m") for r in records)
    train = {p.id for p in load_split(params, "train")}
    found = gold_conversations(params, train)
    by_question = {r.id.split("-t")[0]: r for r in records}
    assert set(found) == set(by_question) and set(found) <= train
    for qa_id, messages in found.items():
        assert messages == sharegpt_to_messages(by_question[qa_id])
    assert set(gold_conversations(params, set(list(by_question)[:1]))) == set(list(by_question)[:1])


def test_ppo_with_turn_credit_is_refused() -> None:
    """PPO's GAE replaces whatever advantages come before it: turn credit would be silently ignored."""
    with pytest.raises(ValueError, match="credit: turn"):
        RLStageParams(algorithm="ppo", credit="turn")


def test_a_reward_that_cannot_score_the_protocol_is_refused_before_any_model_loads(solar_qa: Params, tiny: Path,
                                                                                    tmp_path: Path) -> None:
    params = _tiny_params(solar_qa, tiny, rewards=["omne_stage1", "kg_reasoner"])
    params = params.model_copy(update={"agent": params.agent.model_copy(update={"base_model": str(tmp_path / "none")})})
    with pytest.raises(ConfigError, match="rl.stage1.rewards: reward 'kg_reasoner' cannot score the 'omne' "
                                          "protocol .* scores the search protocol"):
        train_rl(params, 1, progress=False)  # the missing base model is never reached


def _search_trajectory() -> Trajectory:
    """A search-protocol episode: one search whose triples the environment wrote inside the reasoning, an answer."""
    triples = "(Mars, orbited by, Phobos)"
    content = (f"<think>Mars first <search>Mars</search>\n<searched_triples>\n{triples}\n</searched_triples>\n"
               "so it is Phobos.</think><answer>Phobos</answer>")
    return Trajectory(qa_id="q1", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"],
                      protocol="search", messages=[*_trajectory().messages[:2], {"role": "assistant", "content": content}],
                      tool_calls=[ToolCallRecord(round=0, text="Mars", name="search", ok=True, response=triples)],
                      answer="Phobos", finish="answer", rounds=1)


def test_kg_hopper_is_scored_by_the_llm_judge_of_params(solar_qa: Params, tiny: Path, caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The RL build gives kg_hopper the judge of ``llm:``: R_reason is the judge's score; a failing judge gives
    R_reason 0 with a warning, and training goes on; no usable ``llm:`` model is refused up front."""
    import logging

    from pipelines.llm.scripted import scripted_openai_app, serve_in_thread
    from pipelines.train.rl.build import stage_rewards

    for name in ("OMNE_LLM_BASE_URL", "OMNE_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    params = _tiny_params(solar_qa, tiny, rewards=["kg_hopper"])
    params = params.model_copy(update={"agent": params.agent.model_copy(update={"protocol": "search"}),
                                       "llm": params.llm.model_copy(update={"model": "", "cache": False,
                                                                            "max_retries": 0})})
    with pytest.raises(ConfigError, match="rl.stage1.rewards: kg_hopper .* LLM judge .* llm.model"):
        stage_rewards(params, 1)
    reply: dict[str, object] = {"reasoning": '{"reasoning": "Each hop is supported.", "score": 0.6}'}
    app = scripted_openai_app(lambda body: reply["reasoning"])
    episode = _search_trajectory()
    with serve_in_thread(app) as url:
        llm = params.llm.model_copy(update={"base_url": f"{url}/v1", "model": "judge-model"})
        [reward], judge = stage_rewards(params.model_copy(update={"llm": llm}), 1)
        assert judge.model == "judge-model"
        # R_search 0.5 (one answered search) + R_format 0.5 + R_reason 0.6 (the judge) + R_answer 1
        assert reward([episode], trajectory=[episode]) == [pytest.approx(2.6)]
        assert app.state.log.total == 1  # the exact answer is not sent to the answer judge
        reply["reasoning"] = 500  # the endpoint fails
        with caplog.at_level(logging.WARNING, logger="pipelines.train.rewards"):
            assert reward([episode], trajectory=[episode]) == [pytest.approx(2.0)]
    assert "R_reason = 0" in caplog.text


def test_ppo_stage3_starts_from_a_model_and_trains_a_value_model(solar_qa: Params, tiny: Path) -> None:
    params = _tiny_params(solar_qa, tiny, algorithm="ppo", max_steps=1, val_questions=0)
    params = params.model_copy(update={"rl": params.rl.model_copy(update={"stage3": params.rl.stage1})})
    result = train_rl(params, 3, start=str(tiny), name="ppo-test", progress=False)
    history = json.loads((result.folder / "trainer_state.json").read_text())["log_history"]
    assert any("value_loss" in h for h in history) and result.manifest.kind == "rl_stage3_model"


def test_rollouts_generate_at_most_agent_batch_size_episodes_together(solar_qa: Params, tiny: Path, tokenizer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's rollouts go through the policy ``batch_size`` (agent.batch_size) at a time: the key/value cache
    holds that many episodes, not the whole step's (the paper profile's 128 rollouts x 16k tokens would need
    ~90 GB)."""
    from transformers import AutoModelForCausalLM

    from pipelines.agent.client import InProcessToolClient
    from pipelines.agent.rollout import Task
    from pipelines.agent.tools import KGToolbox
    from pipelines.llm.local import TransformersChatClient
    from pipelines.train.rl.rollouts import ToolRollouts

    params = _tiny_params(solar_qa, tiny)
    batches: list[int] = []
    original = TransformersChatClient.complete_many

    def recording(self, requests, *args, **kwargs):  # noqa: ANN001, ANN202
        batches.append(len(requests))
        return original(self, requests, *args, **kwargs)

    monkeypatch.setattr(TransformersChatClient, "complete_many", recording)
    tasks = [Task(qa_id=f"q{i}", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"],
                  sample=i) for i in range(5)]
    rollouts = ToolRollouts(_protocol(params), InProcessToolClient(KGToolbox(params)), tokenizer, params.rl.stage1,
                            {}, 4096, batch_size=2)
    trajectories = rollouts.roll_out(AutoModelForCausalLM.from_pretrained(tiny), tasks, temperature=0.0)
    assert [t.qa_id for t in trajectories] == [f"q{i}" for i in range(5)]
    assert batches and max(batches) <= 2 and sum(batches) >= 5


def test_rl_questions_are_those_of_the_stages_domains(twin_qa: Params) -> None:
    from pipelines.config import with_overrides
    from pipelines.errors import RegistryError
    from pipelines.train.rl.data import validation_questions

    assert {p.domain for p in rl_questions(twin_qa, 1)} == {"solar", "mirror"}
    params = with_overrides(twin_qa, {"rl": {"stage1": {"domains": ["solar"]},
                                             "stage3": {"exclude_domains": ["solar"], "val_questions": 4}}})
    assert {p.domain for p in rl_questions(params, 1)} == {"solar"}
    assert {p.domain for p in validation_questions(params, 1)} == {"solar"}
    assert {p.domain for p in rl_questions(params, 3)} == {"mirror"}
    assert {p.domain for p in validation_questions(params, 3)} == {"mirror"}
    assert validation_questions(twin_qa, 3) == []  # the quick stage 3 validates nothing (its evaluation follows)
    with pytest.raises(RegistryError, match=r"rl\.stage1\.domains/exclude_domains: unknown domain\(s\) 'pluto'"):
        rl_questions(with_overrides(twin_qa, {"rl": {"stage1": {"domains": ["pluto"]}}}), 1)


def half_right_policy(params: Params):  # noqa: ANN201
    """A scripted policy for one rollout call: of the episodes it starts, every other one walks the question's gold
    path (``gold_policy``) and the rest answer a wrong entity at once."""
    from itertools import count

    from tests.test_eval import gold_policy

    gold, started = gold_policy(params), count()

    def reply(request) -> str:  # noqa: ANN001
        if not any(m["role"] == "assistant" for m in request.messages) and next(started) % 2:
            return "<think>?</think><answer>Pluto</answer>"
        return gold(request)

    return reply


def test_stage1_keeps_its_exactly_correct_rollouts_for_the_sft_data(solar_qa: Params, tiny: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A real GRPO stage 1 whose rollouts come from a scripted policy (a tiny random model never answers right):
    the exactly-correct training rollouts, and only they, land in the model folder with their step and reward (the
    validation rollouts, val-split questions, never do); `sft_data.sources: [template, agent]` then trains on them."""
    from pipelines.eval.answers import exact_match
    from pipelines.eval.runner import load_split
    from pipelines.layout import CORRECT_ROLLOUTS_FILE, correct_rollouts_file
    from pipelines.llm.local import TransformersChatClient
    from pipelines.llm.scripted import ScriptedChatClient
    from pipelines.manifest import sha256_file
    from pipelines.train.rl.keep import read_kept_rollouts
    from pipelines.train.sft_data import build_sft_conversations, format_problems, read_sft_conversations

    monkeypatch.setattr(TransformersChatClient, "from_model",
                        lambda *args, **kwargs: ScriptedChatClient(half_right_policy(solar_qa), model="scripted"))
    params = _tiny_params(solar_qa, tiny, max_new_tokens=64, max_rounds=6)
    result = train_rl(params, 1, progress=False)
    path = correct_rollouts_file(params.artifacts_dir)
    kept = read_kept_rollouts(path)
    assert path.parent == result.folder and [k.step for k in kept] == [1, 2]  # one of each step's two rollouts
    assert all(exact_match(k.trajectory.answer, k.trajectory.gold_answers) and k.qa_id == k.trajectory.qa_id
               for k in kept)
    assert all(k.reward == pytest.approx(1.0) for k in kept)  # omne_stage1: format x (0.1 + 0.9 EM); wrong: 0.1
    train = {p.id for p in load_split(params, "train")}
    assert {k.qa_id for k in kept} <= train
    history = json.loads((result.folder / "trainer_state.json").read_text())["log_history"]
    assert [h["val_em"] for h in history if "val_em" in h] == [1.0, 1.0, 1.0]  # right on val too, and not kept
    assert result.manifest.files == {CORRECT_ROLLOUTS_FILE: sha256_file(path)}
    assert result.manifest.rows["correct_rollouts"] == 2
    assert not list(result.folder.parent.glob(f".{result.folder.name}.*"))  # the working file moved in

    mixed = params.model_copy(update={"sft_data": params.sft_data.model_copy(update={"sources": ["template", "agent"]})})
    data = build_sft_conversations(mixed, progress=False)
    agent = [r for r in read_sft_conversations(mixed) if r.source == "agent"]
    stats = data.manifest.metadata["agent"]
    assert agent and stats["kept"] == len(agent) == data.manifest.metadata["stats"]["by_source"]["agent"]
    assert stats["rollouts"] == 2 and stats["kept"] + sum(stats["dropped"].values()) == 2
    assert set(stats["dropped"]) <= {"duplicate"}  # the same question in both steps: the same walk, kept once
    assert all(format_problems(r) == [] and r.id.split("-agent")[0] in train for r in agent)
    assert any(key.endswith(CORRECT_ROLLOUTS_FILE) for key in data.manifest.inputs)


def test_rl_summary_compares_the_first_and_last_third_of_the_steps() -> None:
    """The manifest's trend is the mean reward of the first third of the steps against the last third (the
    issue's test of a rising reward); validation EM and tool calls are read from their own log lines."""
    from pipelines.train.rl.history import rl_summary

    history = [{"step": i + 1, "reward": r, "rollout/tool_calls": 2.0} for i, r in enumerate([0.1, 0.3, 0.9, 0.2,
                                                                                              0.4, 0.6, 0.5, 0.7, 0.8])]
    history.insert(4, {"step": 4, "val_em": 0.5})
    summary = rl_summary(history)
    assert summary["steps_logged"] == 9 and summary["val_em"] == [0.5]
    assert summary["reward_first_third_mean"] == pytest.approx((0.1 + 0.3 + 0.9) / 3)
    assert summary["reward_last_third_mean"] == pytest.approx((0.5 + 0.7 + 0.8) / 3)
    assert rl_summary([{"reward": 0.5}])["reward_last_third_mean"] == 0.5
    assert rl_summary([])["reward_first_third_mean"] is None


def test_the_printed_summary_says_when_no_validation_ran() -> None:
    from pipelines.manifest import new_manifest
    from pipelines.run import rl_summary_line

    manifest = new_manifest("rl_model", rows={"steps": 8})
    manifest.metadata.update({"reward_first_third_mean": 0.3125, "reward_last_third_mean": 0.5125, "val_em": []})
    assert rl_summary_line(manifest) == ("8 steps, mean reward 0.312 (first third) -> 0.512 (last third), "
                                         "no validation (val_questions: 0), 0 correct rollouts kept")
    manifest.metadata["val_em"] = [0.5, 0.75]
    assert "validation EM [0.5, 0.75]," in rl_summary_line(manifest)
