"""Reading a lesson file's YAML: hostile until checked. No Qt, no torch.

The bounded composer (engine.validate.yamlguard) turns the text into nodes that keep their line
numbers; ``Reader`` walks them and checks each field, so every mistake becomes one
``LessonError`` naming the file, the line and the field. The per-stage sampler settings and
options are checked here too (``read_settings``, ``read_options``); what a stage means is
engine.classroom.lessons' business.
"""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from engine.classroom.lesson_files import MAX_PATH_CHARS
from engine.sampling.checks import RULES
from engine.sampling.settings import ORDERS, SWEEPABLE, SamplerSettings
from engine.validate import InputError
from engine.validate.limits import MAX_BEAMS, MAX_GAMMA, MAX_NEW_TOKENS, MAX_TOP_N
from engine.validate.yamlguard import compose_bounded

# Per-stage options beside the sampler settings, with their defaults
# (engine.drivers.workbench.RunRequest)
# Model B of a lockstep as the lesson's own model in other weights: the dtypes each choice
# loads (the window's lockstep dialog offers the same choices).
SAME_QUANT = "same-quant"
SAME_PRECISIONS = {"same-bf16": ("bfloat16",), "same-int8": ("int8",), "same-int4": ("int4",),
                   SAME_QUANT: ("int8", "int4")}  # fmt: skip
OPTION_DEFAULTS: dict[str, Any] = {
    "num_beams": 4,  # beam search width
    "gamma": 5,  # speculative: tokens drafted per round
    "top_n": 50,  # candidates recorded per step (hover, plots, guess round)
    "limit": None,  # tokens for this run; None: settings.max_new_tokens
    "draft_model": None,  # speculative with a draft model: a bundled model's id
    "samples": 1000,  # action sample_step: draws of the next token (at most 100,000)
    "sweep_setting": "temperature",  # action sweep: the setting it varies
    "sweep_values": (),  # and its values, in order (action sweep needs some)
    "tree_file": None,  # action tree: a decoding-lab-tree/1 file, relative to resources/
    "text": None,  # action score: the text the model reads, after the stage's prompt
    "model_b": SAME_QUANT,  # action lockstep: who scores the lesson model's text
    # Inside the step (focus: inside): the token shown after the run (1 = the first new one),
    # the page, the attention view with its layer and head; the output pane's colours
    "inside_step": None,
    "inside_page": None,
    "attention_view": None,
    "attention_layer": None,
    "attention_head": None,
    "colour": None,
}
INSIDE_PAGES = ("lens", "attention", "logit attribution", "inputs")  # the Inside tab's pages
ATTENTION_VIEWS = ("rollout", "mean", "head")
COLOURS = ("rank", "probability", "decision")
_CHOICE_OPTIONS = {"inside_page": INSIDE_PAGES, "attention_view": ATTENTION_VIEWS,
                   "colour": COLOURS, "model_b": tuple(SAME_PRECISIONS)}  # fmt: skip
MAX_SAMPLES, MAX_SWEEP_VALUES = 100_000, 12
MAX_SCORE_CHARS = 2000  # action score: a paragraph for a class to read, not a book
# name -> (minimum, maximum): the maxima are engine.validate.limits', named in the message
_INT_OPTIONS = {
    "num_beams": (1, MAX_BEAMS), "gamma": (1, MAX_GAMMA), "top_n": (1, MAX_TOP_N),
    "limit": (1, MAX_NEW_TOKENS), "samples": (1, MAX_SAMPLES),
    "inside_step": (1, MAX_NEW_TOKENS), "attention_layer": (1, 512), "attention_head": (1, 512),
}  # fmt: skip
_TEXT_OPTIONS = {"tree_file": MAX_PATH_CHARS, "text": MAX_SCORE_CHARS}  # name -> most chars
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


def line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def compose(text: str, path: str | Path | None) -> yaml.Node:
    """The file's root node, inside the bounds; every failure is a ``LessonError``."""
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
    return root


