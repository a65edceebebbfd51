"""int8 and int4 weights (engine.quant): the kernels multiply by exactly the weights the format
defines, the formats round no worse than their step allows, the fast step and model.forward
agree on a quantised model of every fast-path family, and the quantised model stays close to
its float32 self."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from engine.quant.apply import quantize_model
from engine.quant.formats import (
    COMPUTE,
    GROUP,
    dequantize_int4,
    dequantize_int8,
    pack_int4,
    quantize_int4,
    quantize_int8,
)
from engine.quant.linear import QuantLinear
from engine.step.fastpath import FastStepper, fast_stepper_or_none
from engine.step.kernels import mm
from engine.step.stepper import ModelStepper
from family_models import configs

PROMPT = [5, 17, 33, 90, 41, 7, 3, 9, 120, 64]
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "gpt2"]
# bfloat16 keeps 8 significant bits: the kernels round their float32 sums to it once, so a
# product is within half a unit in the last place (2^-9 relative) of the exact one; 2^-8
# leaves room for the float32 accumulation order. atol covers results near zero.
RTOL, ATOL = 2.0**-8, 1e-3


def _weights(n: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[:, :8] += 0.3  # a few wide columns, so groups and rows differ in range
    return w


def test_int8_rounds_within_half_a_step_of_each_row():
    w = _weights(64, 96)
    q, s = quantize_int8(w)
    err = (dequantize_int8(q, s) - w).abs()
    # half a step of the row's scale, plus the scale's own bfloat16 rounding times 127 steps
    bound = s.float()[:, None] * (0.5 + 127 * 2.0**-8)
    assert (err <= bound).all()
    assert q.dtype == torch.int8 and s.dtype == COMPUTE


def test_int4_rounds_within_half_a_step_of_each_group():
    w = _weights(64, 128)
    u, sz = quantize_int4(w)
    assert int(u.max()) <= 15 and sz.shape == (128 // GROUP, 64, 2)
    err = (dequantize_int4(u, sz) - w).abs().reshape(64, -1, GROUP)
    scale = sz[..., 0].float().t()[..., None]  # [N, groups, 1]
    # half a step, plus the zero's bfloat16 rounding (2^-9 of the group's largest weight)
    reach = w.abs().reshape(64, -1, GROUP).amax(-1, keepdim=True)
    assert (err <= 0.5 * scale + reach * 2.0**-8 + 1e-7).all()


@pytest.mark.parametrize("rows", [3, 1])
def test_int8_matmul_equals_the_dequantised_reference(rows):
    w = _weights(96, 128)
    q, s = quantize_int8(w)
    x = torch.randn(rows, 128).to(COMPUTE)
    want = x.float() @ dequantize_int8(q, s).t()
    got = mm(x, q, s, False)
    assert got.dtype == COMPUTE
    torch.testing.assert_close(got.float(), want, rtol=RTOL, atol=ATOL)
    # a view that does not start on the kernel's 32-byte boundary is copied, not misread
    wide = torch.randn(rows, 129).to(COMPUTE)
    torch.testing.assert_close(
        mm(wide[:, 1:], q, s, False).float(), wide[:, 1:].float() @ dequantize_int8(q, s).t(),
        rtol=RTOL, atol=ATOL,
    )  # fmt: skip


@pytest.mark.parametrize("rows", [3, 1])
def test_int4_matmul_equals_the_dequantised_reference(rows):
    w = _weights(128, 256)
    u, sz = quantize_int4(w)
    x = torch.randn(rows, 256).to(COMPUTE)
    want = x.float() @ dequantize_int4(u, sz).t()
    got = mm(x, pack_int4(u), sz, False)
    torch.testing.assert_close(got.float(), want, rtol=RTOL, atol=ATOL)
    # the reference can tell a wrong layout: the unpacked integers give something else
    assert not torch.allclose(mm(x, u[:, : 256 // 2].contiguous(), sz, False).float(), want)


def test_quant_linear_dequantised_weight_is_what_the_kernel_multiplies_by():
    w = _weights(128, 64)
    u, sz = quantize_int4(w)
    layer = QuantLinear(pack_int4(u), sz, None, 64)
    torch.testing.assert_close(layer.weight.float(), dequantize_int4(u, sz), rtol=RTOL, atol=0)


def quant_sized(family: str, seed: int = 0) -> torch.nn.Module:
    """The family's tiny model at shapes the int4 layout fuses (q/k/v rows in 64s)."""
    cfg = configs()[family]()
    cfg.initializer_range = 0.02  # as a trained model's spread, not the tiny models' wide one
    if family == "gpt2":
        cfg.n_embd = 128
    else:
        cfg.hidden_size, cfg.intermediate_size, cfg.head_dim = 128, 256, 32
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    model.generation_config.pad_token_id = 0
    return model.eval()


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("family", FAMILIES)
def test_fast_step_agrees_with_the_quantised_model_forward(family, kind):
    model = quant_sized(family)
    summary = quantize_model(model, kind)
    assert not summary.kept and sum(summary.origins.values()) > 0
    fast, ref = FastStepper(model), ModelStepper(model, use_cache=False)
    assert fast.dtype == COMPUTE
    for seq in (PROMPT, PROMPT + [3], PROMPT[:4] + [8]):
        # both multiply through engine.step.kernels.mm; the rest is bfloat16 in either
        torch.testing.assert_close(fast.logits(seq, keep=2), ref.logits(seq, keep=2),
                                   atol=0.1, rtol=0.05)  # fmt: skip


