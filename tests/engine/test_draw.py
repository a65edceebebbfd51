"""``engine.sampling.chain.draw`` against ``torch.multinomial`` (the draw transformers' sampling
makes): the same token and the same generator state after, on peaked, flat and truncated rows
of the vocabulary sizes the lab meets, on the CPU and (where there is one) on CUDA."""

import pytest
import torch

from engine.sampling.chain import draw

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def rows(vocab: int, count: int):
    g = torch.Generator().manual_seed(vocab)
    for i in range(count):
        x = torch.randn(vocab, generator=g) * (0.5, 3.0, 12.0)[i % 3]  # flat .. peaked
        if i % 4 == 0:  # truncated: most of the row cut, as top-k / top-p leave it
            x[torch.rand(vocab, generator=g) < 0.95] = -float("inf")
            x[int(torch.randint(vocab, (1,), generator=g))] = 0.0
        yield torch.softmax(x, -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab", [2, 50, 49152, 151936])
def test_draw_is_multinomial_token_for_token(device, vocab):
    tokens = []
    for i, p in enumerate(rows(vocab, 60)):
        p = p.to(device)
        ours = torch.Generator(device=device).manual_seed(1000 + i)
        theirs = torch.Generator(device=device).manual_seed(1000 + i)
        got = draw(p, ours)
        want = torch.multinomial(p, 1, generator=theirs)
        assert got.shape == want.shape == (1,) and got.dtype == want.dtype
        assert int(got) == int(want), i
        assert torch.equal(ours.get_state(), theirs.get_state()), i
        tokens.append(int(got))
    if vocab > 2:  # the draws differ from row to row: not a constant
        assert len(set(tokens)) > 10


def test_draw_follows_the_distribution():
    """Not the argmax: a 0.7 / 0.3 row gives the second token about 30% of the time."""
    p = torch.tensor([0.7, 0.3])
    g = torch.Generator().manual_seed(5)
    share = sum(int(draw(p, g)) for _ in range(4000)) / 4000
    assert 0.27 < share < 0.33
