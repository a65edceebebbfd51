"""The decode loops.

* ``ModelStepper`` feeds tokens to a decoder-only or encoder-decoder model, with or without a
  KV cache, and returns the next-token logits. The encoder runs once per stepper.
* ``GenerationSession`` is the streaming per-step API the GUI drives: ``stream()`` is a
  generator that yields one frozen ``Step`` per token. Between tokens the caller may change the
  settings, force the next token, or branch from an earlier step (the cache is cropped, not
  recomputed). Stopping the iteration is how a caller cancels.
* ``autoregressive_generate`` / ``autoregressive_generate_encoder_decoder`` are the
  seed-compatible functions (romsto/Speculative-Decoding signatures).
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, EncoderDecoderCache

from engine.errors import EmptyPromptError, NonFiniteLogitsError
from engine.processors import GreedyProcessor, SeedLogitsProcessor, apply_chain
from engine.records import Candidate, RunSummary, Step
from engine.settings import DEFAULT_SETTINGS, SamplerSettings

LN2 = math.log(2.0)


def _as_id_list(ids: int | Iterable[int] | None) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


def model_device(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover - a model without parameters
        return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a clock read afterwards measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # pragma: no cover - no MPS here
        torch.mps.synchronize()


def context_length(model: torch.nn.Module) -> int | None:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_context_length", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None  # relative positions (T5): no hard limit


def common_prefix(cached: list[int], ids: Sequence[int]) -> int:
    """How many leading ids two sequences share (the cache positions that can be kept)."""
    n = len(cached)
    if list(ids[:n]) == cached:  # the usual case: the sequence only grew
        return n
    for i, (a, b) in enumerate(zip(cached, ids, strict=False)):
        if a != b:
            return i
    return min(n, len(ids))


class ModelStepper:
    """Runs the model on a growing (decoder) sequence and returns next-token logits.

    With ``use_cache`` the stepper remembers which ids are in its KV cache. Each call feeds only
    what is new; if the sequence changed (a branch, rejected drafts) the cache is first cropped
    to the common prefix, never recomputed. Without a cache every call re-runs the whole
    sequence. The encoder of an encoder-decoder model runs once, in ``__init__``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        encoder_input_ids: Sequence[int] | None = None,
        use_cache: bool = True,
    ) -> None:
        self.model = model
        self.device = model_device(model)
        self.use_cache = use_cache
        self.is_encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        self._keep_last = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.forward_passes = 0
        self._cached_ids: list[int] = []
        self._cache: Any = None
        self._encoder_outputs: Any = None
        self._encoder_mask: torch.Tensor | None = None
        if self.is_encoder_decoder:
            if encoder_input_ids is None or len(encoder_input_ids) == 0:
                raise EmptyPromptError("The encoder input is empty: type a prompt first.")
            enc = torch.tensor([list(encoder_input_ids)], dtype=torch.long, device=self.device)
            self._encoder_mask = torch.ones_like(enc)
            with torch.inference_mode():
                # The encoder runs exactly once; every decoder step cross-attends to its output.
                self._encoder_outputs = model.get_encoder()(
                    input_ids=enc, attention_mask=self._encoder_mask, return_dict=True
                )
        self.reset_cache()

    @property
    def cached(self) -> int:
        """How many ids are in the KV cache."""
        return len(self._cached_ids)

    def reset_cache(self) -> None:
        self._cached_ids = []
        if not self.use_cache:
            self._cache = None
        elif self.is_encoder_decoder:
            self._cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        else:
            self._cache = DynamicCache(config=self.model.config)

    def truncate(self, length: int) -> None:
        """Forget cached positions at and after ``length`` (decoder positions)."""
        length = max(0, length)
        if self.use_cache and self.cached > length:
            # transformers 5: crop() takes the (negative) number of positions to remove.
            self._cache.crop(length - self.cached)
            del self._cached_ids[length:]

    @torch.inference_mode()
    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        """ids: the whole decoder sequence so far. Returns the logits of its last ``keep``
        positions in float32: [keep, vocab] (row j predicts the id after ids[len - keep + j]).
        With keep == 1 the shape is [1, vocab]."""
        if len(ids) < keep:
            raise ValueError(f"need at least {keep} ids, got {len(ids)}")
        if self.use_cache:
            self.truncate(min(common_prefix(self._cached_ids, ids), len(ids) - keep))
            new = list(ids[self.cached :])
        else:
            new = list(ids)
        x = torch.tensor([new], dtype=torch.long, device=self.device)  # [1, n]
        kwargs: dict[str, Any] = {"use_cache": self.use_cache}
        if self.use_cache:
            kwargs["past_key_values"] = self._cache
        if self._keep_last:
            kwargs["logits_to_keep"] = keep
        if self.is_encoder_decoder:
            out = self.model(
                encoder_outputs=self._encoder_outputs,
                attention_mask=self._encoder_mask,
                decoder_input_ids=x,
                **kwargs,
            )
        else:
            out = self.model(input_ids=x, **kwargs)
        self.forward_passes += 1
        if self.use_cache:
            self._cache = out.past_key_values
            self._cached_ids.extend(new)
        return out.logits[0, -keep:, :].float()  # [keep, vocab]


