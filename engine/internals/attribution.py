"""Input attribution on demand: integrated gradients (Sundararajan et al., 2017) of the chosen
token's log-probability with respect to the input embeddings, by Captum (PyTorch's attribution
library). Each token's score is its embedding's attributions summed; Captum's convergence delta
(the scores' sum against f(input) - f(baseline)) comes with the result.

The baseline puts a neutral token (the pad token, else end-of-text) in every position but the
first, which stays as it is: Llama-family and GPT-2 models park most attention on the first token
(an attention sink), and without it the path from baseline to input crosses regions so steep that
no affordable number of steps integrates it (measured on SmolLM2: 38% error after 96 steps).

The integral is taken piecewise: the path is cut into segments, each integrated by Captum (IG is
additive along the path, so the segments' attributions sum to the whole path's), and the
segments with the largest deltas are halved until the deltas are within 1% of f(input) -
f(baseline) or the step budget is spent. Steep stretches get the steps; flat ones do not.

Issue 54 (8.8 s on the lesson's prompt on an idle 2-core machine, 41.7 s under load, no progress
and no Stop): each round's segments go to Captum as one batch (a segment a row: one call, the end
points' forwards batched too), as many segments are halved per round as the error needs, and a
segment has 6 Gauss-Legendre points, not 16. The integrand along this path is rough (sampled at 41
points on the lesson prompts it changes sign and jumps several-fold between neighbours), so a
low order on more, smaller segments reaches the 1% target with fewer steps: on the lesson
prompts of lessons 12 and 13, 564 steps against 768, every delta under 0.4%
(``main.py bench --internals`` runs both plans side by side). Progress is told per gradient pass,
a line per round, and Stop is asked before each block's forward and backward.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from engine.errors import InternalsUnavailable
from engine.internals.anatomy import anatomy
from engine.internals.records import InputAttribution
from engine.internals.trace import TokenPath
from engine.models.text import TokenTable

DEFAULT_STEPS = 256  # the budget: the shipped lesson's prompts need 36-132 (issue 54's note)
MAX_STEPS = 2048
TOLERANCE = 0.01  # stop refining when the segments' |delta| sum to 1% of the difference
MAX_TOKENS = 1024  # each step is a forward and a backward pass over the path up to the token
BATCH_TOKENS = 256  # interpolation steps batched together, at most this many tokens per pass


@dataclass(frozen=True)
class Plan:
    """How the path is cut: Gauss-Legendre ``points`` per segment, ``first`` segments in the
    first round, and whether a round integrates all its segments in one batch and halves as
    many as the error needs (else one Captum call per segment and the worst one halved per
    round, as before issue 54: ``OLD_PLAN``, which the benchmark runs beside this one)."""

    points: int = 6
    first: int = 4
    batched: bool = True

    @property
    def least(self) -> int:
        return self.points * self.first


PLAN = Plan()
OLD_PLAN = Plan(points=16, first=4, batched=False)


class Stopped(Exception):
    """The user pressed Stop while the attribution ran."""


@contextmanager
def _input_grads_only(model: nn.Module) -> Iterator[None]:
    """Gradients for the embeddings alone: the weights' would cost another backward's worth."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        for p in params:
            p.requires_grad_(True)


def _neutral_id(tokenizer: Any) -> int:
    for name in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0


def _scorer(
    bundle: Any, path: TokenPath, q: int, token: int
) -> tuple[Callable[..., Tensor], tuple[Tensor, ...], tuple[Tensor, ...]]:
    """f(embeddings) -> log p(token) at position ``q``; the path's embeddings; the baseline's."""
    model, dev = bundle.model, bundle.device
    embed = anatomy(model).embed
    ids = torch.tensor([path.ids[: q + 1]], device=dev)
    neutral = _neutral_id(bundle.tokenizer)
    dec = embed(ids).detach()
    dec_base = embed(torch.full_like(ids, neutral)).detach()
    dec_base[:, 0] = dec[:, 0]  # the first position stays: the attention sink (module doc)
    if path.encoder_decoder:
        enc_ids = torch.tensor([path.context], device=dev)
        enc = embed(enc_ids).detach()
        enc_base = embed(torch.full_like(enc_ids, neutral)).detach()

        def f(enc_e: Tensor, dec_e: Tensor) -> Tensor:
            mask = torch.ones(enc_e.shape[:2], dtype=torch.long, device=dev)
            out = model(inputs_embeds=enc_e, attention_mask=mask, decoder_inputs_embeds=dec_e)
            return torch.log_softmax(out.logits[:, -1].float(), dim=-1)[:, token]

        return f, (enc, dec), (enc_base, dec_base)

    def g(e: Tensor) -> Tensor:
        mask = torch.ones(e.shape[:2], dtype=torch.long, device=dev)
        out = model(inputs_embeds=e, attention_mask=mask, logits_to_keep=1)
        return torch.log_softmax(out.logits[:, -1].float(), dim=-1)[:, token]

    return g, (dec,), (dec_base,)


