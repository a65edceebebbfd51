"""Scoring a text on a served model (issue 25): one request for the prompt's own
log-probabilities. vLLM: ``/v1/completions`` with ``prompt_logprobs`` returns, for every token
of the prompt, its log-probability, its rank over the vocabulary and the top-N there. SGLang:
``/generate`` with ``logprob_start_len`` 0 returns the log-probability and the top-N, but no
rank: a token outside its top-N gets the bound N + 1 (``ScoredToken.rank_bound``). The text is
sent as token ids after its context, so the positions are exactly those ``engine.tree.score``
scores locally. llama-server and Ollama return no prompt log-probabilities: scoring on them is
refused in one line (``engine.serve.backends``). The replies are checked by
``engine.validate.prompt_logprobs`` / ``served_sglang`` (ids below the local vocabulary) and
bounded in size and time by the client (``MAX_REPLY_BYTES``, the request's deadline)."""

from __future__ import annotations

import math
from typing import Any

from engine.serve.backends import VLLM, backend
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
    budget = client.reply_budget(len(ids), len(ids) + 1, n_logprobs)  # the client's bounds
    data = client._json(client._send("POST", "/v1/completions", body, max_bytes=budget))
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
    caps = backend(getattr(bundle, "server_kind", VLLM))
    if not caps.prompt_logprobs:
        raise ValueError(
            f"{caps.title} returns no prompt log-probabilities, so a text cannot be scored on "
            "it: score on vLLM or SGLang, or on a model loaded here."
        )
    rows = prompt_logprobs(client, full, n) if caps.kind == VLLM else _sglang_rows(client, full, n)
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
        bound = pos.rank > len(pos.top) and not caps.vocab_ranks
        out.tokens.append(
            ScoredToken(
                i - len(head),
                pos.token_id,
                word,
                pos.logprob,
                pos.rank,
                bits,
                top,
                rank_bound=bound,
            )  # fmt: skip
        )
    return out


def _sglang_rows(client: Any, ids: list[int], n: int) -> list[PromptPosition | None]:
    """SGLang's prompt positions as vLLM's: the rank is the token's place among the top-N
    (ties counted as vLLM does: the likelier ones before it), or N + 1 when it is not listed."""
    out: list[PromptPosition | None] = [None]
    for pos in client.prompt_positions(ids, n)[1:]:
        assert pos.logprob is not None  # checked: only the first has none
        likelier = sum(1 for _t, lp, _w in pos.top if lp > pos.logprob)
        listed = any(t == pos.token_id for t, _lp, _w in pos.top)
        rank = likelier + 1 if listed else len(pos.top) + 1
        out.append(PromptPosition(pos.token_id, pos.logprob, rank, pos.top))
    return out


def _served_word(pos: PromptPosition) -> str:
    """The token's text as the reply gave it (no /detokenize request per token)."""
    word = next((w for t, _lp, w in pos.top if t == pos.token_id and w is not None), None)
    return word if word is not None else f"<{pos.token_id}>"