# KL(fp32 || quantised) of the next-token distribution, averaged over the prompt's positions,
# on these random models (weights spread 0.02 as an initialised model's): measured 5e-6 to
# 1.5e-5 for int8 and 4e-4 to 1.5e-3 for int4 across the four families; the bounds leave 7x.
# int8 rounds each weight within 1/254 of its row's largest, int4 within 1/30 of its group's
# range, so int4 must also land further from float32 than int8 does.
KL_BOUND = {"int8": 1e-4, "int4": 1e-2}


def _kl_to_float32(family: str, kind: str) -> float:
    model = quant_sized(family)
    want = ModelStepper(model, use_cache=False).logits(PROMPT, keep=len(PROMPT))
    quantize_model(model, kind)
    got = FastStepper(model).logits(PROMPT, keep=len(PROMPT))
    kl = F.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="none")
    return float(kl.sum(-1).mean())


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3", "gpt2"])
def test_quantised_distribution_stays_close_to_float32(family):
    kl8, kl4 = _kl_to_float32(family, "int8"), _kl_to_float32(family, "int4")
    assert 0 < kl8 < KL_BOUND["int8"]
    assert kl8 < kl4 < KL_BOUND["int4"]


def test_misaligned_int4_layers_leave_the_fast_path_with_a_reason(caplog):
    cfg = configs()["llama"]()  # the family's usual tiny shapes: k/v rows of 16
    torch.manual_seed(0)
    small = AutoModelForCausalLM.from_config(cfg).eval()
    quantize_model(small, "int4")
    with caplog.at_level("INFO"):
        assert fast_stepper_or_none(small) is None
    assert "quantised" in caplog.text
    ids = ModelStepper(small).logits(PROMPT)  # model.forward still runs the int4 kernels
    assert torch.isfinite(ids).all()


def test_quantising_twice_or_off_the_cpu_is_refused():
    model = quant_sized("llama")
    quantize_model(model, "int8")
    with pytest.raises(ValueError, match="already"):
        quantize_model(model, "int4")
    with pytest.raises(ValueError, match="kind"):
        quantize_model(quant_sized("llama"), "int3")


def test_int8_weights_off_the_kernel_alignment_are_copied_not_crashed_on():
    # a tensor read from a file (safetensors keeps 8-byte offsets) can start anywhere
    w = _weights(64, 128)
    q, s = quantize_int8(w)
    raw = torch.empty(q.numel() + 8, dtype=torch.int8)
    raw[8:] = q.reshape(-1)
    odd = raw[8:].view(64, 128)
    assert odd.data_ptr() % 64 != 0
    layer = QuantLinear(odd, s, None, 128)
    assert layer.qweight.data_ptr() % 64 == 0
    x = torch.randn(5, 128)
    want = x.to(COMPUTE).float() @ dequantize_int8(q, s).t()
    torch.testing.assert_close(layer(x).float(), want, rtol=RTOL, atol=ATOL)
