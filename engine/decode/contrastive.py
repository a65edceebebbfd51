"""Contrastive search (Su et al., 2022, "A Contrastive Framework for Neural Text Generation";
transformers 5 moved it to the Hub repository ``transformers-community/contrastive-search``),
streamed as ``Step`` records for the chosen tokens and a ``BeamEvent`` per step for the tree.

Among the top-k tokens by probability (after the penalties), pick the one maximising
``(1 - alpha) · p(v) - alpha · max_j cos(h_v, h_j)``, where h_v is the model's last hidden
state after reading v and h_j those of every earlier position (prompt included). alpha 0 is
greedy decoding.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from engine.decode.base import Record, SessionBase
from engine.decode.measure import measure
from engine.models.device import model_device
from engine.records import (
    CONTRASTIVE,
    KEEP_FULL,
    PRUNED,
    RUNNING,
    BeamEvent,
    BeamNode,
    StageNote,
)
from engine.sampling.build import PENALTIES, build_chain
from engine.sampling.chain import Chain
from engine.sampling.sampler import StageReport
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings
from engine.step.kvcache import cache_kwargs, returned_cache


class ContrastiveSession(SessionBase):
    """Contrastive search, token by token (decoder-only models). Per step: one forward pass
    over the k candidates (the KV cache repeated k times, then cropped to the chosen one),
    a ``Step`` for the chosen token and a ``BeamEvent`` with the k candidates scored."""

    method = CONTRASTIVE

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        settings: SamplerSettings = DEFAULT_SETTINGS,
        *,
        penalty_alpha: float = 0.6,
        top_k: int = 4,
        tokenizer: Any | None = None,
        eos_token_ids: int | Iterable[int] | None = None,
        top_n: int = 20,
        max_context: int | None = None,
        keep_candidates: int | None = KEEP_FULL,
    ) -> None:
        if not 0 <= penalty_alpha <= 1:
            raise ValueError(f"penalty_alpha must be in [0, 1], got {penalty_alpha!r}")
        if not (isinstance(top_k, int) and top_k >= 1):
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
        super().__init__(
            model, prompt_ids, settings, tokenizer=tokenizer, eos_token_ids=eos_token_ids,
            top_n=top_n, max_context=max_context, keep_candidates=keep_candidates,
        )  # fmt: skip
        if self.is_encoder_decoder:
            raise ValueError("contrastive search here takes decoder-only models")
        self.alpha = float(penalty_alpha)
        self.k = top_k
        self.device = model_device(model)
        self.forward_passes = 0
        self._state: tuple[torch.Tensor, Any, torch.Tensor] | None = None
        self._node = 0  # the tree node of the last chosen token (0: the prompt)
        self._next_id = 1

    def _chain_for(self, settings: SamplerSettings) -> Chain:
        """Contrastive search is deterministic: only the penalties apply (as in transformers)."""
        return build_chain(
            settings, self.prompt_length, self.eos_token_ids, only=PENALTIES,
            tokenizer=self.tokenizer,
        )  # fmt: skip

    def rewind(self, step_index: int) -> Any:
        raise NotImplementedError("contrastive search runs from the prompt; start a new run")

    def _forward(self, ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """ids: [rows, t] -> last logits [rows, vocab], last-layer hidden states [rows, t, H]."""
        out = self.model(
            input_ids=ids, **cache_kwargs(self.model, cache), use_cache=True,
            output_hidden_states=True,
        )  # fmt: skip
        self.forward_passes += 1
        return out.logits[:, -1, :].float(), out.hidden_states[-1].float(), returned_cache(out)

    def _advance(self, room: int) -> Iterator[Record]:
        yield from self._step()

    @torch.inference_mode()
    def _step(self) -> list[Record]:
        from transformers import DynamicCache

        start = time.perf_counter()
        fed = 1
        if self._state is None:  # read the prompt once
            prompt = torch.tensor([self.ids], device=self.device)
            logits, hidden, cache = self._forward(prompt, DynamicCache(config=self.model.config))
            self._state = (logits, cache, hidden[0])  # context: [S, H]
            fed = len(self.ids)
        logits, cache, context = self._state
        ids = torch.tensor([self.ids], device=self.device) if self.sampler.uses_ids else None
        probs, cut = self.sampler.probs(ids, logits)  # [1, vocab]
        k = min(self.k, probs.shape[-1])
        top_p, top_ids = torch.topk(probs[0], k)  # [k]
        # Feed the k candidates at once: the cache repeated k times.
        cache.batch_repeat_interleave(k)
        cand_logits, cand_hidden, cache = self._forward(top_ids[:, None], cache)
        h = F.normalize(cand_hidden[:, -1, :], dim=-1)  # [k, H]
        degeneration = (h @ F.normalize(context, dim=-1).T).amax(dim=-1)  # [k]
        score = (1 - self.alpha) * top_p - self.alpha * degeneration
        best = score.argmax()  # the first maximum, as torch.max in transformers
        token = top_ids[best].reshape(1)
        cache.reorder_cache(best.reshape(1))  # keep the chosen candidate's row
        self._state = (
            cand_logits[best][None],
            cache,
            torch.cat([context, cand_hidden[best, -1][None]]),
        )
        extra = torch.cat([top_ids.double(), top_p.double(), degeneration.double(),
                           score.double()])[None]  # fmt: skip
        m = measure(logits, probs, token, self.top_n, cut, extra=extra)[0]  # one host copy
        elapsed = time.perf_counter() - start
        return self._records(m, elapsed, fed, k, self.sampler.report())

    def _records(
        self, m: Any, elapsed: float, fed: int, k: int, report: StageReport
    ) -> list[Record]:
        ids, p, deg, score = (m.extra[i * k : (i + 1) * k] for i in range(4))
        chosen = [int(i) for i in ids].index(m.token_id)
        show = self.text_track.show
        depth = len(self.history) + 1
        nodes = tuple(
            BeamNode(
                node_id=self._next_id + j,
                parent=self._node,
                token_id=int(ids[j]),
                text=show(int(ids[j])),
                logprob=float(torch.tensor(p[j]).log()),
                score=score[j],
                depth=depth,
                status=RUNNING if j == chosen else PRUNED,
            )  # fmt: skip
            for j in range(k)
        )
        note = StageNote(
            f"contrastive α {self.alpha:g}, k {self.k}",
            f"chose {show(m.token_id)!r}: p {p[chosen]:.3f}, degeneration {deg[chosen]:.3f}, "
            f"score {score[chosen]:.3f}",
        )
        self._node = self._next_id + chosen
        self._next_id += k
        # the penalties' word notes (DRY); numeric notes come from stages contrastive lacks
        step = self._append(m, elapsed, "contrastive", fed=fed, report=report)
        step = self.history[-1] = _with_note(step, note)
        event = BeamEvent(depth, nodes, (self._node,), ())
        return [event, step]


def _with_note(step: Any, note: StageNote) -> Any:
    return replace(step, stage_notes=(*step.stage_notes, note))
