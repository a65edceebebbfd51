"""Stream mode on a served model: one streaming request per run; the server samples with its
own temperature / top-k / top-p / min-p / repetition penalty (and seed, where it takes one), and
each Step shows the top-N it reports. No Qt.

The servers report RAW probabilities with a stream (vLLM, llama-server without
``post_sampling_probs``, Ollama; SGLang at temperature 0 or 1, or with its raw flag), never the
distribution their sampler drew from: so a stream's Step says ``after_sampler=False``, its
``prob`` repeats the raw one and no "after sampler" bar is drawn for it. SGLang at another
temperature reports tempered probabilities, neither raw nor after its filters: the session
refuses that rather than draw them as either.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from engine.decode.base import SessionBase
from engine.records import KEEP_FULL, SERVED_STREAM, Candidate, Step
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.serve.backends import LLAMA_SERVER, OLLAMA, SGLANG, backend, stream_view
from engine.serve.http import ServedClient, ServedToken
from engine.serve.server_tokenizer import prefetch_step
from engine.serve.topn import served_start, top_n_math


def stream_parameters(kind: str, s: SamplerSettings) -> dict[str, Any]:
    """Our settings as ``kind``'s sampling parameters. vLLM: the completions names, neutral
    values left to the server (its defaults are neutral); llama-server: its whole chain with the
    rest switched off (its defaults are not neutral); Ollama: its options; SGLang: its
    sampling_params (no seed: it honours one only in deterministic mode)."""
    if kind == LLAMA_SERVER:
        from engine.serve.llama_server import chain_parameters

        return chain_parameters(s)[0]
    if kind == OLLAMA:
        return {
            "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
            "repeat_penalty": s.repetition_penalty, "seed": s.seed,
        }  # fmt: skip
    if kind == SGLANG:
        return {
            "temperature": s.temperature, "top_k": s.top_k or -1, "top_p": s.top_p,
            "min_p": s.min_p, "repetition_penalty": s.repetition_penalty,
            "min_new_tokens": s.min_new_tokens,
        }  # fmt: skip
    out: dict[str, Any] = {"temperature": s.temperature, "seed": s.seed}
    if s.top_k:
        out["top_k"] = s.top_k
    if s.top_p < 1:
        out["top_p"] = s.top_p
    if s.min_p > 0:
        out["min_p"] = s.min_p
    if s.repetition_penalty != 1:
        out["repetition_penalty"] = s.repetition_penalty
    if s.min_new_tokens:
        out["min_tokens"] = s.min_new_tokens
    return out


class RemoteStreamSession(SessionBase):
    """Stream mode: one streaming request, the server samples (its temperature, top-k, top-p,
    min-p, repetition penalty and the settings' seed); Steps carry the raw top-N it reports.
    No branching or Undo: the choices are the server's."""

    method = SERVED_STREAM

    def __init__(
        self,
        client: ServedClient,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        n_logprobs: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
        raw_flag: bool = False,
    ) -> None:
        if getattr(settings, "grammar", ""):  # the server samples: the lab cannot constrain it
            raise ValueError("Stream mode cannot keep a grammar (the server samples): use "
                             "explore mode, or clear the grammar")  # fmt: skip
        self.client = client
        self.n_logprobs = int(n_logprobs)
        self.server_requests = 0
        self.raw_flag = raw_flag  # the server's log-probabilities are raw at any temperature
        super().__init__(
            None, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=min(int(top_n), self.n_logprobs), max_context=max_context,
            keep_candidates=keep_candidates,
            start=served_start(prompt_ids, eos_token_ids, max_context), vocab=0,
        )  # fmt: skip

    @property
    def forward_passes(self) -> int:
        return self.server_requests

    def sampling_parameters(self) -> dict[str, Any]:
        """The settings as the server's own sampling parameters (``stream_parameters`` of its
        client: each server names them its way and has its own defaults)."""
        return stream_parameters(self.client.kind, self._settings or DEFAULT_SETTINGS)

    def _advance(self, room: int) -> Iterator[Step]:
        s = self._settings or DEFAULT_SETTINGS
        if not stream_view(self.client.kind, s.temperature, self.raw_flag):
            raise ValueError(
                f"{backend(self.client.kind).title} reports probabilities after its temperature "
                f"({s.temperature:g}), not raw ones: use explore mode (our sampler on its raw "
                "top-N), temperature 1, or start it with SGLANG_RETURN_ORIGINAL_LOGPROB=1 and "
                "say so (--raw-logprobs)"
            )
        self.server_requests += 1
        fed = len(self.ids)
        last = time.perf_counter()
        params = self.sampling_parameters()
        for served in self.client.stream(self.ids, room, self.n_logprobs, **params):
            now = served.arrived or time.perf_counter()  # held back a little: when it came
            if served.finish_reason == "stop" and served.token_id not in self.eos_token_ids:
                self.eos_token_ids = (*self.eos_token_ids, served.token_id)
            yield self._served_step(served, now - last, fed)
            last, fed = now, 1
            if self.finished:
                return

    def _served_step(self, served: ServedToken, elapsed: float, fed: int) -> Step:
        top = served.top[: self.n_logprobs]
        math_ = top_n_math([t.logprob for t in top])
        ids = [t.token_id for t in top]
        rank = ids.index(served.token_id) + 1 if served.token_id in ids else len(ids) + 1
        raw = math.exp(served.logprob)
        n = self.top_n
        rate = self.clock.add(elapsed, fed)
        prefetch_step(self.text_track, served.token_id, ids[:n])  # one /detokenize request
        text = self.text_track.push(served.token_id)
        show = self.text_track.show
        step = Step(
            index=len(self.history), token_id=served.token_id, text=text,
            token_str=show(served.token_id), raw_prob=raw, prob=raw, rank=rank,
            candidates=tuple(
                Candidate(i, show(i), p, p) for i, p in zip(ids[:n], math_.raw[:n], strict=True)
            ),
            survivors=len(ids), entropy_raw=math_.entropy_raw, entropy=math_.entropy_raw,
            step_time=elapsed, tokens_per_s=rate, is_eos=served.token_id in self.eos_token_ids,
            source="server", prefill=fed > 1, other_p=math_.other, entropy_lower_bound=True,
            after_sampler=False,  # the server reports raw probabilities only: no such bars
        )  # fmt: skip
        self._add(step)
        return step
