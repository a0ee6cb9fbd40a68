"""The RL trainers' overrides of TRL's PRIVATE ``GRPOTrainer`` methods (pipelines/train/rl/trainers.py), which a TRL
release may rename, re-sign or re-purpose without notice: each must still exist on TRL's class with the signature
it was written against, say the TRL version it was read against, and still do its job on a tiny model (GRPO and
PPO trainers on a 2-layer llama, rollouts replaced by two canned episodes)."""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch
import trl
from trl import GRPOConfig, GRPOTrainer

from pipelines.agent.rollout import Task
from pipelines.agent.trajectory import ToolCallRecord, Trajectory
from pipelines.config import RLStageParams
from pipelines.train.rewards import eog_reward, kg_r1_scores, omne_stage1_reward
from pipelines.train.rl.advantages import turn_level_advantages
from pipelines.train.rl.episodes import encode_trajectory
from pipelines.train.rl.resampling import SkippingSampler, conversation_losses
from pipelines.train.rl.rollouts import ToolRollouts, trajectory_rewards
from pipelines.train.rl.trainers import WRITTEN_FOR_TRL, PPOToolTrainer, ToolGRPOTrainer
from tests.conftest import PROJECT_ROOT

# every private TRL method each class overrides (defined in the class itself); a new override belongs here, with a
# behavioural test below
PRIVATE_OVERRIDES = {
    ToolGRPOTrainer: {"_generate_and_score_completions", "_calculate_rewards", "_get_train_sampler", "_prepare_inputs"},
    PPOToolTrainer: {"_generate_and_score_completions"},
}
PUBLIC_OVERRIDES = {"__init__", "compute_loss"}  # public GRPOTrainer methods the trainers extend on purpose

SYSTEM = {"role": "system", "content": "You answer questions."}
QUESTIONS = {"q1": "Question: Which moon orbits Mars?", "q2": "Question: What does Phobos orbit?",
             "q3": "Question: What does Mars orbit?"}
RESPONSE = "<tool_response>\nEntity: Mars\nRelations (1):\n1. Phobos -[orbits]-> Mars\n</tool_response>"


# ----- the overrides against TRL's class ------------------------------------------------------------------------
def _private_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items()
            if name.startswith("_") and not name.startswith("__") and callable(value)}


def _shape(function: Any) -> list[tuple[str, Any, Any]]:
    """Parameter names, kinds and defaults (annotations aside): what a caller's arguments bind to."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_written_for_the_pinned_trl() -> None:
    """A TRL upgrade means reading the overrides again (then update WRITTEN_FOR_TRL and the comments)."""
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [d for d in pyproject["project"]["dependencies"] if re.match(r"trl\b", d)]
    assert pins == [f"trl=={WRITTEN_FOR_TRL}"]
    assert trl.__version__ == WRITTEN_FOR_TRL, (
        f"TRL {trl.__version__} installed, overrides in pipelines/train/rl/trainers.py read against {WRITTEN_FOR_TRL}")


@pytest.mark.parametrize("cls", list(PRIVATE_OVERRIDES), ids=lambda c: c.__name__)
def test_private_overrides_still_exist_in_trl_with_the_same_signature(cls: type) -> None:
    assert _private_methods(cls) == PRIVATE_OVERRIDES[cls]
    for name in PRIVATE_OVERRIDES[cls]:
        assert callable(getattr(GRPOTrainer, name, None)), f"GRPOTrainer.{name} is gone"
        assert _shape(getattr(cls, name)) == _shape(getattr(GRPOTrainer, name)), name
        comment = inspect.getcomments(getattr(cls, name)) or ""
        assert f"TRL {WRITTEN_FOR_TRL} private override" in comment, f"{cls.__name__}.{name}: no version comment"


@pytest.mark.parametrize("cls", list(PRIVATE_OVERRIDES), ids=lambda c: c.__name__)
def test_the_trainers_own_helpers_shadow_nothing_in_trl(cls: type) -> None:
    """Public names for the trainers' own methods, none of which GRPOTrainer has (so no accidental override)."""
    own = {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}
    assert own - PUBLIC_OVERRIDES and not {name for name in own - PUBLIC_OVERRIDES if hasattr(GRPOTrainer, name)}
    assert all(hasattr(GRPOTrainer, name) for name in PUBLIC_OVERRIDES)


