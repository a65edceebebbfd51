"""The CPU forms of the per-token vocabulary operations (engine.sampling.base.fill,
engine.decode.measure.entropy_bits and finite_rows) against the torch operations they stand
for: masked_fill bit for bit, -xlogy(p, p) summed, isfinite(...).all() with torch.where."""

from __future__ import annotations

import pytest
import torch

from engine.decode.measure import LN2, entropy_bits, finite_rows
from engine.sampling.base import fill

SPECIAL = [float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 1e-45, -3.5]


def _rows(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4099, generator=g) * 4
    x[0, : len(SPECIAL)] = torch.tensor(SPECIAL)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", [float("-inf"), 0.0, -0.0, 2.5, float("nan")])
def test_fill_is_masked_fill_bit_for_bit(dtype: torch.dtype, value: float) -> None:
    x = _rows(dtype)
    mask = torch.rand(x.shape, generator=torch.Generator().manual_seed(1)) > 0.5
    mask[0, : len(SPECIAL)] = torch.tensor([True, False, True, False, True, False, True])
    want, got = x.masked_fill(mask, value), fill(x, mask, value)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    # a transposed (not contiguous) input, and a mask that broadcasts (masked_fill's own path)
    assert torch.equal(fill(x.t(), mask.t(), value).float().nan_to_num(7.0),
                       x.t().masked_fill(mask.t(), value).float().nan_to_num(7.0))  # fmt: skip
    row = mask[:, :1]
    assert torch.equal(fill(x, row, value).float().nan_to_num(7.0),
                       x.masked_fill(row, value).float().nan_to_num(7.0))  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
def test_fill_on_integers(dtype: torch.dtype) -> None:
    x = torch.randint(-50, 50, (2, 999), dtype=dtype)
    mask = x > 7
    assert torch.equal(fill(x, mask, 3), x.masked_fill(mask, 3))
    assert torch.equal(fill(x, mask, -1), x.masked_fill(mask, -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_entropy_bits_is_minus_xlogy(dtype: torch.dtype) -> None:
    x = _rows(torch.float32).nan_to_num(0.0, posinf=0.0, neginf=-50.0)
    x[1, 100:] = float("-inf")  # most of the row removed, as after top-k
    x[2, 1:] = float("-inf")  # one-hot, as greedy
    p = torch.softmax(x, -1).to(dtype)
    want = (-torch.xlogy(p, p).sum(1, keepdim=True) / LN2).clamp_min(0) + 0.0
    got = entropy_bits(p)
    assert torch.equal(got, want)
    assert str(got[2, 0].item()) == "0.0"  # not -0.0
    logp = torch.log_softmax(x, -1).to(dtype)  # the log given: -inf where p is 0
    assert torch.allclose(entropy_bits(logp.exp(), logp), want, rtol=1e-2 if dtype ==
                          torch.bfloat16 else 1e-5)  # fmt: skip


def test_finite_rows() -> None:
    x = _rows(torch.float32).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    out, ok = finite_rows(x)
    assert out is x and ok.tolist() == [True, True, True]
    for bad in (float("nan"), float("inf"), float("-inf")):
        y = x.clone()
        y[1, 17] = bad
        out, ok = finite_rows(y)
        assert ok.tolist() == [True, False, True] == torch.isfinite(y).all(-1).tolist()
        assert torch.equal(out[1], torch.zeros_like(y[1])) and torch.equal(out[0], y[0])


def test_fill_refuses_what_masked_fill_refuses() -> None:
    """A mask that is not bool, and a value the dtype cannot hold, raise as masked_fill does
    (the bit select would write garbage or wrap around)."""
    x = torch.zeros(2, 8)
    for mask in (torch.ones(2, 8), torch.ones(2, 8, dtype=torch.uint8)):
        with pytest.raises(RuntimeError) as theirs:
            x.masked_fill(mask, 1.0)
        with pytest.raises(RuntimeError) as ours:
            fill(x, mask, 1.0)
        assert str(ours.value) == str(theirs.value)
    ones = torch.ones(2, 8, dtype=torch.bool)
    for t, value in ((torch.zeros(2, 8, dtype=torch.int16), 40000),
                     (torch.zeros(2, 8, dtype=torch.float16), 1e6)):  # fmt: skip
        with pytest.raises(RuntimeError):
            t.masked_fill(ones, value)
        with pytest.raises(RuntimeError):
            fill(t, ones, value)
