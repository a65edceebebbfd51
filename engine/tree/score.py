"""Scoring a text through the model's eyes (GLTR's view): per token its log-probability, rank,
surprisal and the top-N of its position; total log-probability and perplexity. One forward pass.

Decoder-only: the text follows ``prompt`` (or the tokenizer's BOS when there is no prompt; with
neither the first token has no context and is not scored). Encoder-decoder: ``prompt`` is the
encoder input and every token of the text is scored as the decoder's output."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


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

    @property
    def total_logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def perplexity(self) -> float:
        return math.exp(-self.total_logprob / len(self.tokens)) if self.tokens else float("nan")

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
                    "entropy": t.entropy,
                }
                for t in self.tokens
            ],  # fmt: skip
        }


def _text_ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def score_text(bundle: Any, text: str, prompt: str = "", top_n: int = 5) -> TextScore:
    """Score ``text`` (after ``prompt``) with one forward pass of ``bundle``'s model."""
    if getattr(bundle, "is_remote", False):
        raise NotImplementedError("scoring a text on a served model is not supported yet")
    tok, model, dev = bundle.tokenizer, bundle.model, bundle.device
    ids = _text_ids(tok, text)
    if not ids:
        raise ValueError("nothing to score: the text has no tokens")
    with torch.inference_mode():
        if bundle.is_encoder_decoder:
            enc = torch.tensor([_text_ids(tok, prompt) or [tok.eos_token_id or 0]], device=dev)
            dec = torch.tensor([[model.config.decoder_start_token_id, *ids]], device=dev)
            logits = model(input_ids=enc, attention_mask=torch.ones_like(enc),
                           decoder_input_ids=dec).logits[0, :-1]  # fmt: skip
            context, targets = 0, ids
        else:
            head = _text_ids(tok, prompt) if prompt else []
            if not head and tok.bos_token_id is not None:
                head = [tok.bos_token_id]
            full = [*head, *ids]
            x = torch.tensor([full], device=dev)
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1]
            start = max(len(head), 1)  # the first position predicted from some context
            logits = logits[start - 1 :]
            context, targets = start - len(head), full[start:]
    logp = F.log_softmax(logits.float(), dim=-1)
    out = TextScore(unscored=context)
    for i, t in enumerate(targets):
        row = logp[i]
        lp = float(row[t])
        rank = int((row > row[t]).sum()) + 1
        vals, idx = torch.topk(row, min(top_n, row.numel()))
        top = tuple(
            (int(j), tok.decode([int(j)]), math.exp(float(v)))
            for v, j in zip(vals, idx, strict=True)
        )
        ent = float(-(row.exp() * row).nansum()) / math.log(2)
        out.tokens.append(ScoredToken(context + i, t, tok.decode([t]), lp, rank,
                                      -lp / math.log(2), top, ent))  # fmt: skip
    return out
