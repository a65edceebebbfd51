"""A scored text's records (``ScoredToken``, ``TextScore``, written as ``decoding-lab-score/1``)
and the decoder-only context rule, shared by the local scorer (``engine.tree.score``) and the
served one (``engine.serve.remote_score``) so neither imports the other.

The rule: the text follows its context; with none, it follows the token the model saw at the
start of every document in training (``document_start``), so the first words are scored as
the opening of a text, not as the opening of a chat turn (SmolLM2-Instruct's BOS is
``<|im_start|>``: after it " teacher" cost 23.4 bits, after ``<|endoftext|>`` 11.9). The first
token after no context at all is still a guess from nothing: it is marked ``no_context`` and
left out of the most-surprising pick (``TextScore.peak``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScoredToken:
    index: int
    token_id: int
    text: str
    logprob: float
    rank: int  # 1-based, in the raw distribution
    surprisal: float  # bits
    top: tuple[tuple[int, str, float], ...] = ()  # (token_id, text, probability)
    entropy: float = float("nan")  # bits, of the whole distribution at this position
    # the rank is a lower bound: a served model (SGLang) listed only its top-N and the token
    # was not among them, so it ranks at least N + 1
    rank_bound: bool = False

    @property
    def rank_text(self) -> str:
        """The rank as it may be said: "≥21" where it is only a bound."""
        return f"≥{self.rank}" if self.rank_bound else str(self.rank)


@dataclass
class TextScore:
    tokens: list[ScoredToken] = field(default_factory=list)
    unscored: int = 0  # leading tokens with no context
    # what the model read before the first scored token: the decoder's context (the prompt's
    # ids, or the start token) or an encoder-decoder's encoder input; Inside the step reads it
    context_ids: tuple[int, ...] = ()
    # the text had no context: its first token (tokens[0]) was read after the document start
    # alone, a guess from nothing, not a surprise
    no_context: bool = False

    @property
    def total_logprob(self) -> float:
        return sum(t.logprob for t in self.tokens)

    @property
    def perplexity(self) -> float:
        if not self.tokens:
            return float("nan")
        mean = -self.total_logprob / len(self.tokens)
        return math.exp(mean) if mean < 709.0 else math.inf  # exp overflows past ~709.78

    def peak(self) -> int | None:
        """The position in ``tokens`` of the most surprising token, the no-context one left
        out (None when no other token is scored)."""
        first = 1 if self.no_context else 0
        if len(self.tokens) <= first:
            return None
        return max(range(first, len(self.tokens)), key=lambda i: self.tokens[i].surprisal)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "decoding-lab-score/1",
            "total_logprob": self.total_logprob,
            "perplexity": self.perplexity,
            "unscored": self.unscored,
            "no_context": self.no_context,
            "tokens": [
                {
                    "index": t.index,
                    "token_id": t.token_id,
                    "text": t.text,
                    "logprob": t.logprob,
                    "rank": t.rank,
                    "surprisal": t.surprisal,
                    "top": [list(c) for c in t.top],
                    "entropy": None if math.isnan(t.entropy) else t.entropy,
                    **({"rank_at_least": True} if t.rank_bound else {}),
                }
                for t in self.tokens
            ],  # fmt: skip
        }


def text_ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


# Tokens that open a chat turn rather than a document: a model that reads one expects a role
# name next ("user", "assistant"), so a text scored after it pays for not being one.
CHAT_TURN_MARKERS = frozenset(
    {"<|im_start|>", "<start_of_turn>", "<|start_header_id|>", "<|user|>", "<|system|>",
     "<|assistant|>"}
)  # fmt: skip
DOCUMENT_SEPARATOR = "<|endoftext|>"  # GPT-2's, kept by SmolLM, Qwen, Phi and others


def document_start(tok: Any) -> int | None:
    """The token a decoder-only model saw before every document in training: its BOS (Llama's
    ``<s>``, GPT-2's ``<|endoftext|>``) unless that opens a chat turn (an instruct model's
    ``<|im_start|>``), else the ``<|endoftext|>`` that separated the documents; None when the
    tokenizer has neither (the first token is then not scored)."""
    bos = getattr(tok, "bos_token_id", None)
    if bos is not None and getattr(tok, "bos_token", None) not in CHAT_TURN_MARKERS:
        return int(bos)
    vocab = getattr(tok, "get_vocab", None)
    found = vocab().get(DOCUMENT_SEPARATOR) if callable(vocab) else None
    return int(found) if found is not None else None


def context_and_text(tok: Any, text: str, prompt: str = "") -> tuple[list[int], list[int]]:
    """Decoder-only: the context's ids (the prompt's, else the document start, else none) and
    the text's. The served path sends exactly these, so both score the same positions.

    A text after a context is read as the words that follow it: when neither side has a space
    at the seam and the tokenizer writes a word with its space ("Here is a short story." then
    " The", as GPT-2-style tokenizers do), the text is read with that space; joined bare,
    "story.The" made "The" 14.9 bits, the most surprising token, where " The" is 4.6."""
    ids = text_ids(tok, text)
    if not ids:
        raise ValueError("nothing to score: the text has no tokens")
    if prompt and not prompt[-1].isspace() and not text[0].isspace():
        spaced = text_ids(tok, " " + text)
        if len(spaced) <= len(ids):  # the space joins the first word (bytes: one more token)
            ids = spaced
    head = text_ids(tok, prompt) if prompt else []
    if not head:
        start = document_start(tok)
        head = [start] if start is not None else []
    return head, ids


def new_score(prompt: str, unscored: int, context_ids: tuple[int, ...] = ()) -> TextScore:
    """The score a scorer fills in: with no context given, the first token scored (when it is
    the text's first) is marked ``no_context``."""
    return TextScore(unscored=unscored, context_ids=tuple(context_ids),
                     no_context=not prompt and unscored == 0)  # fmt: skip
