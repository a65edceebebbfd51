"""The live round in the window (gui.classroom.live_actions): students (WebSocket clients on
their own thread) join, vote, guess and act as the sampler; the window's tallies, the marks in
the distribution plot and the class's own bars beside the model's, the class's token in the run
marked as the class's choice, the class's text scored, the round's totals as the engine
computes them; the window's event loop measured while 200 students answer at once."""

from __future__ import annotations

import math
import re
import time

import pytest
from conftest import load
from live_clients import Students
from PySide6.QtCore import QElapsedTimer, QTimer

from engine.classroom.live import GUESS, SAMPLER, VOTE
from engine.records import CLASS
from gui.common.token_pane import tooltip_html


def open_round(qtbot, window, tiny_dir, n: int):
    load(qtbot, window, tiny_dir)
    window.prompt_box.editor.setPlainText("Hello")
    window.acts.live_round.trigger()
    assert window.live.dock.isVisible()
    url = window.live.open_round("127.0.0.1", 0)
    assert url is not None and window.live.panel.link == url
    assert window.live.panel.url.text().replace("\u200b", "") == url  # it may wrap
    assert window.live.panel.url.toolTip() == url
    assert not window.live.panel.qr.pixmap().isNull()
    server = window.live.server
    students = Students(f"http://127.0.0.1:{server.port}", window.live.round.code)
    students.join([f"s{i}" for i in range(n)])
    qtbot.waitUntil(
        lambda: window.live.panel.counts.text().startswith(f"{n} joined"), timeout=20000
    )
    return students


def ask(qtbot, window, mode: str):
    live = window.live
    live.panel.mode.setCurrentIndex(live.panel.mode.findData(mode))
    live.panel.ask_button.click()
    qtbot.waitUntil(
        lambda: live.round.question is not None and not window.runner.busy, timeout=20000
    )
    return live.round.question


def reveal(qtbot, window, students, n):
    number = window.live.round.question.number
    window.live.panel.reveal_button.click()
    qtbot.waitUntil(lambda: len(window.live.round.reveals) == number and not window.runner.busy,
                    timeout=30000)  # fmt: skip
    qtbot.waitUntil(lambda: all((m := students.last(i, "reveal")) and m["number"] == number
                                for i in range(n)), timeout=10000)  # fmt: skip
    return window.live.round.reveals[-1]


