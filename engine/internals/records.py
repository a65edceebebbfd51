"""The plain records Inside the step sends out: NumPy arrays and Python values, no tensors, so
the window, the CLI's JSON and the shared page read them alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Token = tuple[int, str]  # (id, text as shown)


@dataclass(frozen=True)
class LensView:
    """The logit lens at one position: layer 0 is the embedding, layer ``layers`` the output."""

    layers: int
    candidates: tuple[Token, ...]  # the output's top-N, then the chosen token if not among them
    chosen: int  # index of the chosen token in ``candidates``
    logprobs: np.ndarray  # [layers + 1, len(candidates)]: each candidate's log-prob per layer
    layer_top: tuple[tuple[tuple[int, str, float], ...], ...]  # per layer its top-5
    kl_bits: np.ndarray  # [layers + 1]: KL(output || layer) in bits
    decision_layer: int | None  # first layer from which the chosen token is top-1 and stays

    @property
    def probs(self) -> np.ndarray:
        return np.exp(self.logprobs)


@dataclass(frozen=True)
class AttentionView:
    """Where the query position looked, per layer and head, and attention rollout."""

    sources: tuple[Token, ...]  # the tokens it can attend to (the path up to the query)
    heads: np.ndarray  # [layers, heads, len(sources)]
    rollout: np.ndarray | None  # [len(sources)], rows of the rolled-out matrix sum to 1
    cross_sources: tuple[Token, ...] = ()  # encoder-decoder: the encoder's tokens
    cross: np.ndarray | None = None  # [layers, heads, len(cross_sources)]
    rollout_pending: bool = False  # rollout follows (the rows before the query are read later)

    @property
    def mean(self) -> np.ndarray:
        """[layers, len(sources)]: the heads averaged."""
        return self.heads.mean(axis=1)


@dataclass(frozen=True)
class LogitAttribution:
    """The chosen token's logit minus the runner-up's, split over the blocks that wrote into
    the residual stream, with the final norm's scale held at its value for this position."""

    token: Token
    rival: Token
    sublayers: tuple[str, ...]  # ("attention", "MLP") or T5's three
    blocks: np.ndarray  # [layers, len(sublayers)]
    embedding: float  # the input embedding's term (GPT-2: with the position embedding)
    bias: float  # the final norm's and the head's biases
    total: float  # the model's own logit difference (before Gemma's soft-cap)

    @property
    def parts_sum(self) -> float:
        return float(self.blocks.sum()) + self.embedding + self.bias


@dataclass(frozen=True)
class StepInside:
    """Everything the Inside tab shows for one token of a path."""

    step: int  # index of the token among the path's tokens
    position: int  # the position (in the model's input) whose output is the token
    token: Token
    lens: LensView
    attention: AttentionView | None
    attribution: LogitAttribution | None
    seconds: float
    notes: tuple[str, ...] = ()  # what was left out, and why

    def to_json(self, top: int = 5) -> dict[str, Any]:
        """The CLI's JSON: per layer its top-5 and KL, the rollout's top sources, the DLA."""
        lens = self.lens
        out: dict[str, Any] = {
            "step": self.step, "position": self.position,
            "token": {"id": self.token[0], "text": self.token[1]},
            "decision_layer": lens.decision_layer, "layers": lens.layers,
            "lens": [
                {"layer": i, "kl_bits": float(lens.kl_bits[i]),
                 "chosen_prob": float(lens.probs[i, lens.chosen]),
                 "top": [{"id": t, "text": s, "p": p} for t, s, p in lens.layer_top[i][:top]]}
                for i in range(lens.layers + 1)
            ],
            "notes": list(self.notes), "seconds": self.seconds,
        }  # fmt: skip
        att = self.attention
        if att is not None and att.rollout is not None:
            order = np.argsort(-att.rollout, kind="stable")[:top]
            out["attention_rollout_top"] = [
                {"position": int(i), "text": att.sources[i][1], "weight": float(att.rollout[i])}
                for i in order
            ]
        dla = self.attribution
        if dla is not None:
            out["dla"] = {
                "rival": {"id": dla.rival[0], "text": dla.rival[1]},
                "total": dla.total, "embedding": dla.embedding, "bias": dla.bias,
                "sublayers": list(dla.sublayers),
                "per_layer": [[float(v) for v in row] for row in dla.blocks],
            }  # fmt: skip
        return out


@dataclass(frozen=True)
class DecisionStrip:
    """The decision layer of every token of a path, from one pass."""

    layers: int
    first: int  # index (among the path's tokens) of the first token covered
    decision: tuple[int | None, ...]  # per token from ``first`` on; None: never the top-1
    seconds: float
    model: str = ""


@dataclass(frozen=True)
class InputAttribution:
    """Integrated gradients (Captum) of the chosen token's log-probability with respect to the
    input embeddings, summed over each token's embedding."""

    step: int
    token: Token
    sources: tuple[Token, ...]  # the tokens before it (encoder-decoder: encoder, then decoder)
    scores: np.ndarray  # [len(sources)]
    value: float  # log p(token) at the input
    baseline_value: float  # log p(token) with every embedding zero
    delta: float  # Captum's convergence delta: sum(scores) - (value - baseline_value)
    n_steps: int
    seconds: float

    @property
    def relative_delta(self) -> float:
        diff = abs(self.value - self.baseline_value)
        return abs(self.delta) / diff if diff > 0 else float("inf")

    def top(self, n: int = 10) -> list[tuple[int, str, float]]:
        order = np.argsort(-np.abs(self.scores), kind="stable")[:n]
        return [(int(i), self.sources[i][1], float(self.scores[i])) for i in order]