class _Segments:
    """Integrated gradients along baseline -> input, in segments [a, b] of the path; a batched
    plan integrates a round's segments in one Captum call, one segment per row of the batch."""

    def __init__(self, ig: Any, inputs: tuple[Tensor, ...], base: tuple[Tensor, ...],
                 rows: int, plan: Plan) -> None:  # fmt: skip
        self.ig, self.inputs, self.base, self.rows, self.plan = ig, inputs, base, rows, plan
        self.parts: dict[tuple[float, float], tuple[tuple[Tensor, ...], float]] = {}
        self.steps = 0

    def _at(self, where: list[float]) -> tuple[Tensor, ...]:
        """The points of the path ``where`` of the way from the baseline, one row each."""
        a = torch.tensor(where, dtype=self.inputs[0].dtype, device=self.inputs[0].device)
        return tuple(b + a.view(-1, *[1] * (x.dim() - 1)) * (x - b)
                     for x, b in zip(self.inputs, self.base, strict=True))  # fmt: skip

    def add(self, spans: list[tuple[float, float]]) -> None:
        """Integrate the segments ``spans``: ``plan.points`` points each."""
        groups = [spans] if self.plan.batched else [[span] for span in spans]
        for group in groups:
            starts, ends = self._at([a for a, _ in group]), self._at([b for _, b in group])
            attrs, delta = self.ig.attribute(
                ends, baselines=starts, n_steps=self.plan.points, return_convergence_delta=True,
                internal_batch_size=max(len(group), self.rows),
            )  # fmt: skip
            for k, span in enumerate(group):
                self.parts[span] = (tuple(a[k : k + 1] for a in attrs), float(delta[k]))
            self.steps += self.plan.points * len(group)

    def worst(self, target: float, budget: int) -> list[tuple[float, float]]:
        """The segments to halve next: the fewest, largest error first, whose halving could
        bring the error within ``target`` (one alone in the old plan), as many as ``budget``
        more steps pay for."""
        order = sorted(self.parts, key=lambda k: -abs(self.parts[k][1]))
        left, chosen, cost = self.error(), [], 2 * self.plan.points
        for span in order:
            if left <= target or (len(chosen) + 1) * cost > budget:
                break
            chosen.append(span)
            left -= abs(self.parts[span][1])
            if not self.plan.batched:
                break
        return chosen

    def split(self, spans: list[tuple[float, float]]) -> None:
        halves = []
        for a, b in spans:
            del self.parts[(a, b)]
            halves += [(a, (a + b) / 2), ((a + b) / 2, b)]
        self.add(halves)

    def error(self) -> float:
        return sum(abs(d) for _, d in self.parts.values())

    def total(self) -> tuple[list[Tensor], float]:
        attrs = [sum(p[0][i] for p in self.parts.values()) for i in range(len(self.inputs))]
        return attrs, sum(d for _, d in self.parts.values())  # type: ignore[misc]


