"""A model served by Ollama (>= 0.12.11, which returns log-probabilities), through its native
``POST /api/generate`` (docs/openapi.yaml). No Qt, no torch.

Ollama differs from the other servers in two ways the lab must say rather than hide:

* It takes a prompt as TEXT and answers tokens as TEXT. The lab sends the text of the ids it
  holds (``raw``: no template of Ollama's around it) and maps each piece back to an id with
  the local copy of the model's tokenizer (``PieceMap``; a local tokenizer is required). So a
  branch continues from the text, re-tokenised by the server, not from exactly the ids, and a
  piece the tokenizer spells with more than one id (or not at all) is left out of the
  candidates: its probability joins the "other" mass instead of being given to a guess.
* Its log-probabilities are the raw distribution whatever the temperature (llm/llama_server.go
  asks llama-server for ``n_probs`` without ``post_sampling_probs``; Ollama issue #16196), and
  it gives at most 20 candidates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
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
from engine.validate import served_ollama as check
from engine.validate.limits import STREAM_SECONDS_PER_TOKEN

# The Ollama options that switch its sampler's stages off (its defaults are not neutral:
# top_k 40, top_p 0.9, repeat_penalty 1.1).
NEUTRAL = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "typical_p": 1.0}


class PieceMap:
    """Token text -> id, from the local tokenizer: every id's text (as decoded alone, and as
    its vocabulary entry with SentencePiece's "▁" read as a space). A text two ids share is
    ambiguous and maps to none."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._map: dict[str, int] | None = None

    def _build(self) -> dict[str, int]:
        seen: dict[str, set[int]] = {}
        tok = self.tokenizer
        for i in range(len(tok)):
            for text in {tok.decode([i]), str(tok.convert_ids_to_tokens(i)).replace("▁", " ")}:
                if text and "\ufffd" not in text:
                    seen.setdefault(text, set()).add(i)
        return {text: next(iter(ids)) for text, ids in seen.items() if len(ids) == 1}

    def id_of(self, piece: str) -> int | None:
        if self._map is None:
            self._map = self._build()
        return self._map.get(piece)


class OllamaClient(HttpClient):
    """One Ollama server and one of its models. ``pieces``: the local tokenizer's piece map;
    ``text_of``: ids -> text (the local tokenizer's decode); both are set by whoever opens the
    model (``open_served``) before a position is asked for."""

    kind = "ollama"

    def __init__(self, base_url: str, model: str | None = None, **options: Any) -> None:
        super().__init__(base_url, **options)
        names = [m.name for m in self.models()]
        if model and model not in names and f"{model}:latest" not in names:
            raise RemoteError(
                MODEL_NOT_FOUND,
                f"Ollama has no model named {model!r}. It has: {', '.join(names) or 'none'} "
                f"(ollama pull {model} fetches it).",
            )
        if not names:
            raise RemoteError(MODEL_NOT_FOUND, f"Ollama at {self.base_url} has no model.")
        self.model = model or names[0]
        self.pieces: PieceMap | None = None
        self.text_of: Callable[[Sequence[int]], str] | None = None
        self.unmapped = 0  # candidates left out: no single id spells their text

    def models(self) -> list[ServedModelInfo]:
        try:
            names = check.model_names(self._json(self._send("GET", "/api/tags")))
        except InputError as exc:
            raise self._broken(exc) from None
        return [ServedModelInfo(name, None) for name in names]

    def max_model_len(self) -> int | None:
        return None  # Ollama's context is a per-request option (num_ctx); it truncates silently

    # -- positions ---------------------------------------------------------------------------

    def _body(self, ids: Sequence[int], n: int, stream: bool, options: dict[str, Any]) -> dict:
        if self.text_of is None:
            raise RemoteError(
                BAD_RESPONSE,
                "Ollama takes text, not token ids: the lab needs a local copy of the model's "
                "tokenizer (--tokenizer) to send text and read its tokens back as ids.",
            )
        top = min(int(n), check.MAX_OLLAMA_TOP)
        return {
            "model": self.model, "prompt": self.text_of(list(ids)), "raw": True,
            "stream": stream, "logprobs": True, "top_logprobs": top, "options": options,
        }  # fmt: skip

    def _id(self, piece: str) -> int | None:
        return self.pieces.id_of(piece) if self.pieces is not None else None

    def _served(self, data: Any, seconds: float = 0.0) -> list[ServedToken]:
        try:
            rows = check.positions(data)
        except InputError as exc:
            raise self._broken(exc) from None
        out = []
        for p in rows:
            top = []
            for piece, lp in p.top:
                tid = self._id(piece)
                if tid is None:
                    self.unmapped += 1
                else:
                    top.append(TopToken(tid, lp))
            chosen = self._id(p.piece)
            if chosen is None:
                raise RemoteError(
                    BAD_RESPONSE,
                    f"Ollama chose the token {p.piece[:40]!r}, which the local tokenizer does not "
                    "spell with one id: is it the served model's tokenizer?",
                )
            if not check.same_model(p.model, self.model):
                raise RemoteError(
                    BAD_RESPONSE,
                    f"Ollama at {self.base_url} answered as the model {p.model[:80]!r}, not "
                    f"{self.model!r}: the model changed under the run, which stops here (the "
                    "tokens so far are kept).",
                )
            out.append(self._step(chosen, p.logprob, top, p.finish_reason, seconds, len(out)))
        return out

    def next_token(self, ids: Sequence[int], n_logprobs: int = 20) -> ServedToken:
        """The raw top-N after the text of ``ids`` (Ollama's greedy token with it)."""
        options = {**NEUTRAL, "num_predict": 1, "temperature": 0.0}
        start = time.perf_counter()
        budget = self.reply_budget(len(ids), 1, n_logprobs)
        data = self._post(
            "/api/generate", self._body(ids, n_logprobs, False, options), None, budget
        )
        served = self._within_asked(self._served(data, time.perf_counter() - start), 1)
        if not served:
            raise RemoteError(BAD_RESPONSE, "Ollama's answer has no token.")
        return served[0]

    def complete(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 1, **sampling: Any
    ) -> list[ServedToken]:
        options = {**NEUTRAL, **sampling, "num_predict": int(max_tokens)}
        budget = self.reply_budget(len(ids), int(max_tokens), n_logprobs)
        data = self._post(
            "/api/generate", self._body(ids, n_logprobs, False, options), None, budget
        )
        return self._within_asked(self._served(data), int(max_tokens))

    def stream(
        self, ids: Sequence[int], max_tokens: int, n_logprobs: int = 20, **sampling: Any
    ) -> Iterator[ServedToken]:
        """Ollama samples (``sampling``: its options); one JSON object per line."""
        options = {**NEUTRAL, **sampling, "num_predict": int(max_tokens)}
        seconds = self.deadline + STREAM_SECONDS_PER_TOKEN * int(max_tokens)
        lines = self._events("/api/generate", self._body(ids, n_logprobs, True, options), seconds)
        yield from at_most(with_finish(lines, self._served, check.done), int(max_tokens))
