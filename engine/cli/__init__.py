"""The headless command line (`main.py COMMAND`, `decoding-lab-cli`): one module per command
group, each with ``register(sub)`` adding its parser and setting ``func``. No Qt: the window's
part of the benchmark comes in from main.py as ``gui_bench``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decoding-lab",
        description="Explore by hand how a language model turns probabilities into text.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Imported here, not at the top: each command imports torch only when it runs. Static
    # imports, so a packaged build finds them.
    from engine.cli import bench, catalog, compare, experiments, generate, inspect, tree

    # in the help's order
    for command in (generate, compare, tree, experiments, inspect, bench, catalog):
        command.register(sub)
    return parser


def run(
    argv: list[str] | None = None, gui_bench: Callable[..., dict[str, Any]] | None = None
) -> int:
    """Parse ``argv`` and run its command (help when there is none)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    args.gui_bench = gui_bench
    try:
        return func(args)
    except Exception as exc:  # noqa: BLE001 - the CLI's edge: every error as one line
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1


TRACEBACK_ENV = "DECODING_LAB_TRACEBACK"  # =1: the edge lets an error's traceback through


def one_line(exc: BaseException) -> str:
    """An error as one line a user can act on: the engine's own errors by their message,
    anything else with its type (it is a bug or a system error), control characters
    escaped."""
    from engine.validate.served import printable

    text = " ".join(str(exc).split()) or "(no message)"
    if not _is_engine_error(exc):
        text = f"{type(exc).__name__}: {text} (set {TRACEBACK_ENV}=1 for the traceback)"
    return printable(text)


def _is_engine_error(exc: BaseException) -> bool:
    from engine import errors
    from engine.serve.remote_errors import RemoteError

    own = (errors.ModelLoadError, errors.NonFiniteLogitsError, errors.GrammarStop, RemoteError)
    return isinstance(exc, (*own, ValueError, OSError))
