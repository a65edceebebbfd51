"""Exploring a served model (``engine.serve.remote``) with the same records as a local run. No Qt.

Explore mode (``RemoteSession``): each step asks the server for the next position's top-N raw
log-probabilities (N up to its limit, vLLM ``--max-logprobs``), sending the ids the session
holds, and then runs OUR sampler chain over those N candidates. The rest of the vocabulary is
unknown, so it enters the chain as -inf: the chain sees the top-N renormalised, exactly as a
local chain with a top-k N stage in front. Hence:

* temperature, min-p, and top-k up to N are exact; top-p and typical-p act on the N candidates
  renormalised (the mass outside them, ``Step.other_p``, is what they cannot see: with it
  counted a top-p set could only grow into the tail, never shrink);
* a repetition penalty can only lift tokens already among the N;
* ``entropy_raw`` is a lower bound (the N candidates plus the tail as one outcome), flagged by
  ``Step.entropy_lower_bound``; ``entropy`` is exact for the distribution explore samples from.

Because the session keeps every id and sends them all, Step, Stop, Continue, live settings,
forcing a token, branching and Undo work as in ``GenerationSession`` (they are its methods);
the server's prefix cache makes each step cost about one token.

Stream mode (``RemoteStreamSession``): one streaming request per run; the server samples with
its own temperature / top-k / top-p / min-p / repetition penalty and seed, and each Step shows
the raw top-N the server reports. Its processed probabilities are not reported, so ``prob``
equals ``raw_prob`` there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.decode.base import SessionBase
from engine.decode.measure import Measured, PenaltiesAtTop
from engine.decode.session import GenerationSession, StepLogits
from engine.errors import EmptyPromptError
from engine.models.catalog import served_source
from engine.models.loading import DECODER_ONLY, ModelBundle
from engine.models.prompt import DecodeStart, as_id_list
from engine.records import KEEP_FULL, SAMPLING, SERVED_STREAM, Candidate, Step
from engine.sampling.sampler import StageReport
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.serve.remote import KeySource, RemoteClient, ServedToken
from engine.serve.server_tokenizer import ServerTokenizer, prefetch_step

LN2 = math.log(2.0)


@dataclass(frozen=True)
class TopNMath:
    """What explore mode knows of one position from N candidates."""

    raw: tuple[float, ...]  # exp(logprob): true probabilities, not renormalised
    other: float  # raw mass outside the N candidates
    entropy_raw: float  # bits; a lower bound (the tail counted as one outcome)


def top_n_math(logprobs: Sequence[float]) -> TopNMath:
    raw = tuple(math.exp(lp) for lp in logprobs)
    other = max(0.0, 1.0 - math.fsum(raw))
    h = -math.fsum(p * math.log(p) for p in (*raw, other) if p > 0)
    return TopNMath(raw, other, max(0.0, h / LN2))


def _served_start(
    prompt_ids: Sequence[int], eos_token_ids: int | Iterable[int] | None, max_context: int | None
) -> DecodeStart:
    """Where a served run starts: the prompt checked against the served context."""
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
    if max_context is not None and len(prompt) >= max_context:
        raise ValueError(
            f"The prompt has {len(prompt)} tokens but the served model's context holds "
            f"{max_context}: shorten the prompt."
        )
    return DecodeStart(False, tuple(as_id_list(eos_token_ids)), [], prompt, max_context)


@dataclass(frozen=True)
class ServedLogits(StepLogits):
    """The served source's logits (its top-N log-probabilities, the tail -inf) and the top-N
    as the server listed them (their true probabilities are read from there)."""

    top: tuple[ServedToken, ...] = ()


class RemoteSession(GenerationSession):
    """Explore mode: the server gives the top-N, our chain picks. ``n_logprobs``: candidates
    asked per step (the server's limit; vLLM's default --max-logprobs is 20). ``top_n``:
    candidates kept in each Step (at most ``n_logprobs``). Only the logits source differs from
    ``GenerationSession``: ``_logits`` asks the server, ``_measure`` reads the top-N it gave."""

    method = SAMPLING

    def __init__(
        self,
        client: RemoteClient,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        n_logprobs: int = 20,
        max_context: int | None = None,
        vocab_size: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
        seed: int | None = None,
    ) -> None:
        if n_logprobs < 1 or top_n < 1:
            raise ValueError("n_logprobs and top_n must be >= 1")
        self.client = client
        self.n_logprobs = int(n_logprobs)
        super().__init__(
            None, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=min(int(top_n), self.n_logprobs), max_context=max_context,
            keep_candidates=keep_candidates, seed=seed,
            start=_served_start(prompt_ids, eos_token_ids, max_context),
            vocab=vocab_size or 0,  # 0: unknown, ids are checked by the server
        )  # fmt: skip

    def _open_source(self, use_cache: bool, fast: bool) -> torch.device:
        """No local model or KV cache: the server, whose prefix cache finds the kept prefix."""
        self.fast = False
        self.server_requests = 0
        self.latencies: list[float] = []  # seconds per next_token request
        return torch.device("cpu")

    @property
    def forward_passes(self) -> int:
        return self.server_requests

    def _check_token(self, token_id: int) -> None:
        if int(token_id) < 0 or (self.vocab_size and int(token_id) >= self.vocab_size):
            raise ValueError(f"token id {token_id} is outside the vocabulary")

    def _truncate_cache(self, length: int) -> None:
        """Nothing to crop here: the server's prefix cache finds the kept prefix itself."""

    def _advance(self, room: int) -> Iterator[Step]:
        yield self.step()

    def _learn_stop(self, served: ServedToken) -> None:
        # The server ended its one-token answer on a stop token: that token is an EOS id even
        # when no local tokenizer said so.
        if served.finish_reason == "stop" and served.token_id not in self.eos_token_ids:
            self.eos_token_ids = (*self.eos_token_ids, served.token_id)
            if self._settings is not None:
                self.settings = self._settings  # min-new-tokens must know the new EOS id

    def _logits(self) -> ServedLogits:
        """The next position's top-N log-probabilities from the server, as logits whose tail
        is -inf (the chain sees the top-N renormalised)."""
        fed = len(self.ids) if not self.server_requests else 1
        self.server_requests += 1
        served = self.client.next_token(self.ids, self.n_logprobs)
        self.latencies.append(served.seconds)
        self._learn_stop(served)
        top = served.top[: self.n_logprobs] or (ServedToken(served.token_id, served.logprob, ()),)
        cand = torch.tensor([t.token_id for t in top], dtype=torch.long)  # [n]
        # room for every id the chain may read or a forced token may take
        size = max(int(cand.max()), max(self.ids), self._forced or 0, self.vocab_size - 1) + 1
        logits = torch.full((1, size), -math.inf)  # [1, vocab]: the tail is unknown
        logits[0, cand] = torch.tensor([t.logprob for t in top], dtype=torch.float32)
        return ServedLogits(logits, torch.ones(1, dtype=torch.bool), fed, tuple(top))

    def _measure(
        self,
        source: StepLogits,
        probs: torch.Tensor,
        token: torch.Tensor,
        cut: torch.Tensor | None,
        report: StageReport,
    ) -> Measured:
        """The Step's numbers from the N candidates (true raw probabilities, not renormalised)."""
        assert isinstance(source, ServedLogits)  # _logits made it
        top, row, chosen = source.top, probs[0], int(token)
        math_ = top_n_math([t.logprob for t in top])
        ids = [t.token_id for t in top]
        at = torch.tensor(ids)
        post = row[at].double().tolist()
        cuts = cut[0, at].tolist() if cut is not None else [-1] * len(ids)
        kept = row[row > 0].double()
        entropy = float(-(kept * kept.log()).sum() / LN2) if kept.numel() else 0.0
        rank = ids.index(chosen) + 1 if chosen in ids else len(ids) + 1
        n = self.top_n
        prefetch_step(self.text_track, chosen, ids[:n])  # a served tokenizer: one request
        block = report.note_block()
        return Measured(
            penalties=_penalties_at(report, at[:n]),
            extra=tuple(block.reshape(-1).double().tolist()) if block is not None else (),
            token_id=chosen,
            raw_prob=math_.raw[rank - 1] if rank <= len(ids) else 0.0,
            prob=float(row[chosen]) if chosen < row.shape[0] else 0.0,
            rank=rank,
            survivors=int((row > 0).sum()),
            entropy_raw=math_.entropy_raw,
            entropy=max(0.0, entropy),
            finite=True,
            top_ids=tuple(ids[:n]),
            top_raw=math_.raw[:n],
            top_prob=tuple(post[:n]),
            top_cut=tuple(int(c) for c in cuts[:n]),
            other_p=math_.other,
            entropy_lower_bound=True,
        )


