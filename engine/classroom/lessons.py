"""Lessons: guided classroom scenarios read from YAML files. No Qt, no torch.

A lesson file names a bundled model and a list of stages. Each stage says what the window
should be set to (prompt, method, sampler settings, options, which plot to show) and what the
teacher says and points at. A stage inherits everything it does not set from the stage before
it (the first one from the defaults), so every ``LessonStage`` carries a full
``SamplerSettings``. Mistakes in a file raise ``LessonError`` naming the file, the line and the
field, e.g. ``line 12, stages[2].settings.temprature: unknown setting; did you mean
temperature?``.

The field reference is in the README's section for teachers, and the shipped lessons in
``resources/lessons/`` are worked examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.classroom.lesson_files import RESOURCES_DIR, LessonFileError, read_tree_file
from engine.classroom.lesson_reader import (
    OPTION_DEFAULTS,
    SAME_PRECISIONS,  # noqa: F401 - lockstep's model B choices, read by the GUI and experiments
    SAME_QUANT,  # noqa: F401
    LessonError,
    Reader,
    compose,
    line_of,
    read_model,
    read_options,
    read_settings,
)
from engine.classroom.live import MODES as LIVE_MODES
from engine.records import RUN_METHODS, SAMPLING, SPEC_DRAFT
from engine.sampling.settings import SamplerSettings
from engine.tree import RunTree
from engine.validate.limits import MAX_LESSON_BYTES

LESSONS_DIR = RESOURCES_DIR / "lessons"

# Which plot or tab a stage brings to the front.
FOCUS_DISTRIBUTION, FOCUS_ENTROPY, FOCUS_SPEED = "distribution", "entropy", "speed"
FOCUS_BEAM_TREE, FOCUS_COMPARE, FOCUS_INSIDE = "beam_tree", "compare", "inside"
FOCUSES = (FOCUS_DISTRIBUTION, FOCUS_ENTROPY, FOCUS_SPEED, FOCUS_BEAM_TREE, FOCUS_COMPARE,
           FOCUS_INSIDE)  # fmt: skip

# What the teacher presses once the stage is set up. The experiments (engine.experiments):
# sample the next step ``samples`` times; run ``sweep_setting`` at each of ``sweep_values``.
# The multiverse (engine.tree): open the prepared tree ``tree_file``; score the text ``text``
# after the prompt. Those two are shown as the stage opens: nothing to press.
ACTION_GENERATE, ACTION_STEP, ACTION_COMPARE, ACTION_NONE = "generate", "step", "compare", "none"
ACTION_SAMPLE_STEP, ACTION_SWEEP = "sample_step", "sweep"
ACTION_TREE, ACTION_SCORE = "tree", "score"
# Two models in lockstep: the lesson's model writes, ``options.model_b`` scores (default: its
# own weights in int8 and in int4, SAME_QUANT).
ACTION_LOCKSTEP = "lockstep"
ACTIONS = (
    ACTION_GENERATE, ACTION_STEP, ACTION_COMPARE, ACTION_NONE, ACTION_SAMPLE_STEP, ACTION_SWEEP,
    ACTION_TREE, ACTION_SCORE, ACTION_LOCKSTEP,
)  # fmt: skip


LESSON_KEYS = ("title", "model", "description", "stages")
STAGE_KEYS = (
    "title", "text", "point_at", "question", "prompt", "use_chat_template", "method",
    "settings", "options", "focus", "action", "guess", "model", "live",
)  # fmt: skip
# The stage fields that name one of a fixed set of words.
_CHOICES = {"method": tuple(RUN_METHODS), "focus": FOCUSES, "action": ACTIONS,
            "live": LIVE_MODES}  # fmt: skip


@dataclass(frozen=True)
class LessonStage:
    """One step of a lesson: how to set the window up, and what to say."""

    title: str
    text: str  # one or two short paragraphs, read aloud or shown large
    prompt: str
    method: str = SAMPLING  # engine.records: SAMPLING, BEAM, SPEC_NGRAM, SPEC_DRAFT
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    options: dict[str, Any] = field(default_factory=lambda: dict(OPTION_DEFAULTS))
    point_at: str = ""
    question: str = ""
    use_chat_template: bool | None = None  # None: the model's default
    focus: str = FOCUS_DISTRIBUTION
    action: str = ACTION_GENERATE
    guess: bool = False  # this stage runs a guess round (hide the next token, then reveal)
    # a live round's question in this mode (engine.classroom.live: guess, vote, sampler): the
    # stage opens the round if it is not open and asks; "" for none
    live: str = ""
    model: str = ""  # a bundled model's id (the lesson's unless the stage names another)
    index: int = 0  # 0-based position in the lesson
    line: int = 0  # where the stage starts in its file (1-based)

    @property
    def num_beams(self) -> int:
        return int(self.options["num_beams"])

    @property
    def gamma(self) -> int:
        return int(self.options["gamma"])

    @property
    def top_n(self) -> int:
        return int(self.options["top_n"])

    @property
    def limit(self) -> int | None:
        return self.options["limit"]

    @property
    def draft_model(self) -> str | None:
        return self.options["draft_model"]

    @property
    def samples(self) -> int:
        return int(self.options["samples"])

    @property
    def sweep(self) -> tuple[str, tuple[float, ...]]:
        """(setting, values) of a sweep stage."""
        return self.options["sweep_setting"], tuple(self.options["sweep_values"])

    @property
    def tree_file(self) -> str | None:
        """Action tree: the prepared tree's path, relative to resources/."""
        return self.options["tree_file"]

    @property
    def score_text(self) -> str | None:
        """Action score: the text the model reads after the prompt."""
        return self.options["text"]

    def request(self) -> Any:
        """The ``engine.drivers.workbench.RunRequest`` this stage describes."""
        from engine.drivers.workbench import RunRequest

        return RunRequest(
            prompt=self.prompt, method=self.method, settings=self.settings,
            chat_template=self.use_chat_template, num_beams=self.num_beams, gamma=self.gamma,
            top_n=self.top_n, limit=self.limit,
        )  # fmt: skip


