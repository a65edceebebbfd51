"""Run several decoding methods on one prompt and seed, side by side, with real tokens/s
(device synchronised before every clock read) and forward-pass counts."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from engine.beam import BeamSearch
from engine.generate import GenerationSession, synchronize
from engine.models import ModelBundle
from engine.records import (
    BEAM,
    METHODS,
    PLAIN,
    PLAIN_FAST,
    PLAIN_NO_CACHE,
    SPEC_DRAFT,
    SPEC_NGRAM,
    MethodResult,
)
from engine.settings import SamplerSettings
from engine.speculative import ModelDrafter, NGramDrafter, SpeculativeSession, check_same_tokenizer

T = TypeVar("T")


def _timed(device: torch.device, fn: Callable[[], T]) -> tuple[T, float]:
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def compare_methods(
    bundle: ModelBundle,
    prompt_ids: Sequence[int],
    settings: SamplerSettings,
    methods: Sequence[str] = METHODS,
    max_new_tokens: int = 64,
    num_beams: int = 4,
    gamma: int = 5,
    drafter: ModelBundle | None = None,
    progress: Callable[[str], None] | None = None,
    fast: bool = False,
) -> list[MethodResult]:
    """Each method runs once after a short warm-up; "identical" compares with plain greedy.
    ``fast`` makes the speculative methods use the lean decode path (plain, fast path always
    does; plain, KV cache never does)."""
    say = progress or (lambda _m: None)
    model, eos = bundle.model, bundle.eos_token_ids
    device = bundle.device
    greedy = settings.with_(temperature=0.0)

    def decode(ids: Sequence[int]) -> str:
        return bundle.tokenizer.decode(list(ids), skip_special_tokens=True)

    def plain(use_cache: bool, s: SamplerSettings, fast: bool = False) -> GenerationSession:
        session = GenerationSession(
            model,
            prompt_ids,
            s,
            tokenizer=None,
            eos_token_ids=eos,
            top_n=1,
            max_context=bundle.context_length,
            use_cache=use_cache,
            fast=fast,
        )
        for _ in session.stream(max_new_tokens):
            pass
        return session

    # warm-up (first-call allocations, lazy kernels) outside the timings
    plain(True, greedy.with_(max_new_tokens=2))
    reference = plain(True, greedy).generated_ids

    results: list[MethodResult] = []
    for method in methods:
        say(f"Running {method}")
        if method == PLAIN_FAST:
            from engine.fastpath import supports

            if supports(model) is not None or bundle.is_encoder_decoder:
                continue
            plain(True, greedy.with_(max_new_tokens=2), fast=True)  # warm-up
            session, secs = _timed(device, lambda: plain(True, settings, fast=True))
            ids = session.generated_ids
            results.append(
                MethodResult(method, tuple(ids), decode(ids), secs, session.forward_passes)
            )
        elif method in (PLAIN, PLAIN_NO_CACHE):
            session, secs = _timed(device, lambda c=method == PLAIN: plain(c, settings))
            ids = session.generated_ids
            results.append(
                MethodResult(method, tuple(ids), decode(ids), secs, session.forward_passes)
            )
        elif method == BEAM:
            search = BeamSearch(
                model,
                prompt_ids,
                num_beams=num_beams,
                max_new_tokens=max_new_tokens,
                eos_token_ids=eos,
                no_repeat_ngram_size=settings.no_repeat_ngram_size,
            )
            result, secs = _timed(device, search.run)
            ids = result.token_ids
            name = f"{BEAM} ({num_beams})"
            results.append(MethodResult(name, tuple(ids), decode(ids), secs, result.forward_passes))
        elif method in (SPEC_DRAFT, SPEC_NGRAM):
            if method == SPEC_DRAFT:
                if drafter is None:
                    continue
                check_same_tokenizer(bundle.tokenizer, drafter.tokenizer)
                enc = prompt_ids if drafter.is_encoder_decoder else None
                draft: ModelDrafter | NGramDrafter = ModelDrafter(drafter.model, enc)
            else:
                draft = NGramDrafter()
            spec = SpeculativeSession(
                model,
                prompt_ids,
                draft,
                settings,
                eos_token_ids=eos,
                gamma=gamma,
                top_n=1,
                seed=settings.seed,
                max_context=bundle.context_length,
                fast=fast,
            )
            ids, secs = _timed(device, lambda sp=spec: sp.run(max_new_tokens))
            st = spec.stats
            results.append(
                MethodResult(
                    f"{method} (γ={gamma})",
                    tuple(ids),
                    decode(ids),
                    secs,
                    st.target_passes,
                    st.acceptance_rate,
                    st.mean_accepted_length,
                    note=f"{st.drafter_passes} draft passes" if method == SPEC_DRAFT else "",
                )
            )
        else:
            raise ValueError(f"unknown method {method!r}: choose from {', '.join(METHODS)}")
    return [
        MethodResult(**{**r.__dict__, "identical_to_greedy": list(r.token_ids) == reference})
        for r in results
    ]


def format_table(results: Sequence[MethodResult], baseline: str = PLAIN) -> str:
    base = next((r for r in results if r.method == baseline), None)
    rows = [
        (
            "method",
            "tokens",
            "seconds",
            "tokens/s",
            "speed-up",
            "target passes",
            "accept",
            "mean acc.",
            "= greedy",
        )
    ]
    for r in results:
        rows.append(
            (
                r.method,
                str(r.tokens),
                f"{r.seconds:.2f}",
                f"{r.tokens_per_s:.1f}",
                f"{r.tokens_per_s / base.tokens_per_s:.2f}x" if base and base.tokens_per_s else "-",
                str(r.forward_passes),
                f"{r.acceptance:.0%}" if r.acceptance is not None else "-",
                f"{r.mean_accepted:.2f}" if r.mean_accepted is not None else "-",
                "yes" if r.identical_to_greedy else "no",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
