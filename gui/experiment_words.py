"""What a lesson stage's experiment button does, in the words a class reads (the lesson panel
and the status bar show these; ``gui.experiment_actions`` prepares the stage)."""

from __future__ import annotations

from engine.classroom.lessons import ACTION_SAMPLE_STEP, ACTION_SWEEP

EXPERIMENT_PRESS = {
    ACTION_SAMPLE_STEP: (
        "Press Sample N× (above the bars): the same step is drawn N times without moving on, "
        "and the counts appear beside its probabilities, with how far apart they are."
    ),
    ACTION_SWEEP: (
        "Press Sweep: one run per value with the same prompt and seed; the outputs appear "
        "side by side with how likely and how varied each one is."
    ),
}
