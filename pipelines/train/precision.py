"""bf16 mixed precision: where it is used (``auto``) and where this CPU has it natively."""

from __future__ import annotations

from typing import Any


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX tiles), where autocast to bf16 makes
    SFT steps ~1.3x faster (bench/sft_precision.py); elsewhere bf16 is emulated and slower than fp32."""
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def use_bf16(choice: Any, *, cuda: bool | None = None) -> bool:
    """bf16 mixed precision? ``auto``: on a CUDA GPU that supports it, else on a CPU with native bf16
    (``cpu_has_native_bf16``); ``cuda`` says which device trains (default: CUDA when available)."""
    import torch

    if choice != "auto":
        return bool(choice)
    if cuda is None:
        cuda = torch.cuda.is_available()
    if cuda:
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return cpu_has_native_bf16()