def test_the_public_hooks_the_trainers_rely_on() -> None:
    assert "rollout_func" in inspect.signature(GRPOTrainer.__init__).parameters  # experimental in TRL 1.16
    assert _shape(GRPOTrainer.compute_loss)[:3] == _shape(PPOToolTrainer.compute_loss)[:3]


def test_no_other_rl_module_overrides_a_private_trl_method() -> None:
    private = {name for name in dir(GRPOTrainer) if name.startswith("_") and not name.startswith("__")}
    offenders = []
    for path in (PROJECT_ROOT / "pipelines" / "train" / "rl").glob("*.py"):
        if path.name == "trainers.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                offenders += [f"{path.name}:{node.name}.{item.name}" for item in node.body
                              if isinstance(item, ast.FunctionDef) and item.name in private]
    assert not offenders


# ----- the overrides at work on a tiny model --------------------------------------------------------------------
def _episode(qa_id: str, answer: str, *, tool: bool) -> Trajectory:
    turns = []
    calls = []
    if tool:
        text = 'node_info(node_name="Mars", graph_type="solar")'
        turns += [{"role": "assistant", "content": f"<think>Find Mars.</think>\n<tool_call>{text}</tool_call>"},
                  {"role": "user", "content": RESPONSE}]
        calls = [ToolCallRecord(round=0, text=text, name="node_info", ok=True, response=RESPONSE)]
    turns.append({"role": "assistant", "content": f"<think>So.</think>\n<answer>{answer}</answer>"})
    return Trajectory(qa_id=qa_id, domain="solar", question=QUESTIONS[qa_id], gold_answers=["Phobos"],
                      protocol="omne", messages=[SYSTEM, {"role": "user", "content": QUESTIONS[qa_id]}, *turns],
                      tool_calls=calls, answer=answer, finish="answer", rounds=len(calls) + 1)


class CannedRollouts(ToolRollouts):
    """ToolRollouts with the policy's generation replaced by fixed episodes: a two-turn one that calls a tool and
    answers right, a one-turn one that answers wrong (so the two completions differ in length and reward)."""

    def roll_out(self, model: Any, tasks: list[Task], *, temperature: float, seed: int | None = None
                 ) -> list[Trajectory]:
        return [_episode(t.qa_id, "Phobos", tool=True) if t.sample % 2 == 0 else
                _episode(t.qa_id, "Deimos", tool=False) for t in tasks]


class Protocol:
    name = "omne"
    inline_responses = False
    response_message = None

    def assistant_prefix(self) -> str:
        return ""


def _trainer(tiny: Path, tmp_path: Path, *, cls: type = ToolGRPOTrainer, reward_funcs: list[Any] | None = None,
             reward_weights: list[float] | None = None, rollouts: type | None = None,
             buckets: dict[str, str] | None = None,
             **stage: Any) -> Any:
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    settings = RLStageParams(num_generations=2, **stage)
    tasks = {text: Task(qa_id=qa_id, domain="solar", question=text, gold_answers=["Phobos"], bucket="1", hops=1)
             for qa_id, text in QUESTIONS.items()}
    buckets = buckets or {}
    dataset = datasets.Dataset.from_list([{"prompt": [SYSTEM, {"role": "user", "content": text}], "qa_id": qa_id,
                                           "bucket": buckets.get(qa_id, "1")} for qa_id, text in QUESTIONS.items()])
    # two rollouts per generation batch, one per micro-batch (steps_per_generation 2)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", bf16=False, num_generations=2,
                      per_device_train_batch_size=1, gradient_accumulation_steps=2, reward_weights=reward_weights)
    extra = {}
    if cls is PPOToolTrainer:
        from transformers import AutoModelForTokenClassification

        extra["value_model"] = AutoModelForTokenClassification.from_pretrained(tiny, num_labels=1)
    torch.manual_seed(0)
    trainer = cls(model=AutoModelForCausalLM.from_pretrained(tiny), args=args, train_dataset=dataset,
                  reward_funcs=reward_funcs or [lambda completions, **kw: [1.0] * len(completions)],
                  processing_class=tokenizer, stage=settings,
                  rollouts=(rollouts or CannedRollouts)(Protocol(), None, tokenizer, settings, tasks, 4096), **extra)
    trainer.model.train()  # as during training (TRL reads the mode to pick train or eval settings)
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by Trainer's loop
    return trainer