def _penalties_at(report: StageReport, ids: torch.Tensor) -> PenaltiesAtTop | None:
    """What the penalties did to the shown candidates, as the local session reads it."""
    trace = report.penalties
    if trace is None:
        return None
    before, after = trace.before[0, ids].double().tolist(), trace.after[0, ids].double().tolist()
    return PenaltiesAtTop(
        tuple(before), tuple(after), tuple(int(b) for b in trace.changed_by[0, ids].tolist())
    )


class RemoteStreamSession(SessionBase):
    """Stream mode: one streaming request, the server samples (its temperature, top-k, top-p,
    min-p, repetition penalty and the settings' seed); Steps carry the raw top-N it reports.
    No branching or Undo: the choices are the server's."""

    method = SERVED_STREAM

    def __init__(
        self,
        client: RemoteClient,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        n_logprobs: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
    ) -> None:
        if getattr(settings, "grammar", ""):  # the server samples: the lab cannot constrain it
            raise ValueError("Stream mode cannot keep a grammar (the server samples): use "
                             "explore mode, or clear the grammar")  # fmt: skip
        self.client = client
        self.n_logprobs = int(n_logprobs)
        self.server_requests = 0
        super().__init__(
            None, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=min(int(top_n), self.n_logprobs), max_context=max_context,
            keep_candidates=keep_candidates,
            start=_served_start(prompt_ids, eos_token_ids, max_context), vocab=0,
        )  # fmt: skip

    @property
    def forward_passes(self) -> int:
        return self.server_requests

    def sampling_parameters(self) -> dict[str, Any]:
        """The settings as completions parameters; neutral values are left to the server."""
        s = self._settings or DEFAULT_SETTINGS
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

    def _advance(self, room: int) -> Iterator[Step]:
        self.server_requests += 1
        fed = len(self.ids)
        last = time.perf_counter()
        params = self.sampling_parameters()
        for served in self.client.stream(self.ids, room, self.n_logprobs, **params):
            now = time.perf_counter()
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
        )  # fmt: skip
        self._add(step)
        return step


