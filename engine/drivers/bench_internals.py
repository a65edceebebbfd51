"""Inside the step's figures for ``main.py bench`` (issue 33), measured side by side in one
process: the decision strip of a 128-token run against one plain forward over the same tokens
(target: at most 2x), one step's lens + attention + DLA (target: at most 300 ms), and the
decode rate before and after the internals were used (target: unchanged). Issue 54 adds, before
and after side by side: a step of a 512-token run from the full pass over the path up to it
(before) and from the reader's cache (after), for token 1 and token 512; and integrated
gradients on the lesson prompts (lessons 12 and 13) with the old plan (16-point segments, one
Captum call each) and the batched one: time, steps and completeness delta. The window's
click-to-drawn times come from gui.devtools.inside_bench through main.py's hook."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import torch

from engine.decode.session import GenerationSession
from engine.drivers.bench_common import line
from engine.internals.attribution import OLD_PLAN, PLAN, attribute_inputs
from engine.internals.inspect import decision_strip, inspect_step, path_for
from engine.internals.lens import bf16_pays
from engine.internals.pace import LoadWatch
from engine.internals.reader import PathReader
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
    out["long_run_step"] = step_section(bundle, say)
    out["lesson_attribution"] = attribution_section(bundle, say)
    return out


# -- issue 54: a step of a long run, and integrated gradients on the lesson prompts ------------

LESSONS = ("12-reading-a-text-through-the-model.yaml", "13-where-does-the-model-decide.yaml")


def long_run(bundle: ModelBundle, n: int = 512) -> tuple[GenerationSession, TokenPath]:
    """A sampled run of ``n`` tokens (seeded) after the bench's prompt, and its session (kept,
    as the window's worker keeps it)."""
    ids = bundle.encode_prompt(PROMPT, use_chat_template=False)
    settings = SamplerSettings(temperature=0.8, top_k=0, top_p=1.0, max_new_tokens=n,
                               min_new_tokens=n, seed=11)  # fmt: skip
    session = GenerationSession.over(bundle, ids, settings, top_n=20, fast=True)
    tokens = [r.token_id for r in session.stream() if isinstance(r, Step)]
    return session, path_for(bundle, ids, tokens)


def step_section(bundle: ModelBundle, say: Callable[[str], None], n: int = 512) -> dict[str, Any]:
    """Token 1 and token ``n`` of an ``n``-token run: the full pass over the path up to the
    token (as each click read it before issue 54) against the reader (its positions read once,
    then one position a step); best of three, alternated."""
    session, path = long_run(bundle, n)
    handed = PathReader(bundle.model, path.ids)  # the window's first view after a run
    with fitted().fitting():
        first = timed(bundle.device, lambda: handed.inspect(bundle, path, n - 1, rollout=False,
                                                            session=session))[1]  # fmt: skip
        rows = timed(bundle.device, lambda: handed.read_rows(path.query(n - 1)))[1]
    reader = PathReader(bundle.model, path.ids)
    with fitted().fitting():
        cold = timed(bundle.device, lambda: reader.inspect(bundle, path, n - 1))[1]
    out: dict[str, Any] = {"tokens": n, "reader_cold_ms": cold * 1e3}
    out |= {"handed_first_ms": first * 1e3, "rollout_rows_ms": rows * 1e3}
    for step in (0, n - 1):
        up_to = TokenPath(path.context, path.tokens[: step + 1])
        full = lambda p=up_to, k=step: inspect_step(bundle, p, k)  # noqa: E731
        cached = lambda p=up_to, k=step: reader.inspect(bundle, p, k)  # noqa: E731
        old = new = float("inf")
        for _ in range(3):
            with fitted().fitting():
                old = min(old, timed(bundle.device, full)[1])
            with fitted().fitting():
                new = min(new, timed(bundle.device, cached)[1])
        say(line(f"I4. token {step + 1} of {n}: full pass vs reader", old * 1e3, new * 1e3, "ms",
                 "before", "after") + "  (engine only; target <= 300 ms)")  # fmt: skip
        out[f"token_{step + 1}"] = {"before_ms": old * 1e3, "after_ms": new * 1e3}
    say(f"    the reader's first step of token {n}, nothing read yet: {cold * 1e3:.0f} ms "
        f"(reads the {len(path.ids) - 1} positions before it once); from the run's own keys "
        f"and values (the window's first view after a run): {first * 1e3:.0f} ms, the rows "
        f"its rollout needs read after it in {rows * 1e3:.0f} ms")  # fmt: skip
    return out


