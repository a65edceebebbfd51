"""Input attribution on demand: integrated gradients (Sundararajan et al., 2017) of the chosen
token's log-probability with respect to the input embeddings, by Captum (PyTorch's attribution
library). Each token's score is its embedding's attributions summed; Captum's convergence delta
(the scores' sum against f(input) - f(baseline)) comes with the result.

The baseline puts a neutral token (the pad token, else end-of-text) in every position but the
first, which stays as it is: Llama-family and GPT-2 models park most attention on the first token
(an attention sink), and without it the path from baseline to input crosses regions so steep that
no affordable number of steps integrates it (measured on SmolLM2: 38% error after 96 steps).

The integral is taken piecewise: the path is cut into segments, each integrated by Captum (IG is
additive along the path, so the segments' attributions sum to the whole path's), and the segment
with the largest delta is halved until the deltas are within 1% of f(input) - f(baseline) or the
step budget is spent. Steep stretches get the steps; flat ones do not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from engine.errors import InternalsUnavailable
from engine.internals.anatomy import anatomy
from engine.internals.records import InputAttribution
from engine.internals.trace import TokenPath
from engine.models.text import TokenTable

DEFAULT_STEPS = 256  # the budget: the shipped lesson's prompts need 64-128 (issue 33's note)
MAX_STEPS = 2048
SEGMENT_STEPS = 16  # Gauss-Legendre points per segment
FIRST_SEGMENTS = 4
TOLERANCE = 0.01  # stop refining when the segments' |delta| sum to 1% of the difference
MAX_TOKENS = 1024  # each step is a forward and a backward pass over the path up to the token
BATCH_TOKENS = 2048  # interpolation steps batched together, at most this many tokens per pass


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
    """Integrated gradients along baseline -> input, one Captum call per segment [a, b]."""

    def __init__(self, ig: Any, inputs: tuple[Tensor, ...], base: tuple[Tensor, ...],
                 batch: int) -> None:  # fmt: skip
        self.ig, self.inputs, self.base, self.batch = ig, inputs, base, batch
        self.parts: dict[tuple[float, float], tuple[tuple[Tensor, ...], float]] = {}
        self.steps = 0

    def _at(self, a: float) -> tuple[Tensor, ...]:
        return tuple(b + a * (x - b) for x, b in zip(self.inputs, self.base, strict=True))

    def add(self, a: float, b: float) -> None:
        attrs, delta = self.ig.attribute(
            self._at(b), baselines=self._at(a), n_steps=SEGMENT_STEPS,
            internal_batch_size=self.batch, return_convergence_delta=True,
        )  # fmt: skip
        self.parts[(a, b)] = (tuple(attrs), float(delta.sum()))
        self.steps += SEGMENT_STEPS

    def split_worst(self) -> None:
        worst = max(self.parts, key=lambda k: abs(self.parts[k][1]))
        del self.parts[worst]
        a, b = worst
        self.add(a, (a + b) / 2)
        self.add((a + b) / 2, b)

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
) -> InputAttribution:
    """Integrated gradients of token ``step`` of ``path`` over the tokens before it, with at
    most ``n_steps`` gradient evaluations (fewer when the integral converges sooner)."""
    from captum.attr import IntegratedGradients

    if not FIRST_SEGMENTS * SEGMENT_STEPS <= n_steps <= MAX_STEPS:
        raise ValueError(f"The step budget must be {FIRST_SEGMENTS * SEGMENT_STEPS}..{MAX_STEPS}, "
                         f"not {n_steps}.")  # fmt: skip
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
    token = path.tokens[step]
    started = time.perf_counter()
    with _input_grads_only(bundle.model):
        f, inputs, base = _scorer(bundle, path, q, token)
        per_step = sum(x.shape[1] for x in inputs)
        batch = max(1, min(SEGMENT_STEPS, BATCH_TOKENS // per_step))
        segments = _Segments(IntegratedGradients(_watched(f, n_steps, batch, progress, cancelled)),
                             inputs, base, batch)  # fmt: skip
        with torch.no_grad():
            value, base_value = float(f(*inputs)), float(f(*base))
        edges = [i / FIRST_SEGMENTS for i in range(FIRST_SEGMENTS + 1)]
        for a, b in zip(edges, edges[1:], strict=False):
            segments.add(a, b)
        target = TOLERANCE * abs(value - base_value)
        while segments.error() > target and segments.steps + 2 * SEGMENT_STEPS <= n_steps:
            segments.split_worst()
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


def _watched(
    f: Callable[..., Tensor],
    budget: int,
    batch: int,
    progress: Callable[[float], None] | None,
    cancelled: Callable[[], bool] | None,
) -> Callable[..., Tensor]:
    """``f`` that reports how far the step budget is spent and stops when asked."""
    calls = [0]
    # Captum evaluates the end points once more per segment for its delta: count those too
    expected = -(-budget // batch) + 2 * budget // SEGMENT_STEPS

    def watched(*xs: Tensor) -> Tensor:
        if cancelled is not None and cancelled():
            raise Stopped
        calls[0] += 1
        if progress is not None:
            progress(min(1.0, calls[0] / expected))
        return f(*xs)

    return watched
