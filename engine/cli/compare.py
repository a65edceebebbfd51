"""`compare`: several decoding methods (or sampler presets) on one prompt, side by side."""

from __future__ import annotations

import argparse
import sys

from engine.cli.args import DTYPE_HELP, bounded_int, device, dtype, text
from engine.cli.common import add_server_options, open_served
from engine.validate.limits import MAX_BEAMS, MAX_GAMMA, MAX_NEW_TOKENS


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    cmp = sub.add_parser("compare", help="run several decoding methods on one prompt, side by side")
    cmp.add_argument("--model", default=None, help="as for generate (default: smollm2-135m)")
    cmp.add_argument("--prompt", type=text, default=None)
    cmp.add_argument("--no-chat-template", action="store_true")
    cmp.add_argument("--draft-model", default=None, help="a smaller model with the same tokenizer")
    cmp.add_argument(
        "--draft-dtype",
        type=dtype,
        default=None,
        help="the draft's dtype (default: as --dtype), e.g. int4",
    )
    cmp.add_argument(
        "--methods", default=None, help="comma-separated subset, e.g. 'plain, KV cache,beam search'"
    )
    cmp.add_argument("--max-new-tokens", type=bounded_int(1, MAX_NEW_TOKENS), default=64)
    cmp.add_argument("--num-beams", type=bounded_int(1, MAX_BEAMS), default=4)
    cmp.add_argument(
        "--gamma", type=bounded_int(1, MAX_GAMMA), default=5, help="draft tokens per target pass"
    )
    cmp.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    cmp.add_argument("--seed", type=int, default=0)
    cmp.add_argument("--show-text", action="store_true", help="print each method's output")
    cmp.add_argument(
        "--presets", default=None,
        help="compare sampler presets instead of methods, e.g. 'Greedy,Creative,Mirostat 2' "
        "(same prompt and seed; distinct-1/2 and rep-4 next to the speed)",
    )  # fmt: skip
    cmp.add_argument("--device", type=device, default="auto")
    cmp.add_argument("--dtype", type=dtype, default="auto", help=DTYPE_HELP)
    add_server_options(cmp)
    cmp.add_argument(
        "--local-model", default=None,
        help="with --server: also run this local model (same tokenizer), e.g. smollm2-135m",
    )  # fmt: skip
    cmp.set_defaults(func=run)
    return cmp


def run(args: argparse.Namespace) -> int:
    if args.server:
        return run_served(args)
    return run_local(args)


def _pick_rows(text: str) -> list[str]:
    """The comparison rows named in ``text`` (names such as "plain, KV cache" hold commas, so
    the known names are found, in the order given; what is left over is reported)."""
    from engine.records import COMPARE_ROWS

    found: list[tuple[int, str]] = []
    rest = text
    for row in sorted(COMPARE_ROWS, key=len, reverse=True):
        at = rest.find(row)
        if at >= 0:
            found.append((at, row))
            rest = rest[:at] + " " * len(row) + rest[at + len(row) :]
    left = rest.replace(",", " ").replace(";", " ").split()
    if left:
        return [" ".join(left)]  # unknown: the comparison says which names exist
    return [row for _at, row in sorted(found)]


def run_local(args: argparse.Namespace) -> int:
    from engine import ModelLoadError, SamplerSettings
    from engine.drivers.compare import compare_methods, format_table
    from engine.models.catalog import open_model
    from engine.records import COMPARE_ROWS

    def say(m: str) -> None:
        print(f"[{m}]", file=sys.stderr)

    try:
        bundle = open_model(args.model, device=args.device, dtype=args.dtype, progress=say)
        drafter = None
        if args.draft_model:
            drafter = open_model(
                args.draft_model,
                device=args.device,
                dtype=args.draft_dtype or args.dtype,
                progress=say,
            )
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    methods = _pick_rows(args.methods) if args.methods else list(COMPARE_ROWS)
    prompt = args.prompt or bundle.extra.get("example_prompt", "Once upon a time")
    try:
        ids = bundle.encode_prompt(
            prompt, use_chat_template=False if args.no_chat_template else None
        )
        if args.presets:
            return _compare_presets(args, bundle, ids)
        settings = SamplerSettings(temperature=args.temperature, seed=args.seed)
        results = compare_methods(
            bundle, ids, settings, methods, max_new_tokens=args.max_new_tokens,
            num_beams=args.num_beams, gamma=args.gamma, drafter=drafter, progress=say,
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"model: {bundle.describe()}  prompt tokens: {len(ids)}  new tokens: {args.max_new_tokens}"
    )
    print(format_table(results))
    if args.show_text:
        for r in results:
            print(f"\n== {r.method}\n{r.text}")
    return 0


def _compare_presets(args: argparse.Namespace, bundle, ids: list[int]) -> int:
    from engine import PRESETS
    from engine.drivers.compare import compare_presets, format_preset_table

    names = [n.strip() for n in args.presets.split(",") if n.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(
            f"unknown preset(s) {', '.join(unknown)}: choose from {', '.join(PRESETS)}"
        )
    results = compare_presets(
        bundle, ids, {n: PRESETS[n] for n in names}, args.max_new_tokens, args.seed
    )
    print(
        f"model: {bundle.describe()}  prompt tokens: {len(ids)}  new tokens: "
        f"{args.max_new_tokens}  seed: {args.seed}"
    )
    print(format_preset_table(results))
    if args.show_text:
        for r in results:
            print(f"\n== {r.name}\n{r.text}")
    return 0


def run_served(args: argparse.Namespace) -> int:
    from engine import SamplerSettings
    from engine.drivers.compare import compare_served, format_table
    from engine.models.catalog import open_model
    from engine.records import ROW_SERVED_EXPLORE, MethodResult
    from engine.serve.remote import RemoteError

    try:
        bundle = open_served(args)
        local = None
        if args.local_model:
            local = open_model(args.local_model, device=args.device, dtype=args.dtype)
        prompt = args.prompt or "Once upon a time"
        ids = bundle.encode_prompt(prompt, False if args.no_chat_template else None)
        settings = SamplerSettings(temperature=args.temperature, seed=args.seed)
        results = []
        for r in compare_served(bundle, ids, settings, args.max_new_tokens, local=local):
            if isinstance(r, MethodResult):
                results.append(r)
            else:
                print(f"[{r.text}]", file=sys.stderr)
    except (RemoteError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"model: {bundle.describe()}  prompt tokens: {len(ids)}  new tokens: {args.max_new_tokens}"
    )
    print(format_table(results, baseline=ROW_SERVED_EXPLORE))
    if args.show_text:
        for r in results:
            print(f"\n== {r.method}\n{r.text}")
    return 0
