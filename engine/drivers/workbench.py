"""What a user can ask of the engine, as generators of records; no Qt.

A ``Workbench`` holds the loaded model, the draft model and the current session. Each action
(``start``, ``proceed``, ``branch``, ``undo``, ``compare``, ...) is a generator: it tokenises and
builds sessions itself (so a caller on a worker thread keeps that work off the GUI thread), then
yields records (``engine.records``). A caller drives one action at a time and may ``send`` new
``SamplerSettings`` in between records (they apply from the next token, for every method) or
``STOP`` (the run ends after the current token and its summary is still yielded).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.models.loading import ModelBundle
from engine.records import (
    BEAM,
    BEAMS,
    CONTRASTIVE,
    GROUP_BEAM,
    KEEP_FULL,
    RUN_METHODS,
    SAMPLED_BEAM,
    SAMPLING,
    SERVED_STREAM,
    SPEC_DRAFT,
    SPEC_NGRAM,
    ChoiceHistory,
    Progress,
    RunStarted,
    Step,
)
from engine.sampling.settings import DEFAULT_SETTINGS, SamplerSettings

STOP = object()  # send this into an action to end the run after the current token

Action = Generator[Any, Any, Any]


@dataclass(frozen=True)
class RunRequest:
    """A new run as the window describes it: plain values, no tokens yet."""

    prompt: str
    method: str = SAMPLING
    settings: SamplerSettings = DEFAULT_SETTINGS
    chat_template: bool | None = None  # None: the model's default
    num_beams: int = 4
    gamma: int = 5
    top_n: int = 50  # candidates recorded per step
    limit: int | None = None  # tokens for this run; None: settings.max_new_tokens
    fast: bool = True  # the lean decode path where the model supports it
    keep_candidates: int | None = KEEP_FULL
    penalty_alpha: float = 0.6  # contrastive search
    contrastive_k: int = 4
    num_beam_groups: int = 2  # diverse beam search
    diversity_penalty: float = 0.5


def live(session: Any, records: Iterator[Any], settings: bool = True) -> Action:
    """Pass ``records`` on; apply settings sent in to ``session``; on ``STOP`` end the run.
    Ends with the session's summary."""
    try:
        for record in records:
            sent = yield record
            if sent is STOP:
                break
            if sent is not None and settings:
                session.settings = sent
    finally:
        records.close()  # type: ignore[attr-defined] - a generator; marks a stopped run
    yield session.summary()


def prepared(session: Any, records: Iterator[Any]) -> Iterator[Any]:
    """``records``, with the GPU decode step compiled and captured before the first token and
    again between tokens when the run outgrows its cache (``engine.step.static_step.warm_ups``),
    each time after a ``Progress`` line for the status bar. Nothing is added for other
    steppers (CPU, ``model.forward``)."""
    from engine.step.static_step import warm_ups  # torch: not at import (the window starts first)

    try:
        yield from (Progress(text) for text in warm_ups(session))
        for record in records:
            yield record
            # run_end: set by the stream as it starts, so always current here
            if isinstance(record, Step) and len(session.history) < session.run_end:
                yield from (Progress(text) for text in warm_ups(session))  # a token follows
    finally:
        records.close()  # type: ignore[attr-defined] - a generator; marks a stopped run


