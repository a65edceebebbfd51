"""Two models in lockstep: model A decides every token (its own sampler chain, seeded as any
run), model B reads the same prefix and scores the next token at every step. Per step: both
top-N lists, KL(A || B) of the raw next-token distributions (temperature 1, in nats), the
Jaccard index of the two top-N id sets and whether the greedy picks agree.

Any two local models that share a tokenizer (two sizes of one family, fp32 and bf16 of one
model); a different tokenizer is refused with ``TokenizerMismatchError``. When the two output
layers differ in width (padded vocabularies), both are compared on the ids they share.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.errors import TokenizerMismatchError
from engine.experiments.records import LockstepStep, LockstepSummary, Ranked
from engine.records import Step
from engine.step.stepper import Stepper, make_stepper


def check_same_tokenizer(a: Any, b: Any) -> None:
    """Refuse two tokenizers whose vocabularies differ (same strings must map to same ids)."""
    if a is None or b is None:
        return
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        raise TokenizerMismatchError(
            f"The two models use different tokenizers ({len(va):,} vs {len(vb):,} tokens), so "
            "their next-token distributions cannot be compared: pick two models of one family."
        )


class _Recording:
    """A stepper that keeps the last logits it returned (A's raw scores at each step)."""

    def __init__(self, inner: Stepper) -> None:
        self.inner = inner
        self.last: torch.Tensor | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        self.last = self.inner.logits(ids, keep)
        return self.last

    def greedy_logits(
        self, ids: Sequence[int], top_n: int
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The inner stepper's logits with a greedy step's record (FastStepper's), recorded as
        ``logits`` records them; None where it has no such call."""
        whole = getattr(self.inner, "greedy_logits", None)
        both = whole(ids, top_n) if whole is not None else None
        if both is not None:
            self.last = both[0]
        return both


def compare_rows(
    a_logits: torch.Tensor, b_logits: torch.Tensor, top_n: int
) -> dict[str, torch.Tensor]:
    """a_logits, b_logits: [rows, vocab] raw next-token scores of A and B at the same
    positions -> per row: kl [rows], jaccard [rows], agree [rows], and both top-N."""
    width = min(a_logits.shape[-1], b_logits.shape[-1])
    la = a_logits[..., :width].double().log_softmax(-1)
    lb = b_logits[..., :width].to(la.device).double().log_softmax(-1)
    pa = la.exp()
    kl = torch.where(pa > 0, pa * (la - lb), 0.0).sum(-1)  # [rows]
    n = min(top_n, width)
    a_top, b_top = la.topk(n, -1), lb.topk(n, -1)
    shared = (a_top.indices[..., :, None] == b_top.indices[..., None, :]).any(-1).sum(-1)
    jaccard = shared.double() / (2 * n - shared).double()
    agree = la.argmax(-1) == lb.argmax(-1)
    return {"kl": kl, "jaccard": jaccard, "agree": agree, "a_top": a_top, "b_top": b_top,
            "la": la, "lb": lb}  # fmt: skip


def _prob_of(logits: torch.Tensor, token: int) -> torch.Tensor:
    """logits: [1, width] -> [1]: the token's probability over the model's whole output layer;
    0 for an id past it (a padded row of the other model, which this one cannot write)."""
    if token >= logits.shape[-1]:
        return torch.zeros(1, dtype=torch.float64, device=logits.device)
    return logits[0].double().softmax(-1)[token].reshape(1)


class Lockstep:
    """A's session and B's stepper; ``stream()`` yields a ``LockstepStep`` per token. The
    session's stepper is wrapped so that A's raw logits of each step are kept (no second
    forward pass of A); B runs its own cached stepper over the same ids."""

    def __init__(
        self, session: GenerationSession, model_b: torch.nn.Module, tokenizer_b: Any = None,
        top_n: int = 10,
    ) -> None:  # fmt: skip
        if session.is_encoder_decoder:
            raise ValueError("lockstep compares decoder-only models")
        check_same_tokenizer(session.tokenizer, tokenizer_b)
        if top_n < 1:
            raise ValueError("top_n must be >= 1")
        self.session, self.top_n = session, top_n
        self.recorder = _Recording(session.stepper)
        session.stepper = self.recorder  # type: ignore[assignment]
        self.b = make_stepper(model_b, use_cache=True)
        self.b_width = model_b.get_input_embeddings().weight.shape[0]  # ids B can read
        self.steps: list[LockstepStep] = []
        self.note = ""

    def stream(self, max_new_tokens: int | None = None) -> Iterator[LockstepStep]:
        """A's steps, each scored by B. A token past B's input layer (a padded row of A's
        wider vocabulary) is scored 0 by B, and the comparison stops after it: B cannot read
        a prefix holding it (``note`` says so)."""
        for record in self.session.stream(max_new_tokens):
            if isinstance(record, Step):
                yield self._compare(record)
                if record.token_id >= self.b_width:
                    self.note = (
                        f"model A wrote token {record.token_id}, past model B's vocabulary "
                        f"({self.b_width:,} ids): B cannot read on, so the comparison stops here"
                    )
                    return

    def _compare(self, step: Step) -> LockstepStep:
        prefix = self.session.ids[:-1]  # what A read to choose this token
        a_logits = self.recorder.last
        if a_logits is None:  # a step without a forward pass (a restored record): nothing to score
            raise RuntimeError("lockstep needs A's logits for every step")
        b_logits = self.b.logits(prefix)
        c = compare_rows(a_logits[-1:], b_logits, self.top_n)
        numbers = torch.cat([
            c["kl"], c["jaccard"], c["agree"].double(),
            _prob_of(a_logits[-1:], step.token_id).to(c["kl"].device),
            _prob_of(b_logits, step.token_id).to(c["kl"].device),
        ]).tolist()  # one copy to the host  # fmt: skip
        show = self.session.text_track.show

        def ranked(top: Any) -> tuple[Ranked, ...]:
            ids, logp = top.indices[0].tolist(), top.values[0].exp().tolist()
            return tuple(Ranked(i, show(i), p) for i, p in zip(ids, logp, strict=True))

        record = LockstepStep(
            index=step.index, token_id=step.token_id, text=step.text,
            a_top=ranked(c["a_top"]), b_top=ranked(c["b_top"]),
            a_prob=numbers[3], b_prob=numbers[4], kl=numbers[0], jaccard=numbers[1],
            greedy_agree=bool(numbers[2]),
        )  # fmt: skip
        self.steps.append(record)
        return record

    def summary(self) -> LockstepSummary:
        s = self.steps
        if not s:
            return LockstepSummary(0, 0.0, 0.0, -1, 0.0, 0.0, "", self.note)
        worst = max(s, key=lambda r: r.kl)
        return LockstepSummary(
            tokens=len(s), mean_kl=sum(r.kl for r in s) / len(s), max_kl=worst.kl,
            max_kl_step=worst.index, mean_jaccard=sum(r.jaccard for r in s) / len(s),
            greedy_agreement=sum(r.greedy_agree for r in s) / len(s), text=self.session.text,
            note=self.note,
        )  # fmt: skip
