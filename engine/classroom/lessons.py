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

import difflib
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from engine.records import RUN_METHODS, SAMPLING, SPEC_DRAFT
from engine.sampling.checks import RULES
from engine.sampling.settings import ORDERS, SWEEPABLE, SamplerSettings
from engine.validate import InputError
from engine.validate.limits import (
    MAX_BEAMS,
    MAX_GAMMA,
    MAX_LESSON_BYTES,
    MAX_NEW_TOKENS,
    MAX_TOP_N,
)
from engine.validate.yamlguard import compose_bounded

_BASE = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[2]))
LESSONS_DIR = _BASE / "resources" / "lessons"

# Which plot or tab a stage brings to the front.
FOCUS_DISTRIBUTION, FOCUS_ENTROPY, FOCUS_SPEED = "distribution", "entropy", "speed"
FOCUS_BEAM_TREE, FOCUS_COMPARE = "beam_tree", "compare"
FOCUSES = (FOCUS_DISTRIBUTION, FOCUS_ENTROPY, FOCUS_SPEED, FOCUS_BEAM_TREE, FOCUS_COMPARE)

# What the teacher presses once the stage is set up. The experiments (engine.experiments):
# sample the next step ``samples`` times; run ``sweep_setting`` at each of ``sweep_values``.
ACTION_GENERATE, ACTION_STEP, ACTION_COMPARE, ACTION_NONE = "generate", "step", "compare", "none"
ACTION_SAMPLE_STEP, ACTION_SWEEP = "sample_step", "sweep"
ACTIONS = (
    ACTION_GENERATE, ACTION_STEP, ACTION_COMPARE, ACTION_NONE, ACTION_SAMPLE_STEP, ACTION_SWEEP
)  # fmt: skip

# Per-stage options beside the sampler settings, with their defaults
# (engine.drivers.workbench.RunRequest)
OPTION_DEFAULTS: dict[str, Any] = {
    "num_beams": 4,  # beam search width
    "gamma": 5,  # speculative: tokens drafted per round
    "top_n": 50,  # candidates recorded per step (hover, plots, guess round)
    "limit": None,  # tokens for this run; None: settings.max_new_tokens
    "draft_model": None,  # speculative with a draft model: a bundled model's id
    "samples": 1000,  # action sample_step: draws of the next token (at most 100,000)
    "sweep_setting": "temperature",  # action sweep: the setting it varies
    "sweep_values": (),  # and its values, in order (action sweep needs some)
}
MAX_SAMPLES, MAX_SWEEP_VALUES = 100_000, 12
# name -> (minimum, maximum): the maxima are engine.validate.limits', named in the message
_INT_OPTIONS = {
    "num_beams": (1, MAX_BEAMS), "gamma": (1, MAX_GAMMA), "top_n": (1, MAX_TOP_N),
    "limit": (1, MAX_NEW_TOKENS), "samples": (1, MAX_SAMPLES),
}  # fmt: skip

LESSON_KEYS = ("title", "model", "description", "stages")
STAGE_KEYS = (
    "title", "text", "point_at", "question", "prompt", "use_chat_template", "method",
    "settings", "options", "focus", "action", "guess", "model",
)  # fmt: skip
SETTING_NAMES = tuple(f.name for f in fields(SamplerSettings))


