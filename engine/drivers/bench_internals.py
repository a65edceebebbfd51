"""Inside the step's figures for ``main.py bench`` (issue 33), measured side by side in one
process: the decision strip of a 128-token run against one plain forward over the same tokens
(target: at most 2x), one step's lens + attention + DLA (target: at most 300 ms), and the
decode rate before and after the internals were used (target: unchanged)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.drivers.bench_common import line
from engine.internals.inspect import decision_strip, inspect_step, path_for
from engine.internals.lens import bf16_pays
from engine.internals.trace import TokenPath
from engine.models.device import timed
from engine.models.loading import ModelBundle
from engine.records import Step
from engine.sampling.settings import SamplerSettings

PROMPT = "Once upon a time, a dragon"


def _run(bundle: ModelBundle, ids: list[int], settings: SamplerSettings) -> tuple[float, list[int]]:
    session = GenerationSession.over(bundle, ids, settings, top_n=20, fast=True)
    start = time.perf_counter()
    tokens = [r.token_id for r in session.stream() if isinstance(r, Step)]
    return len(tokens) / (time.perf_counter() - start), tokens


def _best(fn: Callable[[], Any], reps: int = 3) -> float:
    return min(timed(torch.device("cpu"), fn)[1] for _ in range(reps))


def _strip_against_forward(
    bundle: ModelBundle, path: TokenPath, screen: bool | None = None
) -> tuple[float, float]:
    """Best of three of each, alternated (A B A B A B)."""
    x = torch.tensor([path.ids], device=bundle.device)
    fwd, strip = float("inf"), float("inf")
    for _ in range(3):
        with torch.inference_mode():
            fwd = min(fwd, timed(bundle.device, lambda: bundle.model(x))[1])
        run = lambda: decision_strip(bundle, path, screen=screen)  # noqa: E731
        strip = min(strip, timed(bundle.device, run)[1])
    return strip, fwd


def internals_section(
    bundle: ModelBundle, say: Callable[[str], None], n: int = 128
) -> dict[str, Any]:
    ids = bundle.encode_prompt(PROMPT, use_chat_template=False)
    greedy = SamplerSettings(temperature=0, max_new_tokens=n, min_new_tokens=n)
    sampled = SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=n,
                              min_new_tokens=n, seed=7)  # fmt: skip
    before = _run(bundle, ids, greedy)[0]  # the first before anything was read inside
    cfg = bundle.model.config
    out: dict[str, Any] = {"bf16_screen": bf16_pays(cfg.hidden_size, cfg.vocab_size, "cpu")}
    say(f"I. inside the step (bf16 screen of the strip: {'on' if out['bf16_screen'] else 'off'})")
    for name, settings in (("sampled", sampled), ("greedy", greedy)):
        _, tokens = _run(bundle, ids, settings)
        path = path_for(bundle, ids, tokens)
        strip, fwd = _strip_against_forward(bundle, path)
        decided = decision_strip(bundle, path).decision
        say(line(f"I1. decision strip, {len(tokens)} tokens {name}", strip * 1e3, fwd * 1e3, "ms",
                 "strip", "forward") + "  (target <= 2x)")  # fmt: skip
        out[f"strip_{name}"] = {"strip_ms": strip * 1e3, "forward_ms": fwd * 1e3,
                                "ratio": strip / fwd,
                                "never_top1": sum(d is None for d in decided)}  # fmt: skip
    if out["bf16_screen"]:  # what a CPU without fast bf16 gets: the scan in fp32
        strip, fwd = _strip_against_forward(bundle, path, screen=False)
        say(line("I1. decision strip, greedy, fp32 scan only", strip * 1e3, fwd * 1e3, "ms",
                 "strip", "forward") + "  (as on CPUs where bf16 does not pay)")  # fmt: skip
        out["strip_greedy_fp32"] = {"strip_ms": strip * 1e3, "forward_ms": fwd * 1e3,
                                    "ratio": strip / fwd}  # fmt: skip
    last = len(path.tokens) - 1
    step = _best(lambda: inspect_step(bundle, path, last))
    first = _best(lambda: inspect_step(bundle, path, 0))
    say(f"I2. one step's lens + attention + DLA: {step * 1e3:.0f} ms at position "
        f"{path.query(last) + 1}, {first * 1e3:.0f} ms at position {path.query(0) + 1} "
        f"(target <= 300 ms)")  # fmt: skip
    after = 0.0
    for _ in range(3):  # alternated: a decode right after a step was read inside, and one not
        inspect_step(bundle, path, last)
        after = max(after, _run(bundle, ids, greedy)[0])
        before = max(before, _run(bundle, ids, greedy)[0])
    say(line("I3. decode after the internals vs before", after, before, "tok/s", "after",
             "before") + "  (target 1.00x)")  # fmt: skip
    out.update(step_ms=step * 1e3, first_step_ms=first * 1e3, decode_before=before,
               decode_after=after)  # fmt: skip
    return out