@dataclass(frozen=True)
class Lesson:
    title: str
    model: str
    description: str
    stages: tuple[LessonStage, ...]
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.stages)


# -- reading -------------------------------------------------------------------------------


def parse_lesson(text: str, path: str | Path | None = None) -> Lesson:
    """A lesson from YAML text; ``path`` only names the file in error messages."""
    try:
        return _parse(text, path)
    except yaml.MarkedYAMLError as exc:  # e.g. a tag the safe loader refuses (!!python/...)
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or str(exc)
        raise LessonError(f"not allowed in a lesson: {problem}", path, line) from exc


def _parse(text: str, path: str | Path | None) -> Lesson:
    reader = Reader(path)
    root = compose(text, path)
    top = reader.mapping(root, "", LESSON_KEYS, "lesson field")
    for name in ("title", "model", "stages"):
        if name not in top:
            raise LessonError(f"missing; a lesson needs {name}", path, line_of(root), name)
    title = reader.text(top["title"][1], "title")
    model = read_model(reader, top["model"][1], "model")
    description = (
        reader.text(top["description"][1], "description", required=False)
        if ("description" in top)
        else ""
    )
    stages_node = top["stages"][1]
    if not isinstance(stages_node, yaml.SequenceNode) or not stages_node.value:
        raise reader.fail(stages_node, "stages", "expected a list of stages (lines starting '- ')")
    stages: list[LessonStage] = []
    previous = LessonStage(title="", text="", prompt="", model=model)
    for i, node in enumerate(stages_node.value):
        previous = _stage(reader, node, i, previous)
        stages.append(previous)
    return Lesson(title, model, description, tuple(stages), Path(path) if path else None)


def _stage_values(reader: Reader, node: yaml.Node, where: str, previous: LessonStage
                  ) -> tuple[dict[str, Any], dict[str, tuple[yaml.Node, yaml.Node]]]:  # fmt: skip
    """The fields a stage sets, each checked (and the entries, for error lines)."""
    entries = reader.mapping(node, where, STAGE_KEYS, "stage field")
    for name in ("title", "text"):
        if name not in entries:
            raise reader.fail(node, f"{where}.{name}", f"missing; every stage needs {name}")
    values: dict[str, Any] = {}
    for name, (_key, value_node) in entries.items():
        here = f"{where}.{name}"
        if name in ("title", "text", "prompt"):
            values[name] = reader.text(value_node, here)
        elif name in ("point_at", "question"):
            values[name] = reader.text(value_node, here, required=False)
        elif name == "use_chat_template":
            values[name] = None if reader.value(value_node) is None else (
                reader.boolean(value_node, here)
            )  # fmt: skip
        elif name == "guess":
            values[name] = reader.boolean(value_node, here)
        elif name in _CHOICES:
            values[name] = reader.choice(value_node, here, _CHOICES[name])
        elif name == "model":
            values[name] = read_model(reader, value_node, here)
        elif name == "settings":
            values[name] = read_settings(reader, value_node, here, previous.settings)
        elif name == "options":
            values[name] = read_options(reader, value_node, here, previous.options)
    return values, entries


