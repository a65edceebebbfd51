"""The lab's CPU passes over a vocabulary (engine/quant/csrc/stats.cpp): a step record's
numbers (``measure.native_columns``) against the torch operations they replace
(``measure.step_columns``), finiteness against ``isfinite``, a sampler stage's cuts against
``apply_chain``'s own, and a session's records with and without them."""

from __future__ import annotations

import math

import pytest
import torch

from engine.decode import measure
from engine.decode.session import GenerationSession
from engine.quant import native
from engine.sampling.base import NEG_INF, LogitsProcessor
from engine.sampling.build import build_chain
from engine.sampling.chain import apply_chain
from engine.sampling.settings import SamplerSettings

pytestmark = pytest.mark.skipif(not native.usable(), reason=f"not built: {native.why_not()}")
lab = torch.ops.decoding_lab
INT_COLUMNS = [0, 3, 4, 7]  # token, rank, survivors, finite


def _torch_way(logits, probs, tokens, n, cut=None, finite=None) -> torch.Tensor:
    columns = measure.step_columns(logits, probs, tokens, n, cut, finite)
    return torch.cat([c.double() for c in columns], 1)


def _rows(seed: int, rows: int, vocab: int, spread: float = 4.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * spread
    logits[:, ::7] -= 9.0  # a skewed distribution, as a model's
    return logits, g


def _agree(got: torch.Tensor, want: torch.Tensor, n: int) -> None:
    ints = INT_COLUMNS + list(range(8, 8 + n)) + list(range(8 + 3 * n, 8 + 4 * n))
    assert torch.equal(got[:, ints], want[:, ints])  # ids, ranks, counts, cuts: exactly
    floats = [c for c in range(got.shape[1]) if c not in ints + [5, 6]]
    # float32 rounding: torch's float32 sums over 49,152 terms are off by up to ~5e-6
    torch.testing.assert_close(got[:, floats], want[:, floats], rtol=2e-5, atol=1e-12)
    # the entropies: torch's loses a confident row's small terms beside the top's 1 (ours
    # keeps them: test_a_confident_rows_entropy_keeps_its_small_terms), ~1e-7 bits
    torch.testing.assert_close(got[:, [5, 6]], want[:, [5, 6]], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("vocab", [5, 300, 49152])
@pytest.mark.parametrize("n", [0, 1, 20])
def test_a_records_numbers_are_the_torch_operations_numbers(vocab, n):
    n = min(n, vocab)
    logits, g = _rows(vocab + n, 3, vocab)
    scores = logits / 0.8
    scores[0, torch.randperm(vocab, generator=g)[: vocab // 2]] = NEG_INF  # a cut half
    scores[2, 1:] = NEG_INF  # one token left: greedy's row
    scores[2, 0] = 1.0
    probs = scores.softmax(-1)
    cut = torch.where(scores == NEG_INF, 2, -1).to(torch.int16)
    tokens = torch.tensor([1, vocab - 1, 0])
    for c, f in ((None, None), (cut, torch.tensor([True, False, True]))):
        got = measure.native_columns(logits, probs, tokens, n, c, f)
        assert got is not None and got.dtype == torch.float64
        _agree(got, _torch_way(logits, probs, tokens, n, c, f), n)


def test_ties_go_to_the_lower_id_and_rank_counts_only_the_more_probable():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0, -2.0]])
    probs = logits.softmax(-1)
    got = measure.native_columns(logits, probs, torch.tensor([4]), 4, None, None)
    assert got[0, 8:12].tolist() == [1.0, 2.0, 4.0, 0.0]
    assert got[0, 3] == 1.0  # ranked first: nothing is more probable than token 4
    assert got[0, 12] == got[0, 13] == got[0, 14]


def test_bfloat16_logits_ties_come_in_the_same_order_either_way():
    """A bfloat16 model's logits tie often (9.3125 twice in a row of 49,152): both ways list
    tied tokens by id (torch.topk alone leaves them in any order)."""
    g = torch.Generator().manual_seed(7)
    logits = (torch.randn(8, 49152, generator=g) * 2.5).bfloat16().float()
    probs = logits.softmax(-1)
    tokens = torch.zeros(8, dtype=torch.long)
    got = measure.native_columns(logits, probs, tokens, 20, None, None)
    want = _torch_way(logits, probs, tokens, 20)
    raw = got[:, 8 + 20 : 8 + 40]
    assert bool((raw[:, 1:] == raw[:, :-1]).any())  # ties inside the top 20
    top = logits.topk(21).values
    keep = top[:, 19] != top[:, 20]  # a tie across the 20th place may admit either token
    assert int(keep.sum()) >= 4
    assert torch.equal(got[keep, 8:28], want[keep, 8:28])


def test_a_confident_rows_entropy_keeps_its_small_terms():
    """One logit 22 above 299 others: the entropy is ~1e-6 bits, all of it from terms under
    6e-8 beside the top's 1 (float64 as the reference)."""
    logits = torch.zeros(1, 300)
    logits[0, 17] = 22.0
    got = measure.native_columns(logits, logits.softmax(-1), torch.tensor([17]), 3, None, None)
    p = logits.double().softmax(-1)[0]
    exact = float(-(p * p.log()).sum() / math.log(2))
    assert got[0, 5].item() == pytest.approx(exact, rel=1e-4)


def test_tiny_and_subnormal_probabilities_are_the_exact_ones():
    """A spread of 100 nats: the least probable tokens are float32 subnormals (e^-100 is
    3.7e-44); the op's exp and log hold there too (float64 as the reference)."""
    logits = torch.linspace(0.0, -100.0, 4000).reshape(1, -1)
    probs = (logits * 0.3).softmax(-1)
    got = measure.native_columns(logits, probs, torch.tensor([3999]), 4000, None, None)
    exact = logits.double().softmax(-1)[0]
    raw = got[0, 8 + 4000 : 8 + 8000]
    assert got[0, 8 : 8 + 4000].tolist() == list(range(4000))
    torch.testing.assert_close(raw, exact.float().double(), rtol=3e-6, atol=2e-45)
    h = float(-(exact * exact.log()).sum() / math.log(2))
    assert got[0, 5].item() == pytest.approx(h, rel=1e-5)
    p = probs.double()[0]
    assert got[0, 6].item() == pytest.approx(float(-(p * p.log()).sum() / math.log(2)), rel=1e-5)


def test_a_broken_row_is_flagged_and_still_unpacks():
    logits = torch.randn(3, 50)
    logits[0, 7] = float("nan")
    logits[1, 3] = float("inf")
    logits[2, :] = NEG_INF
    probs = torch.full((3, 50), 1 / 50)
    got = measure.native_columns(logits, probs, torch.tensor([0, 1, 2]), 5, None, None)
    assert got[:, 7].tolist() == [0.0, 0.0, 0.0]
    assert bool(got[:, 1].isnan().all()) and bool(got[:, 5].isnan().all())
    for row in got.tolist():
        m = measure.unpack_row(row, 5, False)
        assert not m.finite and len(set(m.top_ids)) == 5 and m.survivors == 50


def test_what_does_not_fit_is_refused_or_left_to_torch():
    logits, probs = torch.randn(2, 10), torch.full((2, 10), 0.1)
    with pytest.raises(RuntimeError, match="not in the vocabulary"):
        measure.native_columns(logits, probs, torch.tensor([1, 10]), 3, None, None)
    none = torch.empty(0)
    with pytest.raises(RuntimeError, match="top 11"):
        lab.step_stats(logits, probs, torch.tensor([0, 1]), 11, none, none)
    with pytest.raises(RuntimeError, match="shaped as the logits"):
        lab.step_stats(logits, probs[:1], torch.tensor([0, 1]), 3, none, none)
    assert measure.native_columns(logits.double(), probs.double(), torch.tensor([0, 1]), 3,
                                  None, None) is None  # fmt: skip
    # measure() takes either way to the same records
    a = measure.measure(logits.double(), probs.double(), torch.tensor([0, 1]), 3)
    b = measure.measure(logits, probs, torch.tensor([0, 1]), 3)
    assert [m.top_ids for m in a] == [m.top_ids for m in b]


def test_finiteness_is_isfinites():
    x = torch.randn(6, 1000)
    x[1, 5], x[2, 999], x[3, 0], x[4, 500] = float("nan"), float("inf"), NEG_INF, 3e38
    want = torch.isfinite(x).all(-1)
    assert torch.equal(lab.all_finite(x), want)
    assert torch.equal(measure.all_finite(x), want)


class _EmptyRow(LogitsProcessor):
    """Cuts every token of row 0 (a stage the chain must skip there, or, binding, obey)."""

    def __init__(self, binding: bool) -> None:
        self.binding = binding

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        out[0] = NEG_INF
        return out

    def stops(self) -> list[str | None]:
        return ["nothing fits"]


@pytest.mark.parametrize("binding", [False, True])
def test_a_stages_cuts_are_apply_chains_own(binding, monkeypatch):
    settings = SamplerSettings(temperature=0.7, top_k=40, top_p=0.9, min_p=0.02)
    stages = [*build_chain(settings).stages[:2], _EmptyRow(binding),
              *build_chain(settings).stages[2:]]  # fmt: skip
    scores, _ = _rows(11, 3, 5000)
    ids = torch.empty((3, 0), dtype=torch.long)
    got = apply_chain(stages, ids, scores.clone(), track=True)
    monkeypatch.setattr(native, "takes_rows", lambda *_: False)
    want = apply_chain(stages, ids, scores.clone(), track=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert int((got[1] >= 0).sum()) > 3 * 4000  # the stages did cut
    assert bool((got[0][0] == NEG_INF).all()) == binding  # skipped, or obeyed
    columns = scores.t().contiguous().t()  # the same numbers, column-major: cut made contiguous
    assert torch.equal(apply_chain(stages, ids, columns, track=True)[1], want[1])


def test_the_op_refuses_a_cut_table_it_cannot_mark():
    before, after = torch.randn(2, 8), torch.full((2, 8), NEG_INF)
    with pytest.raises(RuntimeError, match="int16"):
        lab.stage_cut(before, after, torch.zeros(2, 8, dtype=torch.int32), 0, False)
    with pytest.raises(RuntimeError, match="does not fit int16"):
        lab.stage_cut(before, after, torch.zeros(2, 8, dtype=torch.int16), 40000, False)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_sessions_records_are_the_same_either_way(temperature, monkeypatch):
    from test_quant import quant_sized

    model = quant_sized("llama")
    settings = SamplerSettings(temperature=temperature, top_k=50, max_new_tokens=12, seed=5)

    def run():
        session = GenerationSession(model, [3, 7, 11, 2], settings, eos_token_ids=[], top_n=8)
        return list(session.stream())

    ours = run()
    monkeypatch.setattr(native, "takes_rows", lambda *_: False)
    theirs = run()
    assert [s.token_id for s in ours] == [s.token_id for s in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a.rank == b.rank and a.survivors == b.survivors
        assert [c.token_id for c in a.candidates] == [c.token_id for c in b.candidates]
        assert [c.cut_by for c in a.candidates] == [c.cut_by for c in b.candidates]
        assert a.raw_prob == pytest.approx(b.raw_prob, rel=1e-5)
        assert a.entropy == pytest.approx(b.entropy, rel=1e-5, abs=1e-6)
        assert a.entropy_raw == pytest.approx(b.entropy_raw, rel=1e-5)