def lesson_cases(bundle: ModelBundle) -> list[tuple[str, TokenPath, int]]:
    """The steps the lessons ask about: lesson 13's tokens (its ``inside_step``, else the
    first), greedy; lesson 12's scored texts at the token the stage points at (quoted in its
    ``point_at``: " Paris", " Berlin", " Thames")."""
    from engine.classroom.lessons import load_lesson
    from engine.models.catalog import RESOURCES

    cases: dict[tuple[int, ...], tuple[str, TokenPath, int]] = {}
    for name in LESSONS:
        for stage in load_lesson(RESOURCES / "lessons" / name).stages:
            chat = bool(stage.use_chat_template)
            ids = bundle.encode_prompt(stage.prompt, use_chat_template=chat)
            if stage.action == "score":
                tokens = bundle.tokenizer.encode(stage.options["text"], add_special_tokens=False)
                path = path_for(bundle, ids, tokens)
                step = _pointed_at(bundle, path, stage.point_at)
            else:
                step = int(stage.options.get("inside_step") or 1) - 1
                greedy = SamplerSettings(temperature=0, max_new_tokens=step + 1)
                path = path_for(bundle, ids, _run(bundle, ids, greedy)[1])
            text = bundle.tokenizer.decode([path.tokens[step]])
            read = path.ids[: path.query(step) + 2]  # what the attribution reads, and the token
            cases.setdefault(read, (f"{name[:2]} {text!r} after {stage.prompt!r}", path, step))
    return list(cases.values())


def _pointed_at(bundle: ModelBundle, path: TokenPath, point_at: str) -> int:
    """The first token of ``path`` quoted in ``point_at``, else its first token."""
    texts = [bundle.tokenizer.decode([t]) for t in path.tokens]
    for quoted in re.findall(r'"([^"]+)"', point_at):
        if quoted in texts:
            return texts.index(quoted)
    return 0


def fitted() -> LoadWatch:
    """The machine's load over half a second: the threads a job the user waits on would get in
    the window (engine.internals.pace), so that a busy machine's collapse at two threads does not
    stand in for either side of a comparison."""
    watch = LoadWatch()
    watch.read()
    time.sleep(0.5)
    watch.read()
    return watch


def attribution_section(
    bundle: ModelBundle, say: Callable[[str], None], rounds: int = 2
) -> dict[str, Any]:
    """Integrated gradients on the lessons' steps, the old plan and this one alternated, the
    best of ``rounds`` each, on the threads the machine's load leaves free at each run."""
    rows, totals = [], {"before": [0.0, 0], "after": [0.0, 0]}
    say(f"I5. integrated gradients on the lesson prompts: {OLD_PLAN.points}-point segments, "
        f"one Captum call each (before) vs {PLAN.points}-point segments batched per round "
        f"(after); best of {rounds}, alternated")  # fmt: skip
    for label, path, step in lesson_cases(bundle):
        got: dict[str, dict[str, Any]] = {}
        for _ in range(rounds):
            for name, plan in (("before", OLD_PLAN), ("after", PLAN)):
                watch = fitted()
                with watch.fitting():
                    threads = torch.get_num_threads()
                    ig = attribute_inputs(bundle, path, step, plan=plan)
                if name not in got or ig.seconds < got[name]["s"]:
                    got[name] = {"s": ig.seconds, "steps": ig.n_steps,
                                 "delta": ig.relative_delta, "threads": threads}  # fmt: skip
        for name in totals:
            totals[name][0] += got[name]["s"]
            totals[name][1] += got[name]["steps"]
        b, a = got["before"], got["after"]
        say(f"    {label[:52]:52} {b['s']:5.1f} s {b['steps']:3} steps delta {b['delta']:.2%}"
            f" | {a['s']:5.1f} s {a['steps']:3} steps delta {a['delta']:.2%}"
            f"  ({b['threads']}/{a['threads']} threads)")  # fmt: skip
        rows.append({"case": label, "before": b, "after": a})
    (tb, sb), (ta, sa) = totals["before"], totals["after"]
    say(line("I5. all the lesson prompts, before vs after", tb, ta, "s", "before", "after")
        + f"  ({sb} vs {sa} steps; worst delta "
        f"{max(r['before']['delta'] for r in rows):.2%} vs "
        f"{max(r['after']['delta'] for r in rows):.2%})")  # fmt: skip
    return {"cases": rows, "before_s": tb, "after_s": ta, "before_steps": sb, "after_steps": sa}
