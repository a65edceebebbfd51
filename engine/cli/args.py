"""Argument types that check a command-line value where argparse reads it: a bad value ends
in argparse's own one-line message and exit code 2, never a traceback further in. The bounds
are engine.validate.limits', named in the message."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d{1,2})?)$")


def device(text: str) -> str:
    """auto, cpu, mps, cuda or cuda:N."""
    if not DEVICE.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a device this app can use: auto, cpu, cuda, cuda:N or mps"
        )
    return text


def text(value: str) -> str:
    """A command-line text that is valid UTF-8. Python keeps an undecodable byte of argv as a
    lone surrogate (U+DC80..U+DCFF); no tokenizer can take one, so it is refused here."""
    for i, ch in enumerate(value):
        if "\ud800" <= ch <= "\udfff":
            byte = f"0x{ord(ch) - 0xDC00:02x}" if ch >= "\udc80" else "a surrogate"
            raise argparse.ArgumentTypeError(
                f"the text is not valid UTF-8 (byte {byte} at character {i + 1}): check the "
                "terminal's encoding, or write the text in a file"
            )
    return value


def bounded_int(least: int, most: int) -> Callable[[str], int]:
    """A whole number in [least, most]."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if not least <= number <= most:
            raise argparse.ArgumentTypeError(
                f"must be from {least} to {most} (the bound), got {number}"
            )
        return number

    parse.__name__ = "whole number"  # what argparse names in its own messages
    return parse


def probability(value: str) -> float:
    """A number in [0, 1]."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not 0.0 <= number <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1], got {value}")
    return number


def output_file(value: str) -> str:
    """A file the result can be written to, checked before any work: not a folder, in a
    folder that exists and may be written."""
    import os
    from pathlib import Path

    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a folder: give a file name in it")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{value!r} cannot be written (permissions)")
    try:  # the permission bits do not say all (root, a read-only or special file system)
        import tempfile

        with tempfile.NamedTemporaryFile(prefix=f".{path.name}.", dir=folder):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise argparse.ArgumentTypeError(f"{value!r} cannot be written there ({why})") from None
    return value


DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16", "int8", "int4")  # engine.models.loading


def dtype(value: str) -> str:
    """A number format a model can be loaded in, checked before any model loads (a second
    model's ``--dtype-b int3`` is refused before the first is loaded)."""
    if value not in DTYPE_NAMES:
        names = ", ".join(DTYPE_NAMES)
        raise argparse.ArgumentTypeError(f"{value!r} is not a dtype: choose {names}")
    return value


dtype.__name__ = "dtype"
probability.__name__ = "probability"
output_file.__name__ = "file name"

DTYPE_HELP = (
    "auto, float32, bfloat16, float16; int8 or int4: weights quantised for the CPU kernels "
    "(a GGUF's own 4-bit blocks where they fit)"
)
