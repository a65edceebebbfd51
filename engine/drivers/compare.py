"""Run several decoding methods on one prompt and seed, side by side, with real tokens/s
(device synchronised before every clock read) and forward-pass counts."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.decode.beam import BeamSession
from engine.decode.session import GenerationSession
from engine.decode.speculative import (
    ModelDrafter,
    NGramDrafter,
    SpeculativeSession,
    check_same_tokenizer,
)
from engine.models.device import timed
from engine.models.loading import ModelBundle
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
from engine.sampling.settings import SamplerSettings
from engine.step.static_step import warm_ups


class _Comparison:
    """The methods on one prompt and seed; each ``row`` runs one and times it."""

    def __init__(
        self, bundle: ModelBundle, prompt_ids: Sequence[int], settings: SamplerSettings,
        max_new_tokens: int, num_beams: int, gamma: int, drafter: ModelBundle | None, fast: bool,
    ) -> None:  # fmt: skip
        self.bundle, self.ids, self.settings = bundle, list(prompt_ids), settings
        self.n, self.num_beams, self.gamma = max_new_tokens, num_beams, gamma
        self.drafter, self.fast = drafter, fast
        greedy = settings.with_(temperature=0.0)
        self.plain(True, greedy.with_(max_new_tokens=2))  # first-call allocations, lazy kernels
        self.reference = self.plain(True, greedy).generated_ids

    def session(self, use_cache: bool, s: SamplerSettings, fast: bool = False) -> GenerationSession:
        """A plain session over the prompt, its GPU decode step already captured."""
        b = self.bundle
        session = GenerationSession.over(
            b, self.ids, s, top_n=1, max_context=b.context_length, use_cache=use_cache, fast=fast
        )
        return ready(session, self.n)

    def plain(self, use_cache: bool, s: SamplerSettings, fast: bool = False) -> GenerationSession:
        return run(self.session(use_cache, s, fast), self.n)

    def result(
        self, row: str, ids: Sequence[int], secs: float, passes: int, **extra: Any
    ) -> MethodResult:
        text = self.bundle.tokenizer.decode(list(ids), skip_special_tokens=True)
        same = list(ids) == self.reference
        return MethodResult(row, tuple(ids), text, secs, passes, identical_to_greedy=same, **extra)

    def row(self, row: str) -> MethodResult | None:
        """One method's result; None when it does not apply (no draft model, no fast path)."""
        b = self.bundle
        if row == ROW_PLAIN_FAST:
            from engine.step.fast_t5 import supports_t5
            from engine.step.fastpath import supports

            if (supports_t5 if b.is_encoder_decoder else supports)(b.model) is not None:
                return None
            self.plain(True, self.settings.with_(max_new_tokens=2, temperature=0), fast=True)
            session = self.session(True, self.settings, fast=True)
        elif row in (ROW_PLAIN, ROW_PLAIN_NO_CACHE):
            session = self.session(row == ROW_PLAIN, self.settings)
        else:
            session = None
        if session is not None:  # timed from the first token (construction and capture apart)
            _, secs = timed(b.device, lambda: run(session, self.n))
            return self.result(row, session.generated_ids, secs, session.forward_passes)
        if row == ROW_BEAM:
            beam = BeamSession(
                b.model, self.ids, self.settings.with_(max_new_tokens=self.n),
                num_beams=self.num_beams, tokenizer=b.tokenizer, eos_token_ids=b.eos_token_ids,
                top_n=1,
            )  # fmt: skip
            found, secs = timed(b.device, beam.run)
            name = f"{ROW_BEAM} ({self.num_beams})"
            return self.result(name, found.token_ids, secs, found.forward_passes)
        if row in (ROW_SPEC_DRAFT, ROW_SPEC_NGRAM):
            return self.speculative(row)
        raise ValueError(f"unknown method {row!r}: choose from {', '.join(COMPARE_ROWS)}")

    def speculative(self, row: str) -> MethodResult | None:
        b = self.bundle
        if row == ROW_SPEC_DRAFT:
            if self.drafter is None:
                return None
            check_same_tokenizer(b.tokenizer, self.drafter.tokenizer)
            enc = self.ids if self.drafter.is_encoder_decoder else None
            draft: ModelDrafter | NGramDrafter = ModelDrafter(self.drafter.model, enc)
        else:
            draft = NGramDrafter()
        spec = SpeculativeSession(
            b.model, self.ids, draft, self.settings, tokenizer=b.tokenizer,
            eos_token_ids=b.eos_token_ids, gamma=self.gamma, top_n=1, seed=self.settings.seed,
            max_context=b.context_length, fast=self.fast,
        )  # fmt: skip
        ready(spec, self.n)
        ids, secs = timed(b.device, lambda: spec.run(self.n))
        st = spec.stats
        return self.result(
            f"{row} (γ={self.gamma})", ids, secs, st.target_passes, acceptance=st.acceptance_rate,
            mean_accepted=st.mean_accepted_length,
            note=f"{st.drafter_passes} draft passes" if row == ROW_SPEC_DRAFT else "",
        )  # fmt: skip


