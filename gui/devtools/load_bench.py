"""The window under load (issue 57), a section of `main.py bench --contention`: the real window
(offscreen) generates N tokens greedily with 0 and then 1 busy background process (the
contention bench's own, started and stopped here), beside the CLI's session of the same request
measured the same way in the same run, alternated: tokens over the wall time from asking for the
run to its last record (the window: to ``run_finished``, its records drawn). The window on its
own thread count (``gui.core.runtime.window_threads``: one core fewer than the machine's) and on
every core, and the event loop's longest block while the window generates (a 10 ms heartbeat on
the GUI thread). Targets: with one busy
process the window within 20% of the CLI, and the event loop never blocked longer than 100 ms."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.drivers.workbench import RunRequest
    from engine.models.loading import ModelBundle
    from gui.shell.window import MainWindow

PROMPT = "Write a short poem about the sea."
FLOOR = 0.8  # the window's tok/s at least this share of the CLI's, with one busy process
MAX_BLOCK_MS = 100.0  # the event loop never blocked longer than this


@dataclass
class Row:
    """One busy level's figures: each way's rates (tok/s, one a round), the heartbeat's gaps
    (seconds) in the window's runs at each thread count, the cores other programs used."""

    rates: dict[str, list[float]] = field(default_factory=dict)
    gaps: dict[str, list[float]] = field(default_factory=dict)
    others: float | None = None
    same_tokens: bool = True

    def best(self, way: str) -> float:
        return max(self.rates.get(way) or [0.0])

    def longest_ms(self, way: str) -> float:
        return 1000 * max(self.gaps.get(way) or [0.0])


def _window_run(window: MainWindow, request: RunRequest, threads: int) -> tuple[float, list]:
    """The window's run of ``request`` at ``threads`` torch threads: its tok/s over the wall
    time, and the heartbeat's gaps meanwhile."""
    import torch

    from gui.devtools.harness import Heartbeat, wait_for_run

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    ended: list[float] = []

    def finished(_summary: object) -> None:
        ended.append(time.perf_counter())

    window.run_finished.connect(finished)
    heartbeat = Heartbeat()
    heartbeat.start()
    start = time.perf_counter()
    try:
        run = wait_for_run(window, lambda: window.runner.generate(request), 600, "the run")
    finally:
        gaps = heartbeat.stop()[1:]
        window.run_finished.disconnect(finished)
        torch.set_num_threads(before)
    if run is None or len(window.steps) != request.settings.max_new_tokens:
        raise RuntimeError(f"the window's run failed: {window.last_error}")
    return len(window.steps) / (ended[0] - start), gaps


def _cli_run(bundle: ModelBundle, request: RunRequest) -> tuple[float, list[int]]:
    """The CLI's session of the same request, as the worker builds it but without Qt: its
    tok/s over the wall time (the prompt's tokenising included, as in the window), its tokens.
    It runs on a thread of its own that ends with it, as the window's jobs do: the GUI thread
    must not keep an OpenMP pool (``engine.runtime.threads.release_pool``), or the window's
    steps run on libgomp's throttled waits and this section measures that instead."""
    from engine.drivers.workbench import make_session

    out: list[tuple[float, list[int]]] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            start = time.perf_counter()
            ids = bundle.encode_prompt(request.prompt, request.chat_template)
            session = make_session(bundle, ids, request)
            for _ in session.stream():
                pass
            out.append((len(session.generated_ids) / (time.perf_counter() - start),
                        session.generated_ids))  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=work, name="load-bench-cli")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


def _level(
    window: MainWindow, bundle: ModelBundle, request: RunRequest, busy: int, rounds: int
) -> Row:
    """Warm-ups, then ``rounds`` of: the window on its thread count, the window on every core,
    the CLI (every core), with ``busy`` background processes running."""
    from engine.drivers.bench_contention import start_busy, stop_busy
    from engine.runtime.threads import cpu_seconds, usable_cores
    from gui.core.runtime import window_threads

    ways = {"window": window_threads(), "window_all": usable_cores()}
    row = Row()
    hogs = start_busy(busy)
    try:
        time.sleep(1.0)  # the background processes running
        _window_run(window, request, ways["window"])
        _cli_run(bundle, request)
        began, load0 = time.perf_counter(), cpu_seconds()
        for _ in range(rounds):
            for way, threads in ways.items():
                rate, gaps = _window_run(window, request, threads)
                row.rates.setdefault(way, []).append(rate)
                row.gaps.setdefault(way, []).extend(gaps)
            rate, tokens = _cli_run(bundle, request)
            row.rates.setdefault("cli", []).append(rate)
            row.same_tokens &= tokens == [s.token_id for s in window.steps]
        load1 = cpu_seconds()
        if load0 is not None and load1 is not None:
            wall = time.perf_counter() - began
            row.others = max(0.0, (load1[0] - load0[0]) - (load1[1] - load0[1])) / wall
    finally:
        stop_busy(hogs)
    return row


