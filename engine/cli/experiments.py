"""The experiments (issue 26), each printing JSON on stdout: `sample-step` (the next token
drawn N times against its after-sampler distribution), `sweep` (a setting over a list of
values, or N seeded runs grouped by continuation) and `lockstep` (model A decides, model B
scores the same prefix). `generate --grammar` is the grammar stage, an ordinary setting."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from engine.cli.args import DTYPE_HELP, bounded_int, device, dtype, text
from engine.cli.common import add_sampler_options, add_server_options, settings_from
from engine.experiments.records import MAX_RUNS, MAX_SAMPLES
from engine.records import GRAMMAR_STOP
from engine.validate.limits import MAX_NEW_TOKENS, MAX_TOP_N


def _common(p: argparse.ArgumentParser) -> None:
    """Model, prompt and the sampler options, as for generate."""
    p.add_argument("--model", default=None, help="as for generate (default: smollm2-135m)")
    p.add_argument(
        "--prompt", type=text, default=None, help="the prompt (default: the model's example)"
    )
    p.add_argument("--no-chat-template", action="store_true", help="send the prompt as it is")
    p.add_argument("--preset", default=None, help="start from a preset (Greedy, Balanced, ...)")
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None, help="0 = off")
    p.add_argument("--top-p", type=float, default=None, help="1 = off")
    p.add_argument("--min-p", type=float, default=None, help="0 = off")
    p.add_argument("--repetition-penalty", type=float, default=None, help="1 = off")
    p.add_argument("--temperature-last", action="store_true", help="llama.cpp's order")
    p.add_argument("--max-new-tokens", type=bounded_int(1, MAX_NEW_TOKENS), default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", type=device, default="auto", help="auto, cpu, cuda, mps")
    p.add_argument("--dtype", type=dtype, default="auto", help=DTYPE_HELP)
    add_sampler_options(p)


def register(sub: argparse._SubParsersAction) -> None:
    step = sub.add_parser("sample-step", help="draw the next token N times: histogram, TV, χ²")
    _common(step)
    step.add_argument(
        "--samples", type=bounded_int(1, MAX_SAMPLES), default=1000, help="N, up to 100,000"
    )
    step.add_argument(
        "--top", type=bounded_int(1, MAX_TOP_N), default=20, help="tokens listed (and any drawn)"
    )
    step.add_argument("--sample-seed", type=int, default=0, help="seed of the N draws")
    step.set_defaults(func=run_sample_step)
    sweep = sub.add_parser("sweep", help="one setting over a list of values, or N seeded runs")
    _common(sweep)
    sweep.add_argument("--setting", default="temperature", help="the setting to sweep")
    sweep.add_argument(
        "--values", type=_values, default="0.2,0.7,1.0,1.5",
        help="comma-separated values (at most 1,000)",
    )  # fmt: skip
    sweep.add_argument(
        "--runs", type=bounded_int(0, MAX_RUNS), default=0,
        help="instead: this many sampled runs (seeds seed, seed+1, ...) grouped by output",
    )  # fmt: skip
    sweep.set_defaults(func=run_sweep)
    lock = sub.add_parser("lockstep", help="model A decides, model B scores the same prefix")
    _common(lock)
    lock.add_argument(
        "--model-b", default=None,
        help="model B (default: the same as A); with --server, its served name",
    )  # fmt: skip
    lock.add_argument(
        "--dtype-b", type=dtype, default=None,
        help="B's dtype (default: as --dtype); --dtype float32 --dtype-b int4: what 4 bits change",
    )  # fmt: skip
    lock.add_argument(
        "--top-n", type=bounded_int(1, MAX_TOP_N), default=10, help="candidates compared per step"
    )
    add_server_options(lock, " as model B")
    lock.set_defaults(func=run_lockstep)


def _say(message: str) -> None:
    print(f"[{message}]", file=sys.stderr)


def _open(args: argparse.Namespace, source: str | None = None, dtype: str | None = None) -> Any:
    from engine.models.catalog import open_model

    return open_model(
        source if source is not None else args.model, device=args.device,
        dtype=dtype or args.dtype, progress=_say,
    )  # fmt: skip


def _session(args: argparse.Namespace, bundle: Any, settings: Any) -> Any:
    from engine import GenerationSession

    prompt = args.prompt or bundle.extra.get("example_prompt", "Once upon a time")
    ids = bundle.encode_prompt(prompt, use_chat_template=False if args.no_chat_template else None)
    return GenerationSession.over(bundle, ids, settings, top_n=1)


def _emit(data: Any) -> int:
    """The result as JSON on stdout, whole or not at all: made in full before a byte is
    written, non-finite figures as null (as ``score`` writes them: a KL bound of infinity
    beside a zero probability is no JSON number)."""
    from engine.cli.tree import plain

    text = json.dumps(plain(data), indent=1, ensure_ascii=False, allow_nan=False, default=str)
    print(text)
    return 0


def _guarded(run: Any, args: argparse.Namespace) -> int:
    """Run a command; a refusal (bad value, model that cannot load) is one line and code 2, a
    grammar that cannot go on one line and code 1."""
    from engine.errors import GrammarStop, ModelLoadError

    try:
        return run(args)
    except GrammarStop as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _served_lockstep(args: argparse.Namespace, a: Any, settings: Any) -> int:
    """Lockstep with a served B (engine.serve.served_lockstep): its KL is a lower bound."""
    from engine.cli.common import open_served
    from engine.serve.remote import RemoteError
    from engine.serve.served_lockstep import ServedLockstep

    try:
        b = open_served(args, args.model_b)
    except RemoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        lock = ServedLockstep(_session(args, a, settings), b, top_n=min(args.top_n, b.n_logprobs))
        _say(lock.bounds)
        steps = [asdict(s) for s in lock.stream()]
    except RemoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        b.client.close()
    summary = {**asdict(lock.summary()), "bounds": lock.bounds}
    return _emit({"summary": summary, "steps": steps, "a": a.describe(), "b": b.describe(),
                  "b_capability": b.capability()})  # fmt: skip


def _values(text: str) -> list[float]:
    """--values, checked where argparse reads it: before any model loads."""
    from engine.experiments.sweep import parse_values

    try:
        return parse_values(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _progress(what: str) -> Any:
    return lambda done, total: _say(f"{what} {done} of {total}")


def _stopped_by_grammar(rows: Any) -> int:
    """Exit code 1 (and the reason on stderr) when a grammar stopped one of the runs."""
    stops = [r for r in rows if r.stop_reason == GRAMMAR_STOP]
    for r in stops:
        print(f"error: value {r.value:g}: {r.ending}", file=sys.stderr)
    return 1 if stops else 0


def run_sample_step(args: argparse.Namespace) -> int:
    def go(args: argparse.Namespace) -> int:
        from engine.experiments.step_sample import sample_step

        settings = settings_from(args)
        session = _session(args, _open(args), settings)
        result = sample_step(session, args.samples, seed=args.sample_seed, top=args.top)
        return _emit(asdict(result))

    return _guarded(go, args)


def run_sweep(args: argparse.Namespace) -> int:
    def go(args: argparse.Namespace) -> int:
        from engine.experiments.sweep import sweep, sweep_settings, variation

        settings = settings_from(args)
        values = args.values if isinstance(args.values, list) else _values(args.values)
        if not args.runs:
            sweep_settings(settings, args.setting, values)  # every value, before the model
        bundle = _open(args)

        def make(s: Any) -> Any:
            return _session(args, bundle, s)

        if args.runs:
            return _emit(asdict(variation(make, settings, args.runs, _progress("run"))))
        rows = sweep(make, settings, args.setting, values, _progress("value"))
        return _emit([asdict(r) for r in rows]) or _stopped_by_grammar(rows)

    return _guarded(go, args)


def run_lockstep(args: argparse.Namespace) -> int:
    def go(args: argparse.Namespace) -> int:
        from engine.experiments.lockstep import Lockstep

        settings = settings_from(args)
        a = _open(args)
        if args.server:  # B is served: compared over the top-N it sends (bounds, said so)
            return _served_lockstep(args, a, settings)
        b = _open(args, args.model_b or args.model, args.dtype_b)
        lock = Lockstep(_session(args, a, settings), b.model, b.tokenizer, top_n=args.top_n)
        steps = []
        for s in lock.stream():
            steps.append(asdict(s))
            if len(steps) % 25 == 0:
                _say(f"step {len(steps)} of at most {settings.max_new_tokens}")
        _emit({"summary": asdict(lock.summary()), "steps": steps,
               "a": a.describe(), "b": b.describe()})  # fmt: skip
        ran = lock.session.summary()
        why = ran.note if ran.stop_reason == GRAMMAR_STOP else lock.note
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 1
        return 0

    return _guarded(go, args)
