"""Decoding Lab entry point: the window (no command) or the headless CLI (a command)."""

from __future__ import annotations

import os
import sys

# A windowed (packaged) build has no console: sys.stdout / sys.stderr are None there, and
# transformers' and tqdm's progress output would crash the app. Point them somewhere first.
if sys.stdout is None:
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
if sys.stderr is None:
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115

# Before anything imports torch (engine.runtime.launch): the machine's load at the start, which
# the adaptive thread count reads first. The packaged build's runtime hook has done it already.
from engine.runtime.launch import prepare  # noqa: E402

prepare()

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402


def _gui_bench(bundle: Any, say: Callable[[str], None], args: Any) -> dict[str, Any]:
    """The benchmark's window figures (live plots vs headless, start-up and peak memory); with
    ``--contention``, the window under load instead (``bundle`` is None there)."""
    if getattr(args, "contention", False):
        from gui.devtools.load_bench import run_load_bench

        return {"window_load": run_load_bench(say)}
    if getattr(args, "internals", False):  # the Inside tab's clicks (issue 54)
        from gui.devtools.inside_bench import run_inside_bench

        return {"inside_window": run_inside_bench(bundle, say)}
    from gui.devtools.bench import run_gui_bench, run_startup_bench
    from gui.devtools.open_bench import run_open_bench
    from gui.devtools.tree_bench import run_tree_bench

    return {
        "gui": run_gui_bench(bundle, say, args.new_tokens),
        "startup": run_startup_bench(say, args.rss_tokens),
        "open_long_run": run_open_bench(say),
        "tree": run_tree_bench(say),
    }


def cli(argv: list[str] | None = None) -> int:
    """Headless entry point (`decoding-lab-cli`): the commands live in ``engine.cli``."""
    from engine.cli import run

    return run(argv, gui_bench=_gui_bench)


def main(argv: list[str] | None = None) -> int:
    """`decoding-lab`: the window, or the CLI when a command is given."""
    argv = sys.argv[1:] if argv is None else argv
    if "--self-test" in argv:
        from gui.devtools.selftest import run_self_test

        rest = [a for a in argv if a != "--self-test"]
        return run_self_test(rest[0] if rest else None)
    if argv and not argv[0].startswith("-") or any(a in ("-h", "--help") for a in argv):
        return cli(argv)
    try:
        from gui.shell.app import run_app
    except ImportError as exc:
        # Qt or one of the system libraries it loads is missing: say which, still be useful.
        print(
            f"The window cannot start ({exc}). The README's set-up installs what Qt needs; "
            "streaming the default model in the terminal instead.",
            file=sys.stderr,
        )
        return cli(["generate", *argv])
    return run_app(argv)


if __name__ == "__main__":
    sys.exit(main())
