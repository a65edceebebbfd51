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

With ``server_sampler`` (llama-server only: ``post_sampling_probs``) each step also asks the
server's OWN sampler at the same position, with our settings mapped to llama.cpp's chain, and
each candidate carries its result (``Candidate.server_prob``): our chain and llama.cpp's side
by side on the same logits.

Stream mode is ``engine.serve.remote_stream``; what each server returns is
``engine.serve.backends``; ``open_served`` connects to any of them (``engine.serve.connect``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from engine.decode.measure import Measured, PenaltiesAtTop
from engine.decode.session import GenerationSession, StepLogits
from engine.models.catalog import served_source
from engine.models.loading import DECODER_ONLY, ModelBundle
from engine.models.prompt import as_id_list
from engine.records import KEEP_FULL, SAMPLING, SERVED_STREAM, Step
from engine.sampling.sampler import StageReport
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.serve.backends import backend, capability_line, capability_versions
from engine.serve.http import ServedClient, ServedToken, TopToken
from engine.serve.remote_errors import KeySource
from engine.serve.remote_stream import RemoteStreamSession
from engine.serve.server_tokenizer import ServerTokenizer, prefetch_step
from engine.serve.topn import LN2, TopNMath, served_start, top_n_math
from engine.validate.served import printable

__all__ = ["RemoteBundle", "RemoteSession", "RemoteStreamSession", "TopNMath", "open_served",
           "top_n_math"]  # fmt: skip


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
    whole_greedy = False  # its greedy steps go through _measure too

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
        vocab_size: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
        seed: int | None = None,
        server_sampler: bool = False,
    ) -> None:
        if n_logprobs < 1 or top_n < 1:
            raise ValueError("n_logprobs and top_n must be >= 1")
        if server_sampler and not backend(client.kind).post_sampling:
            raise ValueError(
                f"{backend(client.kind).title} does not report its own sampler's probabilities: "
                "only llama-server does (post_sampling_probs)"
            )
        self.client = client
        self.n_logprobs = int(n_logprobs)
        self.server_sampler = server_sampler
        self._server_top: tuple[TopToken, ...] | None = None  # its sampler at the last step
        self._server_label = ""
        super().__init__(
            None, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=min(int(top_n), self.n_logprobs), max_context=max_context,
            keep_candidates=keep_candidates, seed=seed,
            start=served_start(prompt_ids, eos_token_ids, max_context),
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
        if self.server_sampler:
            self._ask_server_sampler()
        return ServedLogits(logits, torch.ones(1, dtype=torch.bool), fed, tuple(top))

    def _ask_server_sampler(self) -> None:
        """llama.cpp's own chain at this position, with our settings (one more request; its
        prompt cache makes it cost one token). Stages it cannot run are named in the label."""
        from engine.serve.llama_server import chain_parameters

        params, missing = chain_parameters(self.settings)
        self.server_requests += 1
        sampler_probs = self.client.sampler_probs  # type: ignore[attr-defined]
        self._server_top = sampler_probs(self.ids, self.n_logprobs, params)
        self._server_label = "llama.cpp" + (f" (without {', '.join(missing)})" if missing else "")

    def _make_step(self, m: Measured, *args: Any, **kwargs: Any) -> Step:
        """The step as the local session makes it, with the server's own sampler beside ours:
        a candidate its chain kept has its probability, one it cut 0.0; one it may have kept
        past the N it listed is unknown (None)."""
        step = super()._make_step(m, *args, **kwargs)
        server, self._server_top = self._server_top, None
        if server is None:
            return step
        listed = {t.token_id: math.exp(t.logprob) for t in server}
        complete = len(server) < self.n_logprobs  # fewer than asked: all its survivors
        candidates = tuple(
            replace(c, server_prob=listed.get(c.token_id, 0.0 if complete else None))
            for c in step.candidates
        )
        return replace(step, candidates=candidates, server_sampler=self._server_label)

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


# -- the served model as the window and the workbench see it ---------------------------------


@dataclass
class RemoteBundle(ModelBundle):
    """A served model in the place of a loaded one: ``model`` is None, ``client`` talks to the
    server. ``make_session`` builds the run's session (explore, or stream for SERVED_STREAM).
    ``server_kind``: which server (``engine.serve.backends``); ``server_sampler``: llama-server's
    own sampler beside ours in explore mode; ``raw_flag``: the user says the server's
    log-probabilities are raw at any temperature (SGLang's SGLANG_RETURN_ORIGINAL_LOGPROB)."""

    client: ServedClient | None = None
    n_logprobs: int = 20
    key_source: KeySource | None = None
    server_kind: str = "vllm"
    server_sampler: bool = False
    raw_flag: bool = False
    detected: str = ""  # how the kind was known

    def describe(self) -> str:
        assert self.client is not None
        title = backend(self.server_kind).title
        name = (
            self.client.model.rsplit("/", 1)[-1]
            if self.client.model.endswith(".gguf")
            else (self.client.model)
        )  # llama-server names its model by the file's path: the file is enough
        # the model id is the server's text: shown with its control characters escaped
        return printable(f"{name} · {title} at {self.client.host} · top-{self.n_logprobs}")

    def capability(self) -> str:
        """The one line that says what this server's bars are (the window and the CLI)."""
        return capability_line(
            self.server_kind, self.n_logprobs, self.server_sampler, self.raw_flag
        )

    def capability_versions(self) -> tuple[str, ...]:
        """That line, then shorter ones saying the same (the window fits one on a line)."""
        return capability_versions(
            self.server_kind, self.n_logprobs, self.server_sampler, self.raw_flag
        )

    def make_session(self, ids: list[int], request: Any) -> Any:
        assert self.client is not None
        common: dict[str, Any] = dict(
            tokenizer=self.tokenizer, eos_token_ids=self.eos_token_ids,
            top_n=min(request.top_n, self.n_logprobs), n_logprobs=self.n_logprobs,
            max_context=self.context_length, keep_candidates=request.keep_candidates,
        )  # fmt: skip
        if request.method == SERVED_STREAM:
            raw = self.raw_flag
            return RemoteStreamSession(self.client, ids, request.settings, raw_flag=raw, **common)
        if request.method != SAMPLING:
            raise ValueError(
                "A served model runs token by token (explore) or streamed by the server; beam "
                "search and speculative decoding need the model here."
            )
        return RemoteSession(
            self.client, ids, request.settings, server_sampler=self.server_sampler, **common
        )


def open_served(
    url: str,
    model: str | None = None,
    key_source: KeySource | None = None,
    *,
    kind: str = "auto",
    tokenizer: str | None = None,
    n_logprobs: int = 20,
    verify: bool = True,
    timeout: float = 60.0,
    api_key: str | None = None,
    server_sampler: bool = False,
    raw_logprobs: bool = False,
) -> RemoteBundle:
    """Connect to a served model (``kind``: vllm, llama-server, ollama, sglang, or auto: asked
    of the server) and describe it as a bundle the workbench runs like a loaded one.
    ``tokenizer``: a hub id or folder of the same tokenizer (default: the served model's name,
    when it names one here; else the server's /tokenize and /detokenize, where it has them).
    ``n_logprobs`` is capped at the server's own limit (Ollama: 20). Raises ``RemoteError``
    (or ``ValueError``) with a clear message when the server cannot be used."""
    from engine.serve.connect import client_for

    options = dict(key_source=key_source, api_key=api_key, verify=verify, timeout=timeout)
    client, how = client_for(kind, url, model, **options)
    caps = backend(client.kind)
    n_logprobs = min(n_logprobs, caps.max_top_n or n_logprobs)
    try:
        if server_sampler and not caps.post_sampling:
            raise ValueError(f"{caps.title} does not report its own sampler's probabilities.")
        tok, context = _prepare(client, tokenizer)
        # One real step: says now, not at the first Generate, whether token-id prompts and
        # this many log-probabilities are accepted.
        client.next_token(tok("Hello")["input_ids"], n_logprobs)
    except Exception:
        client.close()
        raise
    eos = _eos_ids(tokenizer or client.model, tok)
    key_kind = key_source.kind if key_source is not None else "none"
    source_key = served_source(client.base_url, client.model, key_kind, client.kind)
    return RemoteBundle(
        model=None, tokenizer=tok, kind=DECODER_ONLY, device=torch.device("cpu"),  # type: ignore[arg-type]
        dtype=torch.float32, name=printable(f"{client.model} @ {client.host}"),
        source=client.base_url,
        context_length=context, eos_token_ids=eos, extra={"served": True},
        source_key=source_key, client=client, n_logprobs=n_logprobs, key_source=key_source,
        server_kind=client.kind, server_sampler=server_sampler, raw_flag=raw_logprobs,
        detected=how,
    )  # fmt: skip


def _prepare(client: Any, tokenizer: str | None) -> tuple[Any, int | None]:
    """The tokenizer the lab uses with ``client`` (local, else the server's), the served
    context, and what the client needs of the tokenizer (Ollama: text and pieces)."""
    caps = backend(client.kind)
    context = client.max_model_len()
    served_vocab = getattr(client, "served_vocab", lambda: None)()
    if served_vocab:  # llama-server says its vocabulary: a larger id is a broken reply
        client.id_limit = min(client.id_limit, served_vocab)
    local = _local_tokenizer(tokenizer or client.model)
    client.vocab_size = len(local) if local is not None else None  # ids it lacks: noted
    if local is None and not caps.tokenizer_routes:
        raise ValueError(
            f"{caps.title} has no tokenizer routes the lab can use: give a local copy of the "
            "model's tokenizer (--tokenizer, a hub id or folder; in the window: Tokenizer)."
        )
    if client.kind == "ollama":
        from engine.serve.ollama import PieceMap

        client.pieces = PieceMap(local)
        client.text_of = lambda ids: local.decode(list(ids), skip_special_tokens=False)
    return (local if local is not None else ServerTokenizer(client)), context


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
