"""`inspect`: inside the steps of a run or of a given text (issue 33). Per step the decision
layer, each layer's top-5 with probabilities and KL, the attention rollout's top sources, the
direct logit attribution per layer; ``--attribution`` adds integrated gradients (Captum)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from engine.cli.args import bounded_int, text

MAX_LISTED_STEPS = 512  # steps written in one JSON (each holds every layer's top-5)
MAX_ATTRIBUTED = 16  # steps with integrated gradients in one command (each takes seconds)


def register(sub: argparse._SubParsersAction) -> None:
    from engine.cli.experiments import _common as run_options

    p = sub.add_parser("inspect", help="inside a step: logit lens, attention, DLA, attribution")
    run_options(p)
    p.add_argument("--text", type=text, default=None, help="inspect this text after the prompt "
                   "instead of generating (teacher-forced, as `score` reads it)")  # fmt: skip
    p.add_argument("--step", type=bounded_int(1, 1_000_000), action="append", default=None,
                   metavar="K", help="token K (1 = the first new token); repeat for more; "
                   "default: every token")  # fmt: skip
    p.add_argument("--top-n", type=bounded_int(1, 100), default=10,
                   help="the output's candidates followed through the layers")  # fmt: skip
    p.add_argument("--attribution", action="store_true",
                   help="integrated gradients over the input tokens (needs --step)")  # fmt: skip
    p.add_argument("--attribution-steps", type=bounded_int(64, 2048), default=None,
                   help="their step budget (default 256)")  # fmt: skip
    p.add_argument("--json", default=None, metavar="OUT", help="write the result here")
    p.add_argument("--html", default=None, metavar="OUT",
                   help="also the run as a web page, with its decision layers")  # fmt: skip
    p.set_defaults(func=run_inspect)


def _target(path: str | None, option: str = "--json") -> Path | None:
    """An output's path, checked before any work is done: a file name (not a folder) in a
    folder that exists and may be written, and, if it exists, writable itself."""
    if path is None:
        return None
    from engine.cli.args import output_file

    try:
        return Path(output_file(path))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"{option} {path}: {exc}") from None


def _tokens(args: argparse.Namespace, bundle: Any) -> tuple[list[int], list[Any], str]:
    """(context ids, Step records, how they were made): a text scored after the prompt (the
    ids `score` reads), or a run generated from the prompt with the sampler options."""
    from engine import GenerationSession
    from engine.cli.common import settings_from
    from engine.records import SCORED, Candidate, Step
    from engine.tree.score import score_text

    if args.text is not None:
        score = score_text(bundle, args.text, prompt=args.prompt or "", top_n=20)
        steps = [Step(index=i, token_id=t.token_id, text=t.text, token_str=t.text,
                      raw_prob=math.exp(t.logprob), prob=math.exp(t.logprob), rank=t.rank,
                      candidates=tuple(Candidate(c, s, p, p) for c, s, p in t.top),
                      survivors=len(t.top), entropy_raw=t.entropy, entropy=t.entropy,
                      step_time=0.0, tokens_per_s=0.0, source=SCORED)
                 for i, t in enumerate(score.tokens)]  # fmt: skip
        return list(score.context_ids), steps, "text"
    prompt = args.prompt or bundle.extra.get("example_prompt", "Once upon a time")
    ids = bundle.encode_prompt(prompt, use_chat_template=False if args.no_chat_template else None)
    session = GenerationSession.over(bundle, ids, settings_from(args), top_n=20)
    return ids, [r for r in session.stream() if isinstance(r, Step)], "generated"


def run_inspect(args: argparse.Namespace) -> int:
    from engine.errors import ModelLoadError

    try:
        return _run(args)
    except (ValueError, ModelLoadError) as exc:  # InternalsUnavailable is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from engine.internals.inspect import decision_strip, inspect_step, path_for
    from engine.models.catalog import open_model

    out, page = _target(args.json), _target(args.html, "--html")
    if args.attribution and not args.step:
        raise ValueError("--attribution needs --step K (each attribution takes seconds)")
    if args.step and len(args.step) > MAX_LISTED_STEPS:
        raise ValueError(f"at most {MAX_LISTED_STEPS} --step options")
    if args.attribution and len(args.step) > MAX_ATTRIBUTED:
        raise ValueError(f"--attribution takes at most {MAX_ATTRIBUTED} steps at a time")
    bundle = open_model(args.model, device=args.device, dtype=args.dtype,
                        progress=lambda m: print(f"[{m}]", file=sys.stderr))  # fmt: skip
    context, records, made = _tokens(args, bundle)
    tokens = [s.token_id for s in records]
    path = path_for(bundle, context, tokens)
    steps = [k - 1 for k in args.step] if args.step else list(range(len(tokens)))
    missing = [k + 1 for k in steps if k >= len(tokens)]
    if missing:
        raise ValueError(f"--step {missing[0]}: the path has {len(tokens)} tokens")
    steps = steps[:MAX_LISTED_STEPS]
    strip = decision_strip(bundle, path)
    data: dict[str, Any] = {
        "model": bundle.describe(), "tokens": made, "layers": strip.layers,
        "context_ids": list(context), "token_ids": list(tokens),
        "decision_strip": list((None,) * strip.first + strip.decision),
        "strip_seconds": strip.seconds, "steps": [],
    }  # fmt: skip
    for k in steps:
        if path.offset + k < 1:
            print(f"[token {k + 1} has no context before it: left out]", file=sys.stderr)
            continue
        inside = inspect_step(bundle, path, k, top_n=args.top_n)
        row = inside.to_json()
        if args.attribution:
            row["attribution"] = _attribution(args, bundle, path, k)
        data["steps"].append(row)
        _print(inside)
    if out is not None:  # whole or not at all; a non-finite figure as null
        from engine.classroom.export import write_atomic
        from engine.cli.tree import plain

        write_atomic(out, json.dumps(plain(data), ensure_ascii=False, allow_nan=False))
    if page is not None:
        _page(page, bundle, context, records, strip)
    return 0


def _page(out: Path, bundle: Any, context: list[int], steps: list[Any], strip: Any) -> None:
    """The shareable page (engine.classroom.share) of the path, with its decision layers."""
    from engine.classroom.share import write_run_html

    decided = {strip.first + i: d for i, d in enumerate(strip.decision)}
    prompt = bundle.decode(context, skip_special_tokens=False)
    write_run_html(out, prompt, bundle.name, {}, steps, decisions=decided, layers=strip.layers)


def _attribution(args: argparse.Namespace, bundle: Any, path: Any, k: int) -> dict[str, Any]:
    from engine.internals.attribution import DEFAULT_STEPS, attribute_inputs

    ig = attribute_inputs(bundle, path, k, n_steps=args.attribution_steps or DEFAULT_STEPS)
    diff = ig.value - ig.baseline_value
    print(f"    integrated gradients: delta {ig.delta:+.4f} ({ig.relative_delta:.1%} of "
          f"{diff:+.3f}) in {ig.n_steps} steps", file=sys.stderr)  # fmt: skip
    return {
        "value": ig.value, "baseline_value": ig.baseline_value, "delta": ig.delta,
        "relative_delta": ig.relative_delta, "n_steps": ig.n_steps,
        "scores": [{"position": i, "text": t, "score": float(s)}
                   for i, ((_, t), s) in enumerate(zip(ig.sources, ig.scores, strict=True))],
        "top": [{"position": i, "text": t, "score": s} for i, t, s in ig.top(10)],
    }  # fmt: skip


def _print(inside: Any) -> None:
    from engine.cli.common import visible

    lens, dla = inside.lens, inside.attribution
    where = "never the top-1" if lens.decision_layer is None else f"layer {lens.decision_layer}"
    line = f"token {inside.step + 1:4d} {visible(inside.token[1])!r:>16}  decided: {where}"
    if dla is not None:
        parts = dla.blocks
        layer, sub = divmod(int(abs(parts).argmax()), parts.shape[1])
        line += (f"  vs {visible(dla.rival[1])!r}: {dla.total:+.2f}, largest: layer {layer + 1}"
                 f"'s {dla.sublayers[sub]} ({parts[layer, sub]:+.2f})")  # fmt: skip
    print(line)