class Workbench:
    """The engine state a window drives: touched by one action at a time."""

    def __init__(self) -> None:
        self.bundle: ModelBundle | None = None
        self.draft: ModelBundle | None = None
        self.session: Any = None  # GenerationSession | SpeculativeSession | BeamSession

    # -- models ------------------------------------------------------------------------------

    def load(
        self,
        source: str,
        device: str = "auto",
        dtype: str = "auto",
        draft: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> ModelBundle:
        """Load a model (or a draft model, which must share the target's tokenizer) and
        return it; ``adopt`` makes it current, so a cancelled load leaves the old one."""
        from engine.decode.speculative import check_same_tokenizer
        from engine.models.catalog import open_model

        bundle = open_model(source, device=device, dtype=dtype, progress=progress)
        if draft and self.bundle is not None:
            check_same_tokenizer(self.bundle.tokenizer, bundle.tokenizer)
        return bundle

    def open_remote(
        self, url: str, model: str | None = None, key_source: Any = None, **options: Any
    ) -> ModelBundle:
        """Connect to a served model (``engine.serve.remote_session.open_served``: ``options`` are
        its keyword arguments); ``adopt`` makes it current, like a loaded model."""
        from engine.serve.remote_session import open_served

        return open_served(url, model, key_source, **options)

    def adopt(self, bundle: ModelBundle, draft: bool = False) -> None:
        if draft:
            self.draft = bundle
        else:
            self.bundle, self.session = bundle, None
            self.draft = None  # a draft model must match the new target's tokenizer

    # -- runs --------------------------------------------------------------------------------

    def start(self, request: RunRequest) -> Action:
        """A new run: tokenise the prompt, build the method's session, stream it."""
        bundle = self._bundle()
        served = hasattr(bundle, "make_session")  # engine.serve.remote_session.RemoteBundle
        if request.method not in RUN_METHODS and not (served and request.method == SERVED_STREAM):
            raise ValueError(f"Unknown method {request.method!r}: choose {', '.join(RUN_METHODS)}")
        ids = bundle.encode_prompt(request.prompt, request.chat_template)
        self.session = None
        session = self._make_session(bundle, ids, request)
        self.session = session
        yield RunStarted(
            request.method, request.prompt, len(ids), request.settings.to_dict(),
            chat_template=request.chat_template,
        )  # fmt: skip
        yield from live(
            session, prepared(session, session.stream(request.limit)),
            settings=request.method not in (*BEAMS, SERVED_STREAM),
        )  # fmt: skip
        yield self._choices()

    def step(self, request: RunRequest) -> Action:
        """One more token of the current run, or a new run of one token when there is none."""
        if self.session is None:
            yield from self.start(replace(request, limit=1))
        else:
            yield from self.proceed(request.settings, 1)

    def resume(
        self, request: RunRequest, steps: Sequence[Step], limit: int | None = None
    ) -> Action:
        """Go on with a run saved earlier (an autosave) or a path of the run's tree: the
        session over these steps (``hold``); the steps stay as they were."""
        session = self.hold(request, steps)
        if session.finished:
            raise ValueError("The saved run had ended: click a token to branch, or Generate.")
        yield from live(session, prepared(session, session.stream(limit)))
        yield self._choices()

    def hold(self, request: RunRequest, steps: Sequence[Step]) -> Any:
        """A sampling session whose history is ``steps``: the live one, cropped to the prefix
        it shares with them (its KV cache kept up to there, as a branch crops it) when it runs
        on the same prompt; else a new one, its cache rebuilt in one prefill at the next
        token. No records: the caller shows these steps already."""
        bundle = self._bundle()
        ids = bundle.encode_prompt(request.prompt, request.chat_template)
        live_one = self.session
        if live_one is not None and live_one.method == SAMPLING and prompt_of(live_one) == ids:
            follow(live_one, steps)
            live_one.settings = request.settings
            return live_one
        session = self._make_session(bundle, ids, replace(request, method=SAMPLING))
        session.resume(steps)
        self.session = session
        return session

    def resume_branch(self, request: RunRequest, steps: Sequence[Step], step_index: int,
                      token_id: int, limit: int | None) -> Action:  # fmt: skip
        """Take ``token_id`` at ``step_index`` of ``steps`` (a restored run, a node of the
        tree) and continue: the session over ``steps`` first (``hold``), then a branch."""
        self.hold(request, steps)
        yield from self.branch(step_index, token_id, request.settings, limit)

    def proceed(self, settings: SamplerSettings, limit: int | None = None) -> Action:
        """Carry the current run on (Continue, Step) with these settings."""
        session = self._session()
        if session.finished:
            raise ValueError("The run has ended: click a token to branch, or Generate again.")
        if session.method in BEAMS:
            raise ValueError("A beam search cannot be continued: Generate again.")
        session.settings = settings
        yield from live(session, prepared(session, session.stream(limit)))

    def branch(
        self, step_index: int, token_id: int, settings: SamplerSettings, limit: int | None
    ) -> Action:
        """Take ``token_id`` at ``step_index`` and continue from there."""
        session = self._session()
        if session.method != SAMPLING:
            raise ValueError(
                "Choosing a token by hand works with the Sampling method: switch to it and "
                "Generate."
            )
        session.settings = settings
        yield session.branch(step_index, token_id)
        yield from live(session, prepared(session, session.stream(limit)))
        yield self._choices()

    def undo(self) -> Action:
        """Put back the tokens the last choice replaced, exactly as they were."""
        yield from self._session().undo()
        yield self._choices()

    def redo(self) -> Action:
        yield from self._session().redo()
        yield self._choices()

    def compare(self, request: RunRequest) -> Action:
        """The comparison of methods on this prompt and seed, one result at a time."""
        from engine.drivers.compare import compare_iter

        bundle = self._bundle()
        ids = bundle.encode_prompt(request.prompt, request.chat_template)
        if hasattr(bundle, "make_session"):
            from engine.drivers.compare import compare_served

            yield from compare_served(
                bundle, ids, request.settings, request.settings.max_new_tokens
            )
            return
        yield from compare_iter(
            bundle, ids, request.settings, max_new_tokens=request.settings.max_new_tokens,
            num_beams=request.num_beams, gamma=request.gamma, drafter=self.draft,
        )  # fmt: skip

    # -- helpers -----------------------------------------------------------------------------

    def _bundle(self) -> ModelBundle:
        if self.bundle is None:
            raise ValueError("No model is loaded yet.")
        return self.bundle

    def _session(self) -> Any:
        if self.session is None:
            raise ValueError("Generate first: there is no run to continue.")
        return self.session

    def _choices(self) -> ChoiceHistory:
        s = self.session
        undo = getattr(s, "can_undo", lambda: False)()
        redo = getattr(s, "can_redo", lambda: False)()
        return ChoiceHistory(can_undo=undo, can_redo=redo)

    def _make_session(self, bundle: ModelBundle, ids: list[int], request: RunRequest) -> Any:
        if hasattr(bundle, "make_session"):  # a served model builds its own sessions
            return bundle.make_session(ids, request)
        return make_session(bundle, ids, request, self.draft)


def prompt_of(session: Any) -> list[int]:
    """The tokenised prompt a session runs on (the encoder's input for encoder-decoders)."""
    if session.is_encoder_decoder:
        return list(session.encoder_ids)
    return list(session.ids[: session.prompt_length])


def follow(session: Any, steps: Sequence[Step]) -> None:
    """Make ``session``'s history ``steps``: rewind to the prefix they share (the KV cache is
    cropped there), then add the rest as they are; the cache catches up at the next forward
    pass, as after an undo (``GenerationSession._swap`` does the same)."""
    have = [s.token_id for s in session.history]
    k = 0
    while k < min(len(have), len(steps)) and have[k] == steps[k].token_id:
        k += 1
    if k < len(have):
        session.rewind(k)
    for step in steps[k:]:
        session.text_track.push(step.token_id)
        session._add(step)


def make_session(
    bundle: ModelBundle, ids: list[int], request: RunRequest, draft: ModelBundle | None = None
) -> Any:
    """The session of ``request.method`` on the tokenised prompt ``ids``."""
    settings = request.settings
    common: dict[str, Any] = dict(
        tokenizer=bundle.tokenizer, eos_token_ids=bundle.eos_token_ids,
        top_n=request.top_n, max_context=bundle.context_length,
        keep_candidates=request.keep_candidates,
    )  # fmt: skip
    if request.method == BEAM:
        from engine.decode.beam import BeamSession

        return BeamSession(bundle.model, ids, settings, num_beams=request.num_beams, **common)
    if request.method in (SAMPLED_BEAM, GROUP_BEAM, CONTRASTIVE):
        from engine.decode.contrastive import ContrastiveSession
        from engine.decode.search import GroupBeamSession, SampledBeamSession

        if request.method == SAMPLED_BEAM:
            return SampledBeamSession(
                bundle.model, ids, settings, num_beams=request.num_beams, **common
            )
        if request.method == GROUP_BEAM:
            return GroupBeamSession(
                bundle.model, ids, settings, num_beams=request.num_beams,
                num_beam_groups=request.num_beam_groups,
                diversity_penalty=request.diversity_penalty, **common,
            )  # fmt: skip
        return ContrastiveSession(
            bundle.model, ids, settings, penalty_alpha=request.penalty_alpha,
            top_k=request.contrastive_k, **common,
        )  # fmt: skip
    if request.method in (SPEC_NGRAM, SPEC_DRAFT):
        from engine.decode.speculative import ModelDrafter, NGramDrafter, SpeculativeSession

        if request.method == SPEC_DRAFT:
            if draft is None:
                raise ValueError("Load a draft model first (Method panel, Draft model: Load…).")
            enc = ids if draft.is_encoder_decoder else None
            drafter: Any = ModelDrafter(draft.model, enc, fast=request.fast)
        else:
            drafter = NGramDrafter()
        return SpeculativeSession(
            bundle.model, ids, drafter, settings, gamma=request.gamma, seed=settings.seed,
            fast=request.fast, **common,
        )  # fmt: skip
    from engine.decode.pipeline import PipelinedSession  # today's step where it does not pay

    return PipelinedSession(bundle.model, ids, settings, fast=request.fast, **common)
