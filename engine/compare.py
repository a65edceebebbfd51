"""Run several decoding methods on one prompt and seed, side by side, with real tokens/s
(device synchronised before every clock read) and forward-pass counts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from engine.beam import BeamSession
from engine.device import timed
from engine.models import ModelBundle
from engine.records import (
    COMPARE_ROWS,
    ROW_BEAM,
    ROW_PLAIN,
    ROW_PLAIN_FAST,
    ROW_PLAIN_NO_CACHE,
    ROW_SPEC_DRAFT,
    ROW_SPEC_NGRAM,
    MethodResult,
    Progress,
)
from engine.session import GenerationSession
from engine.settings import SamplerSettings
from engine.speculative import ModelDrafter, NGramDrafter, SpeculativeSession, check_same_tokenizer


def compare_iter(
    bundle: ModelBundle,
    prompt_ids: Sequence[int],
    settings: SamplerSettings,
    rows: Sequence[str] = COMPARE_ROWS,
    max_new_tokens: int = 64,
    num_beams: int = 4,
    gamma: int = 5,
    drafter: ModelBundle | None = None,
    fast: bool = False,
) -> Iterator[Progress | MethodResult]:
    """Each method once after a short warm-up, yielding its result as soon as it finishes
    ("identical" compares with plain greedy). ``fast`` makes the speculative methods use the
    lean decode path (plain, fast path always does; plain, KV cache never does)."""
    model, eos = bundle.model, bundle.eos_token_ids
    greedy = settings.with_(temperature=0.0)

    def decode(ids: Sequence[int]) -> str:
        return bundle.tokenizer.decode(list(ids), skip_special_tokens=True)

    def plain(use_cache: bool, s: SamplerSettings, fast: bool = False) -> GenerationSession:
        session = GenerationSession(
            model, prompt_ids, s, eos_token_ids=eos, top_n=1, max_context=bundle.context_length,
            use_cache=use_cache, fast=fast,
        )  # fmt: skip
        for _ in session.stream(max_new_tokens):
            pass
        return session

    def result(
        row: str, ids: Sequence[int], secs: float, passes: int, **extra: object
    ) -> MethodResult:
        return MethodResult(
            row, tuple(ids), decode(ids), secs, passes, identical_to_greedy=list(ids) == reference,
            **extra,  # type: ignore[arg-type]
        )  # fmt: skip

    yield Progress("Warming up and running plain greedy for the reference")
    plain(True, greedy.with_(max_new_tokens=2))  # first-call allocations, lazy kernels
    reference = plain(True, greedy).generated_ids
    for i, row in enumerate(rows):
        yield Progress(f"Running {row} ({i + 1} of {len(rows)})", i / len(rows))
        if row == ROW_PLAIN_FAST:
            from engine.fastpath import supports

            if supports(model) is not None or bundle.is_encoder_decoder:
                continue
            plain(True, greedy.with_(max_new_tokens=2), fast=True)  # warm-up
            session, secs = timed(bundle.device, lambda: plain(True, settings, fast=True))
            yield result(row, session.generated_ids, secs, session.forward_passes)
        elif row in (ROW_PLAIN, ROW_PLAIN_NO_CACHE):
            session, secs = timed(bundle.device, lambda c=row == ROW_PLAIN: plain(c, settings))
            yield result(row, session.generated_ids, secs, session.forward_passes)
        elif row == ROW_BEAM:
            beam = BeamSession(
                model, prompt_ids, settings.with_(max_new_tokens=max_new_tokens),
                num_beams=num_beams, eos_token_ids=eos, top_n=1,
            )  # fmt: skip
            found, secs = timed(bundle.device, beam.run)
            yield result(f"{ROW_BEAM} ({num_beams})", found.token_ids, secs, found.forward_passes)
        elif row in (ROW_SPEC_DRAFT, ROW_SPEC_NGRAM):
            if row == ROW_SPEC_DRAFT:
                if drafter is None:
                    continue
                check_same_tokenizer(bundle.tokenizer, drafter.tokenizer)
                enc = prompt_ids if drafter.is_encoder_decoder else None
                draft: ModelDrafter | NGramDrafter = ModelDrafter(drafter.model, enc)
            else:
                draft = NGramDrafter()
            spec = SpeculativeSession(
                model, prompt_ids, draft, settings, eos_token_ids=eos, gamma=gamma, top_n=1,
                seed=settings.seed, max_context=bundle.context_length, fast=fast,
            )  # fmt: skip
            ids, secs = timed(bundle.device, lambda sp=spec: sp.run(max_new_tokens))
            st = spec.stats
            note = f"{st.drafter_passes} draft passes" if row == ROW_SPEC_DRAFT else ""
            yield result(
                f"{row} (γ={gamma})", ids, secs, st.target_passes, acceptance=st.acceptance_rate,
                mean_accepted=st.mean_accepted_length, note=note,
            )  # fmt: skip
        else:
            raise ValueError(f"unknown method {row!r}: choose from {', '.join(COMPARE_ROWS)}")


def compare_methods(
    bundle: ModelBundle,
    prompt_ids: Sequence[int],
    settings: SamplerSettings,
    rows: Sequence[str] = COMPARE_ROWS,
    **options: Any,
) -> list[MethodResult]:
    """``compare_iter``'s results as a list (``options``: its keyword arguments)."""
    records = compare_iter(bundle, prompt_ids, settings, rows, **options)
    return [r for r in records if isinstance(r, MethodResult)]


def format_table(results: Sequence[MethodResult], baseline: str = ROW_PLAIN) -> str:
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
