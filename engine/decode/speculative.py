"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

A drafter proposes up to ``gamma`` tokens; the target scores all of them in one forward pass.
Draft token x at position i is accepted with probability min(1, p_i(x) / q_i(x)), where p is
the target's distribution after the sampler chain and q the drafter's. At the first rejection
the next token is drawn from normalize(max(0, p_i - q_i)); when every draft is accepted, one
bonus token is drawn from the target's next distribution. This keeps the output distributed
exactly as the target alone would sample it. With greedy settings a draft is accepted while it
equals the target's argmax, so the output equals plain greedy decoding token for token.

Two drafters:
* ``ModelDrafter``: a smaller model that shares the target's tokenizer.
* ``NGramDrafter``: prompt lookup (the seed's NASD idea): the last n tokens are matched
  against the prompt and the text so far, and what followed the most recent match is proposed.
  Its proposal is a point mass (q(x) = 1), so acceptance is min(1, p(x)).

Rejected positions are removed from both KV caches by cropping (``ModelStepper`` keeps track
of which ids it has cached and crops to the common prefix).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from engine.decode.base import Record, SessionBase
from engine.decode.measure import Measured, finite_rows, measure
from engine.errors import DrafterMismatchError
from engine.models.device import vocab_size
from engine.records import KEEP_FULL, SPEC_DRAFT, SPEC_NGRAM, SpeculativeReport
from engine.sampling.chain import pick
from engine.sampling.sampler import Sampler, StageReport
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.step.stepper import catch_up, make_stepper, to_feed


def sampler_probs(sampler: Sampler, ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
    """The sampler's distribution after ``ids``; logits: [vocab] -> probs: [vocab]."""
    device = logits.device
    input_ids = torch.tensor([list(ids)], device=device) if sampler.uses_ids else None
    return sampler.probs(input_ids, logits[None])[0][0]


# --------------------------------------------------------------------------------------------
# Drafters
# --------------------------------------------------------------------------------------------


class ModelDrafter:
    """Drafts with a smaller model, sampling from its own processed distribution."""

    kind = "model"

    def __init__(
        self,
        model: torch.nn.Module,
        encoder_input_ids: Sequence[int] | None = None,
        use_cache: bool = True,
        fast: bool = False,
    ) -> None:
        self.model = model
        self.stepper = make_stepper(model, encoder_input_ids, use_cache, fast)

    @property
    def forward_passes(self) -> int:
        return self.stepper.forward_passes

    def propose(
        self, ids: Sequence[int], k: int, sampler: Sampler, generator: torch.Generator
    ) -> tuple[list[int], torch.Tensor | None]:
        """Returns k draft ids and their distributions q: [k, vocab]."""
        drafts: list[int] = []
        qs = []
        seq = list(ids)
        for _ in range(k):
            # a broken draft row (NaN, inf) becomes zeros: q is then the chain over flat
            # scores, still a distribution, and the target's check keeps the output exact
            logits = finite_rows(self.stepper.logits(seq))[0][0]  # [vocab]
            q = sampler_probs(sampler, seq, logits)
            if sampler.report().stop(0) is not None:
                break  # the grammar cannot go on from here: the target's pass will say so
            token = int(sampler.pick(q, generator))
            qs.append(q)
            drafts.append(token)
            seq.append(token)
        return drafts, (torch.stack(qs) if qs else None)


class NGramDrafter:
    """Prompt-lookup drafting: find the most recent earlier occurrence of the last n tokens
    (n from ``max_n`` down to ``min_n``) and propose what followed it. No second model."""

    kind = "ngram"
    forward_passes = 0

    def __init__(self, max_n: int = 3, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> where its continuation starts

    def _sync(self, ids: Sequence[int]) -> None:
        if list(ids[: len(self._seen)]) != self._seen:  # the text was rewound: rebuild
            self._seen, self._index = [], {}
        start = len(self._seen)
        self._seen = list(ids)
        # index every n-gram whose continuation lies inside the known text
        for cont in range(max(1, start), len(ids)):
            for n in range(self.min_n, self.max_n + 1):
                if cont - n >= 0:
                    self._index[tuple(ids[cont - n : cont])] = cont

    def propose(
        self, ids: Sequence[int], k: int, sampler: Sampler | None = None, generator: Any = None
    ) -> tuple[list[int], None]:
        self._sync(ids)
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(ids) < n:
                continue
            cont = self._index.get(tuple(ids[len(ids) - n :]))
            if cont is not None:
                return list(ids[cont : cont + k]), None
        return [], None


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


@dataclass
class SpeculativeStats:
    gamma: int
    drafter: str
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    target_passes: int = 0
    drafter_passes: int = 0
    generated: int = 0
    seconds: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.drafted_by_position = [0] * self.gamma
        self.accepted_by_position = [0] * self.gamma

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Accepted drafts per target pass that verified drafts."""
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def target_passes_per_token(self) -> float:
        return self.target_passes / self.generated if self.generated else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [
            a / d if d else 0.0
            for a, d in zip(self.accepted_by_position, self.drafted_by_position, strict=True)
        ]

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else 0.0

    def report(self) -> SpeculativeReport:
        return SpeculativeReport(
            gamma=self.gamma,
            drafted=self.drafted,
            accepted=self.accepted,
            rounds=self.rounds,
            target_passes=self.target_passes,
            generated=self.generated,
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            target_passes_per_token=self.target_passes_per_token,
            acceptance_by_position=tuple(self.acceptance_by_position),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            target_passes_per_token=self.target_passes_per_token,
            acceptance_by_position=self.acceptance_by_position,
            tokens_per_s=self.tokens_per_s,
        )
        return out


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------


class SpeculativeSession(SessionBase):
    """Speculative generation that yields the same ``Step`` records as plain generation, and a
    ``SpeculativeReport`` after each round; accepted draft tokens have source "draft", tokens
    chosen by the target "target"."""

    def __init__(
        self,
        target: torch.nn.Module,
        prompt_ids: Sequence[int],
        drafter: ModelDrafter | NGramDrafter,
        sampler: Sampler | SamplerSettings = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        gamma: int = 5,
        top_n: int = 20,
        seed: int = 0,
        use_cache: bool = True,
        first_target: bool = False,
        skip_sample_adjustment: bool = False,
        max_context: int | None = None,
        fast: bool = False,
        keep_candidates: int | None = KEEP_FULL,
    ) -> None:
        if gamma < 1:
            raise ValueError("gamma must be >= 1")
        super().__init__(
            target, prompt_ids, sampler, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=top_n, max_context=max_context, keep_candidates=keep_candidates,
        )  # fmt: skip
        self.method = SPEC_DRAFT if drafter.kind == "model" else SPEC_NGRAM
        self.target = target
        self.drafter = drafter
        self.gamma = gamma
        self.stepper = self._make_stepper(use_cache, fast)
        self.device = self.stepper.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.stats = SpeculativeStats(gamma=gamma, drafter=drafter.kind)
        self._first_target = first_target
        self._skip_adjustment = skip_sample_adjustment

    def run(self, max_new_tokens: int) -> list[int]:
        for _ in self.stream(max_new_tokens):
            pass
        return self.generated_ids

    def _truncate_cache(self, length: int) -> None:
        self.stepper.truncate(length)

    def _advance(self, room: int) -> Iterator[Record]:
        total = to_feed(self.stepper, self.ids)
        yield from self.clock.read(catch_up(self.stepper, self.ids), total)
        yield from self._round(room)

    @torch.inference_mode()
    def _round(self, limit: int) -> list[Record]:
        """Draft, verify all drafts in one target pass, keep the accepted ones and one token of
        the target's own; the round's Steps, then its ``SpeculativeReport``."""
        start = time.perf_counter()
        room = limit - 1  # the round always adds one token of the target's own
        if self.max_context is not None:
            room = min(room, self.max_context - len(self.ids) - 1)
        k = 0 if self._first_target else max(0, min(self.gamma, room))
        self._first_target = False
        passes_before = self.drafter.forward_passes
        drafts, q = (
            self.drafter.propose(self.ids, k, self.sampler, self.generator) if k else ([], None)
        )
        g = len(drafts)
        full = self.ids + drafts
        fed = to_feed(self.stepper, full, keep=g + 1)
        fed = fed if fed > g + 1 else 1  # more: this round also read (part of) the prompt
        logits = self.stepper.logits(full, keep=g + 1)  # [g + 1, vocab]
        logits, finite = finite_rows(logits)  # row i predicts full[len(ids) + i]
        p, cut, reports = self._target_probs(full, len(self.ids), logits)  # [g + 1, vocab]
        self.stats.target_passes += 1
        self.stats.drafter_passes += self.drafter.forward_passes - passes_before
        accepted, hit_eos = self._accept(drafts, p, q)
        tokens = drafts[:accepted]
        sources = ["draft"] * accepted
        report = reports[accepted] if len(reports) > 1 else reports[0]
        stop = None if hit_eos else report.stop(accepted if len(reports) == 1 else 0)
        if not hit_eos and stop is None:
            rejected = drafts[accepted] if accepted < g else None
            q_at = q[accepted] if (q is not None and accepted < g) else None
            tokens.append(int(self._next_token(p[accepted], q_at, rejected)))
            sources.append("target")
        if not tokens:  # the grammar cannot go on right here
            raise self.halt(stop or "")
        chosen = torch.tensor(tokens, device=self.device)
        measured = self._measure_rows(logits, p, chosen, cut, finite, reports)
        elapsed = time.perf_counter() - start  # after the copy, which waits for the device
        steps: list[Record] = []
        for i, (m, source) in enumerate(zip(measured, sources, strict=True)):
            report = reports[i] if len(reports) > 1 else reports[0]
            steps.append(self._append(m, elapsed / len(tokens), source, fed=fed, report=report))
            if steps[-1].is_eos:
                break
        self.stats.generated += len(steps)
        self.stats.seconds += elapsed
        if stop is not None:  # the accepted drafts stand; the grammar ends the run after them
            self.halt(stop)
        return [*steps, self.stats.report()]

    def _measure_rows(
        self,
        logits: torch.Tensor,
        p: torch.Tensor,
        chosen: torch.Tensor,
        cut: torch.Tensor,
        finite: torch.Tensor,
        reports: list[StageReport],
    ) -> list[Measured]:
        """The kept rows' numbers: one copy to the host when one chain call served every row,
        else a copy per row (each with its own report)."""
        n = len(chosen)
        if len(reports) == 1:
            report = reports[0]
            block = report.note_block()
            return measure(
                logits[:n], p[:n], chosen, self.top_n, cut[:n], finite[:n],
                report.penalties.head(n) if report.penalties is not None else None,
                block[:n] if block is not None else None,
            )  # fmt: skip
        measured: list[Measured] = []
        for i in range(n):
            rows, report = slice(i, i + 1), reports[i]
            measured += measure(
                logits[rows], p[rows], chosen[rows], self.top_n, cut[rows], finite[rows],
                report.penalties, report.note_block(),
            )  # fmt: skip
        return measured

    def _target_probs(
        self, full: list[int], base: int, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[StageReport]]:
        """The chain on each verified position: row i sees the ids before full[base + i] and,
        with a stateful sampler (mirostat), the state the drafts before it leave (each draft
        is accepted into a copy of the run's state, as each token is in a plain session; one
        host read per row). Returns the probabilities, the stage that cut each token, and
        what the stages reported: one report for all rows, or one per row."""
        sampler = self.sampler
        if not sampler.uses_ids and not sampler.stateful:
            probs, cut = sampler.probs(None, logits)
            reports = [sampler.report()]
        else:
            rows, reports, state = [], [], sampler.snapshot()
            for i, row in enumerate(logits):
                ids = torch.tensor([full[: base + i]], device=self.device)
                rows.append(sampler.probs(ids if sampler.uses_ids else None, row[None]))
                reports.append(sampler.report())
                if sampler.stateful and base + i < len(full):
                    sampler.accept(full[base + i], float(rows[-1][0][0, full[base + i]]))
            sampler.restore(state)  # the kept tokens are accepted as their Steps are made
            probs = torch.cat([r[0] for r in rows])
            cut = torch.cat([r[1] for r in rows]) if rows[0][1] is not None else None
        if cut is None:
            cut = torch.full_like(probs, -1, dtype=torch.int16)
        return probs, cut, reports

    def _accept(
        self, drafts: list[int], p: torch.Tensor, q: torch.Tensor | None
    ) -> tuple[int, bool]:
        """How many drafts the target accepts, and whether an accepted one ended the text."""
        accepted = 0
        hit_eos = False
        for i, x in enumerate(drafts):
            if self.sampler.greedy:
                ok = bool(p[i].argmax() == x) and bool(p[i][x] > 0)  # a grammar's dead row: 0
            else:
                qx = q[i, x] if q is not None else 1.0
                # accept with probability min(1, p(x) / q(x)); u < p/q  <=>  u * q < p
                u = torch.rand(1, generator=self.generator, device=self.device)[0]
                ok = bool(u * qx < p[i][x])
            if not ok:
                break
            accepted += 1
            if x in self.eos_token_ids:
                hit_eos = True
                break
        if drafts:
            st = self.stats
            st.rounds += 1
            st.drafted += len(drafts)
            st.accepted += accepted
            for i in range(len(drafts)):
                st.drafted_by_position[i] += 1
                st.accepted_by_position[i] += i < accepted
        return accepted, hit_eos

    def _next_token(
        self, p: torch.Tensor, q: torch.Tensor | None, rejected: int | None
    ) -> torch.Tensor:
        """The target's token after the accepted drafts. p: [vocab]."""
        greedy = self.sampler.greedy
        if greedy or rejected is None or self._skip_adjustment:
            return pick(p, greedy, self.generator)
        # At a rejection, sample from normalize(max(0, p - q)); for a point-mass proposal
        # (n-gram) that is p with the rejected token removed.
        if q is None:
            residual = p.clone()
            residual[rejected] = 0
        else:
            residual = (p - q).clamp_min(0)
        total = residual.sum()
        if total <= 0:  # p == q exactly: any draw from p is exact
            return pick(p, False, self.generator)
        return pick(residual / total, False, self.generator)


def check_same_tokenizer(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """A draft model must share the target's tokenizer (same ids for the same strings)."""
    a, b = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if a != b:
        only_a = len(set(a.items()) - set(b.items()))
        raise DrafterMismatchError(
            "The draft model uses a different tokenizer from the target "
            f"({len(a)} vs {len(b)} tokens, {only_a} entries differ): pick a draft model from "
            "the same family as the target."
        )


def check_same_vocab(drafter: torch.nn.Module, target: torch.nn.Module) -> None:
    dv, tv = vocab_size(drafter), vocab_size(target)
    if dv != tv:
        raise DrafterMismatchError(
            f"The draft model's vocabulary ({dv} tokens) differs from the target's ({tv}): "
            "they must share a tokenizer."
        )
