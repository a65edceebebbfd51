"""The guess panel: arm a round on a real step, type guesses, Reveal, score, reset."""

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from transformers import ByT5Tokenizer

from engine.classroom.guess import score_round
from engine.decode.session import GenerationSession
from engine.records import Step
from engine.sampling.settings import SamplerSettings
from gui.classroom.guess_panel import GuessPanel, visible
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def tok():
    return ByT5Tokenizer()


@pytest.fixture(scope="module")
def steps(tok) -> list[Step]:
    """Real steps of a tiny model (byte tokens): top 20 candidates recorded per step."""
    session = GenerationSession(
        tiny_llama(), tok("The")["input_ids"], SamplerSettings(temperature=0.8, seed=2,
        max_new_tokens=12), tokenizer=tok, eos_token_ids=(), top_n=20,
    )  # fmt: skip
    return [r for r in session.stream() if isinstance(r, Step)]


def _nice(text: str) -> bool:
    return text.isprintable() and text.strip() == text != "" and not set(text) & set('",')


def _guesses_for(step: Step) -> list[str] | None:
    """The picked token, another top-3 token, a rank 4-10 token and a letter that is not in
    the top 20 in either case; None when one of them would be awkward to type."""
    texts = [c.text for c in step.candidates]
    other3 = next((t for t in texts[:3] if t != step.token_str), "")
    mid = next((t for t in texts[3:10] if t != step.token_str), "")
    outside = next(ch for ch in "qwxzjkvyubcdfg" if ch not in texts and ch.upper() not in texts)
    guesses = [step.token_str, other3, mid, outside]
    return guesses if all(_nice(g) for g in guesses) else None


def test_guess_round_in_the_panel(qtbot, tok, steps):
    panel = GuessPanel()
    qtbot.addWidget(panel)
    panel.resize(420, 520)
    panel.show()
    with qtbot.waitSignal(panel.reveal_requested):  # nothing armed yet: ask the window
        qtbot.mouseClick(panel.reveal_button, Qt.MouseButton.LeftButton)
    assert panel.reveal() is None

    step, guesses = next((s, g) for s in steps if (g := _guesses_for(s)))
    panel.set_step(step, tok)
    assert panel.armed and "hidden" in panel.status.text()
    # Tokens may be any character, so they are inserted as text; the line break is typed.
    panel.guesses.setFocus()
    panel.guesses.insertPlainText(", ".join(guesses[:2]))
    qtbot.keyClick(panel.guesses, Qt.Key.Key_Return)
    panel.guesses.insertPlainText(", ".join(guesses[2:]))
    assert panel.guesses.toPlainText().count("\n") == 1
    with qtbot.waitSignal(panel.revealed) as blocker:
        qtbot.mouseClick(panel.reveal_button, Qt.MouseButton.LeftButton)
    round_ = blocker.args[0]
    assert round_ == score_round(guesses, step, tok)
    points = [r.points for r in round_.results]
    assert points[0] == 3 and points[1] == 2 and points[2] == 1 and points[3] == 0
    rows = panel.result_rows()
    assert [r[0] for r in rows] == guesses
    assert rows[0][1] == visible(step.token_str) and rows[0][4] == "3"
    assert rows[2][2] == str(round_.results[2].rank) and rows[2][3].endswith("%")
    assert rows[3][2] == "not in the top 20" and rows[3][3] == ""
    assert panel.result_rows()[0] and panel.results.item(0, 0).font().bold()
    assert panel.score.text() == "Score: 6 points in 1 round (1 found)"
    assert f"rank {step.rank}" in panel.picked.text()
    assert not panel.armed and panel.reveal() is None  # one reveal per round

    # A second round adds to the running score; Reset score clears it.
    other = next(s for s in steps if s is not step)
    panel.set_step(other, tok)
    assert panel.result_rows() == [] and panel.guesses.toPlainText() == ""
    qtbot.keyClicks(panel.guesses, "e, t")
    with qtbot.waitSignal(panel.revealed):
        panel.reveal()
    expected = 6 + score_round("e, t", other, tok).points
    assert panel.board.total == expected and len(panel.board.rounds) == 2
    shot = Path(os.environ.get("DECODING_LAB_SCREENSHOTS", "")) / "guess-panel.png"
    QApplication.processEvents()
    if shot.parent != Path(""):
        panel.grab().save(str(shot))
    panel.reset_button.click()
    assert panel.board.total == 0 and panel.score.text() == "Score: 0 points in 0 rounds (0 found)"


def test_guess_panel_ctrl_return_reveals(qtbot, tok, steps):
    panel = GuessPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_step(steps[2], tok)
    panel.guesses.setFocus()
    qtbot.keyClicks(panel.guesses, "a")
    with qtbot.waitSignal(panel.revealed):
        qtbot.keyClick(panel.guesses, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert panel.last_round is not None and panel.last_round.step_index == steps[2].index
