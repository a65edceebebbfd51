"""`inspect`: inside the steps of a run or of a given text (issue 33). Per step the decision
layer, each layer's top-5 with probabilities and KL, the attention rollout's top sources, the
direct logit attribution per layer; ``--attribution`` adds integrated gradients (Captum)."""

from __future__ import annotations

import argparse
import json
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
    p.set_defaults(func=run_inspect)


def _target(path: str | None) -> Path | None:
    """The JSON's path, checked before any work is done."""
    if path is None:
        return None
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"--json {path} is a folder: give a file name")
    if not out.parent.is_dir():
        raise ValueError(f"--json {path}: the folder {out.parent} does not exist")
    return out


def _tokens(args: argparse.Namespace, bundle: Any) -> tuple[list[int], list[int], str]:
    """(context ids, token ids, how they were made): the prompt and a text read as it is, or
    the prompt and a run generated with the sampler options."""
    from engine import GenerationSession
    from engine.cli.common import settings_from
    from engine.records import Step
    from engine.tree.scored import context_and_text, text_ids

    prompt = args.prompt or bundle.extra.get("example_prompt", "Once upon a time")
    template = False if args.no_chat_template or args.text is not None else None
    if args.text is not None:
        if bundle.is_encoder_decoder:
            return bundle.encode_prompt(prompt), text_ids(bundle.tokenizer, args.text), "text"
        head, ids = context_and_text(bundle.tokenizer, args.text, args.prompt or "")
        return head, ids, "text"
    ids = bundle.encode_prompt(prompt, use_chat_template=template)
    session = GenerationSession.over(bundle, ids, settings_from(args), top_n=1)
    tokens = [r.token_id for r in session.stream() if isinstance(r, Step)]
    return ids, tokens, "generated"


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

    out = _target(args.json)
    if args.attribution and not args.step:
        raise ValueError("--attribution needs --step K (each attribution takes seconds)")
    if args.step and len(args.step) > MAX_LISTED_STEPS:
        raise ValueError(f"at most {MAX_LISTED_STEPS} --step options")
    if args.attribution and len(args.step) > MAX_ATTRIBUTED:
        raise ValueError(f"--attribution takes at most {MAX_ATTRIBUTED} steps at a time")
    bundle = open_model(args.model, device=args.device, dtype=args.dtype,
                        progress=lambda m: print(f"[{m}]", file=sys.stderr))  # fmt: skip
    context, tokens, made = _tokens(args, bundle)
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
    if out is not None:
        out.write_text(json.dumps(data, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    return 0


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
        line += (f"  vs {visible(dla.rival[1])!r}: {dla.total:+.2f}, most from layer {layer + 1}"
                 f"'s {dla.sublayers[sub]} ({parts[layer, sub]:+.2f})")  # fmt: skip
    print(line)
