"""Constrained decoding as a sampler stage, "grammar": a JSON schema, a regular expression, a
list of choices or a Lark grammar, compiled by llguidance (guidance-ai; the engine behind
llama.cpp's and vLLM's structured outputs; a Rust wheel with no dependencies that runs on CPU).

At every step the stage brings its matcher up to date with the tokens generated so far (it
reads ``input_ids`` after the prompt, so a rewind or a branch rolls the matcher back instead of
confusing it), asks llguidance for the bitmask of allowed next tokens and sets every other
token to -inf: those are cut and named "grammar" like any stage's cuts. Once the grammar is
complete only the end-of-sequence ids remain.

The grammar is a contract (``binding``): it is never skipped. When it cannot go on (no token
it allows is left by the stages before it, its matcher failed, or a chosen token broke it) the
row is left empty and ``stops()`` says why; the session then ends the run there with that
message and keeps what it made. In JSON no key is written twice in one object
(``engine.sampling.json_keys``); ``complete()`` says whether the output is finished.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine.sampling.base import NEG_INF, LogitsProcessor
from engine.sampling.checks import check_grammar_spec
from engine.sampling.grammar_schema import one_of_is_disjoint
from engine.sampling.json_keys import JsonKeys

# JSON as json.dumps writes it, with no free whitespace: a model could otherwise pad with
# newlines and spaces without end (a known failure of constrained JSON). A schema's own
# "x-guidance" options override these.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# llguidance refuses "oneOf" unless told to read it as "anyOf", which is exact only when no
# value can match two alternatives: it is turned on for schemas whose every oneOf is provably
# disjoint (engine.sampling.grammar_schema); the others stay refused with the library's words.
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
            style = {**JSON_STYLE, "coerce_one_of": one_of_is_disjoint(text)}
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults=style)
        else:
            grammar = llguidance.grammar_from(_KIND_FORMAT[kind], text)  # type: ignore[arg-type]
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"grammar {kind}: {exc}") from exc
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem:
        raise ValueError(f"grammar {kind}: {problem.strip().splitlines()[0]}")
    return grammar


_TOKENIZERS: dict[tuple[int, int, tuple[int, ...]], tuple[Any, Any]] = {}
_QUOTED: dict[int, dict[int, bytes]] = {}  # per llguidance tokenizer: tokens holding a '"'
LIMITS_VERBOSE = False  # llguidance's errors without its parser dump: one line to show


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
    _QUOTED.clear()
    _TOKENIZERS[key] = (tokenizer, made)
    return made


def quoted_tokens(tok: Any) -> dict[int, bytes]:
    """The tokens whose bytes hold a double quote (the only ones that can end a JSON key)."""
    found = _QUOTED.get(id(tok))
    if found is None:
        pieces = (tok.decode_bytes([t]) for t in range(tok.vocab_size))
        found = _QUOTED[id(tok)] = {t: b for t, b in enumerate(pieces) if b'"' in b}
    return found


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
    """One row's matcher, the generated ids it has consumed, and (JSON) the keys written."""

    def __init__(self, make: Callable[[], Any], tok: Any, json_keys: bool) -> None:
        self.make, self.tok, self.json_keys = make, tok, json_keys
        self._reset()

    def _reset(self) -> None:
        self.matcher = self.make()
        self.consumed: list[int] = []  # the ids the matcher took, in order
        self.broken: tuple[int, int] | None = None  # (step, token) the grammar refused
        self.keys = JsonKeys() if self.json_keys else None

    def follow(self, generated: list[int]) -> None:
        """Bring the matcher to ``generated`` (rolling back what a rewind took away)."""
        if self.broken is not None:
            at, token = self.broken
            if len(generated) <= at or generated[at] != token or generated[:at] != self.consumed:
                self._reset()  # the refused token is gone: start clean
        common = 0
        for a, b in zip(self.consumed, generated, strict=False):
            if a != b:
                break
            common += 1
        back = len(self.consumed) - common
        if back:
            if self.matcher.is_error() or not self.matcher.rollback(back):
                self._reset()  # a broken matcher cannot roll back: rebuild
                common = 0
            else:
                self.consumed = self.consumed[:common]
                self._rescan()
        for i in range(len(self.consumed), len(generated)):
            if self.broken is not None or not self._take(generated[i]):
                self.broken = self.broken or (i, generated[i])
                break
            self.consumed.append(generated[i])

    def _take(self, token: int) -> bool:
        if self.keys is not None and self.keys.feed(self.tok.decode_bytes([token])):
            return False  # a key written twice: the grammar does not allow it
        return bool(self.matcher.consume_token(token))

    def _rescan(self) -> None:
        """After a rollback: the keys of the kept tokens (cheap: a scan of their bytes)."""
        if self.keys is not None:
            self.keys = JsonKeys()
            self.keys.feed(self.tok.decode_bytes(self.consumed))

    def allowed(self, vocab: int) -> torch.Tensor | None:
        """allowed: [vocab] bool, or None when the matcher cannot go on."""
        if self.broken is not None or self.matcher.is_error():
            return None
        allowed = unpack_bitmask(self.matcher.compute_bitmask(), vocab)
        if self.matcher.is_error():
            return None
        if self.keys is not None:
            live = {t: b for t, b in quoted_tokens(self.tok).items() if t < vocab and allowed[t]}
            repeats = self.keys.repeats(live)
            if repeats:
                allowed[torch.tensor(repeats)] = False
        return allowed

    def why(self, kind: str) -> str:
        """Why this row cannot go on (its matcher failed or a token broke it)."""
        step = f"step {self.broken[0] + 1}" if self.broken is not None else ""
        if step and self.keys is not None and self.keys.repeated:
            return (f"the {kind} grammar broke at {step}: the key {self.keys.repeated!r} is "
                    "written twice in one object")  # fmt: skip
        error = (self.matcher.get_error() or "it allows nothing more").strip().splitlines()[0]
        if step:
            return f"the {kind} grammar broke at {step}: {error}"
        return f"the {kind} grammar cannot go on: {error}"

    def complete(self) -> bool:
        m = self.matcher
        return self.broken is None and not m.is_error() and (m.is_accepting() or m.is_stopped())


