"""What a lesson stage's experiment button does, in the words a class reads (the lesson panel
and the status bar show these; ``gui.experiments.actions`` prepares the stage); and what else
stays on while a sweep varies one setting (``others_on``, ``only_setting``). No Qt."""

from __future__ import annotations

from engine.classroom.lessons import ACTION_LOCKSTEP, ACTION_SAMPLE_STEP, ACTION_SWEEP
from engine.sampling.settings import SamplerSettings

# The settings that switch a stage of the chain on; their defaults switch it off (a stage
# joins the chain only when its value is not neutral: engine.sampling.build.STAGES).
STAGE_SWITCHES = (
    "temperature", "dynatemp_range", "top_k", "top_p", "min_p", "typical_p",
    "repetition_penalty", "frequency_penalty", "presence_penalty", "dry_multiplier",
    "no_repeat_ngram_size", "min_new_tokens", "top_n_sigma", "smoothing_factor",
    "epsilon_cutoff", "eta_cutoff", "top_a", "xtc_probability", "mirostat", "logit_bias",
    "banned_strings", "suppress_tokens", "grammar", "adaptive_p_target",
)  # fmt: skip
_NEUTRAL = SamplerSettings()


def _shown(name: str, value: object) -> str:
    words = name.replace("_", "-")
    return f"{words} {value:g}" if isinstance(value, (int, float)) else words


def others_on(settings: SamplerSettings, setting: str) -> list[str]:
    """The stages other than ``setting`` that are on in ``settings``, as a class reads them
    ("top-k 40", "top-p 0.9"): what a sweep of ``setting`` keeps doing at every value."""
    return [
        _shown(name, getattr(settings, name))
        for name in STAGE_SWITCHES
        if name != setting and getattr(settings, name) != getattr(_NEUTRAL, name)
    ]


def only_setting(settings: SamplerSettings, setting: str) -> SamplerSettings:
    """``settings`` with every other stage off: a sweep of ``setting`` alone (the length of
    the run, the seed and the order stay)."""
    off = {n: getattr(_NEUTRAL, n) for n in STAGE_SWITCHES if n != setting}
    return settings.with_(**off)


EXPERIMENT_PRESS = {
    ACTION_LOCKSTEP: (
        "Press Compare two models… and OK: the model writes, and the same model with smaller "
        "numbers (int8, int4) scores every step; where do their choices part?"
    ),
    ACTION_SAMPLE_STEP: (
        "Press Sample N× (above the bars): the same step is drawn N times without moving on, "
        "and the counts appear beside its probabilities, with how far apart they are."
    ),
    ACTION_SWEEP: (
        "Press Sweep: one run per value with the same prompt and seed; the outputs appear "
        "side by side with how likely and how varied each one is."
    ),
}
