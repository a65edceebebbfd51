"""Run a lesson stage's experiment (``action: sample_step`` or ``action: sweep``) on the
lesson's model: what the window shows when the teacher presses the stage's button."""

from __future__ import annotations

from typing import Any

from engine.classroom.lessons import ACTION_SAMPLE_STEP, ACTION_SWEEP, LessonStage
from engine.decode.session import GenerationSession
from engine.experiments.step_sample import StepSample, sample_step
from engine.experiments.sweep import SweepRow, sweep
from engine.sampling.settings import SamplerSettings


def run_stage(stage: LessonStage, bundle: Any, top: int = 20) -> StepSample | list[SweepRow]:
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
    raise ValueError(f"stage {stage.title!r} runs no experiment (action {stage.action})")