def _batch(trainer: Any, qa_id: str = "q1") -> list[dict[str, Any]]:
    row = next(r for r in trainer.train_dataset if r["qa_id"] == qa_id)
    return [dict(row) for _ in range(trainer.num_generations)]


def test_generate_and_score_drops_settled_questions_and_masks_tool_responses(tiny: Path, tmp_path: Path) -> None:
    """``_generate_and_score_completions`` (history resampling) over ``_calculate_rewards`` (the weighted reward of
    each rollout), fed by ToolRollouts through TRL's rollout_func and env_mask."""
    trainer = _trainer(tiny, tmp_path, resample="history", reward_weights=[0.5, 2.0],
                       reward_funcs=[lambda completions, **kw: [1.0] * len(completions),
                                     lambda completions, **kw: [0.25] * len(completions)])
    output = trainer._generate_and_score_completions(_batch(trainer))  # TRL adds the rollout's columns to inputs

    assert trainer.last_rewards.tolist() == pytest.approx([1.0, 1.0])  # 0.5 * 1 + 2 * 0.25 for each rollout
    torch.testing.assert_close(trainer.last_reward_parts, torch.tensor([[1.0, 0.25], [1.0, 0.25]]))  # unweighted
    assert trainer.excluded == {"q1"}  # both rollouts earned the same: the question teaches nothing
    assert trainer._metrics["train"]["rollout/tool_calls"] == [0.5]  # TRL's logged-metric store still takes ours
    rollout_seconds = trainer._metrics["train"]["rollout/seconds"]  # the step's rollouts, apart from its training pass
    assert len(rollout_seconds) == 1 and rollout_seconds[0] > 0
    completion_ids = output["completion_ids"]
    for row, episode in enumerate(trainer.rollouts.last):  # policy gradient on the model's own tokens only:
        encoded = encode_trajectory(episode, trainer.processing_class, max_length=4096)  # TRL's tool_mask is the
        env_mask = output["tool_mask"][row, :len(encoded.env_mask)].tolist()  # rollout's env_mask
        assert env_mask == encoded.env_mask and completion_ids[row, :len(env_mask)].tolist() == encoded.completion_ids
    assert 0 in output["tool_mask"][0].tolist()  # the tool response of the first episode
    telling = _trainer(tiny, tmp_path, resample="history", reward_funcs=[_answered_phobos])
    telling._generate_and_score_completions(_batch(telling, "q2"))
    assert not telling.excluded  # the rollouts of q2 differ (right / wrong): it stays


def _answered_phobos(completions: list[Any], trajectory: list[Trajectory], **kwargs: Any) -> list[float]:
    return [float(t.answer == "Phobos") for t in trajectory]


def _turn_mask(inputs: list[dict[str, Any]], like: torch.Tensor) -> torch.Tensor:
    inside = torch.zeros_like(like, dtype=torch.bool)
    for row, x in enumerate(inputs):
        for a, b in x["turn_spans"]:
            inside[row, a:b] = True
    return inside


def test_turn_credit_uses_the_configured_rewards(tiny: Path, tmp_path: Path) -> None:
    """``credit: turn`` with ``rewards: [omne_stage1]`` (no per-turn form): every turn's return is λ times the
    episode's omne_stage1 reward (not KG-R1's scores, whatever the configured rewards)."""
    rewards = trajectory_rewards(["omne_stage1"], None, {})
    trainer = _trainer(tiny, tmp_path, credit="turn", rewards=["omne_stage1"], reward_funcs=rewards,
                       reward_options={"kg_r1_lambda": 0.5})
    inputs = _batch(trainer)
    output = trainer._generate_and_score_completions(inputs)
    episodes = trainer.rollouts.last
    scores = omne_stage1_reward(episodes)
    assert scores[0] > scores[1] > 0  # right answer with a tool call / wrong answer
    spans = [x["turn_spans"] for x in inputs]
    assert [len(s) for s in spans] == [2, 1]
    expected = turn_level_advantages([[0.5 * scores[0]] * 2, [0.5 * scores[1]]], spans, 2,
                                     output["completion_ids"].shape[1])
    advantages = output["advantages"]
    torch.testing.assert_close(advantages, expected)
    assert advantages.shape == output["completion_ids"].shape  # per token, not TRL's per rollout
    assert advantages.abs().sum() > 0 and torch.all(advantages[~_turn_mask(inputs, advantages)] == 0)


