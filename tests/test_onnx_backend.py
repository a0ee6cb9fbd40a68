"""The ONNX Runtime generation backend: a model folder converted once (an artifact with a manifest, cached by the
model's identity), and the same greedy answers as the transformers reference, batched or not, over two rounds that
reuse the first, with stop strings and per-request token limits; seeded sampling reproducible. Real tiny random
llamas (tests/model_support.py) and a real conversion by onnxruntime-genai's model builder: no files, no hub."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pipelines.llm.base import ChatRequest
from tests.model_support import TEXT, build_tiny_llama, same_replies

pytest.importorskip("onnxruntime_genai")

SYSTEM = TEXT[:600]  # ~330 tokens of the tiny tokenizer: the shared prefix
USERS = ["Mars?", "Which moon orbits the planet that orbits the Sun? " * 3, "Phobos and Deimos", "The Sun " * 9,
         "Deimos"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Any:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(scope="module")
def onnx_folder(tiny_llama: Path, artifacts: Path) -> Path:
    from pipelines.llm.onnx_export import export_onnx
    from pipelines.manifest import model_identity

    return export_onnx(model_identity(tiny_llama), tiny_llama, artifacts)


def reference(folder: Path, **options: Any) -> Any:
    from pipelines.llm.local import TransformersChatClient

    return TransformersChatClient(folder, device="cpu", **{"batch_size": 4, **options})


def fast(folder: Path, **options: Any) -> Any:
    from pipelines.llm.onnx_backend import onnx_chat_client

    return onnx_chat_client(folder, model="tiny-onnx", **{"batch_size": 4, **options})


def requests(stop: list[str], max_tokens: int | list[int] = 20, users: list[str] = USERS, **extra: Any
             ) -> list[ChatRequest]:
    limits = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(users)
    return [ChatRequest(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}],
                        max_tokens=n, stop=stop, prefix="<think>", **extra) for u, n in zip(users, limits, strict=True)]


@pytest.fixture(scope="module")
def stop(tiny_llama: Path) -> list[str]:
    """Stop strings cut from the middle of two reference replies, so that some rows stop early (at different
    steps) and the others run to their token limit."""
    texts = [r.text for r in reference(tiny_llama).complete_many(requests([]))]
    chosen = [texts[0][6:9], texts[1][10:12]]
    assert all(chosen), texts
    return chosen


def test_conversion_is_an_artifact_cached_by_the_model_identity(tiny_llama: Path, onnx_folder: Path,
                                                                 artifacts: Path, tmp_path: Path) -> None:
    from pipelines.llm.onnx_export import ONNX_KIND, export_onnx
    from pipelines.manifest import model_identity, read_manifest, sha256_file

    manifest = read_manifest(onnx_folder)
    identity = model_identity(tiny_llama)
    assert manifest is not None and manifest.kind == ONNX_KIND and manifest.inputs == {"model": identity}
    assert manifest.params["precision"] == "fp32" and manifest.params["builder"].startswith("onnxruntime-genai==")
    # the graph computes the LM head on each row's last position only (what generation reads)
    import onnx

    graph = onnx.load(str(onnx_folder / "model.onnx"), load_external_data=False).graph
    assert manifest.params["logits"] == "last_position" and any(n.op_type == "Slice" and n.name ==
                                                                "/lm_head/last_position" for n in graph.node)
    assert next(o for o in graph.output if o.name == "logits").type.tensor_type.shape.dim[1].dim_value == 1
    assert onnx_folder.name == f"{identity}-fp32" and onnx_folder.parent == artifacts / "models" / "onnx"
    for name in ("model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json", "generation_config.json"):
        assert manifest.files[name] == sha256_file(onnx_folder / name)
    # the same identity again: reused as it is (no builder run, the same manifest)
    assert export_onnx(identity, tiny_llama, artifacts) == onnx_folder
    assert read_manifest(onnx_folder).created_at == manifest.created_at
    # other weights: another identity, another folder; the first one stays
    other = build_tiny_llama(tmp_path / "other", vocab_size=290)
    assert model_identity(other) != identity
    second = export_onnx(model_identity(other), other, artifacts)
    assert second != onnx_folder and (second / "model.onnx").is_file() and (onnx_folder / "model.onnx").is_file()


def convert_and_read(source: Path, artifacts: Path) -> tuple[Path, str]:
    """In a process of its own: convert ``source`` and say which manifest the folder returned holds."""
    from pipelines.llm.onnx_export import export_onnx
    from pipelines.manifest import model_identity, read_manifest

    folder = export_onnx(model_identity(source), source, artifacts)
    return folder, read_manifest(folder).created_at


def test_processes_converting_the_same_model_at_once_convert_it_once(tmp_path: Path) -> None:
    """Under ``accelerate launch`` every process starts a rollout engine on the same policy: the second waits for
    the first's conversion and reuses it, so both read the one folder with the one manifest."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    source = build_tiny_llama(tmp_path / "shared", vocab_size=300)
    artifacts = tmp_path / "artifacts"
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(convert_and_read, [source, source], [artifacts, artifacts]))
    assert results[0] == results[1] and (results[0][0] / "model.onnx").is_file()
    assert [p.name for p in (artifacts / "models" / "onnx").iterdir()] == [results[0][0].name]


