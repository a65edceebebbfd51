"""The CPU forms of the per-token vocabulary operations (engine.decode.measure.entropy_bits
and finite_rows) against the torch operations they stand for: -xlogy(p, p) summed, and
isfinite(...).all() with torch.where."""

from __future__ import annotations

import pytest
import torch

from engine.decode.measure import LN2, entropy_bits, finite_rows

SPECIAL = [float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 1e-45, -3.5]


def _rows(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4099, generator=g) * 4
    x[0, : len(SPECIAL)] = torch.tensor(SPECIAL)
    return x.to(dtype)


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