class KGR1Rollouts(CannedRollouts):
    """KG-R1 protocol episodes: a query, its <information>, then the answer (right for sample 0, wrong else)."""

    def roll_out(self, model: Any, tasks: list[Task], *, temperature: float, seed: int | None = None
                 ) -> list[Trajectory]:
        query = 'get_tail_entities("Mars", "orbited_by")'
        info = '<information>\nTail entities for entity "Mars" with relation "orbited_by": Phobos\n</information>'
        out = []
        for t in tasks:
            answer = "Phobos" if t.sample % 2 == 0 else "Deimos"
            turns = [{"role": "assistant", "content": f"<think>Follow orbited_by.</think><kg-query>{query}</kg-query>"},
                     {"role": "user", "content": info},
                     {"role": "assistant", "content": f"<think>So.</think><answer>{answer}</answer>"}]
            out.append(Trajectory(qa_id=t.qa_id, domain="solar", question=t.question, gold_answers=["Phobos"],
                                  protocol="kg_r1", messages=[SYSTEM, {"role": "user", "content": t.question}, *turns],
                                  tool_calls=[ToolCallRecord(round=0, text=query, name="get_tail_entities", ok=True,
                                                             response=info)],
                                  answer=answer, finish="answer", rounds=2))
        return out


def test_turn_credit_adds_per_turn_rewards_to_lambda_times_the_weighted_global(tiny: Path, tmp_path: Path) -> None:
    """``rewards: [kg_r1, eog]`` weighted 1 and 2: G_t = r_t(kg_r1) + λ·(R_global(kg_r1) + 2·eog)."""
    trainer = _trainer(tiny, tmp_path, credit="turn", rewards=["kg_r1", "eog"], reward_weights=[1.0, 2.0],
                       reward_funcs=trajectory_rewards(["kg_r1", "eog"], None, {}),
                       reward_options={"kg_r1_lambda": 0.5}, rollouts=KGR1Rollouts)
    inputs = _batch(trainer)
    output = trainer._generate_and_score_completions(inputs)
    episodes = trainer.rollouts.last
    kg, eog = kg_r1_scores(episodes), eog_reward(episodes)
    assert kg[0].turn_rewards != kg[1].turn_rewards and eog == [1.0, 0.0]
    returns = [[r + 0.5 * (k.global_reward + 2 * e) for r in k.turn_rewards] for k, e in zip(kg, eog, strict=True)]
    expected = turn_level_advantages(returns, [x["turn_spans"] for x in inputs], 2, output["completion_ids"].shape[1])
    torch.testing.assert_close(output["advantages"], expected)
    assert expected[1][_turn_mask(inputs, expected)[1]].unique().numel() == 2  # the wrong answer's turns differ


def test_generate_and_score_keeps_trls_sequence_advantages(tiny: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny, tmp_path)
    output = trainer._generate_and_score_completions(_batch(trainer))
    assert output["advantages"].shape == (2,) and not trainer.excluded


def test_trl_takes_per_token_advantages(tiny: Path, tmp_path: Path) -> None:
    """Turn credit and PPO hand TRL's loss (B, T) advantages: the same values per rollout as (B,) give one loss."""
    trainer = _trainer(tiny, tmp_path)
    output = trainer._generate_and_score_completions(_batch(trainer))
    per_rollout = dict(output, advantages=torch.tensor([1.0, -1.0]))
    per_token = dict(output, advantages=torch.tensor([[1.0], [-1.0]]).expand_as(output["completion_ids"]).clone())
    model = trainer.model
    torch.testing.assert_close(trainer.compute_loss(model, per_token), trainer.compute_loss(model, per_rollout))


