"""Beam searches beside the plain one, each ``BeamSession``'s one loop with one thing changed
(contrastive search, not a beam search, is ``engine.decode.contrastive``).

* ``SampledBeamSession``: beam search that draws its candidates (transformers'
  ``generate(do_sample=True, num_beams=N)``): the beams' log-probabilities go through the
  penalties, then temperature and the filters, and the K = max(2, 1 + #EOS) · N continuations
  are drawn without replacement from softmax(path scores) over all beams instead of taken best
  first (``_select``), then ranked by path score (transformers' ``_get_top_k_continuations``
  sorts them too): the best N drawn may finish a hypothesis; the best N unfinished go on.
* ``GroupBeamSession``: diverse (group) beam search (Vijayakumar et al., 2016, "Diverse Beam
  Search"; transformers-community/group-beam-search). The N beams form G groups of N/G; at each
  step the groups choose in turn, and a group's log-probabilities lose
  ``diversity_penalty × (how many beams of earlier groups chose that token at this step)``
  (Hamming diversity) before its own beam step. Each group keeps its own N/G finished
  hypotheses; the answer is the best over all groups. What it adds to the loop is only its
  diversity stage and the tokens that stage reads; with one group it is plain beam search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engine.decode.beam import BeamSession
from engine.records import GROUP_BEAM, SAMPLED_BEAM
from engine.sampling.base import LogitsProcessor
from engine.sampling.build import PENALTIES, build_chain
from engine.sampling.chain import Chain
from engine.sampling.penalties import SequenceBias
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.sampling.truncation import EpsilonCutoff, EtaCutoff, MinP, TopK, TopP, TypicalP


class ScaleTemperature(LogitsProcessor):
    """Divide the scores by the temperature, unshifted (transformers'
    ``TemperatureLogitsWarper``): beam scores add across beams, so a per-row shift would
    change which beam wins."""

    def __init__(self, temperature: float) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.temperature = float(temperature)

    @property
    def label(self) -> str:
        return f"temperature {self.temperature:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores / self.temperature


def sampling_beam_chain(
    settings: SamplerSettings,
    prompt_length: int,
    eos_token_ids: Sequence[int],
    tokenizer: Any = None,
) -> Chain:
    """The stages transformers applies in sampled beam search, in its order: the penalties,
    then temperature, top-k, top-p, min-p, typical-p, epsilon, eta, each keeping at least
    1 + #EOS tokens (transformers' ``min_tokens_to_keep`` for beams). The llama.cpp-only stages
    (XTC, mirostat, dynamic temperature, ...) do not apply to beams."""
    penalties = build_chain(
        settings, prompt_length, eos_token_ids, only=PENALTIES, tokenizer=tokenizer
    ).stages
    keep = len(eos_token_ids) + 1 if eos_token_ids else 2
    s = settings
    warpers: list[LogitsProcessor] = []
    if s.temperature not in (0.0, 1.0):
        warpers.append(ScaleTemperature(s.temperature))
    if s.top_k:
        warpers.append(TopK(max(s.top_k, keep)))
    if s.top_p < 1:
        warpers.append(TopP(s.top_p, keep))
    if s.min_p > 0:
        warpers.append(MinP(s.min_p))
    if s.typical_p < 1:
        warpers.append(TypicalP(s.typical_p, keep))
    if s.epsilon_cutoff > 0:
        warpers.append(EpsilonCutoff(s.epsilon_cutoff, keep))
    if s.eta_cutoff > 0:
        warpers.append(EtaCutoff(s.eta_cutoff, keep))
    return Chain([*penalties, *warpers], greedy=False)


class SampledBeamSession(BeamSession):
    """Beam search whose candidates are drawn (``do_sample=True, num_beams=N`` in
    transformers). One generator, seeded with the settings' seed, for the whole search;
    temperature 0 gives plain beam search. The tree's candidates come best first, like plain
    beam search's."""

    method = SAMPLED_BEAM

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        seed = self._settings.seed if self._settings is not None else 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        return sampling_beam_chain(settings, self.prompt_length, self.eos_token_ids, self.tokenizer)

    def _select(self, total: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._settings is not None and self._settings.temperature == 0:
            return super()._select(total, k)
        # [1, N * vocab] as transformers draws it, without replacement; then, as transformers,
        # ranked by path score, since only the top N of the K may finish a hypothesis
        idx = torch.multinomial(total.softmax(-1)[None], k, generator=self.generator)
        scores, order = total[None].gather(-1, idx).sort(dim=-1, descending=True)
        return scores[0], idx.gather(-1, order)[0]


class HammingDiversity(LogitsProcessor):
    """transformers' ``HammingDiversityLogitsProcessor`` for one group: subtract
    ``penalty × count[v]``, where ``count[v]`` is how many beams of the earlier groups carry on
    with v at this step (``chosen``: their tokens, set before each group chooses)."""

    def __init__(self, penalty: float) -> None:
        if not (isinstance(penalty, (int, float)) and penalty >= 0):
            raise ValueError(f"diversity_penalty must be >= 0, got {penalty!r}")
        self.penalty = float(penalty)
        self.chosen: torch.Tensor | None = None  # [tokens]

    @property
    def label(self) -> str:
        return f"diversity {self.penalty:g}"

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.chosen is None or self.penalty == 0:
            return scores.clone()
        counts = torch.bincount(self.chosen, minlength=scores.shape[-1])
        return scores - self.penalty * counts.to(scores.dtype)


class GroupBeamSession(BeamSession):
    """Diverse beam search: ``num_beams`` beams in ``num_beam_groups`` groups, one forward pass
    for all of them per step; each group is a beam search of ``num_beams / num_beam_groups``
    beams (transformers' rules, ``BeamSession``) whose scores lose the Hamming diversity
    penalty for the tokens earlier groups chose at this step. The diversity stage sits after
    the logit bias and before the other penalties, as in transformers' processor list. A
    group that is done stops (transformers pads it and counts the pad token for later groups;
    here it counts nothing). The shown beam is the best running one over all groups."""

    method = GROUP_BEAM

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        num_beams: int = 4,
        num_beam_groups: int = 2,
        diversity_penalty: float = 0.5,
        **kwargs: Any,
    ) -> None:
        if not (isinstance(num_beam_groups, int) and num_beam_groups >= 1):
            raise ValueError(f"num_beam_groups must be an integer >= 1, got {num_beam_groups!r}")
        if num_beams % num_beam_groups:
            raise ValueError(
                f"num_beams ({num_beams}) must be a multiple of num_beam_groups ({num_beam_groups})"
            )
        self.diversity = HammingDiversity(diversity_penalty)
        super().__init__(model, prompt_ids, settings, num_beams=num_beams, **kwargs)
        self.num_beam_groups = num_beam_groups

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        stages = super()._chain_for(settings).stages
        at = 1 if stages and type(stages[0]) is SequenceBias else 0
        return Chain([*stages[:at], self.diversity, *stages[at:]], greedy=True)

    def _before_group(self, index: int, chosen: list[int]) -> None:
        self.diversity.chosen = torch.tensor(chosen, device=self.device) if chosen else None
