"""The live round's model side, run on the worker thread: the next-token distribution at a
point of the run without taking the step (``peek``), and the class's guesses read as the
model's tokenizer reads them (``guess_tokens``). No Qt."""

from __future__ import annotations

from typing import Any

import torch

from engine.classroom.live import Distribution
from engine.sampling.settings import SamplerSettings

TEXTS_FOR_TOP = 50  # the top tokens whose text a guess is first matched against


def peek(bundle: Any, prompt: str, chat_template: bool, prefix: list[int] | tuple[int, ...],
         settings: SamplerSettings | None = None) -> Distribution:  # fmt: skip
    """The model's raw distribution for the token after ``prompt`` + ``prefix`` (one forward
    pass; the run does not move)."""
    from engine.decode.session import GenerationSession
    from engine.experiments.step_sample import next_distribution

    if hasattr(bundle, "make_session"):  # engine.serve.remote_session.RemoteBundle
        raise ValueError("A live round needs a model loaded here: a served model sends only "
                         "its top few probabilities.")  # fmt: skip
    if prefix and bundle.is_encoder_decoder:
        raise ValueError("On an encoder-decoder model a live round asks only the first step.")
    ids = bundle.encode_prompt(prompt, chat_template)
    session = GenerationSession.over(bundle, [*ids, *prefix], settings or SamplerSettings(),
                                     top_n=1, max_context=bundle.context_length)  # fmt: skip
    logits, _probs = next_distribution(session)
    probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()  # [vocab]
    dist = Distribution(probs, {})
    tok = bundle.tokenizer
    dist.texts = {c.token_id: token_text(tok, c.token_id) for c in dist.top(TEXTS_FOR_TOP)}
    return dist


def token_text(tokenizer: Any, token_id: int) -> str:
    """The token as the class reads it; a piece of a character (a byte that decodes to nothing
    or to U+FFFD) by the tokenizer's own name for it."""
    text = tokenizer.decode([token_id])
    if not text or "\ufffd" in text:
        text = str(tokenizer.convert_ids_to_tokens(token_id) or f"#{token_id}")
    return text


def _first_piece(tokenizer: Any, guess: str) -> int | None:
    """The token the model would write first for ``guess`` as a word in running text (after a
    space), or on its own; a first piece that is only a space is skipped."""
    for variant in (" " + guess, guess):
        ids = list(tokenizer(variant, add_special_tokens=False)["input_ids"])
        if ids and tokenizer.decode(ids[:1]).strip():
            return int(ids[0])
    return None


def guess_tokens(tokenizer: Any, dist: Distribution, guesses: list[str]) -> dict[str, int | None]:
    """Each guess -> the token it names. A top token whose text is the guess (the leading
    space optional; exact case first, then ignoring case; the best ranked when several) wins;
    otherwise the tokenizer's first piece of the word. The texts of the tokens found are added
    to ``dist.texts``."""
    top = dist.top(TEXTS_FOR_TOP)
    out: dict[str, int | None] = {}
    for guess in guesses:
        found = None
        for fold in (False, True):
            g = guess.casefold() if fold else guess
            for c in top:
                t = c.text.casefold() if fold else c.text
                if t == g or t == " " + g:
                    found = c.token_id
                    break
            if found is not None:
                break
        if found is None:
            found = _first_piece(tokenizer, guess)
        if found is not None and found not in dist.texts:
            dist.texts[found] = token_text(tokenizer, found)
        out[guess] = found
    return out