def make_stepper(
    model: torch.nn.Module,
    encoder_input_ids: Sequence[int] | None = None,
    use_cache: bool = True,
    fast: bool = False,
    max_len: int | None = None,
) -> Any:
    """The lean Llama-family path when asked for and supported, else ``ModelStepper``."""
    if fast and use_cache and encoder_input_ids is None:
        from engine.fastpath import fast_stepper_or_none

        stepper = fast_stepper_or_none(model, max_len=max_len)
        if stepper is not None:
            return stepper
    return ModelStepper(model, encoder_input_ids, use_cache=use_cache)


# --------------------------------------------------------------------------------------------
# Incremental detokenisation
# --------------------------------------------------------------------------------------------


class IncrementalDetokenizer:
    """Turns a growing list of ids into text pieces, correct for characters split across
    tokens: a piece is only emitted once it no longer ends in an incomplete character (U+FFFD);
    until then the token's piece is "" and a later token carries the whole character."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._offsets: list[tuple[int, int]] = []  # (prefix, read) before each push

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def push(self, token_id: int) -> str:
        self._offsets.append((self._prefix, self._read))
        self.ids.append(token_id)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return after[len(before) :]
        return ""

    def truncate(self, n: int) -> None:
        """Forget everything from the n-th pushed id on."""
        if n < len(self.ids):
            self._prefix, self._read = self._offsets[n]
            del self.ids[n:]
            del self._offsets[n:]


class TokenTable:
    """Display strings of single tokens, decoded once and kept."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            if self.tokenizer is None:
                text = f"<{token_id}>"
            else:
                text = self.tokenizer.decode([token_id], skip_special_tokens=False)
                if "\ufffd" in text or text == "":  # a lone byte: show the raw token instead
                    raw = self.tokenizer.convert_ids_to_tokens(token_id)
                    text = raw if isinstance(raw, str) else f"<{token_id}>"
            self._cache[token_id] = text
        return text


# --------------------------------------------------------------------------------------------
# The streaming session
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeStart:
    """Where a run starts: the decoder sequence, the encoder input (encoder-decoder only), the
    EOS ids and the context limit. Shared by plain and speculative sessions."""

    is_encoder_decoder: bool
    eos_token_ids: tuple[int, ...]
    encoder_ids: list[int]
    ids: list[int]
    max_context: int | None


def decode_start(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    eos_token_ids: int | Iterable[int] | None,
    max_context: int | None,
) -> DecodeStart:
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
    if eos_token_ids is None:
        eos_token_ids = getattr(model.config, "eos_token_id", None)
    eos = tuple(_as_id_list(eos_token_ids))
    if getattr(model.config, "is_encoder_decoder", False):
        start = model.config.decoder_start_token_id
        if start is None:
            raise ValueError(
                "This encoder-decoder model has no decoder_start_token_id in its config."
            )
        return DecodeStart(True, eos, prompt, [int(start)], max_context)
    limit = max_context or context_length(model)
    if limit is not None and len(prompt) >= limit:
        raise ValueError(
            f"The prompt has {len(prompt)} tokens but the model's context holds {limit}: "
            "shorten the prompt."
        )
    return DecodeStart(False, eos, [], prompt, limit)


def _step_seed(seed: int, index: int) -> int:
    # One generator state per (seed, step): a branch replays the same randomness at each index.
    return (seed * 6364136223846793005 + index * 1442695040888963407 + 1) % (2**63 - 1)


