"""LoRA on the last blocks (``sft.lora_layers``, ``rl.<stage>.lora_layers``): which modules get adapters, and that the
cut below the first adapted block stops backward there without changing the adapted blocks' gradients."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipelines.errors import ConfigError
from pipelines.train.lora import (
    adapted_blocks,
    block_linear_names,
    cut_gradient_below,
    decoder_blocks,
    lora_config,
    merged_adapter,
)
from tests.model_support import build_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random llama of 3 blocks (the shared tiny one has 2: too few to tell 'the last N' from 'all but the first')."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    two = build_tiny_llama(tmp_path_factory.mktemp("tiny") / "two")
    config = LlamaConfig.from_pretrained(two)
    config.num_hidden_layers = 3
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "three"
    LlamaForCausalLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(two).save_pretrained(folder)
    return folder


def _peft_model(folder: Path, layers: int | None, *, cut: bool, input_grads: bool = True):  # noqa: ANN202
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if input_grads:  # what trainable token rows or reentrant checkpointing do: the embeddings' output needs a gradient
        model.enable_input_require_grads()
    config = lora_config(model, r=4, alpha=8, layers=layers)
    if cut:
        cut_gradient_below(model, layers)
    peft_model = get_peft_model(model, config)
    torch.manual_seed(1)
    for name, param in peft_model.named_parameters():  # LoRA's B starts at zero: give every adapter a gradient path
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.02)
    return peft_model


def _adapted(model) -> set[int]:  # noqa: ANN001
    return {int(name.split(".layers.")[1].split(".")[0]) for name, p in model.named_parameters()
            if p.requires_grad and ".layers." in name}


def test_lora_config_adapts_every_linear_layer_of_the_last_blocks(tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert len(decoder_blocks(model)) == 3
    assert block_linear_names(model) == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    assert adapted_blocks(model, None) == [0, 1, 2] and adapted_blocks(model, 2) == [1, 2]
    assert _adapted(_peft_model(tiny, None, cut=False)) == {0, 1, 2}
    last_two = _peft_model(tiny, 2, cut=False)
    assert _adapted(last_two) == {1, 2}
    # every linear layer of an adapted block, as all-linear would: 7 per block, A and B each
    assert sum(1 for name, p in last_two.named_parameters() if p.requires_grad) == 2 * 7 * 2
    assert decoder_blocks(last_two) is decoder_blocks(model) or len(decoder_blocks(last_two)) == 3  # through PEFT
    with pytest.raises(ConfigError, match="4 blocks asked, the model has 3"):
        lora_config(model, r=4, alpha=8, layers=4)


def test_the_cut_stops_backward_below_the_first_adapted_block_and_keeps_its_gradients(tiny: Path) -> None:
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    grads, reached = {}, {}
    for cut in (False, True):
        model = _peft_model(tiny, 2, cut=cut)
        below = []  # the output of block 0, the block under the first adapted one
        hook = decoder_blocks(model)[0].register_forward_hook(lambda _m, _a, out, keep=below: keep.append(out))
        loss = model(input_ids=ids, labels=ids).loss
        hook.remove()
        hidden = below[0][0] if isinstance(below[0], tuple) else below[0]
        seen = []
        hidden.register_hook(lambda g, seen=seen: seen.append(g))
        loss.backward()
        reached[cut] = bool(seen)
        grads[cut] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    assert reached == {False: True, True: False}  # without the cut, backward runs on through block 0; with it, not
    assert grads[False].keys() == grads[True].keys()
    for name, grad in grads[True].items():  # the adapted blocks' gradients are the same either way
        assert grad.abs().sum() > 0, name
        assert torch.allclose(grad, grads[False][name], atol=1e-6), name


def test_the_cut_works_under_reentrant_gradient_checkpointing(tiny: Path) -> None:
    """Reentrant checkpointing gives a block's parameters a gradient only when the block's input needs one: the cut
    makes the input a leaf that does, so the first adapted block still learns."""
    ids = torch.randint(0, 300, (1, 16), generator=torch.Generator().manual_seed(1))
    model = _peft_model(tiny, 2, cut=True, input_grads=False)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    first = [p.grad for n, p in model.named_parameters() if p.requires_grad and ".layers.1." in n]
    assert first and all(g is not None and g.abs().sum() > 0 for g in first)


def test_the_cut_leaves_generation_alone(tiny: Path) -> None:
    model = _peft_model(tiny, 2, cut=True).eval()
    plain = _peft_model(tiny, 2, cut=False).eval()
    ids = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model.generate(input_ids=ids, max_new_tokens=5, do_sample=False),
                           plain.generate(input_ids=ids, max_new_tokens=5, do_sample=False))
    assert cut_gradient_below(model, None) is None  # every block adapted: nothing to cut


def test_rollouts_generate_from_merged_adapters_and_leave_the_weights_as_they_were(tiny: Path) -> None:
    """RL's transformers rollouts run the policy with its adapters merged (``merged_adapter``): the same greedy
    tokens as the unmerged policy, the adapters back in place afterwards, the base weights unchanged up to rounding."""
    model = _peft_model(tiny, None, cut=False, input_grads=False).eval()
    prompt = torch.tensor([[5, 17, 42, 8, 99, 3]])
    base = {name: p.detach().clone() for name, p in model.named_parameters() if "base_layer" in name}
    options = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        unmerged = model.generate(input_ids=prompt, **options)
        with merged_adapter(model) as merged:
            assert merged and all(m.merged for m in model.modules() if hasattr(m, "lora_A"))
            changed = {name for name, p in model.named_parameters() if "base_layer" in name
                       and not torch.equal(p, base[name])}
            from_merged = model.generate(input_ids=prompt, **options)
            with merged_adapter(model) as again:  # nested: already merged, left alone
                assert not again
        assert changed  # the adapters were folded into the base weights
        assert torch.equal(from_merged, unmerged)
        assert not any(m.merged for m in model.modules() if hasattr(m, "lora_A"))
        after = dict(model.named_parameters())
        assert max(float((after[name] - w).abs().max()) for name, w in base.items()) < 1e-6
        assert torch.equal(model.generate(input_ids=prompt, **options), unmerged)
    from transformers import AutoModelForCausalLM

    with merged_adapter(AutoModelForCausalLM.from_pretrained(tiny)) as merged:  # no adapters: nothing to merge
        assert not merged
