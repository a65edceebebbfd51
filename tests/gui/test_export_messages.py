"""Issue 24, item 6: every export failure reaches the user as a message, and a token that
cannot be encoded no longer fails the export."""

from engine.records import Candidate, RunStarted, Step


def _fill(window, text):
    window.store.push(RunStarted("sampling", "p", 1))
    window.store.push(
        Step(0, 5, text, text, 0.5, 0.5, 1, (Candidate(5, text, 0.5, 0.5),), 2, 1.0, 1.0, 0.01, 9.0)
    )
    window.drain()


def test_a_lone_surrogate_token_exports_to_every_format(window, tmp_path):
    _fill(window, "bad \ud800 token")
    for kind in ("json", "csv", "md", "html"):
        path = tmp_path / f"run.{kind}"
        assert window.export(kind, str(path)), window.last_error
        assert "\ufffd" in path.read_text(encoding="utf-8")


def test_an_export_that_raises_value_error_is_a_message(window, tmp_path, monkeypatch):
    _fill(window, "fine")

    def broken(*args, **kwargs):
        raise ValueError("Out of range float values are not JSON compliant")

    monkeypatch.setattr(window.store, "export", broken)
    assert not window.export("html", str(tmp_path / "x.html"))
    assert "Could not export" in window.last_error and "JSON compliant" in window.last_error