def test_a_failed_conversion_leaves_nothing(tmp_path: Path, artifacts: Path) -> None:
    from pipelines.llm.base import LLMError
    from pipelines.llm.onnx_export import export_onnx

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    with pytest.raises(LLMError, match="converting .* to ONNX"):
        export_onnx("broken-0", broken, artifacts)
    assert not list((artifacts / "models" / "onnx").glob("broken*"))
    assert not list((artifacts / "models" / "onnx").glob(".broken*"))


def last_logits(folder: Path, prompt: str) -> Any:
    """The logits after ``prompt``'s last token, from the ONNX folder's graph (one row, nothing cached)."""
    import numpy as np

    client = fast(folder)
    backend = client.backend
    ids = client.tokenizer(prompt)["input_ids"]
    kv = np.zeros((backend.layers, 2, 1, backend.kv_heads, len(ids), backend.head_size), dtype=backend.dtype)
    return backend._prefill_row(kv, 0, ids, 0)


def test_int8_weights_are_their_own_artifact_and_give_close_logits(tiny_llama: Path, onnx_folder: Path,
                                                                     artifacts: Path) -> None:
    """agent.onnx_precision int8: 8-bit weights (MatMulNBits, bits 8), a folder of their own beside fp32's; the
    logits stay within 3% of the fp32 ones' range, and the greedy token is the same wherever fp32's two best are
    not a near-tie."""
    import numpy as np
    import onnx

    from pipelines.llm.onnx_export import export_onnx
    from pipelines.manifest import model_identity, read_manifest

    identity = model_identity(tiny_llama)
    int8 = export_onnx(identity, tiny_llama, artifacts, precision="int8")
    assert int8.name == f"{identity}-int8" and int8 != onnx_folder and (onnx_folder / "model.onnx").is_file()
    assert read_manifest(int8).params["precision"] == "int8"
    graph = onnx.load(str(int8 / "model.onnx"), load_external_data=False).graph
    quantized = [n for n in graph.node if n.op_type == "MatMulNBits"]
    attributes = [{a.name: a.i for a in n.attribute} for n in quantized]
    assert quantized and all(a["bits"] == 8 and a["accuracy_level"] == 4 for a in attributes)  # int8 products
    assert (int8 / "model.onnx.data").stat().st_size < (onnx_folder / "model.onnx.data").stat().st_size
    compared = 0
    for prompt in [SYSTEM, *USERS]:
        exact, approx = last_logits(onnx_folder, prompt), last_logits(int8, prompt)
        spread = float(exact.max() - exact.min())
        assert float(np.abs(approx - exact).max()) <= 0.03 * spread, prompt  # int8: ~1%; int4 would be 5-8%
        top = np.sort(exact)[-2:]
        if top[1] - top[0] > 0.06 * spread:  # no near-tie: twice the largest shift allowed
            compared += 1
            assert int(approx.argmax()) == int(exact.argmax()), prompt
    assert compared


