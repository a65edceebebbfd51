"""Lesson files: the shipped ones load and run; malformed ones say where and what is wrong."""

from dataclasses import fields, replace

import pytest

from engine.classroom.lessons import (
    ACTION_STEP,
    FOCUSES,
    LESSONS_DIR,
    LessonError,
    bundled_lessons,
    load_lesson,
    parse_lesson,
)
from engine.models.catalog import BUNDLED
from engine.records import BEAM, SAMPLING, SPEC_DRAFT, SPEC_NGRAM, Step
from engine.sampling.build import build_chain
from engine.sampling.settings import SamplerSettings

TOPICS = (
    "token", "greedy", "temperature", "top-k", "repetition", "beam", "speculative",
    "encoder-decoder",
)  # fmt: skip


@pytest.fixture(scope="module")
def lessons():
    return bundled_lessons()


def test_shipped_lessons_load_and_cover_the_issue(lessons):
    assert len(lessons) >= 8
    assert [lesson.path.name for lesson in lessons] == sorted(
        p.name for p in LESSONS_DIR.glob("*.yaml")
    )
    titles = " | ".join(lesson.title.lower() for lesson in lessons)
    for topic in TOPICS:
        assert topic in titles, f"no lesson about {topic}"
    assert {lesson.model for lesson in lessons} == set(BUNDLED)  # SmolLM2 and the tiny T5
    methods = {s.method for lesson in lessons for s in lesson.stages}
    assert methods >= {SAMPLING, BEAM, SPEC_NGRAM, SPEC_DRAFT}  # the issue's four at least
    assert any(s.guess for lesson in lessons for s in lesson.stages)


def test_every_lesson_stage_is_complete_and_its_settings_build_a_chain(lessons):
    names = {f.name for f in fields(SamplerSettings)}
    for lesson in lessons:
        assert 3 <= len(lesson.stages) <= 5, lesson.title
        assert lesson.description
        for stage in lesson.stages:
            assert isinstance(stage.settings, SamplerSettings)
            assert set(stage.settings.to_dict()) == names
            chain = build_chain(stage.settings, prompt_length=3, eos_token_ids=(1,))
            assert chain.greedy == (stage.settings.temperature == 0)
            assert stage.title and stage.text and stage.prompt
            assert stage.focus in FOCUSES and stage.model in BUNDLED
            assert 1 <= len(stage.text.split("\n\n")) <= 2, (lesson.title, stage.title)
            if stage.guess:
                assert stage.action == ACTION_STEP
            request = stage.request()
            assert request.method == stage.method and request.settings == stage.settings


def test_lesson_stages_inherit_settings_and_prompt(lessons):
    temperature = next(lesson for lesson in lessons if lesson.title == "Temperature")
    first, second = temperature.stages[:2]
    assert first.settings.temperature == 1.0 and second.settings.temperature == 0.3
    assert second.settings.max_new_tokens == first.settings.max_new_tokens == 30
    assert second.settings.seed == 3 and second.prompt == first.prompt
    assert second.use_chat_template is True
    filters = next(lesson for lesson in lessons if "top-k" in lesson.title.lower())
    last = filters.stages[-1]
    assert (last.settings.top_p, last.settings.temperature) == (0.9, 1.5)
    assert last.settings.order == "temperature_last" and last.settings.top_k == 0


GOOD = """\
title: A lesson
model: smollm2-135m
stages:
  - title: First
    text: Some words.
    prompt: Hello
    settings:
      temperature: 0.5
      top_k: 10
  - title: Second
    text: More words.
    settings:
      top_p: 0.8
"""


def test_a_minimal_lesson_parses_with_defaults_and_inheritance():
    lesson = parse_lesson(GOOD, "good.yaml")
    a, b = lesson.stages
    assert a.settings == SamplerSettings(temperature=0.5, top_k=10)
    assert b.settings == SamplerSettings(temperature=0.5, top_k=10, top_p=0.8)
    assert b.prompt == "Hello" and b.method == SAMPLING and b.line == 10
    assert a.num_beams == 4 and a.gamma == 5 and a.top_n == 50 and a.limit is None


def _error(text: str) -> LessonError:
    with pytest.raises(LessonError) as info:
        parse_lesson(text, "bad.yaml")
    return info.value