def test_train_sampler_skips_excluded_questions_in_whole_groups(tiny: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny, tmp_path)
    sampler = trainer._get_train_sampler()
    assert isinstance(sampler, SkippingSampler)
    ids = trainer.train_dataset["qa_id"]
    everything = list(sampler)
    assert sorted(everything) == sorted(sampler.inner) and len(everything) == len(sampler)
    trainer.excluded = {"q1", "q3"}
    kept = list(sampler)
    assert kept and {ids[i] for i in kept} == {"q2"} and len(kept) == everything.count(ids.index("q2"))
    assert trainer.epochs_started == 2  # each pass over the sampler starts an epoch (hard-case resampling's hook)


def test_prepare_inputs_trims_each_micro_batch_to_its_completion(tiny: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny, tmp_path)
    batch = _batch(trainer)
    micro = [trainer._prepare_inputs(batch)]  # generates the batch, buffers TRL's micro-batches, hands out the first
    buffered = trainer._buffered_inputs  # TRL's untrimmed micro-batches of the generation batch
    trainer._step = 1  # TRL's accumulation counter: the next call hands out the second buffered micro-batch
    micro.append(trainer._prepare_inputs(batch))
    assert trainer._buffered_inputs is buffered  # no new generation
    widths = sorted(int(b["completion_mask"].sum()) for b in buffered)
    assert widths[0] < widths[1] == buffered[0]["completion_ids"].shape[1] == buffered[1]["completion_ids"].shape[1]
    assert sorted(m["completion_ids"].shape[1] for m in micro) == widths  # each cut to its own completion
    for m, full in zip(micro, buffered, strict=True):
        assert m["completion_ids"].shape[0] == 1 and int(m["completion_mask"].sum()) == m["completion_ids"].shape[1]
        assert m["completion_ids"].tolist() == full["completion_ids"][:, :m["completion_ids"].shape[1]].tolist()
        assert m["prompt_ids"].shape == full["prompt_ids"].shape  # the prompt is left as it is
    trainer.model.eval()
    assert trainer._prepare_inputs(batch)["completion_ids"].shape[1] == widths[1]  # eval: untouched


def test_ppo_generate_and_score_adds_gae_advantages_and_critic_targets(tiny: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny, tmp_path, cls=PPOToolTrainer, algorithm="ppo",
                       reward_funcs=[lambda completions, trajectory, **kw: [float(t.answer == "Phobos")
                                                                            for t in trajectory]])
    output = trainer._generate_and_score_completions(_batch(trainer))
    mask = output["completion_mask"].float() * output["tool_mask"].float()
    assert trainer.last_rewards.tolist() == [1.0, 0.0]
    for key in ("advantages", "returns", "old_values"):
        assert output[key].shape == output["completion_ids"].shape, key
        assert torch.all(output[key][mask == 0] == 0), key  # tool responses and padding carry nothing
    assert float(output["value_mask_total"]) == float(mask.sum())
    assert abs(float((output["advantages"] * mask).sum() / mask.sum())) < 1e-5  # whitened over the model's tokens
    loss = trainer.compute_loss(trainer.model, output)  # the policy loss, and one critic step on the value loss
    assert torch.isfinite(loss) and trainer._metrics["train"]["value_loss"]


def _ppo_step(tiny: Path, tmp_path: Path, sign: float) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor]:
    """One PPO policy-loss backward on the canned batch (reward ``sign`` for the right answer, ``-sign`` for the
    wrong one) with a fixed critic (V = 0): the batch, d loss / d log π of each completion token, and the policy's
    parameter gradient."""
    trainer = _trainer(tiny, tmp_path, cls=PPOToolTrainer, algorithm="ppo", reward_funcs=[
        lambda completions, trajectory, **kw: [sign if t.answer == "Phobos" else -sign for t in trajectory]])
    with torch.no_grad():
        for parameter in trainer.value_model.score.parameters():
            parameter.zero_()
    output = trainer._generate_and_score_completions(_batch(trainer))
    captured: dict[str, torch.Tensor] = {}
    logps = trainer._get_per_token_logps_and_entropies  # TRL's own; kept as it is, its output only watched

    def watched(*args: Any, **kwargs: Any) -> Any:
        per_token, *rest = logps(*args, **kwargs)
        per_token.retain_grad()
        captured["logps"] = per_token
        return (per_token, *rest)

    trainer._get_per_token_logps_and_entropies = watched
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, output).backward()
    gradient = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return output, captured["logps"].grad, gradient


