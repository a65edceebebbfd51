"""The sampler contract (engine.sampling.sampler.Sampler): every implementation declares it,
defines every member, and gives the same probabilities, picks and report as its twin on the
same logits; accept moves mirostat's mu exactly as the hand computation says; and a served
session's step equals the local session's on the same logits source."""

from __future__ import annotations

import math

import pytest
import torch

from engine.decode.session import GenerationSession
from engine.drivers.compat import (
    CompatSampler,
    GreedyProcessor,
    MultinomialProcessor,
    NucleusProcessor,
    TopKProcessor,
)
from engine.models.prompt import DecodeStart
from engine.records import Step
from engine.sampling.build import build_chain
from engine.sampling.chain import Chain
from engine.sampling.sampler import Sampler, SamplerState
from engine.sampling.settings import SamplerSettings
from engine.sampling.temperature import Temperature
from engine.sampling.truncation import TopK, TopP
from engine.serve.remote import ServedToken, TopToken
from engine.serve.remote_session import RemoteSession

VOCAB = 48
IMPLEMENTATIONS = [Chain, CompatSampler]
METHODS = ("prepare", "probs", "pick", "report", "notes", "accept", "snapshot", "restore")
ATTRIBUTES = ("greedy", "uses_ids", "labels", "stateful")


def logits_for(seed: int, rows: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, VOCAB, generator=g) * 3  # [rows, vocab]


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_every_implementation_declares_and_defines_the_protocol(cls):
    assert Sampler in cls.__mro__  # declared, so a type checker holds it to every member
    for name in METHODS:  # defined by the class, not the protocol's empty body
        assert getattr(cls, name) is not getattr(Sampler, name), f"{cls.__name__}.{name}"
    assert set(ATTRIBUTES) <= set(Sampler.__annotations__)


# Twins: a seed-compatible processor and the chain that samples the same way (the reference
# applies top-k / top-p to the raw logits and the temperature after them).
TWINS = {
    "greedy": (lambda: GreedyProcessor(), lambda: Chain([], greedy=True)),
    "multinomial": (
        lambda: MultinomialProcessor(0.8, seed=5), lambda: Chain([Temperature(0.8)], False)
    ),
    "top-k": (
        lambda: TopKProcessor(0.7, 6, seed=5), lambda: Chain([TopK(6), Temperature(0.7)], False)
    ),
    "top-p": (lambda: NucleusProcessor(1.0, 0.9, seed=5), lambda: Chain([TopP(0.9)], False)),
}  # fmt: skip


@pytest.mark.parametrize("twin", TWINS)
def test_twins_give_the_same_probs_pick_and_report(twin):
    make_processor, make_chain = TWINS[twin]
    compat, chain = CompatSampler(make_processor()), make_chain()
    samplers: list[Sampler] = [compat, chain]
    assert compat.greedy == chain.greedy
    for seed in range(6):
        logits = logits_for(seed)
        out = []
        for sampler in samplers:
            g = torch.Generator().manual_seed(100 + seed)
            sampler.prepare(g)
            probs, _cut = sampler.probs(None, logits)
            out.append((probs, [int(sampler.pick(probs[0], g)) for _ in range(4)]))
            report = sampler.report()
            assert report.penalties is None and report.note_block() is None
            assert sampler.notes(report, (), str) == ()
        torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-6, atol=1e-7)
        if twin == "greedy":
            assert out[0][1] == out[1][1] == [int(logits.argmax())] * 4
    # draws: the processor's own generator (seeded once, at its first draw) against one
    # generator seeded the same way once, draw after draw
    if twin != "greedy":
        compat, g = CompatSampler(make_processor()), torch.Generator().manual_seed(5)
        unused = torch.Generator().manual_seed(99)  # the processor draws with its own
        for seed in range(6):
            probs = compat.probs(None, logits_for(seed))[0]
            assert int(compat.pick(probs[0], unused)) == int(chain.pick(probs[0], g))


def stateless_samplers() -> list[Sampler]:
    return [CompatSampler(TopKProcessor(0.9, 8, seed=1)), build_chain(SamplerSettings(top_k=8))]


@pytest.mark.parametrize("sampler", stateless_samplers(), ids=lambda s: type(s).__name__)
def test_a_stateless_sampler_ignores_accept(sampler):
    logits = logits_for(3)
    before = sampler.probs(None, logits)[0]
    assert sampler.snapshot() == SamplerState() and not sampler.stateful
    sampler.accept(int(before.argmax()), float(before.max()))
    assert sampler.snapshot() == SamplerState()
    torch.testing.assert_close(sampler.probs(None, logits)[0], before, rtol=0, atol=0)


