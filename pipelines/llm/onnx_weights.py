"""A converted ONNX copy of the RL policy brought up to date without converting it again.

RL's onnx rollouts (``rl.<stage>.backend: onnx``) need the policy's current weights in the ONNX graph after every
optimizer step. Only the LoRA-adapted linear layers change (the embeddings, norms and LM head are frozen), so a sync
loads a graph already converted from the same start model (its evaluation's artifact, or one full conversion) and
writes just those layers: each adapted layer's merged weight (``W + scale * B A``, PEFT's ``get_delta_weight``) in
the layout the model builder wrote for it, handed to ONNX Runtime as initializers that replace the file's
(``SessionOptions.add_initializer``). The full sync (copy and merge the policy, save it, run the builder in a child
process, load) took 12-16 s of each stage-3 step on 2 cores.

Layouts, as onnxruntime-genai's builder writes a llama-style block (checked against the graph, else None and the
caller converts in full):

- ``model.layers.{i}.attn.qkv_proj.MatMul`` (q, k and v fused along the output axis; or ``q_proj``/``k_proj``/
  ``v_proj`` apart), ``attn.o_proj``, ``mlp.gate_proj``, ``mlp.up_proj``, ``mlp.down_proj``;
- fp32: ``<name>.weight``, the weight transposed ([in, out]);
- int8 (``MatMulNBits``, bits 8, symmetric): ``<name>.weight_Q8`` [out, in / block, block] uint8 and
  ``<name>.weight_scales`` [out, in / block] float32, by ``quantize_int8_blocks``: ONNX Runtime's own blockwise
  quantization (MLAS), reproduced bit for bit (tests/test_onnx_weights.py compares it with the builder's output).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

INT8_BLOCK = 32  # the builder's block size for 8-bit MatMulNBits (its int4_block_size default, used for 8 bits too)
_LINEAR = re.compile(r"(?:^|\.)layers\.(\d+)\.(self_attn|mlp)\."
                     r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$")
_PRECISION_SUFFIXES = {"fp32": (".weight",), "int8": (".weight_Q8", ".weight_scales")}


def quantize_int8_blocks(weight: np.ndarray, block: int = INT8_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """``weight`` [out, in] as ``MatMulNBits`` (bits 8, symmetric) stores it: per block of ``block`` inputs of an
    output row, the scale is the block's value of largest magnitude (the negative one on a tie) over -128, and each
    value becomes ``floor(value / scale + 128.5)`` in float32, clipped to 0..255 (MLAS's blockwise quantizer)."""
    rows, columns = weight.shape
    if columns % block:
        raise ValueError(f"a weight of {columns} inputs does not split into blocks of {block}")
    blocks = np.ascontiguousarray(weight, dtype=np.float32).reshape(rows, columns // block, block)
    low, high = blocks.min(axis=-1), blocks.max(axis=-1)
    peak = np.where(np.abs(low) >= np.abs(high), low, high)
    scales = (peak / np.float32(-128.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(scales != 0, np.float32(1.0) / scales, np.float32(0.0)).astype(np.float32)
    scaled = (blocks * inverse[..., None]).astype(np.float32)
    values = np.clip(np.floor((scaled + np.float32(128.5)).astype(np.float32)), 0, 255).astype(np.uint8)
    return values, scales


def _onnx_name(layer: int, part: str, projection: str, fused: bool) -> str:
    if part == "mlp":
        return f"model.layers.{layer}.mlp.{projection}.MatMul"
    if projection in ("q_proj", "k_proj", "v_proj") and fused:
        return f"model.layers.{layer}.attn.qkv_proj.MatMul"
    return f"model.layers.{layer}.attn.{projection}.MatMul"


class WeightRefresh:
    """The initializers of an ONNX folder (``graph``: its ``model.onnx``, converted at ``precision``) that hold the
    LoRA-adapted linear layers of a PEFT policy, and how to write them from the policy's current weights.
    ``for_policy`` returns None where a layer cannot be placed (another architecture's names, another precision):
    the caller then converts in full."""

    def __init__(self, precision: str, targets: dict[str, list[tuple[str, Any]]], shapes: dict[str, tuple]) -> None:
        self.precision = precision
        self.targets = targets  # ONNX MatMul name -> [(projection, its LoRA module)] in output-axis order
        self.shapes = shapes  # initializer name -> its shape in the graph

    @classmethod
    def for_policy(cls, policy: Any, graph: Path, precision: str) -> WeightRefresh | None:
        import onnx

        suffixes = _PRECISION_SUFFIXES.get(precision)
        if suffixes is None or not hasattr(policy, "peft_config"):
            return None
        shapes = {init.name: tuple(init.dims)
                  for init in onnx.load(str(graph), load_external_data=False).graph.initializer}
        fused = any(name.endswith(f"attn.qkv_proj.MatMul{suffixes[0]}") for name in shapes)
        targets: dict[str, list[tuple[str, Any]]] = {}
        for name, module in policy.named_modules():
            found = _LINEAR.search(name)
            if found is None or not hasattr(module, "get_delta_weight") or not hasattr(module, "base_layer"):
                continue
            layer, part, projection = int(found.group(1)), found.group(2), found.group(3)
            targets.setdefault(_onnx_name(layer, part, projection, fused), []).append((projection, module))
        if not targets:
            return None
        order = {"q_proj": 0, "k_proj": 1, "v_proj": 2}
        for onnx_name, members in targets.items():
            members.sort(key=lambda member: order.get(member[0], 0))
            if onnx_name.endswith("qkv_proj.MatMul") and [m[0] for m in members] != ["q_proj", "k_proj", "v_proj"]:
                return None  # a fused layer with only some of its parts adapted: written in full instead
            if any(onnx_name + suffix not in shapes for suffix in suffixes):
                return None
        return cls(precision, targets, shapes)

    def initializers(self) -> dict[str, np.ndarray]:
        """Every adapted layer's initializers from the policy's weights as they are now (adapter merged in the
        arithmetic only: the policy is not touched)."""
        import torch

        out: dict[str, np.ndarray] = {}
        with torch.no_grad():
            for onnx_name, members in self.targets.items():
                parts = []
                for _, module in members:
                    weight = module.base_layer.weight.detach().float()
                    if not getattr(module, "merged", False):
                        for adapter in module.active_adapters:
                            if adapter in getattr(module, "lora_A", {}):
                                weight = weight + module.get_delta_weight(adapter).float()
                    parts.append(weight)
                weight = torch.cat(parts, dim=0).cpu().numpy() if len(parts) > 1 else parts[0].cpu().numpy()
                if self.precision == "fp32":
                    out[onnx_name + ".weight"] = np.ascontiguousarray(weight.T)
                else:
                    values, scales = quantize_int8_blocks(weight)
                    out[onnx_name + ".weight_Q8"] = values
                    out[onnx_name + ".weight_scales"] = scales
        for name, array in out.items():
            if tuple(array.shape) != self.shapes[name]:
                raise ValueError(f"{name}: the policy's weight gives shape {array.shape}, the graph holds "
                                 f"{self.shapes[name]}")
        return out