def ready(session: Any, n: int) -> Any:
    """``session`` with its GPU decode steps compiled and captured for ``n`` more tokens
    (nothing to do on CPU), so that a timed run measures decoding, not the one-off capture."""
    for _ in warm_ups(session, ahead=n):
        pass
    return session


def run(session: GenerationSession, n: int) -> GenerationSession:
    for _ in session.stream(n):
        pass
    return session


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
    yield Progress("Warming up and running plain greedy for the reference")
    comparison = _Comparison(
        bundle, prompt_ids, settings, max_new_tokens, num_beams, gamma, drafter, fast
    )
    for i, row in enumerate(rows):
        yield Progress(f"Running {row} ({i + 1} of {len(rows)})", i / len(rows))
        result = comparison.row(row)
        if result is not None:
            yield result


def compare_methods(
    bundle: ModelBundle,
    prompt_ids: Sequence[int],
    settings: SamplerSettings,
    rows: Sequence[str] = COMPARE_ROWS,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> list[MethodResult]:
    """``compare_iter``'s results as a list (``options``: its keyword arguments); its progress
    lines go to ``progress`` when given."""
    results = []
    for record in compare_iter(bundle, prompt_ids, settings, rows, **options):
        if isinstance(record, MethodResult):
            results.append(record)
        elif progress is not None:
            progress(record.text)
    return results


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
    return _table(rows)


def _served_run(
    bundle: Any, cls: type, prompt_ids: Sequence[int], settings: SamplerSettings, limit: int
) -> tuple[Any, float]:
    """One run of a served session class, and its wall time (the requests included)."""
    session = cls(
        bundle.client, prompt_ids, settings, tokenizer=bundle.tokenizer, top_n=1,
        eos_token_ids=bundle.eos_token_ids, n_logprobs=bundle.n_logprobs,
        max_context=bundle.context_length,
    )  # fmt: skip

    def run() -> None:
        for _ in session.stream(limit):
            pass

    _, secs = timed(torch.device("cpu"), run)
    return session, secs


def compare_served(
    bundle: Any,
    prompt_ids: Sequence[int],
    settings: SamplerSettings,
    max_new_tokens: int = 64,
    local: ModelBundle | None = None,
    local_rows: Sequence[str] = (ROW_PLAIN,),
) -> Iterator[Progress | MethodResult]:
    """A served model (``engine.serve.remote_session.RemoteBundle``) in explore and stream mode,
    and, given ``local`` (the same weights loaded here, the same tokenizer), local rows beside
    them.
    "identical" compares with the served model's explore run at temperature 0; seconds are wall
    time, requests included (forward passes: requests to the server)."""
    from engine.records import ROW_SERVED_EXPLORE, ROW_SERVED_STREAM
    from engine.serve.remote_session import RemoteSession, RemoteStreamSession

    yield Progress("Served model: explore mode at temperature 0 for the reference")
    greedy = settings.with_(temperature=0.0)
    _served_run(bundle, RemoteSession, prompt_ids, greedy, 2)  # warm the server's prefix cache
    reference, _ = _served_run(bundle, RemoteSession, prompt_ids, greedy, max_new_tokens)
    ref = list(reference.generated_ids)
    rows = [(ROW_SERVED_EXPLORE, RemoteSession), (ROW_SERVED_STREAM, RemoteStreamSession)]
    for i, (row, cls) in enumerate(rows):
        yield Progress(f"Running {row} ({i + 1} of {len(rows) + len(local_rows)})")
        session, secs = _served_run(bundle, cls, prompt_ids, settings, max_new_tokens)
        ids = list(session.generated_ids)
        text = bundle.tokenizer.decode(ids, skip_special_tokens=True)
        yield MethodResult(
            row, tuple(ids), text, secs, session.forward_passes,
            identical_to_greedy=ids == ref, note=bundle.describe(),
        )  # fmt: skip
    if local is not None:
        yield from _local_rows(bundle, local, prompt_ids, settings, max_new_tokens, local_rows, ref)


def _local_rows(
    bundle: Any,
    local: ModelBundle,
    prompt_ids: Sequence[int],
    settings: SamplerSettings,
    max_new_tokens: int,
    rows: Sequence[str],
    reference: list[int],
) -> Iterator[Progress | MethodResult]:
    """The local rows beside a served model's, when both tokenizers are the same."""
    vocab = getattr(bundle.tokenizer, "get_vocab", dict)
    if vocab() != local.tokenizer.get_vocab():
        yield Progress("The local model's tokenizer differs from the served one: no local rows")
        return
    comparison = _Comparison(local, prompt_ids, settings, max_new_tokens, 4, 5, None, fast=False)
    comparison.reference = reference
    for row in rows:
        yield Progress(f"Running {row} (local)")
        result = comparison.row(row)
        if result is not None:
            yield result


# -- comparing sampler presets ----------------------------------------------------------------


def distinct_n(ids: Sequence[int], n: int) -> float:
    """Distinct-n (Li et al. 2016): unique n-grams / all n-grams of the output (1.0: no
    n-gram repeats; 0.0 when the output is shorter than n)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition(ids: Sequence[int], n: int = 4) -> float:
    """seq-rep-n (Welleck et al. 2019): the share of the output's n-grams that repeat an
    earlier one, 1 - distinct-n (0.0: none; near 1: a loop)."""
    grams = len(ids) - n + 1
    return 1.0 - distinct_n(ids, n) if grams > 0 else 0.0


@dataclass(frozen=True)
class PresetResult:
    name: str
    token_ids: tuple[int, ...]
    text: str
    seconds: float
    distinct_1: float
    distinct_2: float
    rep_4: float

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else 0.0


def compare_presets(
    bundle: ModelBundle,
    prompt_ids: Sequence[int],
    presets: dict[str, SamplerSettings],
    max_new_tokens: int = 64,
    seed: int = 0,
    fast: bool = False,
) -> list[PresetResult]:
    """Each preset on the same prompt and seed (after one short warm-up run), with its speed
    (device synchronised) and its distinct-1/2 and rep-4 scores."""
    b = bundle

    def make(settings: SamplerSettings) -> GenerationSession:
        session = GenerationSession.over(
            b, prompt_ids, settings, top_n=1, max_context=b.context_length, fast=fast
        )
        return ready(session, max_new_tokens)  # on CUDA: its capture, before the clock

    first = next(iter(presets.values()), SamplerSettings())
    run(make(first.with_(max_new_tokens=2, seed=seed)), 2)  # warm-up: allocations, kernels
    out = []
    for name, preset in presets.items():
        session = make(preset.with_(max_new_tokens=max_new_tokens, seed=seed))
        _, secs = timed(b.device, lambda s=session: run(s, max_new_tokens))
        ids = session.generated_ids
        text = b.tokenizer.decode(ids, skip_special_tokens=True)
        out.append(
            PresetResult(
                name,
                tuple(ids),
                text,
                secs,
                distinct_n(ids, 1),
                distinct_n(ids, 2),
                repetition(ids, 4),
            )  # fmt: skip
        )
    return out


def format_preset_table(results: Sequence[PresetResult]) -> str:
    rows = [("preset", "tokens", "seconds", "tokens/s", "distinct-1", "distinct-2", "rep-4")]
    for r in results:
        rows.append((r.name, str(len(r.token_ids)), f"{r.seconds:.2f}", f"{r.tokens_per_s:.1f}",
                     f"{r.distinct_1:.2f}", f"{r.distinct_2:.2f}", f"{r.rep_4:.2f}"))  # fmt: skip
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> str:
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