# -- the served model as the window and the workbench see it ---------------------------------


@dataclass
class RemoteBundle(ModelBundle):
    """A served model in the place of a loaded one: ``model`` is None, ``client`` talks to the
    server. ``make_session`` builds the run's session (explore, or stream for SERVED_STREAM)."""

    client: RemoteClient | None = None
    n_logprobs: int = 20
    key_source: KeySource | None = None

    def describe(self) -> str:
        assert self.client is not None
        return f"{self.client.model} · served by {self.client.host} · top-{self.n_logprobs}"

    def make_session(self, ids: list[int], request: Any) -> SessionBase:
        assert self.client is not None
        common: dict[str, Any] = dict(
            tokenizer=self.tokenizer, eos_token_ids=self.eos_token_ids,
            top_n=min(request.top_n, self.n_logprobs), n_logprobs=self.n_logprobs,
            max_context=self.context_length, keep_candidates=request.keep_candidates,
        )  # fmt: skip
        if request.method == SERVED_STREAM:
            return RemoteStreamSession(self.client, ids, request.settings, **common)
        if request.method != SAMPLING:
            raise ValueError(
                "A served model runs token by token (explore) or streamed by the server; beam "
                "search and speculative decoding need the model here."
            )
        return RemoteSession(self.client, ids, request.settings, **common)


def open_served(
    url: str,
    model: str | None = None,
    key_source: KeySource | None = None,
    *,
    tokenizer: str | None = None,
    n_logprobs: int = 20,
    verify: bool = True,
    timeout: float = 60.0,
    api_key: str | None = None,
) -> RemoteBundle:
    """Connect to an OpenAI-compatible server and describe its model as a bundle the workbench
    runs like a loaded one. ``tokenizer``: a hub id or folder of the same tokenizer (default:
    the served model's name, when it names one here; else the server's /tokenize and
    /detokenize). Raises ``RemoteError`` with a clear message when the server cannot be used."""
    client = RemoteClient(
        url, model, key_source=key_source, api_key=api_key, verify=verify, timeout=timeout
    )
    try:
        context = client.max_model_len()
        local = _local_tokenizer(tokenizer or client.model)
        client.vocab_size = len(local) if local is not None else None  # ids it lacks: noted
        tok: Any = local if local is not None else ServerTokenizer(client)
        # One real step: says now, not at the first Generate, whether token-id prompts and
        # this many log-probabilities are accepted.
        client.next_token(tok("Hello")["input_ids"], n_logprobs)
    except Exception:
        client.close()
        raise
    eos = _eos_ids(tokenizer or client.model, tok)
    key_kind = key_source.kind if key_source is not None else "none"
    return RemoteBundle(
        model=None, tokenizer=tok, kind=DECODER_ONLY, device=torch.device("cpu"),  # type: ignore[arg-type]
        dtype=torch.float32, name=f"{client.model} @ {client.host}", source=client.base_url,
        context_length=context, eos_token_ids=eos, extra={"served": True},
        source_key=served_source(client.base_url, client.model, key_kind), client=client,
        n_logprobs=n_logprobs,
        key_source=key_source,
    )  # fmt: skip


def _local_tokenizer(source: str) -> Any | None:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception:  # noqa: BLE001 - not a local folder or cached hub id: use the server's
        return None


def _eos_ids(source: str, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    try:
        from transformers import GenerationConfig

        ids += as_id_list(GenerationConfig.from_pretrained(source).eos_token_id)
    except Exception:  # noqa: BLE001 - no generation config here: the tokenizer's EOS
        pass
    ids += as_id_list(getattr(tokenizer, "eos_token_id", None))
    return tuple(dict.fromkeys(ids))
