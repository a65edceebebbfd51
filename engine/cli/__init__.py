"""The headless command line (`main.py COMMAND`, `decoding-lab-cli`): one module per command
group, each with ``register(sub)`` adding its parser and setting ``func``. No Qt: the window's
part of the benchmark comes in from main.py as ``gui_bench``."""

from __future__ import annotations

import argparse
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
    return func(args)