def attribute_inputs(
    bundle: Any,
    path: TokenPath,
    step: int,
    n_steps: int = DEFAULT_STEPS,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    say: Callable[[str], None] | None = None,
    plan: Plan = PLAN,
) -> InputAttribution:
    """Integrated gradients of token ``step`` of ``path`` over the tokens before it, with at
    most ``n_steps`` gradient evaluations (fewer when the integral converges sooner).
    ``progress`` hears the share of the budget spent, ``say`` a line per round (the steps and
    the completeness gap so far); ``cancelled`` is asked before every block's forward and
    backward, and raises ``Stopped`` when it answers True."""
    from captum.attr import IntegratedGradients

    q = _checked(bundle, path, step, n_steps, plan.least)
    token = path.tokens[step]
    started = time.perf_counter()
    with _input_grads_only(bundle.model), _stoppable(bundle.model, cancelled):
        f, inputs, base = _scorer(bundle, path, q, token)
        rows = max(1, BATCH_TOKENS // sum(x.shape[1] for x in inputs))
        watched = _watched(f, n_steps, progress, cancelled)
        segments = _Segments(IntegratedGradients(watched), inputs, base, rows, plan)
        with torch.no_grad():
            value, base_value = float(f(*inputs)), float(f(*base))
        edges = [i / plan.first for i in range(plan.first + 1)]
        segments.add(list(zip(edges, edges[1:], strict=False)))
        target = TOLERANCE * abs(value - base_value)
        while True:
            if say is not None:
                say(_round_line(segments, n_steps, value - base_value))
            spans = segments.worst(target, n_steps - segments.steps)
            if not spans:
                break
            segments.split(spans)
        attrs, delta = segments.total()
    scores = torch.cat([a[0].sum(-1) for a in attrs]).float().cpu().numpy()
    table = TokenTable(bundle.tokenizer)
    before = path.ids[: q + 1]
    ids = (*path.context, *before) if path.encoder_decoder else before
    return InputAttribution(
        step=step, token=(token, table(token)), sources=tuple((int(i), table(int(i))) for i in ids),
        scores=np.asarray(scores), value=value, baseline_value=base_value, delta=delta,
        n_steps=segments.steps, seconds=time.perf_counter() - started,
    )  # fmt: skip


def _checked(bundle: Any, path: TokenPath, step: int, n_steps: int, least: int) -> int:
    """The position whose output is token ``step``, or the reason it cannot be attributed."""
    if not least <= n_steps <= MAX_STEPS:
        raise ValueError(f"The step budget must be {least}..{MAX_STEPS}, not {n_steps}.")
    from engine.quant.linear import quantised_kind

    kind = quantised_kind(bundle.model)
    if kind is not None:  # its products' gradients would be taken in bfloat16 through integers
        raise InternalsUnavailable(
            f"Input attribution runs on float weights; this model's are {kind}: open it in "
            "float32 or bfloat16 to attribute its inputs."
        )
    q = path.query(step)
    if q + 1 > MAX_TOKENS:
        raise InternalsUnavailable(
            f"Input attribution reads at most {MAX_TOKENS} tokens; this token is at {q + 1}."
        )
    return q


def _round_line(segments: _Segments, budget: int, change: float) -> str:
    gap = segments.error() / abs(change) if change else 0.0
    return (f"Integrated gradients: {segments.steps} of at most {budget} steps; the scores "
            f"sum to within {gap:.1%} of the change (stops under {TOLERANCE:.0%}).")  # fmt: skip


@contextmanager
def _stoppable(model: nn.Module, cancelled: Callable[[], bool] | None) -> Iterator[None]:
    """Stop within one block: ``cancelled`` asked before each block's forward, and before the
    gradient flows back through each block's output."""
    if cancelled is None:
        yield
        return

    def check(*_args: Any) -> None:
        if cancelled():
            raise Stopped

    def on_output(_m: nn.Module, _args: Any, output: Any) -> None:
        h = output[0] if isinstance(output, tuple) else output
        if isinstance(h, Tensor) and h.requires_grad:
            h.register_hook(check)

    handles = []
    for block in _blocks(model):
        handles.append(block.register_forward_pre_hook(check))
        handles.append(block.register_forward_hook(on_output))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _blocks(model: nn.Module) -> list[nn.Module]:
    an = anatomy(model)
    if not an.encoder_decoder:
        return an.blocks
    encoder: Any = getattr(model, "encoder", None)
    return [*an.blocks, *(list(encoder.block) if encoder is not None else [])]


def _watched(
    f: Callable[..., Tensor],
    budget: int,
    progress: Callable[[float], None] | None,
    cancelled: Callable[[], bool] | None,
) -> Callable[..., Tensor]:
    """``f`` that reports the share of the step budget spent (rows of gradient passes; the
    end points Captum reads without gradients are not steps) and stops when asked."""
    steps = [0]

    def watched(*xs: Tensor) -> Tensor:
        if cancelled is not None and cancelled():
            raise Stopped
        if torch.is_grad_enabled():
            steps[0] += int(xs[0].shape[0])
            if progress is not None:
                progress(min(1.0, steps[0] / budget))
        return f(*xs)

    return watched
