"""The GPU check (bench/gpu_check.sh) is ready for a lent device: its dry run goes through the same sequence on the
CPU (project, base model, SFT, stage-3 PPO, evaluation) and writes the JSON a GPU run would, with every figure there;
nothing the path imports is missing on the device once bench/gpu_carry.py's parts are unpacked; the parts split,
join and unpack as the device calls expect."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, cli_env

sys.path.insert(0, str(PROJECT_ROOT / "bench"))

import gpu_carry  # noqa: E402


def test_dry_run_goes_through_the_sequence_and_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(["bash", str(PROJECT_ROOT / "bench" / "gpu_check.sh"), "--dry-run", "--out", str(out)],
                         env=cli_env(PYTHON=sys.executable), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["ok"] and result["problems"] == [] and result["dry_run"]
    phases = result["phases"]
    assert list(phases) == ["project", "base_model", "sft", "ppo", "eval"]
    assert all(p["wall_s"] >= 0 and "peak_gpu_allocated_mb" in p for p in phases.values())
    assert result["device"]["cuda"] is False and phases["sft"]["peak_gpu_allocated_mb"] is None  # figures on a GPU
    # the paper profile, cut: SFT steps, PPO batches of rollouts (2 epochs x 2 minibatches each), the test questions
    assert result["params"]["profile"] == "paper"
    stage3 = result["params"]["resolved"]["rl.stage3"]
    assert (stage3["algorithm"], stage3["method"], stage3["ppo_epochs"], stage3["beta"]) == ("ppo", "full", 2, 0.01)
    sft, ppo, evaluation = phases["sft"], phases["ppo"], phases["eval"]
    assert sft["steps"] == len(sft["step_s"]) == 2 and sft["tokens_per_s"] > 0
    assert ppo["rollout_batches"] == 2 and ppo["optimizer_steps"] == len(ppo["step_s"]) == 2 * 2 * 2
    assert ppo["generated_tokens_per_s"] > 0 and ppo["tokens_per_s"] > 0 and len(ppo["rollout_s"]) == 2
    assert evaluation["questions"] == phases["project"]["dataset"]["test"] == result["expected"]["eval_questions"]
    assert evaluation["generated_tokens_per_s"] > 0
    assert result["imports"]["missing_on_device"] == [] and "trl" in result["imports"]["distributions"]
    assert result["device"]["versions"]["trl"]


def test_the_json_check_names_what_is_missing() -> None:
    from gpu_check import problems

    results = {"device": {"cuda": True}, "phases": {"project": {"peak_gpu_allocated_mb": 10.0},
                                                    "sft": {"error": "OutOfMemoryError: CUDA"}},
               "imports": {"missing_on_device": ["lancedb"]}}
    found = problems(results, {"sft_steps": 20, "ppo_steps": 2, "ppo_optimizer_steps": 16, "eval_questions": 64})
    assert found == ["base_model: did not run", "sft: OutOfMemoryError: CUDA", "ppo: did not run",
                     "eval: did not run", "imports: not on the device and not carried by bench/gpu_carry.py: lancedb"]


def test_every_carried_distribution_has_a_pinned_version() -> None:
    versions = gpu_carry.pinned_versions()
    assert set(versions) == set(gpu_carry.CARRIED) and versions["trl"] == "1.16.0"
    assert {"trl", "datasets", "pydantic", "gguf"} <= set(gpu_carry.CARRIED)  # what the device lacks
    assert gpu_carry.part_budget(20 * gpu_carry.MIB) == 42 * gpu_carry.MIB
    with pytest.raises(SystemExit):
        gpu_carry.part_budget(61 * gpu_carry.MIB)


def test_parts_split_join_and_unpack_as_the_device_calls_expect(tmp_path: Path) -> None:
    site = tmp_path / "build" / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (site / "pkg" / "blob.bin").write_bytes(bytes(range(256)) * 64)
    bundle = tmp_path / "bundle.tar.xz"
    gpu_carry.pack(site, bundle, preset=0)
    here = tmp_path / "here"
    parts = gpu_carry.split_bundle(bundle, here, budget=bundle.stat().st_size // 3 + 1)
    assert [p.name for p in parts] == ["p1", "p2", "p3"]
    assert all(p.stat().st_size <= bundle.stat().st_size // 3 + 1 for p in here.glob("p*/bundle.part"))
    calls = gpu_carry.calls(here)
    assert len(calls) == 3 and '"here/p1"' in calls[0] and "--unpack-only" in calls[0]
    assert calls[-1].endswith('command="bash bench/gpu_check.sh")') and "timeout_s=600" in calls[-1]

    device = tmp_path / "device"  # the parts arrive one call at a time
    (device / "p1").mkdir(parents=True)
    for name in ("bundle.part", gpu_carry.MANIFEST):
        (device / "p1" / name).write_bytes((here / "p1" / name).read_bytes())
    assert not gpu_carry.unpack(device, device / "site")
    for part in ("p2", "p3"):
        (device / part).mkdir()
        for name in ("bundle.part", gpu_carry.MANIFEST):
            (device / part / name).write_bytes((here / part / name).read_bytes())
    assert gpu_carry.unpack(device, device / "site")
    assert (device / "site" / "pkg" / "blob.bin").read_bytes() == (site / "pkg" / "blob.bin").read_bytes()
    assert gpu_carry.unpack(device, device / "site")  # once unpacked, a later call finds it so

    (device / "p2" / "bundle.part").write_bytes(b"another bundle")
    (device / "site" / ".bundle_sha256").unlink()
    with pytest.raises(SystemExit, match="p2"):
        gpu_carry.unpack(device, device / "site")
    assert tarfile.is_tarfile(bundle)


# ----- what the dry run found on the paper profile's path (bf16 mixed precision, PPO with full fine-tuning) ----------

def test_a_full_fine_tuning_reference_is_the_start_model(tiny: Path) -> None:
    """TRL loads the KL reference from the path the policy's config names: a policy merged from an adapter (stage 3
    from a LoRA SFT model, with added tokens) names its base; while the trainer is built it names the policy itself."""
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from pipelines.train.rl.trainers import start_model_reference

    policy = AutoModelForCausalLM.from_pretrained(tiny)
    policy.resize_token_embeddings(policy.config.vocab_size + 2)  # the SFT's <think> tokens
    args = GRPOConfig(output_dir="unused", beta=0.01, use_cpu=True, report_to="none")
    with start_model_reference(policy, args, None):
        reference = AutoModelForCausalLM.from_pretrained(policy.config._name_or_path)
    assert policy.config._name_or_path == str(tiny)
    assert reference.get_input_embeddings().weight.shape == policy.get_input_embeddings().weight.shape
    for beta, peft in ((0.0, None), (0.01, object())):  # no reference, or the adapter disabled: nothing saved
        with start_model_reference(policy, GRPOConfig(output_dir="unused", beta=beta, use_cpu=True), peft):
            assert policy.config._name_or_path == str(tiny)


def test_generation_under_a_trainers_autocast_skips_the_static_cache(tiny: Path) -> None:
    """accelerate's mixed precision wraps the forward (keys come out in float32, values in bf16): the prefix cache's
    StaticCache holds one dtype, so such a model generates without it; a PEFT model generates with its base's."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from pipelines.llm.local import autocast_wrapped

    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert not autocast_wrapped(model)
    model._original_forward = model.forward  # what accelerate's prepare_model leaves with bf16 / fp16
    assert autocast_wrapped(model)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), LoraConfig(r=2, target_modules=["q_proj"]))
    lora._original_forward = lora.forward  # the PEFT wrapper's forward is not the one generate runs
    assert not autocast_wrapped(lora)
