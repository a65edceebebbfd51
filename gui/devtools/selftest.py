"""`decoding-lab --self-test`: open the main window offscreen, load every bundled model on the
worker thread, generate 16 tokens with each, save a screenshot next to a log, print one line.
Exit 0 when everything worked, 1 with the reason otherwise. Works from the source tree and in
the packaged build."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gui.shell.window import MainWindow

TOKENS = 16


def run_self_test(out_dir: Path | None = None, timeout: float = 600.0) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="decoding-lab-selftest-"))
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "self-test.log"
    lines: list[str] = []

    def log(message: str) -> None:
        lines.append(f"{time.perf_counter() - started:7.2f}s {message}")
        log_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    try:
        from engine.models.catalog import BUNDLED
        from gui.devtools.harness import isolated_window
        from gui.shell.app import make_app

        make_app()
        window = isolated_window(out)
        log(f"window shown after {time.perf_counter() - started:.2f}s")
        summary = [try_model(window, name, entry.example_prompt, timeout, log)
                   for name, entry in BUNDLED.items()]  # fmt: skip
        shot = out / "self-test.png"
        save(window, shot)
        views = classroom_views(window, out, timeout, log)
        views += teacher_first_steps(window, out, timeout, log)
        window.close()
        total = time.perf_counter() - started
        names = ", ".join(str(p) for p in (shot, *views))
        log(f"screenshots {names}; all good in {total:.1f}s")
        print(f"self-test OK in {total:.1f}s: " + "; ".join(summary)
              + f"; screenshots {names}; log {log_path}")  # fmt: skip
        return 0
    except Exception as exc:  # noqa: BLE001 - the reason is the output
        log("FAILED: " + "".join(traceback.format_exception(exc)))
        print(
            f"self-test FAILED: {exc.__class__.__name__}: {exc} (log {log_path})", file=sys.stderr
        )
        return 1


def save(window: MainWindow, path: Path) -> None:
    from PySide6.QtWidgets import QApplication

    for _ in range(5):  # let layouts settle before the grab
        QApplication.processEvents()
    if not window.grab().save(str(path)):
        raise RuntimeError(f"could not save the screenshot {path}")


def classroom_views(
    window: MainWindow, out: Path, timeout: float, log: Callable[[str], None]
) -> list[Path]:
    """The two views a teacher projects, at 1280x720: the normal view, and the presentation
    view after a sampled run on the default model."""
    from engine.models.catalog import BUNDLED, DEFAULT_MODEL
    from gui.devtools.harness import pump_until, wait_for_run

    window.resize(1280, 720)
    normal = out / "normal-1280.png"
    save(window, normal)
    window.load_model(DEFAULT_MODEL)
    pump_until(lambda: (window.bundle is not None and window.bundle.source_key == DEFAULT_MODEL
                        and not window.runner.busy) or window.last_error is not None,
               timeout, "the default model to load")  # fmt: skip
    window.set_presentation(True)
    window.prompt.setPlainText(BUNDLED[DEFAULT_MODEL].example_prompt)
    settings = window.sampler.settings().with_(temperature=0.8, top_k=40, top_p=0.9,
                                               max_new_tokens=24, seed=7)  # fmt: skip
    window.sampler.set_settings(settings)
    request = replace(window._request(new_seed=False), settings=settings)
    run = wait_for_run(window, lambda: window.runner.generate(request), timeout, "a sampled run")
    if run is None or window.last_error:
        raise RuntimeError(f"the presentation run failed: {window.last_error}")
    window.select_step(min(8, len(window.steps) - 1))
    present = out / "presentation.png"
    save(window, present)
    window.set_presentation(False)
    log(f"classroom views: {normal.name} (normal view) and {present.name} "
        f"(presentation view, {len(window.steps)} sampled tokens) at 1280x720")  # fmt: skip
    return [normal, present]


def teacher_first_steps(
    window: MainWindow, out: Path, timeout: float, log: Callable[[str], None]
) -> list[Path]:
    """What a teacher does first after a run: the Inside tab reads a token of it, the run is
    exported as a web page, and a lesson opens (its first stage set up in the window)."""
    from engine.classroom.lessons import bundled_lessons
    from gui.devtools.harness import pump_until

    inside = window.inside
    window.select_step(min(3, len(window.steps) - 1))
    window.tabs.setCurrentWidget(inside.view)
    inside.sync()
    pump_until(lambda: (inside.shown is not None and inside.shown in inside.results
                        and not window.runner.busy)
               or bool(inside.failed) or window.last_error is not None,
               timeout, "the Inside tab to read a token")  # fmt: skip
    if inside.failed or window.last_error:
        raise RuntimeError(f"the Inside tab failed: {inside.failed or window.last_error}")
    shot = out / "inside.png"
    save(window, shot)
    log(f"Inside tab: read token {inside.current.step + 1 if inside.current else '?'}")
    page = out / "run.html"
    if not window.export("html", str(page)) or not page.is_file():
        raise RuntimeError(f"the run could not be exported as a web page: {window.last_error}")
    html = page.read_text(encoding="utf-8")
    missing = [s.token_str for s in window.steps if s.token_str.strip() and s.token_str not in html]
    if len(html) < 1000 or len(missing) == len(window.steps):
        raise RuntimeError(f"the web page {page} does not show the run")
    log(f"web page: {page.name}, {len(html):,} characters, {len(window.steps)} tokens")
    lesson = bundled_lessons()[0]
    window.classroom.open_lesson(lesson)
    pump_until(lambda: not window.runner.busy or window.last_error is not None, timeout,
               "the lesson's first stage")  # fmt: skip
    stage = window.classroom.stage
    if stage is None or not window.classroom.lesson_dock.isVisible() or window.last_error:
        raise RuntimeError(f"the lesson {lesson.title!r} did not open: {window.last_error}")
    if window.prompt.toPlainText() != stage.prompt:
        raise RuntimeError(f"the lesson's first stage did not set the prompt ({stage.title!r})")
    lesson_shot = out / "lesson.png"
    save(window, lesson_shot)
    log(f"lesson: {lesson.title!r}, stage {stage.title!r}")
    return [shot, lesson_shot]


def try_model(
    window: MainWindow, name: str, prompt: str, timeout: float, log: Callable[[str], None]
) -> str:
    """Load a bundled model in the window and generate exactly TOKENS tokens greedily."""
    from gui.devtools.harness import pump_until, wait_for_run

    window.last_error = None
    t0 = time.perf_counter()
    window.load_model(name)

    def loaded() -> bool:
        key = window.bundle.source_key if window.bundle else None
        return (key == name and not window.runner.busy) or window.last_error is not None

    pump_until(loaded, timeout, f"{name} to load")
    if window.last_error:
        raise RuntimeError(f"loading {name}: {window.last_error}")
    log(f"{name}: loaded in {time.perf_counter() - t0:.2f}s ({window.bundle.describe()})")
    window.method.set_current("sampling")
    settings = window.sampler.settings().with_(temperature=0.0, max_new_tokens=TOKENS)
    window.sampler.set_settings(settings)
    window.prompt.setPlainText(prompt)
    # exactly TOKENS tokens, even if the model would end its answer earlier
    request = replace(
        window._request(new_seed=False), settings=settings.with_(min_new_tokens=TOKENS)
    )
    t0 = time.perf_counter()
    first: list[float] = []  # when the first record exists

    def note_first() -> None:
        if not first and (window.store.inbox or window.store.steps):
            first.append(time.perf_counter() - t0)

    run = wait_for_run(
        window, lambda: window.runner.generate(request), timeout, f"{name} to generate",
        on_tick=note_first,
    )  # fmt: skip
    if window.last_error or run is None:
        raise RuntimeError(f"generating with {name}: {window.last_error}")
    tokens = len(window.steps)
    if tokens != TOKENS:
        raise RuntimeError(f"{name}: expected {TOKENS} tokens, got {tokens}")
    first_token = first[0] if first else float("nan")
    log(f"{name}: {tokens} tokens, first after {first_token:.2f}s, {run.tokens_per_s:.1f} tok/s")
    log(f"{name} wrote: {window.store.text!r}")
    return f"{name} {tokens} tokens ({run.tokens_per_s:.0f} tok/s, first {first_token:.2f}s)"
