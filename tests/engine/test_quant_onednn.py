"""The int8 output head on oneDNN's int8 matmul (engine.quant.onednn): two int8 planes of
activations against a float64 product of the same integers, the plain integers kept, the
model's two routes (fast step, model.forward) on the same product, and the ways it is not
used (switched off, a kernel that saturates)."""

from __future__ import annotations

import pytest
import torch
from test_quant import PROMPT, _weights, quant_sized

from engine.quant import native, onednn
from engine.quant.apply import quantize_model
from engine.quant.formats import COMPUTE, dequantize_int8, quantize_int8
from engine.step.fastpath import FastStepper
from engine.step.kernels import int8_onednn, mm
from engine.step.stepper import ModelStepper

needs_onednn = pytest.mark.skipif(
    not onednn.usable(), reason="no oneDNN int8 matmul with VNNI / AMX on this CPU"
)


@pytest.fixture(autouse=True)
def _without_the_labs_kernels(monkeypatch):
    """The head goes to oneDNN where the lab's own kernels do not run (engine.quant.native):
    these tests switch them off to check that route."""
    monkeypatch.setenv(native.SWITCH, "0")
    native.usable.cache_clear()
    yield
    monkeypatch.delenv(native.SWITCH, raising=False)
    native.usable.cache_clear()


def _row_with_outlier(rows: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g)
    x[:, 3] = 12.0  # a hidden state's largest element is 7-18x its RMS
    return x.to(COMPUTE)  # what the head gets: the final norm's bfloat16 output


@needs_onednn
@pytest.mark.parametrize("rows", [1, 3])
def test_two_planes_are_within_their_bound_and_closer_than_the_bfloat16_kernel(rows):
    q, s = quantize_int8(_weights(160, 256))
    x = _row_with_outlier(rows, 256, rows)
    w = dequantize_int8(q, s).double()
    want = x.double() @ w.t()
    got = int8_onednn(x, onednn.pack(q), s.float())
    assert got.dtype == torch.float32 and got.shape == (rows, 160)
    # each element of x is carried to within r / 508 (r = max|x| / 127); the products of
    # integers are exact, so the output is off by at most sum_k |w| r / 508, plus float32's
    # rounding of the sums
    r = x.float().abs().amax(-1, keepdim=True).double() / 127
    bound = w.abs().sum(-1) * r / 508 + want.abs() * 2e-6 + 1e-6
    assert ((got.double() - want).abs() <= bound).all()
    bf16 = mm(x, q, s, False).double()  # PyTorch's kernel, output rounded to bfloat16
    assert (got.double() - want).abs().max() < (bf16 - want).abs().max() / 4


@needs_onednn
def test_a_row_the_two_planes_carry_exactly_comes_out_as_the_exact_product():
    # x = r (hi + lo / 254) with r = 1/8 (the first element sets max|x| = 127 r): the planes
    # are hi and lo themselves, so only float32's rounding of the sums may differ
    q, s = quantize_int8(_weights(64, 256))
    g = torch.Generator().manual_seed(3)
    hi = torch.randint(-126, 127, (2, 256), generator=g).double()
    lo = torch.randint(-126, 127, (2, 256), generator=g).double()
    lo[0] = 126.0 * torch.sign(q[0].double())  # every lo aligned with row 0's weights
    hi[:, 0], lo[:, 0] = 127.0, 0.0
    x = ((hi + lo / 254) / 8).float()
    w = dequantize_int8(q, s).double()
    want = x.double() @ w.t()
    got = int8_onednn(x, onednn.pack(q), s.float()).double()
    scale = x.double().abs() @ w.abs().t()  # the size of the sums float32 rounds
    assert ((got - want).abs() <= 1e-6 * scale).all()


@needs_onednn
def test_rows_go_256_at_a_time_with_the_same_numbers_as_one_by_one():
    q, s = quantize_int8(_weights(64, 128))
    packed = onednn.pack(q)
    x = _row_with_outlier(600, 128, 5)  # 256 + 256 + 88 rows
    whole = int8_onednn(x, packed, s.float())
    one_by_one = torch.cat([int8_onednn(x[i : i + 1], packed, s.float()) for i in range(600)])
    assert whole.shape == (600, 64) and torch.equal(whole, one_by_one)


