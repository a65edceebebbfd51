"""Lockstep with a served model as model B: model A (a local session) decides every token; at
each step the served B is asked for its top-N at the same prefix (one request, the ids as
they are). No Qt.

B sends N candidates, not its whole distribution, so what is computed is computed over what
it returns and said to be a bound where it is one:

* KL(A || B) is computed on the partition {each of B's N tokens, everything else as one}:
  sum over B's N of p_A log(p_A / q_B) + P_A(rest) log(P_A(rest) / Q_B(rest)). Merging outcomes
  never increases a KL divergence (the log-sum inequality), so this is a LOWER bound of the
  true KL (``LockstepStep.kl_lower_bound``).
* The Jaccard index of the two top-N id sets and whether the greedy picks agree are exact: B's
  N are its true top-N.
* B's probability of A's token is exact when B listed it; otherwise it is at most the least
  probability B listed, and that bound is shown (``b_prob_upper_bound``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.experiments.lockstep import Lockstep, _Recording, check_same_tokenizer
from engine.experiments.records import LockstepStep, Ranked
from engine.records import Step
from engine.serve.backends import backend

TINY = 1e-12  # B's unlisted mass when its N already add up to 1 within rounding


class ServedLockstep(Lockstep):
    """A's session and the served B (a ``RemoteBundle``); ``stream()`` yields a
    ``LockstepStep`` per token, with the served model's bounds flagged."""

    def __init__(self, session: GenerationSession, bundle_b: Any, top_n: int = 10) -> None:
        if session.is_encoder_decoder:
            raise ValueError("lockstep compares decoder-only models")
        check_same_tokenizer(session.tokenizer, bundle_b.tokenizer)
        if not 1 <= top_n <= bundle_b.n_logprobs:
            raise ValueError(
                f"top_n must be between 1 and the {bundle_b.n_logprobs} candidates the served "
                "model sends"
            )
        self.session, self.top_n, self.bundle_b = session, top_n, bundle_b
        self.recorder = _Recording(session.stepper)
        session.stepper = self.recorder  # type: ignore[assignment]
        self.steps: list[LockstepStep] = []
        self.note = ""  # why the comparison ended early: it never does here
        self.bounds = (
            f"model B is served by {backend(bundle_b.server_kind).title} and sends its top-"
            f"{top_n} only: KL values are lower bounds; B's probability of a token it did not "
            "list is an upper bound"
        )

    def stream(self, max_new_tokens: int | None = None) -> Iterator[LockstepStep]:
        for record in self.session.stream(max_new_tokens):
            if isinstance(record, Step):
                yield self._compare(record)

    def _compare(self, step: Step) -> LockstepStep:
        prefix = self.session.ids[:-1]  # what A read to choose this token
        a_logits = self.recorder.last
        if a_logits is None:
            raise RuntimeError("lockstep needs A's logits for every step")
        la = a_logits[-1].double().log_softmax(-1)  # [vocab]
        served = self.bundle_b.client.next_token(prefix, self.top_n)
        b = {t.token_id: t.logprob for t in served.top[: self.top_n]}
        ids = torch.tensor(list(b), dtype=torch.long)
        lq = torch.tensor(list(b.values()), dtype=torch.float64)
        kl = _kl_lower_bound(la, ids, lq)
        a_top = la.topk(min(self.top_n, la.shape[0]))
        a_ids = a_top.indices.tolist()
        shared = len(set(a_ids) & set(b))
        show = self.session.text_track.show
        b_prob, bound = _b_prob(b, step.token_id)
        record = LockstepStep(
            index=step.index, token_id=step.token_id, text=step.text,
            a_top=tuple(Ranked(i, show(i), math.exp(v)) for i, v in
                        zip(a_ids, a_top.values.tolist(), strict=True)),
            b_top=tuple(Ranked(i, show(i), math.exp(v)) for i, v in b.items()),
            a_prob=float(la[step.token_id].exp()) if step.token_id < la.shape[0] else 0.0,
            b_prob=b_prob, kl=kl, jaccard=shared / (len(a_ids) + len(b) - shared),
            greedy_agree=bool(b) and a_ids[0] == next(iter(b)), kl_lower_bound=True,
            b_prob_upper_bound=bound,
        )  # fmt: skip
        self.steps.append(record)
        return record


def _kl_lower_bound(la: torch.Tensor, ids: torch.Tensor, lq: torch.Tensor) -> float:
    """KL(A || B) on B's N tokens and the rest as one outcome (a lower bound of the true KL).
    la: [vocab] A's log-probabilities; ids: [n] B's tokens; lq: [n] their log-probabilities."""
    inside = ids < la.shape[0]
    ids, lq = ids[inside], lq[inside]
    pa = la[ids].exp()
    listed = torch.where(pa > 0, pa * (la[ids] - lq), 0.0).sum()
    p_rest = max(0.0, 1.0 - float(pa.sum()))
    q_rest = max(TINY, 1.0 - float(lq.exp().sum()))
    rest = p_rest * math.log(p_rest / q_rest) if p_rest > 0 else 0.0
    return max(0.0, float(listed) + rest)


def _b_prob(b: dict[int, float], token: int) -> tuple[float, bool]:
    """B's probability of ``token``: exact when listed, else the least listed (an upper
    bound), flagged."""
    if token in b:
        return math.exp(b[token]), False
    return (math.exp(min(b.values())) if b else 1.0), True