class Reader:
    """Walks the composed YAML nodes (which keep their line numbers) and checks each field."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = path
        self._constructor = yaml.constructor.SafeConstructor()

    def fail(self, node: yaml.Node | None, where: str, message: str) -> LessonError:
        return LessonError(message, self.path, line_of(node) if node is not None else None, where)

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
                raise self.fail(key_node, name, f"unknown {kind}{did_you_mean(key, known)}")
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
            raise self.fail(node, where, f"expected some text, got {show(value)}")
        return value.strip()

    def boolean(self, node: yaml.Node, where: str) -> bool:
        value = self.value(node)
        if not isinstance(value, bool):
            raise self.fail(node, where, f"expected true or false, got {show(value)}")
        return value

    def choice(self, node: yaml.Node, where: str, allowed: tuple[str, ...] | list[str]) -> str:
        value = self.value(node)
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(
                node, where,
                f"{show(value)} is not one of {', '.join(allowed)}"
                + (did_you_mean(value, allowed) if isinstance(value, str) else ""),
            )  # fmt: skip
        return value


def did_you_mean(word: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"


def show(value: Any) -> str:
    if value is None:
        return "nothing"
    text = repr(value)  # bounded: compose_bounded capped the nodes a value can expand to
    return text if len(text) <= 60 else text[:57] + "..."


def read_settings(reader: Reader, node: yaml.Node, where: str, base: SamplerSettings
                  ) -> SamplerSettings:  # fmt: skip
    """``base`` with the stage's ``settings:`` applied, each value checked by its rule."""
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
                raise reader.fail(value_node, here, f"expected a whole number, got {show(value)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise reader.fail(value_node, here, f"expected a number, got {show(value)}")
        if name in RULES:
            ok, limits = RULES[name]
            if not ok(value):
                raise reader.fail(value_node, here, f"{limits}, got {show(value)}")
        if name == "max_new_tokens" and not 1 <= value <= MAX_NEW_TOKENS:
            raise reader.fail(
                value_node, here, f"must be from 1 to {MAX_NEW_TOKENS} (the bound), got {value}"
            )
        changes[name] = float(value) if isinstance(default, float) else value
    try:
        return base.with_(**changes)
    except ValueError as exc:  # a rule SamplerSettings adds beyond the per-field checks
        raise reader.fail(node, where, str(exc)) from exc


def read_options(reader: Reader, node: yaml.Node, where: str, base: dict[str, Any]
                 ) -> dict[str, Any]:  # fmt: skip
    """``base`` with the stage's ``options:`` applied, each value checked."""
    entries = reader.mapping(node, where, tuple(OPTION_DEFAULTS), "option")
    out = dict(base)
    for name, (_key, value_node) in entries.items():
        here = f"{where}.{name}"
        value = reader.value(value_node)
        if name == "draft_model":
            value = None if value is None else read_model(reader, value_node, here)
        elif name == "sweep_setting":
            value = reader.choice(value_node, here, SWEEPABLE)
        elif name == "sweep_values":
            value = _sweep_values(reader, value_node, here)
        elif name in ("tree_file", "text"):  # the file itself is read by the stage's check
            value = _bounded_text(reader, value_node, here, _TEXT_OPTIONS[name])
        elif name in _CHOICE_OPTIONS:
            value = reader.choice(value_node, here, _CHOICE_OPTIONS[name])
        elif name in _INT_OPTIONS and not (name == "limit" and value is None):
            least, most = _INT_OPTIONS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise reader.fail(
                    value_node, here,
                    f"expected a whole number >= {least} and <= {most} (the bound), got "
                    f"{show(value)}",
                )  # fmt: skip
        out[name] = value
    return out


def _bounded_text(reader: Reader, node: yaml.Node, where: str, most: int) -> str:
    value = reader.value(node)
    if not isinstance(value, str) or not value.strip():
        raise reader.fail(node, where, f"expected some text, got {show(value)}")
    if len(value) > most:
        raise reader.fail(node, where, f"{len(value)} characters, over the bound of {most}")
    # a YAML block ends in a newline the teacher did not mean to score; a leading space is
    # part of the first token (" Paris"), so only the end is trimmed
    return value.rstrip()


def _sweep_values(reader: Reader, node: yaml.Node, where: str) -> tuple[float, ...]:
    value = reader.value(node)
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_SWEEP_VALUES
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)
    ):
        raise reader.fail(
            node, where, f"expected a list of 1 to {MAX_SWEEP_VALUES} numbers, got {show(value)}"
        )
    return tuple(value)


def read_model(reader: Reader, node: yaml.Node, where: str) -> str:
    """A bundled model's id."""
    from engine.models.catalog import BUNDLED

    return reader.choice(node, where, list(BUNDLED))