def test_greedy_answers_equal_the_transformers_reference(tiny_llama: Path, onnx_folder: Path,
                                                         stop: list[str]) -> None:
    batch = requests(stop, max_tokens=[20, 14, 20, 9, 20])  # per-request limits in one batch
    expected = reference(tiny_llama).complete_many(batch)
    client = fast(onnx_folder)
    same_replies(client.complete_many(batch), expected)
    assert {r.finish_reason for r in expected} == {"stop", "length"}  # rows that stop early and rows that run on
    assert len({r.completion_tokens for r in expected}) > 1
    # the system prompt was computed once (its own entry) and reused by every other prompt
    stats = client.backend.stats
    system = client.message_boundaries(batch[0])[0]
    assert stats["anchor"] == system and stats["reused"] >= system * (len(batch) - 1)
    # batch 1 (one question at a time) and a bigger batch give the same tokens
    same_replies(fast(onnx_folder, batch_size=1).complete_many(batch), expected)
    same_replies(fast(onnx_folder, batch_size=8).complete_many(batch), expected)
    # no prefix store at all: every prompt computed whole, the same tokens
    bare = fast(onnx_folder, prefix_cache_mb=0)
    same_replies(bare.complete_many(batch), expected)
    assert bare.backend.stats["reused"] == 0 and len(bare.backend.store) == 0


def test_a_second_round_reuses_the_first_and_equals_the_reference(tiny_llama: Path, onnx_folder: Path,
                                                                   stop: list[str]) -> None:
    first_round = requests(stop, max_tokens=12)
    ref, client = reference(tiny_llama, batch_size=8), fast(onnx_folder, batch_size=8)
    replies = client.complete_many(first_round)
    same_replies(replies, ref.complete_many(first_round))
    second_round = []
    for index, (request, reply) in enumerate(zip(first_round, replies, strict=True)):
        messages = [*request.messages, {"role": "assistant", "content": request.prefix + reply.text},
                    {"role": "user", "content": "<tool_response>" + "Phobos orbits Mars. " * (index + 1)
                                                + "</tool_response>"}]
        second_round.append(request.model_copy(update={"messages": messages}))
    before = dict(client.backend.stats)
    same_replies(client.complete_many(second_round), ref.complete_many(second_round))
    # each episode's round 1 (system + user message, at least) came from the store, not from the system prompt
    reused = client.backend.stats["reused"] - before["reused"]
    assert reused >= sum(client.message_boundaries(r)[-1] for r in first_round)
    assert client.backend.stats["anchor"] == before["anchor"]
    computed = client.backend.stats["computed"] - before["computed"]
    total = sum(len(client.prompt_ids(r)) for r in second_round)
    assert computed < total - reused + len(second_round)  # only the new tokens ran


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(onnx_folder: Path) -> None:
    batch = requests([], max_tokens=16, temperature=1.0, seed=7)
    first = fast(onnx_folder).complete_many(batch)
    assert [r.text for r in fast(onnx_folder).complete_many(batch)] == [r.text for r in first]
    one_by_one = fast(onnx_folder, batch_size=1).complete_many(batch)
    assert [r.text for r in one_by_one] == [r.text for r in first]
    other = fast(onnx_folder).complete_many(requests([], max_tokens=16, temperature=1.0, seed=8))
    assert [r.text for r in other] != [r.text for r in first]
    greedy = fast(onnx_folder).complete_many(requests([], max_tokens=16))
    assert [r.text for r in greedy] != [r.text for r in first]


def test_rollouts_with_the_onnx_agent_backend_equal_transformers(tiny_llama: Path, solar, toolbox,  # noqa: ANN001
                                                                 tmp_path: Path) -> None:
    from pipelines.agent.client import InProcessToolClient
    from pipelines.agent.models import load_agent_model
    from pipelines.agent.protocols import OmneProtocol
    from pipelines.agent.rollout import RolloutEngine, RolloutParams, Task
    from pipelines.agent.tools import OMNE_TOOLS, TOOL_SPECS
    from pipelines.llm.onnx_backend import OnnxBackend

    agent = solar.agent.model_copy(update={"backend": "onnx", "onnx_precision": "fp32", "batch_size": 3})
    params = solar.model_copy(update={"agent": agent, "paths": solar.paths.model_copy(
        update={"artifacts": str(tmp_path / "artifacts")})})
    client = load_agent_model(str(tiny_llama), params)
    assert isinstance(client.backend, OnnxBackend) and client.model.endswith("-onnx-fp32")
    assert (params.artifacts_dir / "models" / "onnx").is_dir()
    tasks = [Task(qa_id=str(i), domain="solar", question=q, gold_answers=["Phobos"]) for i, q in enumerate(
        ["Which moon orbits Mars?", "What orbits the Sun?", "Phobos?", "Which planet has the moon Deimos?"])]
    tools = InProcessToolClient(toolbox)
    protocol = OmneProtocol([TOOL_SPECS[n] for n in OMNE_TOOLS], max_rounds=2)
    run_params = RolloutParams(max_new_tokens=24, batch_size=3)
    ours = RolloutEngine(client, protocol, tools, run_params).run(tasks, progress=False)
    ref = RolloutEngine(reference(tiny_llama, batch_size=3), protocol, tools, run_params).run(tasks, progress=False)
    for a, b in zip(ours, ref, strict=True):
        assert (a.messages, a.generated_tokens, a.finish) == (b.messages, b.generated_tokens, b.finish)
    shutil.rmtree(params.artifacts_dir / "models" / "onnx")


