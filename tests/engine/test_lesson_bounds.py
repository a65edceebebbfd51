"""Issue 24, item 3: hostile lesson files end in a LessonError naming the bound, quickly:
alias bombs, deep nesting, huge files and absurd run options."""

import pytest

from engine.classroom.lessons import LessonError, load_lesson, parse_lesson
from engine.validate.limits import (
    MAX_BEAMS,
    MAX_GAMMA,
    MAX_LESSON_BYTES,
    MAX_NEW_TOKENS,
    MAX_TOP_N,
    MAX_YAML_DEPTH,
)

STAGE = "stages:\n  - title: One\n    text: Words.\n    prompt: Hello\n"
HEAD = "title: A lesson\nmodel: smollm2-135m\n"


def _bomb(levels: int, width: int = 9) -> str:
    """A title whose value is the classic "billion laughs": each level lists the one before
    ``width`` times, so the last expands to width**levels strings."""
    items = ["&a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        items.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "title: [" + ", ".join(items) + "]\nmodel: smollm2-135m\n"


def _error(text: str) -> LessonError:
    with pytest.raises(LessonError) as info:
        parse_lesson(text, "bad.yaml")
    assert len(str(info.value)) < 300  # one sentence, not a dump of the value
    return info.value


@pytest.mark.timeout(30)
def test_billion_laughs_is_refused_before_it_is_built():
    # nine levels of nine: 9**9 (387 million) strings once expanded
    text = _bomb(9) + STAGE
    assert "aliases expand to more than" in str(_error(text))


def test_a_modest_alias_bomb_is_refused_too():
    text = _bomb(6) + STAGE  # 531,441 values
    assert "aliases expand" in str(_error(text))


def test_an_alias_that_contains_itself_is_refused():
    _error("title: &a [*a]\nmodel: smollm2-135m\n" + STAGE)


@pytest.mark.parametrize("shape", ["[", "{a: "])
def test_deep_nesting_is_refused_without_recursion_error(shape):
    deep = "title: " + shape * 5000 + "x"
    if shape == "[":
        deep += "]" * 5000
    elif shape == "{a: ":
        deep += "}" * 5000
    err = _error(HEAD.replace("title: A lesson\n", deep + "\n") + STAGE)
    assert f"more than {MAX_YAML_DEPTH} levels" in str(err)


def test_a_huge_lesson_is_refused_at_once(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(HEAD + "description: " + "x" * (2 * MAX_LESSON_BYTES) + "\n" + STAGE)
    with pytest.raises(LessonError, match=f"over the {MAX_LESSON_BYTES // 1024} KB limit"):
        load_lesson(big)
    with pytest.raises(LessonError, match="KB limit"):
        parse_lesson(big.read_text(), big)


@pytest.mark.parametrize(
    ("where", "line", "bound"),
    [
        ("options", "num_beams: 1000000", MAX_BEAMS),
        ("options", "gamma: 100000000", MAX_GAMMA),
        ("options", "top_n: 1000000000", MAX_TOP_N),
        ("options", "limit: 1000000000000", MAX_NEW_TOKENS),
        ("settings", "max_new_tokens: 1000000000000", MAX_NEW_TOKENS),
    ],
)
def test_absurd_run_values_are_refused_naming_the_bound(where, line, bound):
    text = HEAD + STAGE + f"    {where}:\n      {line}\n"
    err = _error(text)
    assert str(bound) in str(err) and "bound" in str(err)
    assert err.field == f"stages[0].{where}.{line.split(':')[0]}"


def test_values_inside_the_bounds_still_load():
    text = HEAD + STAGE + f"    options:\n      num_beams: {MAX_BEAMS}\n      top_n: {MAX_TOP_N}\n"
    stage = parse_lesson(text).stages[0]
    assert stage.num_beams == MAX_BEAMS and stage.top_n == MAX_TOP_N