def _stage(reader: Reader, node: yaml.Node, i: int, previous: LessonStage) -> LessonStage:
    where = f"stages[{i}]"
    values, entries = _stage_values(reader, node, where, previous)
    # What a stage leaves out it takes from the stage before; words are its own.
    stage = LessonStage(
        title=values["title"],
        text=values["text"],
        prompt=values.get("prompt", previous.prompt),
        method=values.get("method", previous.method),
        settings=values.get("settings", previous.settings),
        options=values.get("options", dict(previous.options)),
        point_at=values.get("point_at", ""),
        question=values.get("question", ""),
        use_chat_template=values.get("use_chat_template", previous.use_chat_template),
        focus=values.get("focus", previous.focus if i else FOCUS_DISTRIBUTION),
        action=values.get("action", ACTION_GENERATE),
        guess=values.get("guess", False),
        live=values.get("live", ""),
        model=values.get("model", previous.model),
        index=i,
        line=line_of(node),
    )
    if not stage.prompt:
        raise reader.fail(node, f"{where}.prompt", "missing; the first stage needs a prompt")
    if stage.method == SPEC_DRAFT and stage.draft_model is None:
        raise reader.fail(
            node, f"{where}.options.draft_model",
            "missing; the draft-model method needs options: draft_model: <a bundled model>",
        )  # fmt: skip
    _check_experiment(reader, node, where, stage)
    _check_tree_and_score(reader, node, where, stage)
    if stage.guess and stage.action not in (ACTION_STEP, ACTION_NONE):
        raise reader.fail(
            entries.get("guess", (node, node))[1], f"{where}.guess",
            "a guess round hides the next token, so use it with action: step",
        )  # fmt: skip
    if stage.live and (stage.action != ACTION_NONE or stage.guess or stage.method != SAMPLING):
        raise reader.fail(
            entries.get("live", (node, node))[1], f"{where}.live",
            "a live round makes its own step at Reveal: use it with action: none, "
            "method: sampling and no guess round",
        )  # fmt: skip
    return stage


def _check_experiment(reader: Reader, node: yaml.Node, where: str, stage: LessonStage) -> None:
    """A sweep stage names values its setting accepts; experiments sample token by token."""
    if stage.action not in (ACTION_SAMPLE_STEP, ACTION_SWEEP):
        return
    if stage.method != SAMPLING:
        raise reader.fail(node, f"{where}.method", f"action {stage.action} needs method sampling")
    if stage.action == ACTION_SWEEP:
        setting, values = stage.sweep
        if not values:
            raise reader.fail(
                node, f"{where}.options.sweep_values", "missing; a sweep needs sweep_values"
            )
        for v in values:
            try:
                stage.settings.with_(**{setting: v})
            except (ValueError, TypeError) as exc:
                raise reader.fail(node, f"{where}.options.sweep_values", str(exc)) from exc


def _check_tree_and_score(reader: Reader, node: yaml.Node, where: str, stage: LessonStage
                          ) -> None:  # fmt: skip
    """A tree stage's file is read now, so a missing or broken one is found with the lesson."""
    if stage.action == ACTION_SCORE and not stage.score_text:
        raise reader.fail(node, f"{where}.options.text", "missing; action score needs a text")
    if stage.action != ACTION_TREE:
        return
    if not stage.tree_file:
        raise reader.fail(
            node, f"{where}.options.tree_file",
            "missing; action tree needs a tree file (a path inside resources/)",
        )  # fmt: skip
    load_stage_tree(stage, reader.path, _option_node(node, "tree_file"))


def _option_node(node: yaml.Node, name: str) -> yaml.Node:
    """The node of ``options.<name>`` in a stage's mapping (for the error's line), or the
    stage's own node when the option was inherited from an earlier stage."""
    for key, value in node.value:
        if key.value == "options" and isinstance(value, yaml.MappingNode):
            return next((v for k, v in value.value if k.value == name), node)
    return node


def load_stage_tree(stage: LessonStage, path: str | Path | None = None,
                    node: yaml.Node | None = None) -> RunTree:  # fmt: skip
    """A fresh copy of a tree stage's prepared tree (each opening starts from the file: the
    window moves the cursor of the copy it has). ``LessonError`` naming the lesson ``path``,
    the line and ``stages[i].options.tree_file`` if the file is missing or broken."""
    try:
        return read_tree_file(stage.tree_file or "")
    except LessonFileError as exc:
        line = node.start_mark.line + 1 if node is not None else stage.line or None
        raise LessonError(
            str(exc), path, line, f"stages[{stage.index}].options.tree_file"
        ) from None


def load_lesson(path: str | Path) -> Lesson:
    """Read and check a lesson file; ``LessonError`` names the file, line and field."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_LESSON_BYTES:  # before reading: a huge file is refused at once
            raise LessonError(
                f"it is {size // 1024} KB, over the {MAX_LESSON_BYTES // 1024} KB limit", path
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LessonError(f"cannot read the file: {exc}", path) from exc
    return parse_lesson(text, path)


def bundled_lessons(folder: str | Path | None = None) -> list[Lesson]:
    """The lessons that ship with the app, sorted by file name (01-..., 02-...)."""
    folder = Path(folder) if folder is not None else LESSONS_DIR
    return [load_lesson(p) for p in sorted(folder.glob("*.yaml"))]
