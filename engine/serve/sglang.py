"""A model served by SGLang, through its native ``POST /generate`` (docs/basic_usage/
sampling_params.md): a prompt as ``input_ids``, ``return_logprob`` with ``top_logprobs_num``
candidates, and ``logprob_start_len`` 0 for the prompt's own log-probabilities (scoring a
text). No Qt, no torch.

SGLang's log-probabilities are its sampler's: after its temperature, before its top-k / top-p
/ min-p. Explore mode asks at temperature 0 (SGLang runs greedy as temperature 1 with top-k 1,
so the log-probabilities are the raw distribution); a stream at another temperature reports
tempered ones, which the lab does not draw as raw (``backends.stream_view``) unless the user
says the server runs with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``. Its prompt log-probabilities
give each token's value but no rank over the vocabulary: a token outside the top-N gets the
bound N + 1.
"""

from __future__ import annotations

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
from engine.validate import served as openai_check
from engine.validate import served_sglang as check
from engine.validate.limits import STREAM_SECONDS_PER_TOKEN

NEUTRAL = {"top_k": -1, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0}


class SGLangClient(HttpClient):
    """One SGLang server (it serves one model: ``/v1/models`` names it)."""

    kind = "sglang"

    def __init__(self, base_url: str, model: str | None = None, **options: Any) -> None:
        super().__init__(base_url, **options)
        listed = self.models()
        if model and model not in {m.name for m in listed}:
            names = ", ".join(m.name for m in listed)
            raise RemoteError(MODEL_NOT_FOUND, f"SGLang serves {names}, not {model!r}.")
        self.model = model or listed[0].name
        self._yielded = 0  # tokens of the current stream already passed on

    def models(self) -> list[ServedModelInfo]:
        data = self._json(self._send("GET", "/v1/models"))
        try:
            out = [ServedModelInfo(name, size) for name, size in openai_check.models(data)]
        except InputError as exc:
            raise self._broken(exc) from None
        if not out:
            raise RemoteError(MODEL_NOT_FOUND, f"The server at {self.base_url} serves no model.")
        return out

    def max_model_len(self) -> int | None:
        return next((m.max_model_len for m in self.models() if m.name == self.model), None)

    # -- positions ---------------------------------------------------------------------------

    def _body(self, ids: Sequence[int], n: int, params: dict[str, Any], **extra: Any) -> dict:
        return {
            "input_ids": [int(i) for i in ids], "sampling_params": params,
            "return_logprob": True, "top_logprobs_num": int(n), **extra,
        }  # fmt: skip

    def _served(self, data: Any, seconds: float = 0.0) -> list[ServedToken]:
        try:
            rows = check.output_positions(data, self.id_limit)
        except InputError as exc:
            raise self._broken(exc) from None
        out = []
        for p in rows:
            top = tuple(TopToken(i, lp) for i, lp, _w in p.top)
            assert p.logprob is not None  # output positions always carry one (checked)
            out.append(ServedToken(p.token_id, p.logprob, top, None, seconds))
            self.note_ids([p.token_id, *(t.token_id for t in top)])
        return out

    def _finish(self, data: Any) -> str | None:
        try:
            return check.finish_reason(data)
        except InputError as exc:
            raise RemoteError(BAD_RESPONSE, str(exc)) from None

    def _answer(self, data: Any, seconds: float = 0.0) -> list[ServedToken]:
        served = self._served(data, seconds)
        reason = self._finish(data)
        if served and reason:
            last = served[-1]
            served[-1] = ServedToken(last.token_id, last.logprob, last.top, reason, seconds)
        return served

    def next_token(self, ids: Sequence[int], n_logprobs: int = 20) -> ServedToken:
        """The raw top-N after ``ids`` (temperature 0: SGLang's greedy, raw log-probabilities)."""
        params = {**NEUTRAL, "max_new_tokens": 1, "temperature": 0.0}
        start = time.perf_counter()
        budget = self.reply_budget(len(ids), 1, n_logprobs)
        data = self._post("/generate", self._body(ids, n_logprobs, params), None, budget)
        served = self._within_asked(self._answer(data, time.perf_counter() - start), 1)
        if not served:
            raise RemoteError(BAD_RESPONSE, "SGLang's answer has no token.")
        return served[0]

    def complete(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 1, **sampling: Any
    ) -> list[ServedToken]:
        params = {**NEUTRAL, **sampling, "max_new_tokens": int(max_tokens)}
        budget = self.reply_budget(len(ids), int(max_tokens), n_logprobs)
        data = self._post("/generate", self._body(ids, n_logprobs, params), None, budget)
        return self._within_asked(self._answer(data), int(max_tokens))

    def stream(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 20, **sampling: Any
    ) -> Iterator[ServedToken]:
        """SGLang samples; each event's lists are the answer so far (or its new part)."""
        params = {**NEUTRAL, **sampling, "max_new_tokens": int(max_tokens)}
        body = self._body(ids, n_logprobs, params, stream=True)
        seconds = self.deadline + STREAM_SECONDS_PER_TOKEN * int(max_tokens)
        self._yielded = 0
        events = self._events("/generate", body, seconds)
        yield from at_most(with_finish(events, self._new, self._finish), int(max_tokens))

    def _new(self, event: Any) -> list[ServedToken]:
        """The tokens of a stream event not passed on yet (cumulative or incremental lists)."""
        got = self._served(event)
        try:
            total = check.completion_tokens(event)
        except InputError as exc:
            raise self._broken(exc) from None
        if total is None:  # no count: the lists are the whole answer so far
            fresh = got[self._yielded :]
        else:  # the last (total - yielded) of the list, whichever way it was sent
            new = max(0, total - self._yielded)
            fresh = got[len(got) - new :] if new else []
        self._yielded += len(fresh)
        return fresh

    # -- scoring -----------------------------------------------------------------------------

    def prompt_positions(self, ids: Sequence[int], n_logprobs: int) -> list[check.SGLangPosition]:
        """Every prompt position's log-probability and top-N (``logprob_start_len`` 0)."""
        params = {**NEUTRAL, "max_new_tokens": 1, "temperature": 0.0}
        body = self._body(ids, n_logprobs, params, logprob_start_len=0)
        limit = min(self.id_limit, self.vocab_size or self.id_limit)
        budget = self.reply_budget(len(ids), len(ids) + 1, n_logprobs)
        try:
            data = self._post("/generate", body, None, budget)
            return check.prompt_positions(data, list(ids), limit)
        except InputError as exc:
            raise self._broken(exc) from None
