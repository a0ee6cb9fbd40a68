"""Data-parallel training (``accelerate launch``; docs/orchestration.md, "Scaling out"), on the CPU with
torch.distributed's gloo backend: `omne sft train` and `omne rl` (PPO) in two processes train as in one on the same
global batch (the same losses and weights), and each process's PPO critic, which goes through the trainer's
accelerator as the policy does, stays the same as the other's. Real trainers on a tiny model; the multi-GPU path
(NCCL) is not run here."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from pipelines.config import Params
from pipelines.train.rl.advantages import whiten
from tests.conftest import VENV_BIN, cli_env
from tests.data_parallel_driver import run

DRIVER = Path(__file__).with_name("data_parallel_driver.py")


def _params_file(params: Params, name: str, *, processes: int) -> Path:
    """A params file in the project (its artifacts, its root): 2 SFT steps of 2 conversations, and 2 GRPO (stage 1)
    and 2 PPO (stage 3) steps of 2 questions x 2 rollouts, each global batch split over ``processes``."""
    sft = params.sft.model_copy(update=dict(max_steps=2, per_device_batch=1, grad_accumulation=2 // processes,
                                            learning_rate=1e-3, warmup_ratio=0.0, save_steps=0, bf16=False,
                                            max_length=16384))
    ppo = dict(algorithm="ppo", num_generations=2, questions_per_step=2 // processes, max_steps=2, max_new_tokens=12,
               max_rounds=2, max_questions=4, val_questions=0, learning_rate=1e-3, value_learning_rate=1e-3,
               micro_batch=1, backend="transformers", bf16=False)
    grpo = {**{k: v for k, v in ppo.items() if k != "value_learning_rate"}, "algorithm": "grpo"}
    rl = params.rl.model_copy(update={"stage1": params.rl.stage1.model_copy(update=grpo),
                                      "stage3": params.rl.stage3.model_copy(update=ppo)})
    # each episode generated alone: its sampling depends on its own seed, not on the episodes batched with it
    agent = params.agent.model_copy(update={"device": "cpu", "batch_size": 1})
    raw = params.model_copy(update={"sft": sft, "rl": rl, "agent": agent}).model_dump(mode="json")
    path = params.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _commands(params: Path, name: str, start: Path) -> list[list[str]]:
    """`omne sft train`, `omne rl --stage 1` (GRPO from the base model) and `omne rl --stage 3` (PPO from ``start``),
    into models named after ``name``."""
    return [["--params", str(params), "sft", "train", "--name", f"sft-{name}"],
            ["--params", str(params), "rl", "--stage", "1", "--name", f"grpo-{name}"],
            ["--params", str(params), "rl", "--stage", "3", "--start", str(start), "--name", f"ppo-{name}"]]


def _steps(folder: Path) -> list[dict]:
    return [h for h in json.loads((folder / "trainer_state.json").read_text())["log_history"] if "loss" in h]


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


@pytest.fixture(scope="module")
def solar_all_train(solar_qa: Params, tiny: Path) -> Params:
    """The solar project on the tiny model with all 6 QA pairs in the train split (6 SFT conversations: global
    batches that split evenly over two processes, none repeated to even them out), its SFT conversations built."""
    from pipelines.qa.build import build_qa_dataset
    from pipelines.train.sft_data import build_sft_conversations

    params = solar_qa.model_copy(update={"qa": solar_qa.qa.model_copy(update={"val_share": 0.0, "test_share": 0.0}),
                                         "agent": solar_qa.agent.model_copy(update={"base_model": str(tiny)})})
    build_qa_dataset(params, ["solar"])
    build_sft_conversations(params, progress=False)
    return params


def test_two_processes_train_as_one_process_on_the_same_global_batch(solar_all_train: Params, tiny: Path,
                                                                    tmp_path: Path) -> None:
    """SFT (LoRA), stage-1 GRPO and stage-3 PPO (LoRA policy and critic), 2 steps each, in one process and in two on
    the same global batches: the logged losses, the saved models and the critic match; the two processes' critics
    are equal to the bit after the steps (gradients averaged over the processes, first weights drawn from the same
    seed)."""
    params = solar_all_train
    one, two = _params_file(params, "one-process", processes=1), _params_file(params, "two-processes", processes=2)
    run(tmp_path / "one", _commands(one, "one", tiny))  # in this process: its imports are paid already
    command = [str(VENV_BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               str(DRIVER), str(tmp_path / "two"), json.dumps(_commands(two, "two", tiny))]
    # (torchrun gives each process one thread: the two share the cores)
    result = subprocess.run(command, cwd=params.root, env=cli_env(TRL_EXPERIMENTAL_SILENCE="1"), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}\n{result.stderr[-4000:]}"

    models = params.artifacts_dir / "models"
    for kind, keys in (("sft", ("loss", "grad_norm")), ("grpo", ("loss", "grad_norm", "reward")),
                       ("ppo", ("loss", "grad_norm", "value_loss", "reward"))):
        single, parallel = _steps(models / f"{kind}-one"), _steps(models / f"{kind}-two")
        assert [h["step"] for h in single] == [h["step"] for h in parallel] == [1, 2]
        for a, b in zip(single, parallel, strict=True):
            assert all(b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6) for k in keys), (kind, a, b)
        manifest = json.loads((models / f"{kind}-two" / "manifest.json").read_text())
        assert manifest["rows"]["steps"] == 2 and not list(models.glob(f".{kind}-two.*"))  # one writer, whole

    adapter = "adapter_model.safetensors"
    assert _close(load_file(models / "sft-one" / adapter), load_file(models / "sft-two" / adapter))
    start, policy = load_file(tiny / "model.safetensors"), load_file(models / "ppo-one" / "model.safetensors")
    assert any(not torch.equal(policy[k], start[k]) for k in start)  # the steps moved the policy
    assert _close(policy, load_file(models / "ppo-two" / "model.safetensors"))
    grpo = load_file(models / "grpo-one" / "model.safetensors")
    assert any(not torch.equal(grpo[k], start[k]) for k in start)
    assert _close(grpo, load_file(models / "grpo-two" / "model.safetensors"))
    (critic,) = [load_file(p) for p in sorted((tmp_path / "one").glob("critic-*.safetensors"))]
    rank0, rank1 = [load_file(p) for p in sorted((tmp_path / "two").glob("critic-*.safetensors"))]
    assert rank0.keys() == rank1.keys() and all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    assert _close(critic, rank0)


def test_whitening_over_two_processes_is_the_whole_batchs() -> None:
    """PPO's advantages: each process whitens by the mean and variance of every process's tokens (``all_sum`` adds
    the statistics up), as one process whitens the whole batch. Two threads stand for the processes."""
    torch.manual_seed(0)
    values, mask = torch.randn(4, 6), (torch.rand(4, 6) > 0.3).float()
    barrier, posted, results = threading.Barrier(2), [torch.zeros(())] * 2, [torch.zeros(())] * 2

    def process(rank: int) -> None:
        def all_sum(local: torch.Tensor) -> torch.Tensor:  # an all-reduce: post, wait for the other, add up
            posted[rank] = local
            barrier.wait()
            total = posted[0] + posted[1]
            barrier.wait()
            return total

        rows = slice(2 * rank, 2 * rank + 2)
        results[rank] = whiten(values[rows], mask[rows], all_sum)

    threads = [threading.Thread(target=process, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert torch.allclose(torch.cat(results), whiten(values, mask), atol=1e-6)
    assert not torch.allclose(torch.cat([whiten(values[:2], mask[:2]), whiten(values[2:], mask[2:])]),
                              whiten(values, mask), atol=1e-3)  # whitened apart, the halves would differ