def _say_row(say: Callable[[str], None], busy: int, row: Row, threads: int, cores: int) -> None:
    def runs(way: str) -> str:
        return ", ".join(f"{r:.1f}" for r in row.rates[way])

    cli = row.best("cli")
    others = "?" if row.others is None else f"{row.others:.1f} cores"
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "?"
    say(f"   busy {busy}  window ({threads} thread(s)) {row.best('window'):5.1f} tok/s = "
        f"{row.best('window') / cli:4.2f}x CLI ({cli:5.1f}, {cores} threads) | window on all "
        f"{cores} cores {row.best('window_all'):5.1f} | event loop's longest block "
        f"{row.longest_ms('window'):.0f} ms ({row.longest_ms('window_all'):.0f} ms on all "
        f"cores) | other programs {others}, load {load}")  # fmt: skip
    say(f"      runs: window {runs('window')}; on all cores {runs('window_all')}; CLI "
        f"{runs('cli')}; the same tokens: {'yes' if row.same_tokens else 'NO'}")  # fmt: skip


def _request(window: MainWindow, new_tokens: int) -> RunRequest:
    """The window's own request for exactly ``new_tokens`` greedy tokens from PROMPT."""
    window.method.set_current("sampling")
    settings = window.sampler.settings().with_(temperature=0.0, max_new_tokens=new_tokens)
    window.sampler.set_settings(settings)
    window.prompt.setPlainText(PROMPT)
    return replace(
        window._request(new_seed=False), settings=settings.with_(min_new_tokens=new_tokens)
    )


def run_load_bench(
    say: Callable[[str], None], new_tokens: int = 64, rounds: int = 3
) -> dict[str, Any]:
    """The section's rows for 0 and 1 busy background processes, and its checks."""
    from engine.models.catalog import open_model
    from engine.runtime.threads import release_pool, thread_state, usable_cores
    from gui.core.runtime import import_engine, window_threads
    from gui.devtools.harness import isolated_window
    from gui.shell.app import make_app

    make_app()
    import_engine()  # as the app's load job does: the window's thread count
    cores, began = usable_cores(), time.perf_counter()
    say(
        f"13. the window under load: SmolLM2 float32, {new_tokens} tokens greedy, the real "
        f"window offscreen vs the CLI's session of the same request, 0 and 1 busy background "
        f"processes on {cores} cores; tok/s over the wall time (asking to last record), best "
        f"of {rounds} alternated rounds"
    )  # fmt: skip
    bundle = open_model("smollm2-135m", device="cpu", dtype="float32", progress=lambda _m: None)
    window = isolated_window(Path(tempfile.mkdtemp()))
    window.runner.workbench.adopt(bundle)
    window.models.adopt(bundle)
    request = _request(window, new_tokens)
    release_pool()  # the OpenMP pool the sections before (and the model's loading) left here
    out: dict[str, Any] = {}
    try:
        for busy in (0, 1):
            row = _level(window, bundle, request, busy, rounds)
            _say_row(say, busy, row, window_threads(), cores)
            out[f"busy{busy}"] = {"rates": row.rates, "others": row.others,
                                  "longest_block_ms": row.longest_ms("window"),
                                  "longest_block_all_cores_ms": row.longest_ms("window_all"),
                                  "same_tokens": row.same_tokens}  # fmt: skip
    finally:
        window.close()
    out["checks"] = _checks(out)
    for line in out["checks"]:
        say(f"   {line}")
    state = thread_state()
    say(f"   threads reduced {state.reductions} time(s) so far; the section took "
        f"{time.perf_counter() - began:.0f} s")  # fmt: skip
    return out


def _checks(out: dict[str, Any]) -> list[str]:
    """The issue's two figures for the window with one busy process."""
    busy = out["busy1"]
    ratio = max(busy["rates"]["window"]) / max(busy["rates"]["cli"])
    blocks = max(out["busy0"]["longest_block_ms"], busy["longest_block_ms"])
    return [
        f"one busy: window {ratio:4.2f}x CLI (>= {FLOOR} {'ok' if ratio >= FLOOR else 'MISSED'});"
        f" event loop's longest block {blocks:.0f} ms (<= {MAX_BLOCK_MS:.0f} "
        f"{'ok' if blocks <= MAX_BLOCK_MS else 'MISSED'})"
    ]
