"""The experiments' work, as the worker thread runs it (no Qt here): each function takes the
loaded bundle and plain values captured on the GUI thread, builds its session there (so
tokenising and the forward passes stay off the GUI thread) and returns plain records. A
generator yields ``Progress`` (the status bar) and ``MethodResult`` rows (the Compare tab,
through the run store) and ends early when the Stop button sends ``STOP``."""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.classroom.lessons import SAME_PRECISIONS
from engine.drivers.workbench import STOP
from engine.errors import TokenizerMismatchError
from engine.records import MethodResult, Progress
from engine.sampling.settings import SamplerSettings
from gui.experiments.words import others_on

if TYPE_CHECKING:  # these modules import torch: the window opens before torch loads
    from engine.experiments.lockstep import LockstepStep, LockstepSummary
    from engine.experiments.step_sample import StepDraws, StepSample
    from engine.experiments.sweep import SweepRow, Variation

# The Compare tab's method column is narrow: "temp 0.5" reads whole where "temperature = 0.5"
# was cut to "temperature …".
SHORT = {"temperature": "temp", "top_p": "top-p", "min_p": "min-p", "top_k": "top-k"}
SERVED_REFUSAL = (
    "{what} needs a model loaded here: a served model sends only its top few probabilities, "
    "not the whole distribution."
)


@dataclass(frozen=True)
class Where:
    """The text a step reads: the prompt (as the run saw it) and the tokens before the step."""

    prompt: str
    chat_template: bool
    prefix: tuple[int, ...] = ()
    label: str = "at the first step"


@dataclass(frozen=True)
class SampleResult:
    draws: StepDraws  # kept for "draw more": only a job touches it
    sample: StepSample
    label: str


@dataclass(frozen=True)
class SweepResult:
    rows: tuple[SweepRow, ...]
    seed: int
    also_on: tuple[str, ...] = ()  # the other stages on at every value ("top-k 40")


@dataclass(frozen=True)
class LockstepResult:
    steps: tuple[LockstepStep, ...]
    summary: LockstepSummary | None
    a: str
    b: str
    refusal: str = ""  # the tokenizers differ: this message, nothing else
    bounds: str = ""  # B is served and sent its top-N only: what is a bound (KL, B's prob.)
    # more B's scoring the same text (float32 vs int8 vs int4): (name, steps, summary) each
    extra: tuple[tuple[str, tuple[LockstepStep, ...], LockstepSummary | None], ...] = ()


def _local(bundle: Any, what: str) -> Any:
    if hasattr(bundle, "make_session"):  # engine.serve.remote_session.RemoteBundle
        raise ValueError(SERVED_REFUSAL.format(what=what))
    return bundle


def session_for(bundle: Any, where: Where, settings: SamplerSettings) -> Any:
    """A sampling session over the prompt and ``where.prefix`` (the step's context)."""
    from engine.decode.session import GenerationSession

    ids = bundle.encode_prompt(where.prompt, where.chat_template)
    if where.prefix and bundle.is_encoder_decoder:
        raise ValueError("On an encoder-decoder model only the first step can be sampled here.")
    return GenerationSession.over(
        bundle, [*ids, *where.prefix], settings, top_n=1, max_context=bundle.context_length
    )


def sample_first(bundle: Any, where: Where, settings: SamplerSettings, n: int) -> SampleResult:
    """One forward pass at the step, then ``n`` draws (seeded by the settings' seed)."""
    from engine.experiments.step_sample import StepDraws

    session = session_for(_local(bundle, "Sampling a step"), where, settings)
    draws = StepDraws(session, seed=settings.seed, top=20)
    return SampleResult(draws, draws.more(n), where.label)


def sample_more(previous: SampleResult, n: int) -> SampleResult:
    return SampleResult(previous.draws, previous.draws.more(n), previous.label)