def test_rl_rollouts_from_the_onnx_backend_sync_the_policy_weights(tiny_llama: Path, onnx_folder: Path,
                                                                   toolbox) -> None:  # noqa: ANN001
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.agent.client import InProcessToolClient
    from pipelines.agent.protocols import OmneProtocol
    from pipelines.agent.rollout import Task
    from pipelines.agent.tools import OMNE_TOOLS, TOOL_SPECS
    from pipelines.config import RLStageParams
    from pipelines.train.rl.rollouts import ToolRollouts

    torch.manual_seed(1)
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_llama),
                            LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tasks = [Task(qa_id=str(i), domain="solar", question=q, gold_answers=["Phobos"])
             for i, q in enumerate(["Which moon orbits Mars?", "What orbits the Sun?", "Phobos?"])]
    common = {"protocol": OmneProtocol([TOOL_SPECS[n] for n in OMNE_TOOLS], max_rounds=2),
              "tools": InProcessToolClient(toolbox), "tokenizer": tokenizer, "tasks": {}, "max_length": 4096,
              "stage": RLStageParams(max_new_tokens=12)}
    reference_rollouts = ToolRollouts(**common)
    fast_rollouts = ToolRollouts(**common, backend="onnx", sync_every=1)
    lazy_rollouts = ToolRollouts(**common, backend="onnx", sync_every=2)
    # from the start model's converted artifact (what evaluation made): no conversion at all, its files untouched
    from pipelines.manifest import sha256_file

    artifact = {name: sha256_file(onnx_folder / name) for name in ("model.onnx", "model.onnx.data")}
    started = ToolRollouts(**common, backend="onnx", start_onnx=lambda: onnx_folder)

    def signatures(rollouts: ToolRollouts) -> list[Any]:
        return [(t.messages, t.generated_tokens, t.finish)
                for t in rollouts.roll_out(policy, tasks, temperature=0.0)]

    before = signatures(reference_rollouts)
    assert signatures(fast_rollouts) == before and signatures(lazy_rollouts) == before  # the merged LoRA, converted
    assert signatures(started) == before and started._graph == onnx_folder  # noqa: SLF001 - its layers rewritten
    assert len(fast_rollouts.syncs) == len(lazy_rollouts.syncs) == 1 and fast_rollouts.syncs[0] > 0
    with torch.no_grad():  # an optimizer step (in place, on the adapter)
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.mul_(-3.0)
    after = signatures(reference_rollouts)
    assert after != before
    fast_rollouts.calls = lazy_rollouts.calls = 1  # one rollout call (optimizer step) later
    assert signatures(fast_rollouts) == after and len(fast_rollouts.syncs) == 2  # synced every step
    assert fast_rollouts._refresh is not None  # noqa: SLF001 - the second sync rewrote the adapted layers only
    assert signatures(lazy_rollouts) == before and len(lazy_rollouts.syncs) == 1  # every 2: still the old copy
    started.calls = 1
    assert signatures(started) == after and len(started.syncs) == 2
    started.close()
    assert {name: sha256_file(onnx_folder / name) for name in artifact} == artifact  # read, never written
    lazy_rollouts.calls = 2
    assert signatures(lazy_rollouts) == after and len(lazy_rollouts.syncs) == 2
    folder = fast_rollouts._fast_dir  # noqa: SLF001
    fast_rollouts.close()
    lazy_rollouts.close()
    assert folder is not None and not folder.exists()