@pytest.mark.parametrize(
    ("change", "line", "field", "words"),
    [
        (("      top_k: 10\n", "      top_k: 10\n      temprature: 0.7\n"), 10,
         "stages[0].settings.temprature", "unknown setting; did you mean temperature?"),
        (("top_p: 0.8", "top_p: 1.8"), 13, "stages[1].settings.top_p", "must be in [0, 1]"),
        (("top_k: 10", "top_k: ten"), 9, "stages[0].settings.top_k", "whole number"),
        (("model: smollm2-135m", "model: smollm2"), 2, "model", "did you mean smollm2-135m?"),
        (("    prompt: Hello\n", "    prompt: Hello\n    method: beams\n"), 7,
         "stages[0].method", "did you mean beam?"),
        (("    text: More words.\n", ""), 10, "stages[1].text", "every stage needs text"),
        (("    prompt: Hello\n", ""), 4, "stages[0].prompt", "first stage needs a prompt"),
        (("    text: Some words.\n", "    text: Some words.\n    focus: histogram\n"), 6,
         "stages[0].focus", "is not one of distribution"),
        (("    text: Some words.\n", "    text: Some words.\n    guess: yes please\n"), 6,
         "stages[0].guess", "expected true or false"),
        (("    text: Some words.\n", "    text: Some words.\n    guess: true\n"), 6,
         "stages[0].guess", "use it with action: step"),
        (("title: A lesson\n", "title: A lesson\ntitle: Again\n"), 2, "title", "given twice"),
        (("    text: Some words.\n", "    txt: Some words.\n"), 5,
         "stages[0].txt", "did you mean text?"),
        (("    text: Some words.\n", "    text: Some words.\n    method: spec_draft\n"), 4,
         "stages[0].options.draft_model", "needs options: draft_model"),
        (("  - title: Second\n", "  - title: Second: the sequel\n"), 10, "",
         "must be put in quotes"),
        (("      top_p: 0.8\n", "      top_p: 0.8\n    options:\n      num_beams: 0\n"), 15,
         "stages[1].options.num_beams", "whole number >= 1"),
        (("    text: Some words.\n", "    text: Some words.\n    live: vot\n"), 6,
         "stages[0].live", "did you mean vote?"),
        (("    text: Some words.\n", "    text: Some words.\n    live: vote\n"), 6,
         "stages[0].live", "use it with action: none"),
    ],
)  # fmt: skip
def test_malformed_lessons_name_line_and_field(change, line, field, words):
    old, new = change
    assert old in GOOD
    err = _error(GOOD.replace(old, new, 1))
    assert err.line == line and err.field == field
    assert words in str(err)
    where = f"line {line}, {field}: " if field else f"line {line}: "
    assert str(err).startswith(f"bad.yaml: {where}")


def test_lesson_error_message_reads_as_the_issue_asks():
    err = _error(GOOD.replace("      top_k: 10\n", "      top_k: 10\n      temprature: 0.7\n"))
    assert str(err) == (
        "bad.yaml: line 10, stages[0].settings.temprature: unknown setting; "
        "did you mean temperature?"
    )


def test_not_a_lesson_at_all(tmp_path):
    assert _error("").line == 1
    assert "expected a mapping" in str(_error("- just\n- a list\n"))
    assert "stages" in str(_error("title: x\nmodel: tiny-t5\n"))
    assert "list of stages" in str(_error("title: x\nmodel: tiny-t5\nstages: none\n"))
    unsafe = _error(
        'title: !!python/object/apply:os.system ["echo hi"]\nmodel: tiny-t5\n'
        "stages: [{title: a, text: b, prompt: c}]\n"
    )
    assert unsafe.line == 1 and "not allowed in a lesson" in str(unsafe)
    missing = tmp_path / "nope.yaml"
    with pytest.raises(LessonError, match="cannot read"):
        load_lesson(missing)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(LessonError, match="cannot read"):
        load_lesson(binary)


# -- every stage really runs on its bundled model (2 tokens each) ---------------------------


@pytest.mark.slow
def test_every_lesson_stage_runs_two_tokens_on_its_bundled_model(lessons):
    from engine.drivers.workbench import Workbench
    from engine.records import BeamEvent, RunStarted, RunSummary

    benches: dict[str, Workbench] = {}
    ran = set()
    for lesson in lessons:
        for stage in lesson.stages:
            bench = benches.get(stage.model)
            if bench is None:
                bench = benches[stage.model] = Workbench()
                bench.adopt(bench.load(stage.model, device="cpu"))
            if stage.method == SPEC_DRAFT and bench.draft is None:
                bench.adopt(bench.load(stage.draft_model, device="cpu", draft=True), draft=True)
            settings = stage.settings.with_(max_new_tokens=2)
            request = stage.request()
            records = list(bench.start(replace(request, settings=settings, limit=2)))
            assert isinstance(records[0], RunStarted)
            assert records[0].settings == settings.to_dict()
            summary = next(r for r in records if isinstance(r, RunSummary))
            steps = [r for r in records if isinstance(r, Step)]
            if stage.method == BEAM:
                assert any(isinstance(r, BeamEvent) for r in records)
            assert 1 <= summary.tokens <= 2, (lesson.title, stage.title)
            assert steps and all(s.candidates for s in steps)
            ran.add(stage.method)
    assert ran == {SAMPLING, BEAM, SPEC_NGRAM, SPEC_DRAFT}


def test_lessons_cli_lists_and_checks_files(tmp_path, capsys):
    from main import cli

    assert cli(["lessons"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(bundled_lessons()) and "Temperature" in "\n".join(listed)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD, encoding="utf-8")
    bad.write_text(GOOD.replace("top_p: 0.8", "top_p: 1.8"), encoding="utf-8")
    assert cli(["lessons", str(good)]) == 0
    assert "OK, 'A lesson', 2 stages" in capsys.readouterr().out
    assert cli(["lessons", str(good), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: line 13, stages[1].settings.top_p: must be in [0, 1]" in err


def test_be_the_model_asks_guess_vote_then_sampler_in_a_live_round(lessons):
    """Lesson 15: its stages are the live round's three questions, in that order; each makes
    its step at Reveal (action none, sampling), and a stage that is not live has no mode."""
    lesson = next(les for les in lessons if les.path.name == "15-be-the-model.yaml")
    assert lesson.title == "Be the model"
    assert [s.live for s in lesson.stages] == ["guess", "vote", "sampler"]
    assert all(s.action == "none" and s.method == SAMPLING for s in lesson.stages)
    assert lesson.stages[0].settings.temperature == 0  # the model's token is its favourite
    others = [s for les in lessons if les is not lesson for s in les.stages]
    assert all(s.live == "" for s in others)
    live = parse_lesson(
        GOOD.replace(
            "    text: More words.\n",
            "    text: More words.\n    live: sampler\n    action: none\n",
        )
    )
    assert [s.live for s in live.stages] == ["", "sampler"]