class Grammar(LogitsProcessor):
    """Keep only the tokens the grammar allows next; a row with none left stops the run."""

    uses_ids = True
    binding = True

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
        self._stops: list[str | None] = []
        self._vocab = 0

    @property
    def label(self) -> str:
        return "grammar"

    def _matcher(self, tok: Any) -> Any:
        import llguidance

        limits = llguidance.LLParserLimits(verbose_errors=LIMITS_VERBOSE)
        return llguidance.LLMatcher(tok, self.grammar, log_level=0, limits=limits)

    def _track(self, vocab: int) -> _Track:
        tok = ll_tokenizer(self.tokenizer, vocab, self.eos_token_ids)
        return _Track(lambda: self._matcher(tok), tok, self.kind == "json")

    def masks(self, input_ids: torch.Tensor, vocab: int) -> list[torch.Tensor | None]:
        """Per row, allowed: [vocab] bool on the host (None: the grammar cannot go on), each
        row's matcher brought up to date."""
        rows = input_ids[:, self.prompt_length :].tolist()  # ids live on the host
        self._vocab = vocab
        while len(self._tracks) < len(rows):
            self._tracks.append(self._track(vocab))
        for track, generated in zip(self._tracks, rows, strict=False):
            track.follow(generated)
        return [t.allowed(vocab) for t in self._tracks[: len(rows)]]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        vocab = scores.shape[-1]
        masks = self.masks(input_ids, vocab)
        none = torch.zeros(vocab, dtype=torch.bool)
        allowed = torch.stack([m if m is not None else none for m in masks])
        new = scores.masked_fill(~allowed.to(scores.device), NEG_INF)
        alive = (new != NEG_INF).any(-1).tolist()  # one small copy: the grammar runs on the host
        self._allowed = allowed.sum(-1).tolist()
        self._stops = [
            None if ok else self._why(i, m)
            for i, (ok, m) in enumerate(zip(alive, masks, strict=True))
        ]
        return new

    def _why(self, row: int, mask: torch.Tensor | None) -> str:
        if mask is None:
            return self._tracks[row].why(self.kind)
        ids = mask.nonzero().flatten()[:3].tolist()
        if not ids:
            return f"the {self.kind} grammar allows no token here"
        names = ", ".join(repr(self.tokenizer.decode([t], skip_special_tokens=False)) for t in ids)
        more = " ..." if int(mask.sum()) > len(ids) else ""
        them = "it" if len(ids) == 1 and not more else "them"
        return (f"the {self.kind} grammar allows only {names}{more} next, and the stages "
                f"before it removed {them}")  # fmt: skip

    def stops(self) -> list[str | None]:
        return list(self._stops)

    def complete(self, generated: Sequence[int]) -> bool:
        """Whether ``generated`` (the output so far) is a whole sentence of the grammar."""
        if not self._tracks:
            self._tracks.append(self._track(self._vocab or _vocab_of(self.tokenizer)))
        track = self._tracks[0]
        track.follow(list(generated))
        return track.complete()

    def note(self, before: torch.Tensor, after: torch.Tensor) -> str | None:
        if not self._tracks:
            return None
        if self._stops and self._stops[0]:
            return f"{self._stops[0]}: the run stops here"
        matcher = self._tracks[0].matcher
        if matcher.is_stopped() or self._allowed[0] <= len(self.eos_token_ids) and (
            matcher.is_accepting()
        ):  # fmt: skip
            return f"{self.kind} complete: only the end"
        return f"{self.kind}: {self._allowed[0]:,} tokens allowed"


def _vocab_of(tokenizer: Any) -> int:
    return len(tokenizer)
