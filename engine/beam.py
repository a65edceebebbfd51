"""Beam search with the same rules as ``transformers.generate(num_beams=N, do_sample=False)``,
and a record of every candidate so the GUI can draw the search as a tree.

Per step, over all beams: log-softmax of the logits, then the processors (no-repeat-ngram),
plus each beam's running log-probability; the best K = max(2, 1 + #EOS) * N candidates are
kept. A candidate that ends with EOS (or reaches the length limit) and ranks in the top N
becomes a finished hypothesis scored sum_logprob / generated_length ** length_penalty; the
best N unfinished candidates carry on. The search stops when no running beam can beat the
worst of N finished hypotheses (transformers' heuristic: the running score divided by the
current length), when ``early_stopping=True`` and N hypotheses are finished, or at the limit.

The KV cache is filled once for the prompt, repeated for the N beams, and reordered after every
step (``reorder_cache``), never recomputed. The encoder of an encoder-decoder model runs once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, EncoderDecoderCache

from engine.generate import EmptyPromptError, TokenTable, _as_id_list, context_length, model_device
from engine.processors import NoRepeatNGram
from engine.records import (
    FINISHED,
    PRUNED,
    RUNNING,
    BeamEvent,
    BeamHypothesis,
    BeamNode,
    BeamResult,
)


class BeamSearch:
    """``for event in search.events(): ...`` then ``search.result``; or ``search.run()``."""

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        num_beams: int = 4,
        max_new_tokens: int = 40,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        no_repeat_ngram_size: int = 0,
        eos_token_ids: int | Iterable[int] | None = None,
        tokenizer: Any | None = None,
    ) -> None:
        if num_beams < 1:
            raise ValueError("num_beams must be >= 1")
        if early_stopping not in (True, False, "never"):
            raise ValueError("early_stopping must be True, False or 'never'")
        prompt_ids = [int(i) for i in prompt_ids]
        if not prompt_ids:
            raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
        self.model = model
        self.num_beams = num_beams
        self.length_penalty = float(length_penalty)
        self.early_stopping = early_stopping
        self.processors = [NoRepeatNGram(no_repeat_ngram_size)] if no_repeat_ngram_size else []
        if eos_token_ids is None:
            eos_token_ids = getattr(model.config, "eos_token_id", None)
        self.eos = tuple(_as_id_list(eos_token_ids))
        self.is_encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
        self.device = model_device(model)
        self.prompt_ids = prompt_ids
        self.decoder_prompt = (
            [int(model.config.decoder_start_token_id)] if self.is_encoder_decoder else prompt_ids
        )
        limit = None if self.is_encoder_decoder else context_length(model)
        self.max_length = len(self.decoder_prompt) + max_new_tokens
        if limit is not None:
            self.max_length = min(self.max_length, limit)
        self.tokens = TokenTable(tokenizer)
        self.result: BeamResult | None = None
        self.forward_passes = 0

    def run(self) -> BeamResult:
        for _ in self.events():
            pass
        assert self.result is not None
        return self.result

    # -- model calls --------------------------------------------------------------------------

    def _start(self) -> tuple[torch.Tensor, Any, dict[str, Any]]:
        """First logits for every beam [N, vocab], the cache, and extra forward kwargs."""
        n = self.num_beams
        model = self.model
        if self.is_encoder_decoder:
            enc = torch.tensor([self.prompt_ids], device=self.device)
            mask = torch.ones_like(enc)
            encoder_out = model.get_encoder()(input_ids=enc, attention_mask=mask, return_dict=True)
            # one encoder pass, its output shared by the N beams
            encoder_out["last_hidden_state"] = encoder_out.last_hidden_state.repeat_interleave(
                n, dim=0
            )
            extra = {
                "encoder_outputs": encoder_out,
                "attention_mask": mask.repeat_interleave(n, dim=0),
            }
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            start = torch.tensor([self.decoder_prompt] * n, device=self.device)
            out = model(decoder_input_ids=start, past_key_values=cache, use_cache=True, **extra)
            self.forward_passes += 1
            return out.logits[:, -1, :].float(), out.past_key_values, extra
        cache = DynamicCache(config=model.config)
        prompt = torch.tensor([self.prompt_ids], device=self.device)
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        self.forward_passes += 1
        cache = out.past_key_values
        cache.batch_repeat_interleave(n)  # the prompt is computed once, copied for each beam
        return out.logits[:, -1, :].float().expand(n, -1), cache, {}

    def _step(
        self, tokens: torch.Tensor, cache: Any, extra: dict[str, Any]
    ) -> tuple[torch.Tensor, Any]:
        """tokens: [N] -> logits [N, vocab]."""
        key = "decoder_input_ids" if self.is_encoder_decoder else "input_ids"
        out = self.model(**{key: tokens[:, None]}, past_key_values=cache, use_cache=True, **extra)
        self.forward_passes += 1
        return out.logits[:, -1, :].float(), out.past_key_values

    # -- the search ---------------------------------------------------------------------------

    @torch.inference_mode()
    def events(self) -> Iterator[BeamEvent]:
        start_time = time.perf_counter()
        n = self.num_beams
        eos = torch.tensor(self.eos, device=self.device, dtype=torch.long)
        keep = max(2, 1 + len(self.eos)) * n
        prompt_len = len(self.decoder_prompt)
        seqs = [list(self.decoder_prompt) for _ in range(n)]
        # Only beam 0 is live at first: all beams are the same prompt.
        scores = torch.full((n,), -1e9, device=self.device)
        scores[0] = 0.0
        beam_nodes = [0] * n
        finished: list[tuple[float, list[int], int]] = []  # (score, seq, node id), best first
        improvable = True
        next_id = 1
        cur_len = prompt_len
        logits, cache, extra = self._start()
        step = 0
        while True:
            logp = F.log_softmax(logits, dim=-1)  # [N, vocab]
            if self.processors:
                ids = torch.tensor(seqs, device=self.device)  # [N, cur_len]
                for proc in self.processors:
                    logp = proc(ids, logp)
            vocab = logp.shape[-1]
            total = (logp + scores[:, None]).reshape(-1)  # [N * vocab]
            top_scores, top_idx = torch.topk(total, min(keep, total.numel()))
            src = top_idx // vocab
            tok = top_idx % vocab
            at_limit = cur_len + 1 >= self.max_length
            hits = (
                torch.isin(tok, eos) if len(self.eos) else torch.zeros_like(tok, dtype=torch.bool)
            )
            if at_limit:
                hits = torch.ones_like(hits)
            token_logp = logp.reshape(-1)[top_idx]
            # one copy of the few numbers the bookkeeping needs
            top_scores_l, src_l, tok_l, hits_l, tok_lp = (
                top_scores.tolist(), src.tolist(), tok.tolist(), hits.tolist(), token_logp.tolist()
            )  # fmt: skip

            # Finished hypotheses: only candidates ranked in the top N may finish.
            gen_len = cur_len + 1 - prompt_len
            full = len(finished) == n and self.early_stopping is True
            statuses = [PRUNED] * len(tok_l)
            final_scores: list[float | None] = [None] * len(tok_l)
            if improvable and not full:
                for j in range(min(n, len(tok_l))):
                    if hits_l[j]:
                        final = top_scores_l[j] / (gen_len**self.length_penalty)
                        finished.append((final, seqs[src_l[j]] + [tok_l[j]], next_id + j))
                        statuses[j], final_scores[j] = FINISHED, final
                finished.sort(key=lambda h: -h[0])
                kept_ids = {h[2] for h in finished[:n]}
                for j in range(len(tok_l)):
                    if statuses[j] == FINISHED and next_id + j not in kept_ids:
                        statuses[j] = PRUNED  # finished, but worse than N better hypotheses
                del finished[n:]

            # The best N unfinished candidates carry on.
            masked = top_scores + hits.float() * -1e9
            order = torch.topk(masked, n).indices.tolist()
            for j in order:
                if not hits_l[j]:
                    statuses[j] = RUNNING
            nodes = tuple(
                BeamNode(
                    node_id=next_id + j,
                    parent=beam_nodes[src_l[j]],
                    token_id=tok_l[j],
                    text=self.tokens(tok_l[j]),
                    logprob=tok_lp[j],
                    score=top_scores_l[j],
                    depth=step + 1,
                    status=statuses[j],
                    final_score=final_scores[j],
                )  # fmt: skip
                for j in range(len(tok_l))
            )
            scores = masked[order]
            seqs = [seqs[src_l[j]] + [tok_l[j]] for j in order]
            beam_nodes = [next_id + j for j in order]
            next_id += len(tok_l)
            cache.reorder_cache(src[order])
            cur_len += 1
            step += 1
            live = tuple(node for node, j in zip(beam_nodes, order, strict=True) if not hits_l[j])
            yield BeamEvent(step, nodes, live, tuple(h[2] for h in finished))

            # Can a running beam still beat the worst finished hypothesis?
            if self.early_stopping == "never" and self.length_penalty > 0:
                best_len = self.max_length - prompt_len
            else:
                best_len = cur_len - prompt_len
            best_possible = float(scores[0]) / (best_len**self.length_penalty)
            worst = finished[-1][0] if len(finished) == n else -1e9
            improvable = improvable and best_possible > worst
            all_full = len(finished) == n and self.early_stopping is True
            if not improvable or all_full or all(hits_l):
                break
            logits, cache = self._step(
                torch.tensor([s[-1] for s in seqs], device=self.device), cache, extra
            )

        hyps = tuple(
            BeamHypothesis(tuple(seq[prompt_len:]), score, node) for score, seq, node in finished
        )
        self.result = BeamResult(hyps, step, self.forward_passes, time.perf_counter() - start_time)


def beam_search(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    num_beams: int = 4,
    max_new_tokens: int = 40,
    **kwargs: Any,
) -> BeamResult:
    """Run a beam search to the end and return its hypotheses, best first."""
    return BeamSearch(model, prompt_ids, num_beams, max_new_tokens, **kwargs).run()
