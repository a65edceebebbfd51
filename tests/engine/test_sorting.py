"""engine.sampling.sorting.stable_sort gives exactly what torch.sort(stable=True) gives: the
same values and the same order, ties included, on rows long enough for its radix route."""

from __future__ import annotations

import pytest
import torch

from engine.sampling.sorting import RADIX_MIN, stable_sort


def _row(seed: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, n, generator=g) * 3
    x[:, ::7] = x[:, ::7].round()  # many ties
    x[0, torch.randint(0, n, (n // 10,), generator=g)] = float("-inf")
    x[1, :50] = -0.0
    x[1, 50:100] = 0.0
    x[1, 100] = float("inf")
    x[0, 3] = float("nan")
    x[1, 4] = -float("nan")  # sign bit set: torch.sort still puts it with the largest
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("n", [RADIX_MIN, 49152, 1000])
def test_same_values_and_order_as_torch_sort(dtype, descending, n):
    for seed in range(3):
        x = _row(seed, n, dtype)
        want_v, want_i = torch.sort(x, dim=-1, descending=descending, stable=True)
        got_v, got_i = stable_sort(x, descending=descending)
        assert torch.equal(got_i, want_i)
        assert torch.equal(
            got_v.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
            want_v.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
        )


def test_all_ties_keep_index_order():
    x = torch.zeros(1, RADIX_MIN + 5)
    x[0, ::2] = -0.0
    _, order = stable_sort(x, descending=True)
    assert torch.equal(order[0], torch.arange(x.shape[-1]))