def test_ppo_policy_loss_follows_the_gae_advantages(tiny: Path, tmp_path: Path) -> None:
    """PPO's update is driven by its per-token GAE advantages: on TRL's policy loss, d loss / d log π(token t) is
    -c·A_t (c > 0) on every model token and 0 on the rest, and flipping the reward flips the whole update."""
    from pipelines.train.rl.advantages import gae_advantages, whiten

    output, logp_grad, gradient = _ppo_step(tiny, tmp_path, 1.0)
    mask = output["completion_mask"].float() * output["tool_mask"].float()
    advantages = output["advantages"]
    expected, _ = gae_advantages(torch.tensor([1.0, -1.0]), output["old_values"], mask, gamma=1.0, lam=0.95)
    torch.testing.assert_close(advantages, whiten(expected, mask))  # the critic's (zero) values and the rewards
    for row in range(advantages.shape[0]):
        on = mask[row] > 0
        a, g = advantages[row, on], logp_grad[row, on]
        assert a.unique().numel() > 1  # per token (γλ discounting), not one advantage per rollout
        scale = -(g * a).sum() / (a * a).sum()
        assert scale > 0
        torch.testing.assert_close(g, -scale * a)  # the loss pushes up log π where A > 0, down where A < 0
        assert torch.all(logp_grad[row, ~on] == 0)
    flipped, flipped_logp_grad, flipped_gradient = _ppo_step(tiny, tmp_path, -1.0)
    torch.testing.assert_close(flipped["advantages"], -advantages)
    torch.testing.assert_close(flipped_logp_grad, -logp_grad)
    assert gradient.abs().sum() > 0
    torch.testing.assert_close(flipped_gradient, -gradient)


CONVERSATIONS = {  # gold-path SFT conversations of the multi-hop questions (KG-Reasoner's hard-case loss)
    "q1": [SYSTEM, {"role": "user", "content": QUESTIONS["q1"]},
           {"role": "assistant", "content": "<think>Phobos and Deimos orbit Mars.</think><answer>Phobos</answer>"}],
    "q2": [SYSTEM, {"role": "user", "content": QUESTIONS["q2"]},
           {"role": "assistant", "content": "zq vx kj qq wz xj zz vv kq jx"}],
}


def test_hard_case_resampling_keeps_the_multi_hop_questions_still_hard_from_epoch_two(tiny: Path,
                                                                                     tmp_path: Path) -> None:
    """``resample: hard_case`` (KG-Reasoner): the first epoch trains on every question; from the second, only on the
    multi-hop questions whose gold-path SFT loss under the current policy is above ``hard_case_loss``."""
    trainer = _trainer(tiny, tmp_path, resample="hard_case", buckets={"q1": "3+", "q2": "3+"})  # q3: 1 hop
    trainer.hard_case_conversations = CONVERSATIONS
    losses = conversation_losses(trainer.model, trainer.processing_class, CONVERSATIONS)
    assert trainer.model.training  # measured in eval mode, the mode given back
    hard, easy = sorted(losses, key=losses.__getitem__, reverse=True)
    assert losses[hard] > losses[easy] > 0
    trainer.stage = trainer.stage.model_copy(update={"hard_case_loss": (losses[hard] + losses[easy]) / 2})
    sampler, ids = trainer._get_train_sampler(), trainer.train_dataset["qa_id"]
    first = [ids[i] for i in sampler]
    assert set(first) == {"q1", "q2", "q3"} and not trainer.excluded
    second = [ids[i] for i in sampler]
    assert trainer.excluded == {easy, "q3"} and second == [hard] * first.count(hard)
    # the loss is the assistant turns' only: text after them changes nothing
    tail = {qa: [*messages, {"role": "user", "content": "Anything else? " * 10}]
            for qa, messages in CONVERSATIONS.items()}
    assert conversation_losses(trainer.model, trainer.processing_class, tail) == pytest.approx(losses)
