"""A greedy step's passes (engine.sampling.greedy, the lab's ops in engine/quant/csrc/greedy.cpp)
against torch's own operations: the first maximum (ties, NaN, rows of -inf), temperature 0's
scores, and one-hot probabilities where softmax gives one-hot rows, torch's softmax where it
does not; the whole greedy step in one op (measure.greedy_measured) against the chain, its
pick and measure; and a greedy session's records with and without the lab's ops."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.decode import measure
from engine.decode.session import GenerationSession
from engine.quant import native
from engine.sampling import greedy
from engine.sampling.base import NEG_INF
from engine.sampling.build import build_chain
from engine.sampling.settings import SamplerSettings

pytestmark = pytest.mark.skipif(not native.usable(), reason=f"not built: {native.why_not()}")
lab = torch.ops.decoding_lab
NAN, INF = float("nan"), float("inf")


def _rows(vocab: int) -> torch.Tensor:
    """Rows that reach every branch: plain, ties (first in one block and in two), a NaN and
    two, all -inf, +inf, one finite score left, two left, -inf around a tie."""
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(10, vocab, generator=g) * 4
    x[1, [3, vocab - 1]] = 50.0  # a tie in two blocks
    x[2, [vocab // 2, vocab // 2 + 1]] = 50.0  # a tie in one
    x[3, [vocab - 2]] = NAN
    x[4, [vocab // 3, 1]] = NAN  # two NaNs: the first
    x[5] = NEG_INF
    x[6, vocab // 4] = INF
    x[7] = NEG_INF
    x[7, vocab - 1] = -3.0  # one finite score left
    x[8] = NEG_INF
    x[8, [0, vocab - 1]] = 2.0  # two left, tied
    x[9, ::2] = NEG_INF
    return x


@pytest.mark.parametrize("vocab", [1, 7, 64, 65, 300, 49152])
def test_the_first_maximum_is_torch_maxs(vocab):
    x = _rows(vocab) if vocab > 4 else torch.randn(3, vocab)
    assert torch.equal(lab.first_max(x), x.max(-1).indices)
    for row in x:
        assert torch.equal(greedy.first_max(row), row.max(-1).indices.reshape(1))
    first = x.max(-1, keepdim=True).indices
    want = torch.full_like(x, NEG_INF).scatter_(-1, first, x.gather(-1, first))
    got = greedy.keep_first_max(x)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("vocab", [7, 300, 49152])
def test_probabilities_are_torch_softmaxs(vocab):
    """One-hot where every row keeps one finite score (bit for bit torch's softmax); any other
    row (two left, NaN, +inf, nothing left) sends the whole block to torch's softmax."""
    x = _rows(vocab)
    kept = greedy.keep_first_max(x)
    good = kept[[0, 1, 2, 7, 8, 9]]  # one finite score left in each
    one_hot = lab.one_hot_probs(good)
    assert one_hot.numel() > 0 and torch.equal(one_hot, F.softmax(good, -1))
    assert torch.equal(greedy.softmax(good[[3]]), F.softmax(good[[3]], -1))
    for bad in (x, kept[[5]], kept[[3]], kept[[6]]):  # many left; nothing; NaN; +inf
        assert lab.one_hot_probs(bad).numel() == 0
        got, want = greedy.softmax(bad), F.softmax(bad, -1)
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_the_ops_refuse_what_is_not_float32_rows():
    with pytest.raises(RuntimeError, match="float32"):
        lab.first_max(torch.zeros(2, 5, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="empty vocabulary"):
        lab.keep_first_max(torch.zeros(2, 0))
    # the torch way where the op does not take the rows
    x = torch.randn(2, 9, dtype=torch.float64)
    assert torch.equal(greedy.keep_first_max(x).isfinite().sum(-1), torch.tensor([1, 1]))


def test_a_greedy_sessions_records_are_the_same_with_torchs_operations(monkeypatch):
    from test_quant import quant_sized

    model = quant_sized("llama")
    settings = SamplerSettings(temperature=0, max_new_tokens=12, min_new_tokens=12)

    def run() -> list:
        return list(GenerationSession(model, [5, 17, 33], settings, eos_token_ids=[],
                                      top_n=8).stream())  # fmt: skip

    mine = run()
    monkeypatch.setattr(greedy, "_lab", lambda _x: False)
    theirs = run()
    assert [s.token_id for s in mine] == [s.token_id for s in theirs]
    for a, b in zip(mine, theirs, strict=True):
        assert a.prob == b.prob == 1.0 and a.survivors == b.survivors == 1
        assert [c.token_id for c in a.candidates] == [c.token_id for c in b.candidates]
        assert [c.prob for c in a.candidates] == [c.prob for c in b.candidates]
        assert [c.cut_by for c in a.candidates] == [c.cut_by for c in b.candidates]


@pytest.mark.parametrize("vocab", [3, 300, 49152])
@pytest.mark.parametrize("n", [0, 1, 20])
def test_the_whole_greedy_step_is_the_chains_pick_and_measure(vocab, n):
    """One op for temperature 0 alone: the same record as the chain (its cuts and one-hot
    probabilities), its pick and ``measure``, on plain rows, ties at the top, a confident
    row, and a broken source's row (zeros, its flag false)."""
    n = min(n, vocab)
    chain = build_chain(SamplerSettings(temperature=0), 4, [])
    assert chain.plain_greedy
    g = torch.Generator().manual_seed(vocab)
    rows = [torch.randn(1, vocab, generator=g) * 3 for _ in range(3)]
    rows[1][0, [0, vocab - 1]] = 40.0  # a tie at the top: the first
    rows[2][0, vocab // 2] = 90.0  # the rest far below
    rows.append(torch.zeros(1, vocab))  # finite_rows' stand-in for a broken row
    for i, logits in enumerate(rows):
        finite = torch.tensor([i != 3])
        probs, cut = chain.probs(None, logits)
        token = chain.pick(probs[0], torch.Generator())
        want = measure.measure(logits, probs, token, n, cut, finite)[0]
        got = measure.greedy_measured(logits, n, finite)
        assert got == want


def test_the_whole_greedy_step_is_for_temperature_0_alone():
    for settings in (SamplerSettings(temperature=0, top_k=5), SamplerSettings(temperature=0.7),
                     SamplerSettings(temperature=0, repetition_penalty=1.3)):  # fmt: skip
        assert not build_chain(settings, 4, [2]).plain_greedy
    assert measure.greedy_measured(torch.zeros(2, 9), 3, torch.tensor([True, True])) is None


@pytest.mark.parametrize("kind", ["float32", "int4"])
def test_a_greedy_sessions_records_are_the_same_whole_or_through_the_chain(kind, monkeypatch):
    from test_quant import quant_sized

    from engine.quant.apply import quantize_model

    model = quant_sized("qwen2")
    if kind == "int4":
        quantize_model(model, kind)
    settings = SamplerSettings(temperature=0, max_new_tokens=10, min_new_tokens=10)

    def run() -> list:
        session = GenerationSession(model, [5, 17, 33], settings, eos_token_ids=[], top_n=20,
                                    fast=True)  # fmt: skip
        steps = list(session.stream(5))
        session.force_next(9)  # a forced token goes through the chain
        return steps + list(session.stream(5))

    calls = []
    real = measure.greedy_measured
    monkeypatch.setattr("engine.decode.session.greedy_measured",
                        lambda *a, **k: calls.append(1) or real(*a, **k))  # fmt: skip
    whole = run()
    assert len(calls) == 9  # every step but the forced one
    monkeypatch.setattr(GenerationSession, "whole_greedy", False)
    chained = run()
    assert len(calls) == 9
    for a, b in zip(whole, chained, strict=True):
        assert a.token_id == b.token_id and a.candidates == b.candidates
        assert (a.prob, a.raw_prob, a.rank, a.survivors) == (b.prob, b.raw_prob, b.rank,
                                                              b.survivors)  # fmt: skip
        assert (a.entropy, a.entropy_raw, a.source, a.forced) == (b.entropy, b.entropy_raw,
                                                                  b.source, b.forced)  # fmt: skip


@pytest.mark.parametrize("vocab", [8192, 49157, 151936])
def test_the_greedy_steps_passes_on_every_thread_are_one_threads(vocab):
    """On a long vocabulary the greedy op's passes run on every thread, each over its own
    blocks: the same record, bit for bit, as on one thread; ties at the top on either side
    of the threads' split take the first; a row with a NaN or an inf, its flag read from the
    logits (no ``finite`` given), says so."""
    g = torch.Generator().manual_seed(vocab)
    rows = [torch.randn(1, vocab, generator=g) * s for s in (0.5, 3.0, 12.0)]
    rows.append(rows[0].clone())
    rows[3][0, [vocab // 2 - 3, vocab // 2 + 5, vocab - 1]] = 30.0  # a tie across the split
    rows.append(rows[1].clone())
    rows[4][0, [vocab - 1, vocab - 2]] = 30.0  # a tie at the end
    broken = [rows[0].clone() for _ in range(3)]
    broken[0][0, vocab - 7] = NAN
    broken[1][0, 3] = INF
    broken[2][0, vocab // 2] = -INF  # finite? no: -inf is not finite either
    threads = torch.get_num_threads()
    try:
        got = {}
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            got[n] = [repr(measure.greedy_measured(x, 20)) for x in rows + broken]
            with_flag = [measure.greedy_measured(x, 20, torch.tensor([True])) for x in rows]
            assert [repr(m) for m in with_flag] == got[n][: len(rows)]
    finally:
        torch.set_num_threads(threads)
    assert got[1] == got[2] == got[3]
    records = [measure.greedy_measured(x, 20) for x in rows + broken]
    assert [m.finite for m in records] == [True] * len(rows) + [False] * len(broken)
    assert records[3].token_id == vocab // 2 - 3 and records[4].token_id == vocab - 2
    chain = build_chain(SamplerSettings(temperature=0), 4, [])
    for x, m in zip(rows, records, strict=False):  # and the chain's own record
        probs, cut = chain.probs(None, x)
        token = chain.pick(probs[0], torch.Generator())
        assert m == measure.measure(x, probs, token, 20, cut, torch.tensor([True]))[0]


@pytest.mark.parametrize("kind", ["float32", "int4", "int8-aten"])
def test_the_steppers_greedy_row_is_the_ops_on_its_logits(kind, monkeypatch):
    """FastStepper.greedy_logits: the logits of ``logits`` and, from the same call of the
    lab's step, the greedy op's row on them, bit for bit; None where the head runs apart
    (PyTorch's int8 layout: packed for oneDNN) or the positions are not one new token."""
    from test_quant import quant_sized

    from engine.quant.apply import quantize_model
    from engine.step.fastpath import FastStepper

    if kind == "int8-aten":
        monkeypatch.setattr(native, "takes_int8", lambda *_: False)
    model = quant_sized("qwen2")
    if kind != "float32":
        quantize_model(model, kind.removesuffix("-aten"))
    whole, plain = FastStepper(model), FastStepper(model)
    seq = [5, 17, 33, 2]
    whole.logits(seq)
    plain.logits(seq)
    if kind == "int8-aten":
        assert whole.greedy_logits(seq + [9], 20) is None
        return
    assert whole.greedy_logits(seq + [9, 4], 20) is None  # two new positions: the plain step
    for token in (9, 4, 11):
        seq.append(token)
        logits, row = whole.greedy_logits(seq, 20)
        want = plain.logits(seq)
        assert torch.equal(logits, want)
        got = measure.greedy_measured(logits, 20, row=row)
        assert repr(got) == repr(measure.greedy_measured(want, 20))
        assert got.finite and got.token_id == int(want.argmax())
