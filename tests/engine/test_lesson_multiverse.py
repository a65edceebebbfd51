"""Lesson stages that open a prepared tree (action tree) or score a text (action score): the
shipped ones load, their tree file is a real expansion, and broken ones name file and field."""

import json
import math
import shutil

import pytest

from engine.classroom import lesson_files
from engine.classroom.lesson_reader import MAX_SCORE_CHARS
from engine.classroom.lessons import (
    ACTION_SCORE,
    ACTION_TREE,
    LESSONS_DIR,
    LessonError,
    bundled_lessons,
    load_lesson,
    load_stage_tree,
    parse_lesson,
)
from engine.tree import FORMAT, RunTree

TREE = "trees/once-upon-a-time.json"
LESSON = """\
title: Trees
model: smollm2-135m
stages:
  - title: The tree
    text: Look.
    prompt: Once upon a time, there was a
    options:
      tree_file: {tree}
    action: tree
  - title: Still the tree
    text: Look again.
    action: tree
  - title: A text
    text: Read.
    options:
      text: " Paris, of course."
    action: score
"""


def test_shipped_lessons_open_a_tree_and_score_a_text():
    stages = [s for lesson in bundled_lessons() for s in lesson.stages]
    trees = [s for s in stages if s.action == ACTION_TREE]
    scores = [s for s in stages if s.action == ACTION_SCORE]
    assert trees and scores
    for stage in trees:
        tree = load_stage_tree(stage)
        # the tree was grown from the stage's own prompt (the file's root holds it)
        assert tree.nodes[0].text == stage.prompt and tree.prompt_ids
    for stage in scores:
        assert stage.score_text and stage.score_text == stage.score_text.rstrip()
        assert len(stage.score_text) <= MAX_SCORE_CHARS and stage.prompt


def test_the_shipped_tree_is_the_expansion_it_claims():
    """depth 3, at most 3 children, each >= 5% (the CLI's --min-prob 0.05), path
    log-probabilities the sum of the logprobs above them, and a few KB."""
    path = lesson_files.RESOURCES_DIR / TREE
    assert path.stat().st_size < 16 * 1024
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == FORMAT
    tree = RunTree.from_json(data)
    nodes = [n for n in tree.nodes.values() if n.id != 0]
    assert len(nodes) >= 9 and max(n.depth for n in nodes) == 3
    assert all(len(n.children) <= 3 for n in tree.nodes.values())
    assert all(n.raw_prob >= 0.05 for n in nodes)
    for n in nodes:
        assert math.isclose(n.logprob, math.log(n.raw_prob), rel_tol=1e-4, abs_tol=1e-5)
        above = sum(tree.nodes[i].logprob for i in tree.path(n.id))
        assert math.isclose(n.path_logprob, above, abs_tol=1e-4)
    assert {len(tree.path(leaf)) for leaf in tree.leaves()} == {3}


def test_a_tree_stage_inherits_its_file_and_each_opening_is_a_fresh_copy():
    lesson = parse_lesson(LESSON.format(tree=TREE), "t.yaml")
    first, second, third = lesson.stages
    assert first.tree_file == second.tree_file == TREE and second.action == ACTION_TREE
    assert third.score_text == " Paris, of course." and third.prompt == first.prompt
    a = load_stage_tree(first)
    a.goto(max(a.nodes))
    assert load_stage_tree(first).cursor == 0 != a.cursor


def _error(text: str) -> LessonError:
    with pytest.raises(LessonError) as info:
        parse_lesson(text, "bad.yaml")
    return info.value


@pytest.mark.parametrize(
    ("tree", "words"),
    [
        ("trees/no-such-tree.json", "trees/no-such-tree.json: cannot be read"),
        ("../lessons/01-tokens-and-probabilities.yaml", "inside resources/"),
        ("/etc/passwd", "inside resources/"),
        ("trees\\\\x.json", "not a usable path"),
        ("lessons/01-tokens-and-probabilities.yaml", "not valid JSON"),
    ],
)
def test_a_missing_or_bad_tree_file_names_the_file_line_and_field(tree, words):
    err = _error(LESSON.format(tree=tree))
    assert err.field == "stages[0].options.tree_file" and err.line == 8
    assert words in str(err) and str(err).startswith("bad.yaml: line 8, ")


def test_a_tree_file_with_a_bad_field_is_named_down_to_the_field(tmp_path, monkeypatch):
    data = json.loads((lesson_files.RESOURCES_DIR / TREE).read_text(encoding="utf-8"))
    data["nodes"][2]["raw_prob"] = 1.5
    (tmp_path / "trees").mkdir()
    (tmp_path / "trees" / "broken.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "trees" / "deep.json").write_text("[" * 100_000, encoding="utf-8")
    (tmp_path / "trees" / "big.json").write_bytes(b" " * (lesson_files.MAX_TREE_FILE_BYTES + 1))
    monkeypatch.setattr(lesson_files, "RESOURCES_DIR", tmp_path)
    err = _error(LESSON.format(tree="trees/broken.json"))
    assert "trees/broken.json" in str(err) and "nodes[2].raw_prob" in str(err)
    assert "nested more than" in str(_error(LESSON.format(tree="trees/deep.json")))
    assert "over the 4 MB limit" in str(_error(LESSON.format(tree="trees/big.json")))


def test_a_link_out_of_resources_is_refused(tmp_path, monkeypatch):
    outside = tmp_path / "outside.json"
    shutil.copy(lesson_files.RESOURCES_DIR / TREE, outside)
    resources = tmp_path / "resources"
    (resources / "trees").mkdir(parents=True)
    (resources / "trees" / "link.json").symlink_to(outside)
    monkeypatch.setattr(lesson_files, "RESOURCES_DIR", resources)
    assert "inside resources/" in str(_error(LESSON.format(tree="trees/link.json")))
    shutil.copy(outside, resources / "trees" / "real.json")  # the same file, inside: fine
    assert parse_lesson(LESSON.format(tree="trees/real.json")).stages[0].tree_file


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("    options:\n      tree_file: {tree}\n", "", "stages[0].options.tree_file",
         "needs a tree file"),
        ('      text: " Paris, of course."\n', "      samples: 3\n", "stages[2].options.text",
         "action score needs a text"),
        (" Paris, of course.", "x" * (MAX_SCORE_CHARS + 1), "stages[2].options.text",
         f"over the bound of {MAX_SCORE_CHARS}"),
        ('" Paris, of course."', "[1, 2]", "stages[2].options.text", "expected some text"),
        ("    action: score\n", "    action: scores\n", "stages[2].action",
         "did you mean score?"),
    ],
)  # fmt: skip
def test_tree_and_score_stages_need_their_option(old, new, field, words):
    text = LESSON.replace(old, new).format(tree=TREE)
    assert text != LESSON.format(tree=TREE)
    err = _error(text)
    assert err.field == field and words in str(err)


def test_a_lesson_file_from_elsewhere_still_finds_the_shipped_tree(tmp_path):
    """The tree path is relative to resources/, not to the lesson file."""
    path = tmp_path / "mine.yaml"
    path.write_text(LESSON.format(tree=TREE), encoding="utf-8")
    assert load_lesson(path).stages[0].tree_file == TREE
    assert (LESSONS_DIR.parent / TREE).is_file()