def test_a_class_votes_guesses_and_is_the_sampler(qtbot, window, tiny_dir, tmp_path):
    n = 6
    students = open_round(qtbot, window, tiny_dir, n)
    try:
        q = ask(qtbot, window, VOTE)
        assert len(q.choices) == 5 and window.store.steps == []  # the run did not move
        students.send([{"choice": i % 2} for i in range(n)])
        qtbot.waitUntil(lambda: "6 answered" in window.live.panel.counts.text(), timeout=10000)
        assert window.live.round.tally() == {q.choices[0]: 3, q.choices[1]: 3}
        v = reveal(qtbot, window, students, n)
        assert v.class_counts == {q.choices[0].token_id: 3, q.choices[1].token_id: 3}
        assert len(window.store.steps) == 1
        plot = window.plots.dist_box.plot
        marks = plot.marks
        assert marks[q.choices[0].token_id].startswith("3 of the class")
        # the class's distribution as bars of its own, beside the model's on the same rows
        a, b = q.choices[0].token_id, q.choices[1].token_id
        assert plot.class_bars.shares == {a: 0.5, b: 0.5}
        rows = {r[1].token_id: k for k, r in enumerate(plot.rows)}
        drawn = plot.class_bars.item.opts
        assert sorted(drawn["width"]) == [0.5, 0.5]
        assert sorted(drawn["y"]) == pytest.approx(sorted(plot.rows[rows[t]][0] + 0.27
                                                          for t in (a, b)))  # fmt: skip
        assert "class" in plot.legend_html() and "class" in window.plots.dist_box.key.text()
        assert all("class" in key for key in plot.legend_versions())  # the shortest too
        assert plot._x_upper >= 0.5
        mine = students.last(0, "reveal")["mine"]
        assert mine["prob"] == pytest.approx(v.results[1].prob)

        q = ask(qtbot, window, SAMPLER)
        model_top = window.live.dist.top(1)[0].token_id
        pick = next(i for i, c in enumerate(q.choices) if c.token_id != model_top)
        students.send([{"choice": pick}] * n)
        qtbot.waitUntil(lambda: window.live.round.answered() == n, timeout=10000)
        v = reveal(qtbot, window, students, n)
        step = window.store.steps[-1]
        assert step.index == 1 and step.token_id == q.choices[pick].token_id
        assert step.forced and v.class_choice == step.token_id
        assert step.source == CLASS  # the record says whose choice it was
        assert window.live.class_steps == {1: step.token_id}
        assert students.last(0, "reveal")["class_choice"] is True
        assert "the class's choice" in tooltip_html(step)
        assert "the class chose" in window.plots.dist_box.info.text()
        assert window.store.track.tree.nodes[window.store.track.path[-1]].step.source == CLASS

        # the class picks the model's own favourite: still the class's choice
        q = ask(qtbot, window, SAMPLER)
        top = window.live.dist.top(1)[0].token_id
        pick = next(i for i, c in enumerate(q.choices) if c.token_id == top)
        students.send([{"choice": pick}] * n)
        qtbot.waitUntil(lambda: window.live.round.answered() == n, timeout=10000)
        reveal(qtbot, window, students, n)
        step = window.store.steps[-1]
        assert (step.index, step.token_id, step.source) == (2, top, CLASS)

        # the class's text (steps 1-2) beside greedy and sampling, by perplexity
        window.live.panel.score_button.click()
        qtbot.waitUntil(lambda: window.live.text_result is not None and not window.runner.busy,
                        timeout=60000)  # fmt: skip
        result = window.live.text_result
        assert list(result.mine.tokens) == [s.token_id for s in window.store.steps[1:3]]
        assert result.chosen == 2 and len(result.greedy.tokens) == 2
        shown = window.live.panel.text_score.text()
        assert f"perplexity {result.mine.perplexity:.2f}" in shown
        assert f"Greedy, same length: {result.greedy.perplexity:.2f}" in shown
        assert f"{result.sampled_perplexity:.2f}" in shown

        ask(qtbot, window, GUESS)
        students.send([{"guess": "<b>e</b>\x00"}, {"guess": "a"}] * (n // 2))
        qtbot.waitUntil(lambda: window.live.round.answered() == n, timeout=10000)
        v = reveal(qtbot, window, students, n)
        assert all(r.prob is not None and r.bits >= 0 for r in v.results.values())
        assert window.live.panel.board.rowCount() == n
        assert "bits" in window.live.panel.summary.text()
        check_totals(window, students, n)
        window.live.panel.students.item(0).setSelected(True)
        window.live.remove_selected()
        qtbot.waitUntil(lambda: students.last(0, "removed") is not None, timeout=5000)
        assert window.live.export(str(tmp_path / "round.csv"))
        assert "nickname" in (tmp_path / "round.csv").read_text()
        window.grab().save(str(tmp_path / "live.png"))
    finally:
        window.live.end()
        students.close()
    assert window.live.server is None


@pytest.mark.slow
def test_the_window_never_stalls_while_200_students_answer(qtbot, window, tiny_dir):
    n = 200
    students = open_round(qtbot, window, tiny_dir, n)
    try:
        ask(qtbot, window, VOTE)
        gaps, clock = [], QElapsedTimer()
        clock.start()
        timer = QTimer(interval=5)
        timer.timeout.connect(lambda: gaps.append(clock.restart()))
        timer.start()
        qtbot.wait(200)
        students.send([{"choice": i % 3} for i in range(n)])
        qtbot.waitUntil(lambda: window.live.round.answered() == n, timeout=10000)
        qtbot.wait(300)
        timer.stop()
        start = time.monotonic()
        v = reveal(qtbot, window, students, n)
        slowest = max(max(m["_at"] for m in box if m["type"] == "reveal") for box in students.inbox)
        assert sum(v.class_counts.values()) == n
        print(f"\nwindow's longest gap while 200 answered: {max(gaps[1:])} ms; reveal click to "
              f"the last phone: {slowest - start:.3f} s")  # fmt: skip
        assert max(gaps[1:]) < 100
    finally:
        window.live.end()
        students.close()


def check_totals(window, students, n: int) -> None:
    """The round's totals as displayed equal the engine's (LiveRound.summary) and a count by
    hand: the class's mean surprise over every answer each phone was told, and the model's
    mean entropy over the questions' steps as the run recorded them."""
    r = window.live.round
    class_bits, model_bits = r.summary()
    shown = window.live.panel.totals.text()
    numbers = [float(x) for x in re.findall(r"(\d+\.\d\d) bits", shown)]
    assert numbers == [round(class_bits, 2), round(model_bits, 2)], shown
    assert f"{class_bits:.2f}" in shown and f"{model_bits:.2f}" in shown
    told = [-math.log2(m["mine"]["prob"]) for i in range(n) for m in students.inbox[i]
            if m["type"] == "reveal" and m["mine"] and m["mine"]["prob"]]  # fmt: skip
    # the removed student's answers are gone from the window's round only after the reveals
    assert sum(told) / len(told) == pytest.approx(class_bits, abs=1e-6)
    steps = window.store.steps
    entropies = [steps[v.question.step_index].entropy_raw for v in r.reveals]
    assert sum(entropies) / len(entropies) == pytest.approx(model_bits, abs=1e-3)
