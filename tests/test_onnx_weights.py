"""An RL policy's ONNX copy brought up to date by rewriting its adapted layers (``pipelines.llm.onnx_weights``): the
same initializers, bit for bit, as converting the merged policy again with onnxruntime-genai's model builder, at
fp32 and int8; the same greedy tokens from a session given them. Real tiny random llamas and real conversions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model_support import build_tiny_llama

pytest.importorskip("onnxruntime_genai")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama")


def lora_policy(folder: Path, seed: int) -> Any:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return get_peft_model(AutoModelForCausalLM.from_pretrained(folder),
                          LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)).eval()


def converted(policy: Any, tokenizer: Any, out: Path, precision: str) -> Path:
    """The full sync's copy: the LoRA merged into a copy of the policy, converted by the model builder."""
    from pipelines.llm.onnx_export import convert_folder, save_merged

    save_merged(policy, tokenizer, out / "merged")
    (out / "onnx").mkdir(parents=True)
    convert_folder(out / "merged", out / "onnx", precision=precision)
    return out / "onnx"


def graph_initializers(folder: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(folder / "model.onnx"))  # the weights from model.onnx.data too
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_rewritten_layers_equal_a_new_conversion_bit_for_bit(tiny_llama: Path, tmp_path: Path, precision: str) -> None:
    import torch
    from transformers import AutoTokenizer

    from pipelines.llm.onnx_weights import WeightRefresh

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    policy = lora_policy(tiny_llama, seed=1)
    first = converted(policy, tokenizer, tmp_path / "first", precision)  # the first sync converts in full
    refresh = WeightRefresh.for_policy(policy, first / "model.onnx", precision)
    assert refresh is not None
    # every linear layer of both blocks (q, k, v fused into one MatMul by the builder), nothing else
    assert sorted(refresh.targets) == sorted(f"model.layers.{i}.{name}.MatMul" for i in range(2) for name in
                                            ("attn.qkv_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                             "mlp.down_proj"))
    with torch.no_grad():  # an optimizer step on the adapter
        for name, weight in policy.named_parameters():
            if "lora_" in name:
                weight.add_(torch.randn_like(weight) * 0.05)
    written = refresh.initializers()
    assert len(written) == len(refresh.targets) * (1 if precision == "fp32" else 2)
    again = graph_initializers(converted(policy, tokenizer, tmp_path / "again", precision))
    before = graph_initializers(first)
    for name, array in written.items():
        assert array.dtype == again[name].dtype and np.array_equal(array, again[name]), name
        assert not np.array_equal(array, before[name]), name  # the step changed it
    untouched = [name for name in again if name not in written and again[name].size > 1]
    assert untouched and all(np.array_equal(before[name], again[name]) for name in untouched)  # embeddings, norms

    # a session of the first graph given the rewritten layers generates as the new conversion does
    from pipelines.llm.base import ChatRequest
    from pipelines.llm.onnx_backend import onnx_chat_client

    requests = [ChatRequest(messages=[{"role": "user", "content": text}], max_tokens=16)
                for text in ("Which moon orbits Mars?", "Phobos and Deimos", "The Sun")]
    refreshed = onnx_chat_client(first, model="refreshed", initializers=written).complete_many(requests)
    reference = onnx_chat_client(tmp_path / "again" / "onnx", model="again").complete_many(requests)
    assert [r.text for r in refreshed] == [r.text for r in reference]
    stale = onnx_chat_client(first, model="stale").complete_many(requests)
    assert [r.text for r in stale] != [r.text for r in reference]  # without them: the old weights


def test_int8_blocks_reproduce_the_builders_quantization(tiny_llama: Path, tmp_path: Path) -> None:
    """``quantize_int8_blocks`` on the base model's weights gives the builder's MatMulNBits initializers exactly,
    a block with a tie of magnitudes included."""
    import torch
    from transformers import AutoModelForCausalLM

    from pipelines.llm.onnx_export import convert_folder
    from pipelines.llm.onnx_weights import quantize_int8_blocks

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    with torch.no_grad():  # a block whose largest magnitude is there twice, with both signs
        model.model.layers[0].mlp.down_proj.weight[3, :2] = torch.tensor([0.25, -0.25])
    model.save_pretrained(tmp_path / "model")
    (tmp_path / "model" / "onnx").mkdir()
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(tmp_path / "model")
    convert_folder(tmp_path / "model", tmp_path / "model" / "onnx", precision="int8")
    graph = graph_initializers(tmp_path / "model" / "onnx")
    layers = model.model.layers
    checked = 0
    for i, layer in enumerate(layers):
        for name, weight in (("mlp.down_proj", layer.mlp.down_proj.weight),
                             ("attn.o_proj", layer.self_attn.o_proj.weight)):
            values, scales = quantize_int8_blocks(weight.detach().numpy())
            assert np.array_equal(values, graph[f"model.layers.{i}.{name}.MatMul.weight_Q8"]), (i, name)
            assert np.array_equal(scales, graph[f"model.layers.{i}.{name}.MatMul.weight_scales"]), (i, name)
            checked += 1
    assert checked == 2 * len(layers)
    tie = quantize_int8_blocks(np.array([[0.25, -0.25] + [0.0] * 30], dtype=np.float32))
    assert tie[1][0, 0] == np.float32(-0.25) / np.float32(-128)  # the negative one sets the scale
    assert tie[0][0, 0, 1] == 0 and tie[0][0, 0, 0] == 255
    with pytest.raises(ValueError, match="blocks of 32"):
        quantize_int8_blocks(np.zeros((2, 40), dtype=np.float32))