def test_it_is_used_wherever_the_cpu_has_int8_dot_products(monkeypatch):
    """The oneDNN tests above skip where it is not used: here a CPU that reports VNNI or AMX
    must use it, so a probe or a check gone wrong cannot switch it off unseen."""
    if not (onednn._cpu_has_int8_dot() and torch.backends.mkldnn.is_available()):
        pytest.skip("this CPU reports no VNNI / AMX int8 (or torch has no oneDNN)")
    monkeypatch.delenv("DECODING_LAB_ONEDNN_INT8", raising=False)
    onednn.usable.cache_clear()
    try:
        assert onednn.usable()
    finally:
        onednn.usable.cache_clear()


@needs_onednn
def test_packing_keeps_the_integers_and_rows_of_zeros_or_nan_stay_so():
    q, s = quantize_int8(_weights(96, 128))
    packed = onednn.pack(q)
    assert torch.equal(onednn.unpack(packed), q)
    x = torch.zeros(3, 128)
    x[1] = 1.0
    x[2, 5] = float("nan")
    y = int8_onednn(x, packed, s.float())
    assert torch.equal(y[0], torch.zeros(96)) and y[1].isfinite().all()
    assert y[2].isnan().all()  # a broken row stays visibly broken for the session's guard


@needs_onednn
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_quantised_heads_product_is_on_onednn_and_both_routes_share_it(kind):
    model = quant_sized("qwen2")
    summary = quantize_model(model, kind)
    head = model.get_output_embeddings()
    assert head.on_onednn and summary.head_on_onednn and "oneDNN" in summary.describe()
    q, s = head.stored()
    assert q.dtype == torch.int8 and q.shape == (head.out_features, head.in_features)
    assert s.dtype == COMPUTE and torch.equal(head.weight, dequantize_int8(q, s).to(COMPUTE))
    assert head.nbytes() == q.numel() + 4 * s.numel()  # the scales are read in float32
    fast, ref = FastStepper(model), ModelStepper(model, use_cache=False)
    assert fast.lm_head is head.qweight  # the step takes the module's packed weights
    for seq in (PROMPT, PROMPT[:4] + [8]):
        a, b = fast.logits(seq, keep=2), ref.logits(seq, keep=2)
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=0.1, rtol=0.05)  # the layers' bfloat16 differ
    # the head alone, on one input, is the same product whichever route calls it
    h = torch.randn(2, head.in_features).to(COMPUTE)
    assert torch.equal(head(h), mm(h, fast.lm_head, fast.spec.lm_head_s, False))


def test_switched_off_the_head_stays_on_pytorchs_kernel(monkeypatch):
    monkeypatch.setenv("DECODING_LAB_ONEDNN_INT8", "off")
    onednn.usable.cache_clear()
    try:
        assert not onednn.usable()
        model = quant_sized("llama")
        summary = quantize_model(model, "int8")
        head = model.get_output_embeddings()
        assert not head.on_onednn and not summary.head_on_onednn
        assert head.qweight.dtype == torch.int8 and head.scales.dtype == COMPUTE
        assert "oneDNN" not in summary.describe()
    finally:
        monkeypatch.delenv("DECODING_LAB_ONEDNN_INT8")
        onednn.usable.cache_clear()


@needs_onednn
def test_a_kernel_that_saturates_is_found_by_the_probe(monkeypatch):
    real = onednn.int8_onednn

    def saturating(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        y = real(x, w, s)
        return y.clamp(-0.9 * y.abs().amax(), 0.9 * y.abs().amax())  # the largest sums cut

    assert onednn._probe_agrees()
    monkeypatch.setattr(onednn, "int8_onednn", saturating)
    assert not onednn._probe_agrees()
    onednn.usable.cache_clear()
    try:
        assert not onednn.usable()
    finally:
        monkeypatch.undo()
        onednn.usable.cache_clear()
    assert onednn.usable()
