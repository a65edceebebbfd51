"""The window on llama-server, Ollama and SGLang without a running server (the fakes of
tests/served_fakes.py answer in each server's documented shapes): opened through the source
string File > Open served model… makes, the capability line above the distribution says what
that server returns, a run draws the server's top-N with the rest as one bar and the entropy
as a lower bound, and File > Score a text is refused in one message where the server returns
no prompt log-probabilities (and scores on SGLang, a rank past its top-N read as a bound).
The real llama-server's window: tests/remote/test_llama_server_window.py. (The file's name is
not test_served_window.py: tests/remote has one, and pytest needs the base names to differ.)"""

from __future__ import annotations

import pytest
from conftest import load, run
from served_fakes import fake_bundle

from engine.models.catalog import served_source
from tiny_models import tiny_llama

URL = "http://lab-box:8080"
BRIEF = {
    "llama-server": "llama-server · raw top-20 → our sampler + llama.cpp's · stream: raw · "
    "entropy: a lower bound · can't score texts · exact ids",
    "ollama": "Ollama · raw top-20 → our sampler · stream: raw · entropy: a lower bound · "
    "can't score texts · ids from text",
    "sglang": "SGLang · raw top-20 → our sampler · stream: raw · entropy: a lower bound · "
    "scores texts · exact ids",
}
OPTIONS = {  # what the dialog would remember for each
    "llama-server": {"server_sampler": "1"}, "ollama": {"tokenizer": "t"},
    "sglang": {"tokenizer": "t", "raw_logprobs": "1"},
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=3)


def open_fake(qtbot, window, monkeypatch, tiny, kind: str) -> None:
    def open_remote(url, model, key_source, **options):
        assert options["kind"] == kind  # the dialog's choice reaches the engine
        return fake_bundle(kind, tiny, url, server_sampler=options["server_sampler"],
                           raw_flag=options["raw_logprobs"])  # fmt: skip

    monkeypatch.setattr(window.runner.workbench, "open_remote", open_remote)
    with qtbot.waitSignal(window.runner.model_loaded, timeout=30000):
        window.load_model(served_source(URL, "", "none", kind, OPTIONS[kind]))
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)


@pytest.mark.parametrize("kind", list(BRIEF))
def test_the_window_says_what_each_server_returns_and_draws_only_that(
    qtbot, window, monkeypatch, tiny, kind
):
    window.resize(1280, 720)
    open_fake(qtbot, window, monkeypatch, tiny, kind)
    line = window.plots.dist_box.capability
    assert line.isVisible() and line.text() == BRIEF[kind]
    assert line.toolTip() == window.bundle.capability() and "lower bound" in line.toolTip()
    window.prompt_box.choose_chat(False)
    window.prompt.setPlainText("[2][17][99][5]")
    run(qtbot, window, lambda: window.runner.generate(window._request(limit=4)))
    steps = window.steps
    assert len(steps) == 4 and all(s.entropy_lower_bound and s.other_p >= 0 for s in steps)
    window.views.redraw(busy=False)
    rows = window.dist.rows
    assert rows[-1][1].text == "(all other tokens)"
    assert "lower bound" in window.plots.dist_box.info.text()
    sampler = kind == "llama-server"  # llama.cpp's own sampler: a third bar, named in the key
    assert ("llama.cpp" in window.plots.dist_box.key.text()) == sampler
    assert (len(window.dist.server.opts["width"]) > 0) == sampler


@pytest.mark.parametrize("kind", ["llama-server", "ollama"])
def test_scoring_a_text_is_refused_in_one_message(qtbot, window, monkeypatch, tiny, kind):
    open_fake(qtbot, window, monkeypatch, tiny, kind)
    with qtbot.waitSignal(window.runner.failed, timeout=30000):
        window.score.show("[5][17][99]", "[2]")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=5000)
    assert "returns no prompt log-probabilities" in window.last_error
    assert not window.score.view.isVisible()


def test_scoring_on_sglang_shows_bounded_ranks(qtbot, window, monkeypatch, tiny):
    open_fake(qtbot, window, monkeypatch, tiny, "sglang")
    with qtbot.waitSignal(window.runner.job_done, timeout=30000):
        window.score.show("[5][17][99][240][31]", "[2][40]")
    qtbot.waitUntil(lambda: window.score.view.isVisible(), timeout=5000)
    score = window.score.score
    assert score is not None and len(score.tokens) == 5
    assert any(t.rank_bound for t in score.tokens)  # SGLang listed 20 of 384
    bound = next(t for t in score.tokens if t.rank_bound)
    window.score.select(bound.index)
    assert f"rank ≥{bound.rank}" in window.plots.dist_box.info.text()


def test_a_served_model_b_in_lockstep_says_its_kl_is_a_lower_bound(
    qtbot, window, tiny_dir, monkeypatch
):
    """Experiments > Two models in lockstep… offers the served recents as model B; B (the same
    weights as A, on a replayed llama-server) is asked for its top-N at each of A's prefixes:
    KL ~ 0 and read as '≥', Jaccard 1, greedy agreement 100%, the bound said in the view."""
    from gui.experiments.dialogs import LockstepDialog

    load(qtbot, window, tiny_dir)
    window.prompt.setPlainText("Hello there")
    window.prompt_box.chat_template.setChecked(False)
    window.sampler.set_settings(window.sampler.settings().with_(temperature=0.0,
                                                                max_new_tokens=6))  # fmt: skip
    source = served_source(URL, "", "none", "llama-server", {"tokenizer": str(tiny_dir)})
    window.picker.remember(source)
    window.picker.remember(str(tiny_dir))  # A stays the current model
    opened = []

    def open_served(url, model, key_source, **options):
        opened.append((url, options))
        return fake_bundle("llama-server", tiny_llama(), url, tokenizer=window.bundle.tokenizer)

    monkeypatch.setattr("engine.serve.remote_session.open_served", open_served)

    def choose_served(dialog) -> int:
        dialog.model.setCurrentIndex(dialog.model.findData(source))
        dialog.top_n.setValue(5)
        return LockstepDialog.DialogCode.Accepted

    monkeypatch.setattr(LockstepDialog, "exec", choose_served)
    view = window.plots.experiments.lockstep
    run(qtbot, window, window.experiments.ask_lockstep)
    qtbot.waitUntil(lambda: len(view.steps) == 6, timeout=5000)
    assert opened == [(URL, {"kind": "llama-server", "tokenizer": str(tiny_dir),
                             "server_sampler": False, "raw_logprobs": False})]  # fmt: skip
    assert all(s.kl_lower_bound and 0 <= s.kl < 1e-4 for s in view.steps)
    assert all(s.jaccard == 1.0 and s.greedy_agree for s in view.steps)
    assert view.table.item(0, 2).text().startswith("≥")
    info = view.info.text()
    assert "mean KL <b>≥ " in info and "KL values are lower bounds" in info
    assert "llama.cpp llama-server" in info and "(at least)" in view.kl.title
