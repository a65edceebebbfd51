"""Run a lesson stage's experiment (``action: sample_step``, ``sweep`` or ``lockstep``) on the
lesson's model: what the window shows when the teacher presses the stage's button."""

from __future__ import annotations

from typing import Any

from engine.classroom.lessons import (
    ACTION_LOCKSTEP,
    ACTION_SAMPLE_STEP,
    ACTION_SWEEP,
    SAME_PRECISIONS,
    SAME_QUANT,
    LessonStage,
)
from engine.decode.session import GenerationSession
from engine.experiments.records import LockstepStep, LockstepSummary
from engine.experiments.step_sample import sample_step
from engine.experiments.sweep import sweep
from engine.sampling.settings import SamplerSettings


def run_stage(stage: LessonStage, bundle: Any, top: int = 20) -> Any:
    """The stage's step sample (its ``samples`` draws, seeded by its settings' seed) or its
    sweep (``sweep_setting`` over ``sweep_values``), on ``bundle`` (a ModelBundle)."""
    ids = bundle.encode_prompt(stage.prompt, stage.use_chat_template)

    def make(settings: SamplerSettings) -> GenerationSession:
        return GenerationSession.over(bundle, ids, settings, top_n=1)

    if stage.action == ACTION_SAMPLE_STEP:
        return sample_step(make(stage.settings), stage.samples, seed=stage.settings.seed, top=top)
    if stage.action == ACTION_SWEEP:
        setting, values = stage.sweep
        return sweep(make, stage.settings, setting, values)
    if stage.action == ACTION_LOCKSTEP:
        return lockstep_stage(stage, bundle, lambda: make(stage.settings))
    raise ValueError(f"stage {stage.title!r} runs no experiment (action {stage.action})")


def lockstep_stage(
    stage: LessonStage, bundle: Any, make: Any, top_n: int = 10
) -> dict[str, tuple[list[LockstepStep], LockstepSummary]]:
    """A lockstep stage: the lesson's model writes (``make()``, its session) and each model B
    scores, by B's name: its own weights in other dtypes (``SAME_PRECISIONS``), or a source."""
    from engine.experiments.lockstep import Lockstep
    from engine.models.catalog import open_model

    choice = str(stage.options.get("model_b", SAME_QUANT))
    source = bundle.source_key or bundle.source
    out = {}
    for dtype in SAME_PRECISIONS.get(choice, ("auto",)):
        quant = dtype in ("int8", "int4")
        b = open_model(source if choice in SAME_PRECISIONS else choice,
                       device="cpu" if quant else bundle.device, dtype=dtype)  # fmt: skip
        lock = Lockstep(make(), b.model, b.tokenizer, top_n=top_n)
        steps = list(lock.stream())
        out[b.dtype_name if choice in SAME_PRECISIONS else b.name] = (steps, lock.summary())
    return out
