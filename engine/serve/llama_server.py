"""A model served by llama.cpp's own ``llama-server``, through its native ``/completion`` route
(tools/server/README.md): a prompt as token ids, ``n_probs`` candidates per token, and
``post_sampling_probs`` for the probabilities after the server's own sampler chain. No Qt, no
torch.

Two views of one position: ``next_token`` asks for the top-N of the raw distribution (the
softmax of the logits, temperature 1: what ``get_token_probabilities`` computes before any
sampler); ``sampler_probs`` asks the same position again with our sampler's settings mapped to
llama.cpp's chain (``samplers`` in our order, the stages llama.cpp has) and
``post_sampling_probs``: its own result, so a class can set it beside ours. Every stage the
server would add on its own (its defaults are top-k 40, top-p 0.95, min-p 0.05) is switched off
by sending its neutral value. The server's prompt cache makes the second request cost one
token.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from engine.serve.http import (
    HttpClient,
    ServedModelInfo,
    ServedToken,
    TopToken,
    at_most,
    with_finish,
)
from engine.serve.remote_errors import BAD_RESPONSE, MODEL_NOT_FOUND, RemoteError
from engine.validate import InputError
from engine.validate import served_llama as check
from engine.validate.limits import STREAM_SECONDS_PER_TOKEN, TOKENIZER_DEADLINE_S

# Our stage names -> llama.cpp's sampler names (common/sampling.cpp common_sampler_type names);
# a stage not listed here has no counterpart llama-server runs, and is left out (said so).
LLAMA_STAGES = {
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
    "typical_p": "typ_p",
}  # fmt: skip
# Every sampling parameter /completion takes, at its neutral value (the server's own defaults
# are not neutral: top_k 40, top_p 0.95, min_p 0.05, temperature 0.8).
NEUTRAL = {
    "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0,
    "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    "dry_multiplier": 0.0, "xtc_probability": 0.0, "mirostat": 0, "dynatemp_range": 0.0,
    "top_n_sigma": -1.0, "n_indent": 0, "ignore_eos": False, "logit_bias": [],
}  # fmt: skip


def chain_parameters(settings: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Our settings as llama-server's chain: the parameters (neutral where ours is off), and
    the stages of ours it cannot run (they are not sent; the caller says so)."""
    from engine.sampling.build import STAGES
    from engine.sampling.settings import stage_order

    order = [n for n in stage_order(settings) if not STAGES[n][0](settings)]
    params = dict(NEUTRAL)
    params.update(
        temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
        min_p=settings.min_p, typical_p=settings.typical_p, seed=settings.seed,
        dynatemp_range=settings.dynatemp_range, dynatemp_exponent=settings.dynatemp_exponent,
        samplers=[LLAMA_STAGES[n] for n in order if n in LLAMA_STAGES] or ["temperature"],
    )  # fmt: skip
    missing = tuple(n for n in order if n not in LLAMA_STAGES)
    return params, missing