class GenerationSession:
    """Token-by-token generation with full per-step records.

    ``prompt_ids`` are the decoder-only prompt, or the encoder input of an encoder-decoder model
    (whose decoder then starts at ``decoder_start_token_id``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        use_cache: bool = True,
        keep_candidates: int | None = None,
        fast: bool = False,
    ) -> None:
        if top_n < 1:
            raise ValueError("top_n must be >= 1")
        start = decode_start(model, prompt_ids, eos_token_ids, max_context)
        self.model = model
        self.tokenizer = tokenizer
        self.top_n = top_n
        self.is_encoder_decoder = start.is_encoder_decoder
        self.eos_token_ids = start.eos_token_ids
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.encoder_ids = start.encoder_ids
        self.ids = start.ids
        self.max_context = start.max_context
        self.prompt_length = len(self.ids)
        # Memory bound for long runs: only the last `keep_candidates` records keep all top-N
        # candidates; older ones keep their top 5.
        self.keep_candidates = keep_candidates
        self.stepper = make_stepper(
            model, self.encoder_ids or None, use_cache, fast, self.max_context
        )
        self.device = self.stepper.device
        self.fast = not isinstance(self.stepper, ModelStepper)
        self.history: list[Step] = []
        self.finished = False  # EOS or context end reached
        self.stop_reason: str | None = None
        self._settings = settings
        self._chain = settings.build_chain(self.prompt_length, self.eos_token_ids)
        self._forced: int | None = None
        self._recorder = StepRecorder(tokenizer, top_n)
        self._generator = torch.Generator(device=self.device)
        self._run_tokens = 0
        self._run_time = 0.0

    # -- what the caller may change between tokens ------------------------------------------

    @property
    def settings(self) -> SamplerSettings:
        return self._settings

    @settings.setter
    def settings(self, value: SamplerSettings) -> None:
        """Takes effect at the next token."""
        self._settings = value
        self._chain = value.build_chain(self.prompt_length, self.eos_token_ids)

    def force_next(self, token_id: int) -> None:
        """The next step takes this token instead of sampling (manual choice)."""
        self._check_token(token_id)
        self._forced = int(token_id)

    def branch(self, step_index: int, token_id: int) -> None:
        """Go back to ``step_index`` and take ``token_id`` there; later tokens are discarded.
        The KV cache is cropped to the kept prefix, not recomputed."""
        if not 0 <= step_index <= len(self.history):
            raise ValueError(f"step_index must be in [0, {len(self.history)}], got {step_index}")
        self._check_token(token_id)
        self.rewind(step_index)
        self._forced = int(token_id)

    def rewind(self, step_index: int) -> None:
        """Discard the tokens from ``step_index`` on (undo)."""
        del self.history[step_index:]
        del self.ids[self.prompt_length + step_index :]
        self._recorder.truncate(step_index)
        self.stepper.truncate(len(self.ids) - 1)  # keep one id to feed for the next logits
        self.finished = False
        self.stop_reason = None
        self._forced = None

    def replay(self, step_index: int, token_ids: Sequence[int]) -> Iterator[Step]:
        """Rewind to ``step_index`` and take ``token_ids`` from there (undo of a branch),
        yielding a fresh record for each: one forward pass per token, the prompt is not re-run."""
        self.rewind(step_index)
        for token_id in token_ids:
            if self.finished:
                return
            self.force_next(token_id)
            yield self.step()

    def _check_token(self, token_id: int) -> None:
        if not 0 <= int(token_id) < self.vocab_size:
            raise ValueError(
                f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})"
            )

    # -- reading -----------------------------------------------------------------------------

    @property
    def generated_ids(self) -> list[int]:
        return self.ids[self.prompt_length :]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.history)

    @property
    def forward_passes(self) -> int:
        return self.stepper.forward_passes

    def summary(self) -> RunSummary:
        rate = self._run_tokens / self._run_time if self._run_time > 0 else 0.0
        return RunSummary(
            tokens=self._run_tokens,
            seconds=self._run_time,
            tokens_per_s=rate,
            stop_reason=self.stop_reason or "stopped",
            text=self.text,
            token_ids=tuple(self.generated_ids),
        )

    # -- generating --------------------------------------------------------------------------

    def stream(self, max_new_tokens: int | None = None) -> Iterator[Step]:
        """Yield up to ``max_new_tokens`` more steps (default: the settings' value), stopping at
        EOS or at the end of the context. Close the generator (or stop iterating) to cancel."""
        budget = self._settings.max_new_tokens if max_new_tokens is None else max_new_tokens
        self._run_tokens = 0
        self._run_time = 0.0
        self.stop_reason = "eos" if self.finished else None
        produced = 0
        try:
            while not self.finished and produced < budget:
                yield self.step()
                produced += 1
        finally:
            if self.stop_reason is None:
                self.stop_reason = "max_new_tokens" if produced >= budget else "stopped"

    @torch.inference_mode()
    def step(self) -> Step:
        """Generate one token and return its record."""
        if self.finished:
            raise RuntimeError("Generation has finished; branch or rewind to continue.")
        start = time.perf_counter()
        index = len(self.history)
        settings = self._settings
        logits = self.stepper.logits(self.ids)  # [1, vocab]
        # A broken model gives NaN/inf: sample from something harmless, then refuse the step
        # once the flag arrives with the one copy below (no extra device sync per token).
        finite = torch.isfinite(logits).all()
        logits = torch.where(finite, logits, torch.zeros_like(logits))
        ids = torch.tensor([self.ids], dtype=torch.long, device=self.device)  # [1, seq]
        probs = F.softmax(apply_chain(self._chain, ids, logits), dim=-1)  # [1, vocab]
        if self._forced is not None:
            token = torch.tensor([self._forced], device=self.device)
            source = "forced"
        elif settings.greedy:
            token = probs[0].argmax().reshape(1)
            source = "greedy"
        else:
            self._generator.manual_seed(_step_seed(settings.seed, index))
            token = torch.multinomial(probs[0], 1, generator=self._generator)
            source = "sample"
        forced = self._forced is not None
        self._forced = None
        values = summarise(logits[0], probs[0], token, self.top_n, finite)  # one copy to host
        elapsed = time.perf_counter() - start  # after the copy, which waits for the device
        if values[-1] != 1.0:
            raise NonFiniteLogitsError(index)
        self._run_tokens += 1
        self._run_time += elapsed
        record = self._recorder.record(
            index, values, elapsed, self._run_tokens / self._run_time, self.eos_token_ids,
            forced=forced, source=source,
        )  # fmt: skip
        self.ids.append(record.token_id)
        if record.is_eos:
            self.finished, self.stop_reason = True, "eos"
        elif self.max_context is not None and len(self.ids) >= self.max_context:
            self.finished, self.stop_reason = True, "context"
        self.history.append(record)
        keep = self.keep_candidates
        if keep is not None and len(self.history) > keep:
            old = self.history[-keep - 1]
            if len(old.candidates) > 5:
                self.history[-keep - 1] = replace(old, candidates=old.candidates[:5])
        return record


def summarise(
    logits: torch.Tensor,
    probs: torch.Tensor,
    token: torch.Tensor,
    top_n: int,
    finite: torch.Tensor | None = None,
) -> list[float]:
    """Everything a Step record needs, computed on the model's device and copied in one go.

    logits, probs: [vocab] (raw logits; probabilities after the chain); token: [1].
    Returns top-N ids, raw and processed probabilities, then token, p_raw, p, rank,
    survivors, entropy_raw, entropy, and 1.0 if the logits were finite. float64 keeps token ids
    exact."""
    raw_logp = F.log_softmax(logits, dim=-1)
    raw = raw_logp.exp()
    top_raw, top_ids = torch.topk(raw, min(top_n, raw.shape[-1]))  # [N]
    tok = token.reshape(1)
    chosen_raw = raw.gather(0, tok)
    scalars = torch.stack(
        [
            tok[0].double(),
            chosen_raw[0].double(),
            probs.gather(0, tok)[0].double(),
            ((raw > chosen_raw).sum() + 1).double(),
            (probs > 0).sum().double(),
            (-torch.xlogy(raw, raw).sum() / LN2).clamp_min(0).double(),
            (-torch.xlogy(probs, probs).sum() / LN2).clamp_min(0).double(),
            (finite if finite is not None else torch.isfinite(logits).all()).double(),
        ]
    )
    packed = torch.cat(
        [top_ids.double(), top_raw.double(), probs.gather(0, top_ids).double(), scalars]
    )
    return packed.tolist()


class StepRecorder:
    """Turns the numbers from ``summarise`` into ``Step`` records, with text pieces."""

    def __init__(self, tokenizer: Any | None, top_n: int) -> None:
        self.top_n = top_n
        self.detok = IncrementalDetokenizer(tokenizer) if tokenizer is not None else None
        self.tokens = TokenTable(tokenizer)

    def truncate(self, n: int) -> None:
        if self.detok is not None:
            self.detok.truncate(n)

    def record(
        self,
        index: int,
        values: list[float],
        elapsed: float,
        tokens_per_s: float,
        eos_token_ids: Sequence[int],
        forced: bool = False,
        source: str = "sample",
    ) -> Step:
        n = (len(values) - 8) // 3
        top_ids = [int(v) for v in values[:n]]
        top_raw, top_prob = values[n : 2 * n], values[2 * n : 3 * n]
        token_id, raw_p, p, rank, survivors, h_raw, h, _finite = values[3 * n :]
        token_id = int(token_id)
        piece = self.detok.push(token_id) if self.detok is not None else ""
        return Step(
            index=index,
            token_id=token_id,
            text=piece,
            token_str=self.tokens(token_id),
            raw_prob=raw_p,
            prob=p,
            rank=int(rank),
            candidates=tuple(
                Candidate(i, self.tokens(i), r, q)
                for i, r, q in zip(top_ids, top_raw, top_prob, strict=True)
            ),
            survivors=int(survivors),
            entropy_raw=abs(h_raw),  # -0.0 from a one-hot distribution reads as 0
            entropy=abs(h),
            step_time=elapsed,
            tokens_per_s=tokens_per_s,
            forced=forced,
            is_eos=token_id in eos_token_ids,
            source=source,
        )


def stream_generate(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    settings: SamplerSettings = DEFAULT_SETTINGS,
    **kwargs: Any,
) -> Iterator[Step]:
    """One generator for both model kinds: yields a ``Step`` per generated token."""
    session = GenerationSession(model, prompt_ids, settings, **kwargs)
    yield from session.stream()


# --------------------------------------------------------------------------------------------
# Seed-compatible functions
# --------------------------------------------------------------------------------------------


def _seed_loop(
    model: torch.nn.Module,
    decoder_ids: list[int],
    stepper: ModelStepper,
    steps: int,
    logits_processor: SeedLogitsProcessor,
    eos_tokens_id: int | list[int],
    debug: bool,
    show: Callable[[int], str] = str,
) -> list[int]:
    stop = set(_as_id_list(eos_tokens_id))
    for i in range(steps):
        logits = stepper.logits(decoder_ids)  # [1, vocab]
        probs = logits_processor(logits)  # [1, vocab]
        token = int(logits_processor.sample(probs))
        decoder_ids.append(token)
        if debug:
            print(f"step {i}: token {show(token)} p={float(probs[0, token]):.4f}")
        if token in stop:
            break
    return decoder_ids


@torch.inference_mode()
def autoregressive_generate(
    inputs: list[int],
    model: torch.nn.Module,
    max_gen_len: int = 40,
    logits_processor: SeedLogitsProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the seed
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    debug: bool = False,
) -> list[int]:
    """Decoder-only generation; returns the generated ids (not the prompt), EOS included.

    ``pad_token_id`` is accepted for compatibility: the seed pre-filled a padded buffer with
    it; this loop grows a list instead, so it is not used. ``use_cache`` True and False give the
    same tokens (the cached path feeds only the new token; the seed re-fed the whole prefix).
    """
    if len(inputs) == 0:
        raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
    limit = context_length(model)
    steps = max_gen_len if limit is None else max(0, min(max_gen_len, limit - len(inputs)))
    stepper = ModelStepper(model, use_cache=use_cache)
    ids = _seed_loop(model, list(inputs), stepper, steps, logits_processor, eos_tokens_id, debug)
    return ids[len(inputs) :]


@torch.inference_mode()
def autoregressive_generate_encoder_decoder(
    inputs: list[int],
    model: torch.nn.Module,
    max_gen_len: int = 40,
    logits_processor: SeedLogitsProcessor = GreedyProcessor(),  # noqa: B008 - stateless, as in the seed
    eos_tokens_id: int | list[int] = 1,
    pad_token_id: int = 0,
    use_cache: bool = False,
    debug: bool = False,
) -> list[int]:
    """Encoder-decoder generation. The encoder runs once; the decoder starts at
    ``model.config.decoder_start_token_id``. Returns the decoder ids: the start id, then up to
    ``max_gen_len`` generated ids, EOS included when produced."""
    start = model.config.decoder_start_token_id
    if start is None:
        raise ValueError("This encoder-decoder model has no decoder_start_token_id in its config.")
    stepper = ModelStepper(model, encoder_input_ids=inputs, use_cache=use_cache)
    return _seed_loop(
        model, [int(start)], stepper, max_gen_len, logits_processor, eos_tokens_id, debug
    )
