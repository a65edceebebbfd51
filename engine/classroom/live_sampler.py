"""The class as a decoding strategy ("be the sampler"), run on the worker thread. No Qt.

- ``class_branch``: the class's token taken in the run at a step (the run tree's own branch,
  for one token), its ``Step`` marked ``source == CLASS`` in the record the window gets and in
  the session's own history, so an undo and a redo give it back as the class's choice.
- ``score_class_text``: the text the class wrote, scored against the model's greedy
  continuation and its sampled ones from the same point and of the same length, each by its
  perplexity under the model: 2 to the power of the mean surprisal of its tokens (bits), the
  raw distribution (no sampler) read in one forward pass per text.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from engine.records import CLASS, Step
from engine.sampling.settings import SamplerSettings

SAMPLES = 5  # sampled continuations the class's text is set beside
MAX_TEXT_TOKENS = 256  # the class writes a sentence or two, one question a token


def class_branch(workbench: Any, step_index: int, token_id: int, settings: SamplerSettings
                 ) -> Generator[Any, Any, Any]:  # fmt: skip
    """``workbench.branch(step_index, token_id, settings, 1)`` (engine.drivers.workbench),
    with the token taken there marked as the class's choice. Settings and Stop sent in are
    passed on."""
    action = workbench.branch(step_index, token_id, settings, 1)
    sent = None
    try:
        while True:
            record = action.send(sent)
            if isinstance(record, Step) and record.index == step_index and record.forced:
                record = _mark(workbench.session, record)
            sent = yield record
    except StopIteration as done:
        return done.value
    finally:
        action.close()


def _mark(session: Any, step: Step) -> Step:
    marked = replace(step, source=CLASS)
    history = session.history
    if step.index < len(history) and history[step.index] is step:
        history[step.index] = marked
    return marked


@dataclass(frozen=True)
class ScoredText:
    who: str  # "the class", "greedy", "sampled (seed 3)"
    tokens: tuple[int, ...]
    text: str
    bits: tuple[float, ...]  # each token's surprisal under the model

    @property
    def mean_bits(self) -> float:
        return sum(self.bits) / len(self.bits) if self.bits else math.nan

    @property
    def perplexity(self) -> float:
        return 2.0**self.mean_bits


@dataclass(frozen=True)
class TextComparison:
    mine: ScoredText  # the class's text
    greedy: ScoredText
    samples: tuple[ScoredText, ...]
    chosen: int = 0  # of the class's tokens, how many the class chose (the rest: the model's)

    @property
    def sampled_perplexity(self) -> float:
        """The samples' tokens pooled: 2 ** their mean surprisal."""
        bits = [b for s in self.samples for b in s.bits]
        return 2.0 ** (sum(bits) / len(bits)) if bits else math.nan


def token_bits(bundle: Any, context: Sequence[int], tokens: Sequence[int]) -> list[float]:
    """Each of ``tokens``' surprisal in bits after ``context`` and the tokens before it, under
    the model's raw distribution (one forward pass; a decoder-only model)."""
    if bundle.is_encoder_decoder:
        raise ValueError("Scoring the class's text needs a decoder-only model.")
    if not context or not tokens:
        raise ValueError("nothing to score: the text or its context is empty")
    ids = torch.tensor([[*context, *tokens]], device=bundle.device)  # [1, seq]
    with torch.inference_mode():
        logits = bundle.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    rows = torch.log_softmax(logits[0, len(context) - 1 : -1].float(), dim=-1)  # [n, vocab]
    picked = rows.gather(1, torch.tensor(list(tokens), device=rows.device)[:, None])[:, 0]
    return [-float(lp) / math.log(2) for lp in picked.cpu()]


def continuation(bundle: Any, context: Sequence[int], n: int, temperature: float, seed: int
                 ) -> list[int]:  # fmt: skip
    """``n`` tokens the model writes after ``context``: greedy (temperature 0) or sampled from
    its raw distribution with ``seed``; the end of text is not taken before ``n``."""
    from engine.decode.session import GenerationSession

    settings = SamplerSettings(temperature=temperature, seed=seed, max_new_tokens=n,
                               min_new_tokens=n)  # fmt: skip
    session = GenerationSession.over(bundle, list(context), settings, top_n=1,
                                     max_context=bundle.context_length)  # fmt: skip
    return [r.token_id for r in session.stream(n) if isinstance(r, Step)]


def score_class_text(bundle: Any, prompt: str, chat_template: bool, prefix: Sequence[int],
                     tokens: Sequence[int], chosen: int = 0, samples: int = SAMPLES
                     ) -> TextComparison:  # fmt: skip
    """The class's ``tokens`` (after ``prompt`` + ``prefix``) beside the model's greedy and
    ``samples`` sampled continuations of the same length from the same point."""
    if not tokens:
        raise ValueError("The class has chosen no token yet: ask in Be the sampler first.")
    tokens = list(tokens)[-MAX_TEXT_TOKENS:]
    context = [*bundle.encode_prompt(prompt, chat_template), *prefix]
    tok = bundle.tokenizer

    def scored(who: str, ids: list[int]) -> ScoredText:
        return ScoredText(who, tuple(ids), tok.decode(ids), tuple(token_bits(bundle, context,
                                                                              ids)))  # fmt: skip

    n = len(tokens)
    drawn = tuple(scored(f"sampled (seed {s})", continuation(bundle, context, n, 1.0, s))
                  for s in range(samples))  # fmt: skip
    greedy = scored("greedy", continuation(bundle, context, n, 0.0, 0))
    return TextComparison(scored("the class", tokens), greedy, drawn, chosen)