class LlamaServerClient(HttpClient):
    """One ``llama-server`` (it serves one model). ``model``: the name it lists (None: its
    own); the other keywords are ``HttpClient``'s."""

    kind = "llama-server"

    def __init__(self, base_url: str, model: str | None = None, **options: Any) -> None:
        super().__init__(base_url, **options)
        listed = self.models()
        if model and model not in {m.name for m in listed}:
            names = ", ".join(m.name for m in listed)
            raise RemoteError(
                MODEL_NOT_FOUND, f"llama-server serves one model, {names}, not {model!r}."
            )
        self.model = model or listed[0].name

    # -- what the server is ------------------------------------------------------------------

    def _model_list(self) -> list[tuple[str, int | None, int | None, str]]:
        try:
            return check.models(self._json(self._send("GET", "/v1/models")))
        except InputError as exc:
            raise self._broken(exc) from None

    def models(self) -> list[ServedModelInfo]:
        return [ServedModelInfo(name, n_ctx) for name, n_ctx, _v, _o in self._model_list()]

    def max_model_len(self) -> int | None:
        return next((m.max_model_len for m in self.models() if m.name == self.model), None)

    def served_vocab(self) -> int | None:
        """The vocabulary size the server reports (``meta.n_vocab``): ids are bounded by it."""
        return next((v for name, _c, v, _o in self._model_list() if name == self.model), None)

    # -- positions ---------------------------------------------------------------------------

    def _body(self, ids: Sequence[int], n_predict: int, n_probs: int, **extra: Any) -> dict:
        return {
            "prompt": [int(i) for i in ids], "n_predict": int(n_predict), "n_probs": int(n_probs),
            "cache_prompt": True, "return_tokens": True, **extra,
        }  # fmt: skip

    def _served(self, data: Any, post: bool = False, seconds: float = 0.0) -> list[ServedToken]:
        try:
            rows = check.positions(data, post, self.id_limit)
        except InputError as exc:
            raise self._broken(exc) from None
        out = []
        for p in rows:
            to_log = (lambda v: math.log(v) if v > 0 else -math.inf) if post else float
            top = tuple(TopToken(i, to_log(v)) for i, v in p.top)
            out.append(ServedToken(p.token_id, to_log(p.value), top, p.finish_reason, seconds))
            self.note_ids([p.token_id, *(t.token_id for t in top)])
        return out

    def next_token(self, ids: Sequence[int], n_logprobs: int = 20) -> ServedToken:
        """The raw top-``n_logprobs`` after ``ids`` (and the server's greedy token)."""
        body = self._body(ids, 1, n_logprobs, **{**NEUTRAL, "temperature": 0.0})
        start = time.perf_counter()
        data = self._post("/completion", body, max_bytes=self.reply_budget(len(ids), 1, n_logprobs))
        served = self._within_asked(self._served(data, seconds=time.perf_counter() - start), 1)
        if not served:
            raise RemoteError(BAD_RESPONSE, "llama-server's answer has no token probabilities.")
        return served[0]

    def sampler_probs(
        self, ids: Sequence[int], n_logprobs: int, params: dict[str, Any]
    ) -> tuple[TopToken, ...]:
        """llama.cpp's own sampler at the position after ``ids`` (``params``: from
        ``chain_parameters``): its surviving candidates, best first, as log-probabilities
        (``post_sampling_probs``; fewer than ``n_logprobs`` when its chain cut the rest)."""
        body = self._body(ids, 1, n_logprobs, post_sampling_probs=True, **params)
        budget = self.reply_budget(len(ids), 1, n_logprobs)
        served = self._within_asked(
            self._served(self._post("/completion", body, max_bytes=budget), post=True), 1
        )
        if not served:
            raise RemoteError(BAD_RESPONSE, "llama-server's answer has no token probabilities.")
        return served[0].top

    def complete(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 1, **sampling: Any
    ) -> list[ServedToken]:
        """One non-streaming completion with the raw top-N of every token."""
        body = self._body(ids, max_tokens, max(1, n_logprobs), **{**NEUTRAL, **sampling})
        budget = self.reply_budget(len(ids), int(max_tokens), max(1, n_logprobs))
        served = self._served(self._post("/completion", body, max_bytes=budget))
        return self._within_asked(served, int(max_tokens))

    def stream(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 20, **sampling: Any
    ) -> Iterator[ServedToken]:
        """The server samples (``sampling``: /completion's parameters, the rest neutral); each
        token comes with the raw top-N as it is sent."""
        body = self._body(ids, max_tokens, n_logprobs, stream=True, **{**NEUTRAL, **sampling})
        seconds = self.deadline + STREAM_SECONDS_PER_TOKEN * int(max_tokens)
        events = self._events("/completion", body, seconds)
        yield from at_most(with_finish(events, self._served, self._finished), int(max_tokens))

    def _finished(self, event: Any) -> str | None:
        try:
            return check.finished(event)
        except InputError as exc:
            raise self._broken(exc) from None

    # -- the tokenizer -----------------------------------------------------------------------

    def tokenize(self, text: str, add_special_tokens: bool = True) -> list[int]:
        body = {"content": text, "add_special": add_special_tokens, "parse_special": True}
        try:
            return check.token_ids(self._post("/tokenize", body, TOKENIZER_DEADLINE_S))
        except InputError as exc:
            raise self._broken(exc) from None

    def detokenize(self, ids: Sequence[int]) -> str:
        body = {"tokens": [int(i) for i in ids]}
        try:
            return check.text(self._post("/detokenize", body, TOKENIZER_DEADLINE_S))
        except InputError as exc:
            raise self._broken(exc) from None
