"""A scored text's records (``ScoredToken``, ``TextScore``, written as ``decoding-lab-score/1``)
and the decoder-only context rule, shared by the local scorer (``engine.tree.score``) and the
served one (``engine.serve.remote_score``) so neither imports the other."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScoredToken:
    index: int
    token_id: int
    text: str
    logprob: float
    rank: int  # 1-based, in the raw distribution
    surprisal: float  # bits
    top: tuple[tuple[int, str, float], ...] = ()  # (token_id, text, probability)
    entropy: float = float("nan")  # bits, of the whole distribution at this position


@dataclass
class TextScore:
    tokens: list[ScoredToken] = field(default_factory=list)
    unscored: int = 0  # leading tokens with no context
    # what the model read before the first scored token: the decoder's context (the prompt's
    # ids, or the start token) or an encoder-decoder's encoder input; Inside the step reads it
    context_ids: tuple[int, ...] = ()

    @property
    def total_logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def perplexity(self) -> float:
        if not self.tokens:
            return float("nan")
        mean = -self.total_logprob / len(self.tokens)
        return math.exp(mean) if mean < 709.0 else math.inf  # exp overflows past ~709.78

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "decoding-lab-score/1",
            "total_logprob": self.total_logprob,
            "perplexity": self.perplexity,
            "unscored": self.unscored,
            "tokens": [
                {
                    "index": t.index,
                    "token_id": t.token_id,
                    "text": t.text,
                    "logprob": t.logprob,
                    "rank": t.rank,
                    "surprisal": t.surprisal,
                    "top": [list(c) for c in t.top],
                    "entropy": None if math.isnan(t.entropy) else t.entropy,
                }
                for t in self.tokens
            ],  # fmt: skip
        }


def text_ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def context_and_text(tok: Any, text: str, prompt: str = "") -> tuple[list[int], list[int]]:
    """Decoder-only: the context's ids (the prompt's, else the tokenizer's BOS, else none) and
    the text's. The served path sends exactly these, so both score the same positions."""
    ids = text_ids(tok, text)
    if not ids:
        raise ValueError("nothing to score: the text has no tokens")
    head = text_ids(tok, prompt) if prompt else []
    if not head and getattr(tok, "bos_token_id", None) is not None:
        head = [tok.bos_token_id]
    return head, ids
