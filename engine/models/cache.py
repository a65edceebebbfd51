"""Where the lab keeps what it makes once and reuses: converted models, quantised layers, the
built kernels (``engine.quant.native``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cache_root() -> Path:
    """$DECODING_LAB_CACHE, else the platform's cache folder."""
    env = os.environ.get("DECODING_LAB_CACHE")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
        return base / "decoding-lab" / "cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "decoding-lab"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "decoding-lab"