class LessonError(ValueError):
    """A lesson file that cannot be used; ``str()`` names the file, line and field."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None,
                 field: str = "") -> None:  # fmt: skip
        self.message, self.path, self.line, self.field = message, path, line, field
        where = ", ".join(
            part for part in (f"line {line}" if line is not None else "", field) if part
        )
        text = f"{where}: {message}" if where else message
        super().__init__(f"{path}: {text}" if path is not None else text)


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


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Reader:
    """Walks the composed YAML nodes (which keep their line numbers) and checks each field."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = path
        self._constructor = yaml.constructor.SafeConstructor()

    def fail(self, node: yaml.Node | None, where: str, message: str) -> LessonError:
        return LessonError(message, self.path, _line(node) if node is not None else None, where)

    def mapping(self, node: yaml.Node, where: str, known: tuple[str, ...], kind: str
                ) -> dict[str, tuple[yaml.Node, yaml.Node]]:  # fmt: skip
        """key -> (key node, value node); unknown and repeated keys are errors."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, where, f"expected a mapping of {kind} (name: value lines)")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self._constructor.construct_object(key_node, deep=True)
            name = f"{where}.{key}" if where else str(key)
            if not isinstance(key, str):
                raise self.fail(key_node, name, f"expected a {kind} name")
            if key not in known:
                raise self.fail(key_node, name, f"unknown {kind}{_did_you_mean(key, known)}")
            if key in out:
                raise self.fail(key_node, name, f"{kind} given twice")
            out[key] = (key_node, value_node)
        return out

    def value(self, node: yaml.Node) -> Any:
        return self._constructor.construct_object(node, deep=True)

    def text(self, node: yaml.Node, where: str, required: bool = True) -> str:
        value = self.value(node)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(node, where, f"expected some text, got {_show(value)}")
        return value.strip()

    def boolean(self, node: yaml.Node, where: str) -> bool:
        value = self.value(node)
        if not isinstance(value, bool):
            raise self.fail(node, where, f"expected true or false, got {_show(value)}")
        return value

    def choice(self, node: yaml.Node, where: str, allowed: tuple[str, ...] | list[str]) -> str:
        value = self.value(node)
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(
                node, where,
                f"{_show(value)} is not one of {', '.join(allowed)}"
                + (_did_you_mean(value, allowed) if isinstance(value, str) else ""),
            )  # fmt: skip
        return value


def _did_you_mean(word: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"


def _show(value: Any) -> str:
    if value is None:
        return "nothing"
    text = repr(value)  # bounded: compose_bounded capped the nodes a value can expand to
    return text if len(text) <= 60 else text[:57] + "..."


def _settings(reader: _Reader, node: yaml.Node, where: str, base: SamplerSettings
              ) -> SamplerSettings:  # fmt: skip
    entries = reader.mapping(node, where, SETTING_NAMES, "setting")
    changes: dict[str, Any] = {}
    for name, (_key, value_node) in entries.items():
        here = f"{where}.{name}"
        value = reader.value(value_node)
        default = getattr(base, name)
        if name == "order":
            value = reader.choice(value_node, here, ORDERS)
        elif isinstance(default, str):  # the grammar: SamplerSettings checks its form
            value = reader.text(value_node, here, required=False)
        elif isinstance(default, int) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int):
                raise reader.fail(value_node, here, f"expected a whole number, got {_show(value)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise reader.fail(value_node, here, f"expected a number, got {_show(value)}")
        if name in RULES:
            ok, limits = RULES[name]
            if not ok(value):
                raise reader.fail(value_node, here, f"{limits}, got {_show(value)}")
        if name == "max_new_tokens" and not 1 <= value <= MAX_NEW_TOKENS:
            raise reader.fail(
                value_node, here, f"must be from 1 to {MAX_NEW_TOKENS} (the bound), got {value}"
            )
        changes[name] = float(value) if isinstance(default, float) else value
    try:
        return base.with_(**changes)
    except ValueError as exc:  # a rule SamplerSettings adds beyond the per-field checks
        raise reader.fail(node, where, str(exc)) from exc


def _options(reader: _Reader, node: yaml.Node, where: str, base: dict[str, Any]
             ) -> dict[str, Any]:  # fmt: skip
    from engine.models.catalog import BUNDLED

    entries = reader.mapping(node, where, tuple(OPTION_DEFAULTS), "option")
    out = dict(base)
    for name, (_key, value_node) in entries.items():
        here = f"{where}.{name}"
        value = reader.value(value_node)
        if name == "draft_model":
            value = None if value is None else reader.choice(value_node, here, list(BUNDLED))
        elif name == "sweep_setting":
            value = reader.choice(value_node, here, SWEEPABLE)
        elif name == "sweep_values":
            value = _sweep_values(reader, value_node, here)
        elif name in _INT_OPTIONS and not (name == "limit" and value is None):
            least, most = _INT_OPTIONS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise reader.fail(
                    value_node, here,
                    f"expected a whole number >= {least} and <= {most} (the bound), got "
                    f"{_show(value)}",
                )  # fmt: skip
        out[name] = value
    return out


def _sweep_values(reader: _Reader, node: yaml.Node, where: str) -> tuple[float, ...]:
    value = reader.value(node)
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_SWEEP_VALUES
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
    ):
        raise reader.fail(
            node, where, f"expected a list of 1 to {MAX_SWEEP_VALUES} numbers, got {_show(value)}"
        )
    return tuple(value)


def _model(reader: _Reader, node: yaml.Node, where: str) -> str:
    from engine.models.catalog import BUNDLED

    return reader.choice(node, where, list(BUNDLED))


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
    reader = _Reader(path)
    try:
        root = compose_bounded(text, "the lesson")
    except InputError as exc:  # too big, too deep, an alias bomb: refused before construction
        raise LessonError(exc.message, path) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        hint = ""
        if "mapping values are not allowed" in str(exc.problem):
            hint = " (a value that contains ': ' must be put in quotes)"
        raise LessonError(f"not valid YAML: {exc.problem or exc}{hint}", path, line) from exc
    except yaml.YAMLError as exc:
        raise LessonError(f"not valid YAML: {exc}", path) from exc
    if root is None:
        raise LessonError("the file is empty", path, 1)
    top = reader.mapping(root, "", LESSON_KEYS, "lesson field")
    for name in ("title", "model", "stages"):
        if name not in top:
            raise LessonError(f"missing; a lesson needs {name}", path, _line(root), name)
    title = reader.text(top["title"][1], "title")
    model = _model(reader, top["model"][1], "model")
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
        where = f"stages[{i}]"
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
            elif name == "method":
                values[name] = reader.choice(value_node, here, list(RUN_METHODS))
            elif name == "focus":
                values[name] = reader.choice(value_node, here, FOCUSES)
            elif name == "action":
                values[name] = reader.choice(value_node, here, ACTIONS)
            elif name == "model":
                values[name] = _model(reader, value_node, here)
            elif name == "settings":
                values[name] = _settings(reader, value_node, here, previous.settings)
            elif name == "options":
                values[name] = _options(reader, value_node, here, previous.options)
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
            model=values.get("model", previous.model),
            index=i,
            line=_line(node),
        )
        if not stage.prompt:
            raise reader.fail(node, f"{where}.prompt", "missing; the first stage needs a prompt")
        if stage.method == SPEC_DRAFT and stage.draft_model is None:
            raise reader.fail(
                node, f"{where}.options.draft_model",
                "missing; the draft-model method needs options: draft_model: <a bundled model>",
            )  # fmt: skip
        _check_experiment(reader, node, where, stage)
        if stage.guess and stage.action not in (ACTION_STEP, ACTION_NONE):
            raise reader.fail(
                entries.get("guess", (node, node))[1], f"{where}.guess",
                "a guess round hides the next token, so use it with action: step",
            )  # fmt: skip
        stages.append(stage)
        previous = stage
    return Lesson(title, model, description, tuple(stages), Path(path) if path else None)


def _check_experiment(reader: _Reader, node: yaml.Node, where: str, stage: LessonStage) -> None:
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