@pytest.mark.parametrize("version", [1, 2])
def test_accept_moves_mirostat_mu_as_the_hand_computation_says(version):
    tau, eta = 3.0, 0.5
    chain = build_chain(SamplerSettings(mirostat=version, mirostat_tau=tau, mirostat_eta=eta))
    assert chain.stateful and chain.snapshot() == SamplerState(2 * tau)  # mu starts at 2 tau
    mu, states = 2 * tau, []
    for seed in range(8):
        logits = logits_for(seed)
        probs = chain.probs(None, logits)[0][0]
        if version == 2:  # v2 keeps the tokens whose surprise is <= mu (and the top one)
            p = logits.softmax(-1)[0].double()
            keep = (-p.log2() <= mu) | (torch.arange(VOCAB) == int(p.argmax()))
            assert torch.equal(probs > 0, keep)
        note = chain.notes(chain.report(), chain.report().note_block()[0].tolist(), str)
        assert note[0].text.startswith(f"mu {mu:.2f}: kept {int((probs > 0).sum())}")
        token = int(probs.argmax()) if seed % 2 else int((probs > 0).nonzero()[-1])
        prob = float(probs[token])
        states.append(chain.snapshot())
        chain.accept(token, prob)
        mu = mu - eta * (-math.log2(prob) - tau)  # Basu et al.: mu <- mu - eta (surprise - tau)
        assert chain.snapshot().mu == pytest.approx(mu, abs=1e-12)
    # restore goes back to any earlier state, and the chain filters under it again
    chain.restore(states[3])
    assert chain.snapshot() == states[3]
    chain.restore(SamplerState())
    assert chain.snapshot() == SamplerState(2 * tau)


def test_a_rebuilt_chain_goes_on_from_the_runs_mu():
    """New settings mid-run: the new chain takes the mu the history ends with."""
    settings = SamplerSettings(mirostat=2, mirostat_tau=3.0, mirostat_eta=0.5, max_new_tokens=4)
    session = LocalSession(settings)
    steps = [r for r in session.stream() if isinstance(r, Step)]
    session.settings = settings.with_(mirostat_eta=0.25)
    assert session.sampler.snapshot() == SamplerState(steps[-1].mu)
    session.rewind(2)
    assert session.sampler.snapshot() == SamplerState(steps[1].mu)


# -- the served session's step against the local one, on one logits source ------------------


def source_logits(ids: list[int]) -> torch.Tensor:
    """A deterministic stand-in for a model: log-probabilities [1, vocab] from the ids."""
    g = torch.Generator().manual_seed(sum((i + 1) * 7919**j for j, i in enumerate(ids[-4:])))
    return torch.log_softmax(torch.randn(1, VOCAB, generator=g) * 3, dim=-1)


class FakeStepper:
    """The local logits source: ``source_logits`` as a stepper without a cache."""

    device = torch.device("cpu")
    cache = None

    def __init__(self) -> None:
        self.forward_passes = 0

    def logits(self, ids, keep: int = 1) -> torch.Tensor:
        self.forward_passes += 1
        return source_logits(list(ids))

    def truncate(self, length: int) -> None:
        pass


class LocalSession(GenerationSession):
    def __init__(self, settings: SamplerSettings, prompt=(3, 1, 4, 1, 5)) -> None:
        start = DecodeStart(False, (), [], list(prompt), None)
        super().__init__(None, prompt, settings, start=start, vocab=VOCAB, top_n=VOCAB)

    def _make_stepper(self, use_cache: bool, fast: bool) -> FakeStepper:  # type: ignore[override]
        return FakeStepper()


class FakeClient:
    """The served logits source: the whole vocabulary as top-N, best first."""

    def next_token(self, ids, n: int) -> ServedToken:
        lp = source_logits(list(ids))[0]
        order = torch.argsort(lp, descending=True, stable=True)[:n].tolist()
        top = tuple(TopToken(i, float(lp[i])) for i in order)
        return ServedToken(top[0].token_id, top[0].logprob, top)


SERVED_SETTINGS = [
    SamplerSettings(temperature=0.0),
    SamplerSettings(temperature=0.9, top_k=12, seed=4),
    SamplerSettings(
        mirostat=2, mirostat_tau=2.0, mirostat_eta=0.3, repetition_penalty=1.3, seed=7
    ),  # fmt: skip
    SamplerSettings(xtc_threshold=0.05, xtc_probability=0.6, min_p=0.02, seed=2),
]


@pytest.mark.parametrize("settings", SERVED_SETTINGS, ids=["greedy", "top-k", "mirostat", "xtc"])
def test_the_served_step_equals_the_local_step_on_the_same_source(settings):
    local = LocalSession(settings)
    served = RemoteSession(
        FakeClient(), (3, 1, 4, 1, 5), settings, top_n=VOCAB, n_logprobs=VOCAB, vocab_size=VOCAB
    )  # type: ignore[arg-type]
    a = [local.step() for _ in range(10)]
    b = [served.step() for _ in range(10)]
    assert [s.token_id for s in a] == [s.token_id for s in b]
    for x, y in zip(a, b, strict=True):
        assert x.source == y.source and x.stage_notes == y.stage_notes
        assert y.prob == pytest.approx(x.prob, abs=1e-6)
        assert y.raw_prob == pytest.approx(x.raw_prob, abs=1e-6)
        assert (x.mu is None) == (y.mu is None)
        if x.mu is not None:
            assert y.mu == pytest.approx(x.mu, abs=1e-9)
        assert [c.token_id for c in x.candidates] == [c.token_id for c in y.candidates]
        assert [c.cut_by for c in x.candidates] == [c.cut_by for c in y.candidates]
        assert [c.penalised_by for c in x.candidates] == [c.penalised_by for c in y.candidates]
    # a branch and a forced token go through the same body on both
    for s in (local, served):
        s.branch(4, a[4].candidates[3].token_id)
    assert local.step().token_id == served.step().token_id == a[4].candidates[3].token_id
    assert [local.step().token_id for _ in range(3)] == [served.step().token_id for _ in range(3)]
    assert (served.mu is None) == (local.mu is None) == (not settings.mirostat)
    if settings.mirostat:
        assert served.mu == pytest.approx(local.mu, abs=1e-9)
