"""Scoring a text on a served model (issue 25): one ``/v1/completions`` request with vLLM's
``prompt_logprobs`` returns, for every token of the prompt, its log-probability, its rank over
the vocabulary and the top-N there; the text is sent as token ids after its context, so the
positions are exactly those ``engine.tree.score`` scores locally. The reply is checked by
``engine.validate.prompt_logprobs`` (ids below the local vocabulary) and bounded in size and
time by the client (``MAX_REPLY_BYTES``, the request's deadline)."""

from __future__ import annotations

import math
from typing import Any

from engine.serve.remote import BAD_RESPONSE, LOGPROBS_NOT_ALLOWED, RemoteClient, RemoteError
from engine.tree.scored import ScoredToken, TextScore, context_and_text, new_score
from engine.validate import InputError
from engine.validate.prompt_logprobs import PromptPosition, prompt_positions


def prompt_logprobs(
    client: RemoteClient, ids: list[int], n_logprobs: int
) -> list[PromptPosition | None]:
    """Every prompt position's checked log-probabilities (None for the first)."""
    body = {
        "model": client.model, "prompt": [int(i) for i in ids], "max_tokens": 1,
        "temperature": 0.0, "prompt_logprobs": int(n_logprobs),
    }  # fmt: skip
    data = client._json(client._send("POST", "/v1/completions", body))  # the client's bounds
    limit = min(client.id_limit, client.vocab_size or client.id_limit)
    try:
        return prompt_positions(data, list(ids), limit)
    except InputError as exc:
        kind = LOGPROBS_NOT_ALLOWED if "no prompt log-probabilities" in str(exc) else BAD_RESPONSE
        raise RemoteError(kind, f"The server's answer is broken: {exc}.") from None


def score_served(bundle: Any, text: str, prompt: str = "", top_n: int = 5) -> TextScore:
    """``engine.tree.score.score_text`` on a served decoder-only model (a ``RemoteBundle``)."""
    tok, client = bundle.tokenizer, bundle.client
    head, ids = context_and_text(tok, text, prompt)
    full = [*head, *ids]
    if bundle.context_length is not None and len(full) > bundle.context_length:
        too_long = f"The text is {len(full)} tokens with its context: over the served model's"
        raise ValueError(f"{too_long} {bundle.context_length}.")
    n = max(1, min(top_n, bundle.n_logprobs))
    rows = prompt_logprobs(client, full, n)
    start = max(len(head), 1)  # the first position predicted from some context
    local = not hasattr(tok, "client")  # a local tokenizer: decode here, not the server's text
    out = new_score(prompt, start - len(head))
    for i in range(start, len(full)):
        pos = rows[i]
        assert pos is not None  # positions from 1 on are checked to be present
        listed = [c for c in pos.top if c[0] != pos.token_id or pos.rank <= n][:n]
        top = tuple(
            (tid, tok.decode([tid]) if local or word is None else word, math.exp(lp))
            for tid, lp, word in listed
        )
        word = tok.decode([pos.token_id]) if local else _served_word(pos)
        bits = -pos.logprob / math.log(2)
        out.tokens.append(
            ScoredToken(i - len(head), pos.token_id, word, pos.logprob, pos.rank, bits, top)
        )
    return out


def _served_word(pos: PromptPosition) -> str:
    """The token's text as the reply gave it (no /detokenize request per token)."""
    word = next((w for t, _lp, w in pos.top if t == pos.token_id and w is not None), None)
    return word if word is not None else f"<{pos.token_id}>"
