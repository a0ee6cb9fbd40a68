"""RL rollouts from TRL's vLLM engine (``rl.<stage>.backend: vllm``), checked without vllm or a GPU: the rollout
engine, ``LocalChatClient`` and ``TrlVLLMBackend`` drive TRL's real ``VLLMClient`` against a scripted stand-in of
the ``trl vllm-serve`` HTTP API on 127.0.0.1 (the external LLM endpoint: the one stand-in allowed), with a real
tokenizer and the real KG tools; the refusal where vllm is missing (here it always is); and the GRPOConfig
settings. Not checked here: colocate mode and TRL's weight sync (both need vllm on a CUDA GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines.config import Params, RLStageParams, load_params
from pipelines.errors import ConfigError
from tests.conftest import make_project

TOOL_CALL = '<think>find Mars</think><tool_call>node_info(node_name="Mars", graph_type="solar")</tool_call>'
ANSWER = "<think>so it is Phobos</think><answer>Phobos</answer>"


@pytest.fixture(scope="module")
def solar_kg(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """A project with the solar KG built (node_info needs no entity index)."""
    from pipelines.domains import load_registry
    from pipelines.kg.build import build_knowledge_graph

    root = make_project(tmp_path_factory.mktemp("vllm") / "project")
    params = load_params(root / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params)
    return params


def trl_vllm_generation(url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """TRL's ``VLLMGeneration`` in server mode around a real ``VLLMClient`` of the server at ``url``.

    ``VLLMClient.__init__`` refuses to run unless vllm is importable (it never is here) and then only checks
    ``/health`` and reads ``/v1/models``: with the check let through, the real constructor talks to the stand-in.
    ``VLLMGeneration.__init__`` would start vLLM's NCCL weight transfer (a GPU), so the object is made without it
    and given the two attributes generation reads: its mode and its client (what TRL's own init sets)."""
    import trl.generation.vllm_client as vllm_client_module
    from trl.generation.vllm_generation import VLLMGeneration

    monkeypatch.setattr(vllm_client_module, "is_vllm_available", lambda *args, **kwargs: True)
    generation = VLLMGeneration.__new__(VLLMGeneration)
    generation.mode = "server"
    generation.vllm_client = vllm_client_module.VLLMClient(base_url=url)
    return generation


def test_rollouts_generate_through_trl_vllm_client_with_real_tool_responses(
        solar_kg: Params, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted reply that calls a tool gets the real tool's response, which the next request's prompt tokens
    carry; sampled rows go one request each with their own seed (rows of one prompt must not sample alike),
    greedy rows together without one; each request asks for the round's token limit, the protocol's stop strings
    kept in the output, no log-probabilities. Tokens past a stop string never reach the episode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.agent.client import InProcessToolClient
    from pipelines.agent.rollout import Task
    from pipelines.agent.tools import KGToolbox
    from pipelines.eval.runner import make_protocol
    from pipelines.llm.scripted import scripted_vllm_app, serve_in_thread
    from pipelines.train.rl.rollouts import ToolRollouts

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    protocol = make_protocol(solar_kg, "omne", None)

    def reply(prompt: list[int], body: dict[str, Any]) -> list[int]:
        text = ANSWER if TOOL_CALL in tokenizer.decode(prompt) else TOOL_CALL + "<answer>Vulcan</answer>"
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    app = scripted_vllm_app(reply)
    tasks = [Task(qa_id="q1", domain="solar", question="Which moon orbits Mars?", gold_answers=["Phobos"], sample=s)
             for s in range(2)]
    stage = RLStageParams(max_new_tokens=200, backend="vllm")
    policy = AutoModelForCausalLM.from_pretrained(tiny)
    with serve_in_thread(app) as url:
        rollouts = ToolRollouts(protocol, InProcessToolClient(KGToolbox(solar_kg)), tokenizer, stage, {}, 4096,
                                backend="vllm", vllm=trl_vllm_generation(url, monkeypatch))
        sampled = rollouts.roll_out(policy, tasks, temperature=0.7, seed=11)
        greedy = rollouts.roll_out(policy, [task.model_copy(update={"qa_id": f"g{i}"}) for i, task in
                                            enumerate(tasks[:1] * 3)], temperature=0.0)
    bodies = app.state.log.bodies
    assert len(bodies) == 2 * 2 + 2  # sampled: 2 rounds x 2 rows, one request each; greedy: 2 rounds x 1 request
    for episode in [*sampled, *greedy]:
        assert episode.answer == "Phobos" and episode.rounds == 2 and len(episode.tool_calls) == 1
        call = episode.tool_calls[0]
        assert call.ok and call.name == "node_info" and "Phobos" in call.response
        assert "Vulcan" not in str(episode.messages)  # cut at the stop string
    response = sampled[0].tool_calls[0].response
    for body in bodies:
        assert body["max_tokens"] == 200 and body["stop"] == protocol.stop and body["include_stop_str_in_output"]
        assert body["logprobs"] is None and body["n"] == 1 and body["return_token_ids"]
        rendered = [tokenizer.decode(prompt) for prompt in body["prompt"]]
        assert all(("Which moon orbits Mars?" in text) for text in rendered)
        # the second round's prompt tokens hold the real tool response
        assert all((response in text) == (TOOL_CALL in text) for text in rendered)
    sampled_bodies, greedy_bodies = bodies[:4], bodies[4:]
    assert all(len(b["prompt"]) == 1 and b["temperature"] == 0.7 and b["top_k"] == 50 for b in sampled_bodies)
    first_round = [b["seed"] for b in sampled_bodies if TOOL_CALL not in tokenizer.decode(b["prompt"][0])]
    assert len(first_round) == 2 and len(set(first_round)) == 2  # one prompt, two rollouts: two seeds
    assert all(len(b["prompt"]) == 3 and b["temperature"] == 0.0 and "seed" not in b for b in greedy_bodies)


def test_vllm_rollouts_without_vllm_are_refused_with_what_they_need(solar_kg: Params, tiny: Path) -> None:
    from pipelines.train.rl import train_rl
    from pipelines.train.rl.build import require_vllm

    stage1 = solar_kg.rl.stage1.model_copy(update={"backend": "vllm"})
    params = solar_kg.model_copy(update={"rl": solar_kg.rl.model_copy(update={"stage1": stage1}),
                                         "agent": solar_kg.agent.model_copy(update={"base_model": str(tiny)})})
    with pytest.raises(ConfigError) as refused:
        train_rl(params, 1, progress=False)  # before the QA data (none here) or any model is read
    message = str(refused.value)
    assert message.startswith("rl.stage1.backend: vllm: vllm is not installed")
    assert "CUDA GPU machine with `pip install omne[vllm]`" in message
    assert f"`trl vllm-serve --model {tiny}` running at http://127.0.0.1:8000" in message
    colocate = stage1.model_copy(update={"vllm_mode": "colocate"})
    with pytest.raises(ConfigError, match=r"rl.stage3.backend: vllm: vllm is not installed and no CUDA GPU .* "
                                          r"colocate mode, vLLM runs inside the training process"):
        require_vllm(colocate, 3, tiny, cuda=False)


def test_grpo_config_gets_trl_vllm_settings_only_for_the_vllm_backend(tmp_path: Path) -> None:
    from trl import GRPOConfig

    from pipelines.train.rl.build import vllm_trainer_options

    server = RLStageParams(backend="vllm", vllm_server_base_url="http://10.0.0.5:8001")
    colocate = RLStageParams(backend="vllm", vllm_mode="colocate", vllm_gpu_memory_utilization=0.5)
    assert vllm_trainer_options(server, "transformers") == {}
    assert vllm_trainer_options(server, "vllm") == {"use_vllm": True, "vllm_mode": "server",
                                                    "vllm_server_base_url": "http://10.0.0.5:8001",
                                                    "vllm_importance_sampling_correction": False}
    assert vllm_trainer_options(colocate, "vllm") == {"use_vllm": True, "vllm_mode": "colocate",
                                                      "vllm_gpu_memory_utilization": 0.5,
                                                      "vllm_importance_sampling_correction": False}
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none",
                        **vllm_trainer_options(server, "vllm"))  # TRL takes them as they are
    assert (config.use_vllm, config.vllm_mode, config.vllm_server_base_url) == (True, "server",
                                                                                 "http://10.0.0.5:8001")


def test_vllm_settings_shape_a_stage_only_when_vllm_generates() -> None:
    """Existing RL models keep their fingerprints; the server's address and vLLM's memory share never count."""
    plain = RLStageParams().result_settings()
    assert not any(key.startswith("vllm_") for key in plain)
    settings = RLStageParams(backend="vllm", vllm_server_base_url="http://gpu:9000",
                             vllm_gpu_memory_utilization=0.8).result_settings()
    assert settings["backend"] == "vllm" and settings["vllm_mode"] == "server"
    assert "vllm_server_base_url" not in settings and "vllm_gpu_memory_utilization" not in settings
