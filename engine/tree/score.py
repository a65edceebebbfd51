"""Scoring a text through the model's eyes (GLTR's view): per token its log-probability, rank,
surprisal and the top-N of its position; total log-probability and perplexity. One forward pass
(a served model: one request for vLLM's ``prompt_logprobs``, ``engine.serve.remote_score``).

Decoder-only: the text follows ``prompt`` (or the document start, ``scored.document_start``, when
there is no prompt; without one the first token has no context and is not scored).
Encoder-decoder: ``prompt`` is the encoder input exactly as generation builds it
(``ModelBundle.encode_prompt``: T5's ends in ``</s>``), so a text's scores are the run's own
probabilities, and every token of the text is scored as the decoder's output.

The length is checked before any work: the text and its context must fit the model's context
(``MAX_SCORE_TOKENS`` for a model that states none), as one forward pass holds a
[tokens, vocabulary] block of logits (37,000 tokens of SmolLM2: 7 GB)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from engine.tree.scored import ScoredToken, TextScore, context_and_text, new_score, text_ids

__all__ = ["ScoredToken", "TextScore", "context_and_text", "score_text"]


MAX_SCORE_TOKENS = 8192  # a model with no stated context (T5): its logits stay near 1.6 GB


def check_length(bundle: Any, n: int) -> None:
    """ValueError naming the bound when ``n`` tokens do not fit the model's context."""
    limit = bundle.context_length or MAX_SCORE_TOKENS
    if n > limit:
        whose = "the model's context" if bundle.context_length else "the scoring bound"
        raise ValueError(
            f"The text is {n:,} tokens with its context: over {whose} of {limit:,} tokens. "
            "Score a shorter text."
        )


def encoder_ids(bundle: Any, prompt: str) -> list[int]:
    """The encoder input of an encoder-decoder model, as generation builds it (T5 adds
    ``</s>``); with no prompt the end-of-text token alone."""
    if prompt.strip():
        return bundle.encode_prompt(prompt, use_chat_template=False)
    tok = bundle.tokenizer
    return [tok.eos_token_id if tok.eos_token_id is not None else 0]


def score_text(bundle: Any, text: str, prompt: str = "", top_n: int = 5) -> TextScore:
    """Score ``text`` (after ``prompt``) with one forward pass of ``bundle``'s model, or with
    one ``prompt_logprobs`` request when the model is served (``engine.serve.remote_score``)."""
    if getattr(bundle, "client", None) is not None and bundle.model is None:
        from engine.serve.remote_score import score_served

        return score_served(bundle, text, prompt, top_n)
    tok, model, dev = bundle.tokenizer, bundle.model, bundle.device
    with torch.inference_mode():
        if bundle.is_encoder_decoder:
            ids = text_ids(tok, text)
            if not ids:
                raise ValueError("nothing to score: the text has no tokens")
            source = encoder_ids(bundle, prompt)
            check_length(bundle, max(len(source), len(ids) + 1))
            enc = torch.tensor([source], device=dev)
            dec = torch.tensor([[model.config.decoder_start_token_id, *ids]], device=dev)
            logits = model(input_ids=enc, attention_mask=torch.ones_like(enc),
                           decoder_input_ids=dec).logits[0, :-1]  # fmt: skip
            context, targets = 0, ids
            read = tuple(enc[0].tolist())
        else:
            head, ids = context_and_text(tok, text, prompt)
            full = [*head, *ids]
            check_length(bundle, len(full))
            x = torch.tensor([full], device=dev)
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1]
            start = max(len(head), 1)  # the first position predicted from some context
            logits = logits[start - 1 :]
            context, targets = start - len(head), full[start:]
            read = tuple(full[:start])
    logp = F.log_softmax(logits.float(), dim=-1)
    out = new_score(prompt, context, read)
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
