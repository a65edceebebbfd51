"""Constrained decoding as a sampler stage, "grammar": a JSON schema, a regular expression, a
list of choices or a Lark grammar, compiled by llguidance (guidance-ai; the engine behind
llama.cpp's and vLLM's structured outputs; a Rust wheel with no dependencies that runs on CPU).

At every step the stage brings its matcher up to date with the tokens generated so far (it
reads ``input_ids`` after the prompt, so a rewind or a branch rolls the matcher back instead of
confusing it), asks llguidance for the bitmask of allowed next tokens and sets every other
token to -inf: those are cut and named "grammar" like any stage's cuts. Once the grammar is
complete only the end-of-sequence ids remain. A token the grammar refuses (a forced choice)
breaks the matcher: the stage then lets everything through and its note says so.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine.sampling.base import NEG_INF, LogitsProcessor
from engine.sampling.checks import check_grammar_spec

# JSON as json.dumps writes it, with no free whitespace: a model could otherwise pad with
# newlines and spaces without end (a known failure of constrained JSON). A schema's own
# "x-guidance" options override these.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_KIND_FORMAT = {"json": "json_schema", "regex": "regex", "choice": "choice", "lark": "lark"}


def parse_spec(spec: str) -> tuple[str, str]:
    """``"KIND:TEXT"`` -> (kind, text), checked."""
    check_grammar_spec(spec)
    kind, _, text = spec.partition(":")
    return kind.strip(), text


def compile_grammar(spec: str) -> str:
    """The llguidance grammar of a spec; ValueError naming what is wrong with it."""
    import llguidance

    kind, text = parse_spec(spec)
    if kind == "choice":
        stripped = text.strip()
        options = json.loads(stripped) if stripped.startswith("[") else text.split("|")
        if not options or not all(isinstance(o, str) and o for o in options):
            raise ValueError("grammar choice: give non-empty options, 'a|b|c' or a JSON list")
        text = json.dumps(options)
    try:
        if kind == "json":
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_STYLE)
        else:
            grammar = llguidance.grammar_from(_KIND_FORMAT[kind], text)  # type: ignore[arg-type]
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"grammar {kind}: {exc}") from exc
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem:
        raise ValueError(f"grammar {kind}: {problem.strip().splitlines()[0]}")
    return grammar


_TOKENIZERS: dict[tuple[int, int, tuple[int, ...]], tuple[Any, Any]] = {}


def ll_tokenizer(tokenizer: Any, n_vocab: int, eos_ids: Sequence[int]) -> Any:
    """llguidance's view of a Hugging Face fast tokenizer (about 0.5 s to build: cached)."""
    import llguidance

    key = (id(tokenizer), n_vocab, tuple(eos_ids))
    if key in _TOKENIZERS and _TOKENIZERS[key][0] is tokenizer:
        return _TOKENIZERS[key][1]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("a grammar needs a fast (Rust tokenizers) tokenizer")
    backend = copy.copy(backend)
    backend.no_padding()
    backend.no_truncation()
    eos = list(eos_ids) or tokenizer.eos_token_id
    made = llguidance.LLTokenizer(backend.to_str(), n_vocab=n_vocab, eos_token=eos)
    _TOKENIZERS.clear()  # one tokenizer at a time: the app runs one model
    _TOKENIZERS[key] = (tokenizer, made)
    return made


def unpack_bitmask(bitmask: bytes, vocab: int) -> torch.Tensor:
    """llguidance's bitmask (little-endian 32-bit words, bit i of word j = token 32j + i)
    -> allowed: [vocab] bool. Ids past the mask are not allowed."""
    raw = torch.frombuffer(bytearray(bitmask), dtype=torch.uint8)
    bits = (raw[:, None] >> torch.arange(8, dtype=torch.uint8)) & 1  # byte b, bit k: 8b + k
    allowed = bits.flatten().bool()[:vocab]
    if allowed.numel() < vocab:
        allowed = torch.cat([allowed, torch.zeros(vocab - allowed.numel(), dtype=torch.bool)])
    return allowed


class _Track:
    """One row's matcher and the generated ids it has consumed."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.matcher = make()
        self.consumed: list[int] = []

    def follow(self, generated: list[int]) -> None:
        common = 0
        for a, b in zip(self.consumed, generated, strict=False):
            if a != b:
                break
            common += 1
        back = len(self.consumed) - common
        if back and (self.matcher.is_error() or not self.matcher.rollback(back)):
            self.matcher, common = self.make(), 0  # a broken matcher cannot roll back: rebuild
        for token in generated[common:]:
            if not self.matcher.consume_token(token):
                break
        self.consumed = list(generated)

    def allowed(self, vocab: int) -> torch.Tensor:
        if self.matcher.is_error():
            return torch.ones(vocab, dtype=torch.bool)
        return unpack_bitmask(self.matcher.compute_bitmask(), vocab)


class Grammar(LogitsProcessor):
    """Keep only the tokens the grammar allows next."""

    uses_ids = True

    def __init__(
        self, spec: str, tokenizer: Any, prompt_length: int = 0, eos_token_ids: Sequence[int] = ()
    ) -> None:
        if tokenizer is None:
            raise ValueError("a grammar needs the model's tokenizer")
        self.kind, _ = parse_spec(spec)
        self.spec, self.grammar = spec, compile_grammar(spec)
        self.tokenizer, self.prompt_length = tokenizer, prompt_length
        self.eos_token_ids = tuple(eos_token_ids)
        self._tracks: list[_Track] = []
        self._allowed: list[int] = []

    @property
    def label(self) -> str:
        return "grammar"

    def _matcher(self, vocab: int) -> Any:
        import llguidance

        tok = ll_tokenizer(self.tokenizer, vocab, self.eos_token_ids)
        return llguidance.LLMatcher(tok, self.grammar, log_level=0)

    def masks(self, input_ids: torch.Tensor, vocab: int) -> torch.Tensor:
        """allowed: [batch, vocab] bool on the host, each row's matcher brought up to date."""
        rows = input_ids[:, self.prompt_length :].tolist()  # ids live on the host
        while len(self._tracks) < len(rows):
            self._tracks.append(_Track(lambda: self._matcher(vocab)))
        for track, generated in zip(self._tracks, rows, strict=False):
            track.follow(generated)
        return torch.stack([t.allowed(vocab) for t in self._tracks[: len(rows)]])

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        allowed = self.masks(input_ids, scores.shape[-1]).to(scores.device)
        self._allowed = allowed.sum(-1).tolist()
        return scores.masked_fill(~allowed, NEG_INF)

    def note(self, before: torch.Tensor, after: torch.Tensor) -> str | None:
        if not self._tracks:
            return None
        matcher = self._tracks[0].matcher
        if matcher.is_error():
            return "grammar broken by a token it does not allow: everything passes"
        if matcher.is_stopped() or self._allowed[0] <= len(self.eos_token_ids) and (
            matcher.is_accepting()
        ):  # fmt: skip
            return f"{self.kind} complete: only the end"
        return f"{self.kind}: {self._allowed[0]:,} tokens allowed"