def sweep_job(
    bundle: Any, where: Where, base: SamplerSettings, setting: str, values: Sequence[float]
) -> Generator[Any, Any, SweepResult]:
    """One run per value; a Compare-tab row as each one ends."""
    from engine.experiments.sweep import sweep

    _local(bundle, "A sweep")
    rows: list[SweepRow] = []
    for i, value in enumerate(values):
        if (yield Progress(f"Sweep: {setting} = {value:g} ({i + 1} of {len(values)})")) is STOP:
            break
        start = time.perf_counter()
        row = sweep(lambda s: session_for(bundle, where, s), base, setting, [value])[0]
        rows.append(row)
        result = MethodResult(
            method=f"{SHORT.get(setting, setting)} {value:g}", token_ids=row.token_ids,
            text=row.text, seconds=time.perf_counter() - start, forward_passes=len(row.token_ids),
            note=f"log-prob {row.logprob:.1f}, entropy {row.mean_entropy:.2f} bits",
        )  # fmt: skip
        if (yield result) is STOP:
            break
    return SweepResult(tuple(rows), base.seed, tuple(others_on(base, setting)))


def variation_job(bundle: Any, where: Where, base: SamplerSettings, runs: int) -> Variation:
    from engine.experiments.sweep import variation

    _local(bundle, "Stochastic variation")
    return variation(lambda s: session_for(bundle, where, s), base, runs)


def lockstep_job(
    bundle: Any, where: Where, settings: SamplerSettings, source_b: str, top_n: int,
    say: Any,
) -> Generator[Any, Any, LockstepResult]:  # fmt: skip
    """Load B (a ``SAME_PRECISIONS`` key: A's own source in other weights, one B per dtype),
    then A writes and each B scores; A's seeded run writes the same text for every B."""
    from engine.experiments.lockstep import Lockstep
    from engine.models.catalog import open_model, parse_served

    _local(bundle, "Lockstep")
    if parse_served(source_b) is not None:  # B on a server: a recent of Open served model…
        return (yield from _served_lockstep(bundle, where, settings, source_b, top_n, say))
    precisions = SAME_PRECISIONS.get(source_b)
    source = (bundle.source_key or bundle.source) if precisions else source_b
    a_name = f"{bundle.name} ({bundle.dtype_name})" if precisions else bundle.name
    runs: list[tuple[str, tuple[LockstepStep, ...], LockstepSummary | None]] = []
    for dtype in precisions or ("auto",):
        say(f"Loading model B: {source}{'' if dtype == 'auto' else ' in ' + dtype}…")
        device = "cpu" if dtype in ("int8", "int4") else bundle.device
        b = open_model(source, device=device, dtype=dtype)
        b_name = f"{b.name} ({b.dtype_name})" if precisions else b.name
        try:
            lock = Lockstep(session_for(bundle, where, settings), b.model, b.tokenizer,
                            top_n=top_n)  # fmt: skip
        except TokenizerMismatchError as exc:
            return LockstepResult((), None, bundle.name, b_name, refusal=str(exc))
        stopped = False
        for step in lock.stream():
            said = f"Lockstep ({b_name}): step {step.index + 1}, KL {step.kl:.3f}"
            if (yield Progress(said)) is STOP:
                stopped = True
                break
        runs.append((b_name, tuple(lock.steps), lock.summary()))
        del b, lock  # one B in memory at a time
        if stopped:
            break
    (b_name, steps, summary), *more = runs
    return LockstepResult(steps, summary, a_name, b_name, extra=tuple(more))


def _served_lockstep(
    bundle: Any, where: Where, settings: SamplerSettings, source_b: str, top_n: int, say: Any
) -> Generator[Any, Any, LockstepResult]:
    """B served (``engine.serve.served_lockstep``): asked for its top-N at each of A's
    prefixes, with the server and options its source remembers; KL is then a lower bound."""
    from engine.models.catalog import parse_served
    from engine.serve.remote import KeySource
    from engine.serve.remote_session import open_served
    from engine.serve.served_lockstep import ServedLockstep
    from gui.models.api import served_run_options

    url, model, key_kind = parse_served(source_b) or ("", "", "none")
    say(f"Connecting to model B at {url}…")
    b = open_served(url, model or None, KeySource(key_kind), **served_run_options(source_b))
    try:
        session = session_for(bundle, where, settings)
        lock = ServedLockstep(session, b, top_n=min(top_n, b.n_logprobs))
        for step in lock.stream():
            if (yield Progress(f"Lockstep: step {step.index + 1}, KL ≥ {step.kl:.3f}")) is STOP:
                break
    except TokenizerMismatchError as exc:
        return LockstepResult((), None, bundle.name, b.describe(), refusal=str(exc))
    finally:
        b.client.close()
    return LockstepResult(tuple(lock.steps), lock.summary(), bundle.name, b.describe(),
                          bounds=lock.bounds)  # fmt: skip
