"""`generate`: stream a generation to the terminal (a local model, or a served one with
--server)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from engine.cli.args import DTYPE_HELP, bounded_int, device, dtype, text
from engine.cli.common import (
    add_sampler_options,
    add_server_options,
    open_served,
    settings_from,
    visible,
)
from engine.records import BEAMS, CONTRASTIVE, GRAMMAR_STOP, INCOMPLETE, SAMPLING, RunSummary
from engine.validate.limits import MAX_BEAMS, MAX_NEW_TOKENS, MAX_TOP_N
from engine.validate.served import printable, unknown_ids_notice

if TYPE_CHECKING:  # imported when a command runs: torch loads only then
    from engine.models.loading import ModelBundle
    from engine.records import Step
    from engine.sampling.settings import SamplerSettings

# The basic sampler settings: (option, type, help). One left out keeps the preset's value.
BASIC_SAMPLER_OPTIONS = (
    ("--temperature", float, "0 = greedy"),
    ("--top-k", int, "0 = off"),
    ("--top-p", float, "1 = off"),
    ("--min-p", float, "0 = off"),
    ("--repetition-penalty", float, "1 = off"),
)


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The `generate` command's parser; options in the order the help lists them."""
    gen = sub.add_parser("generate", help="stream a generation to the terminal")
    _add_prompt_options(gen)
    _add_basic_sampler_options(gen)
    add_sampler_options(gen)
    _add_method_options(gen)
    _add_output_options(gen)
    add_server_options(gen)
    gen.add_argument(
        "--stream", action="store_true",
        help="with --server: the server samples in one streaming request (default: explore)",
    )  # fmt: skip
    gen.set_defaults(func=run)
    return gen


def _add_prompt_options(gen: argparse.ArgumentParser) -> None:
    gen.add_argument(
        "--model",
        default=None,
        help="bundled name, Hugging Face id, folder or .gguf (default: smollm2-135m)",
    )
    gen.add_argument(
        "--prompt", type=text, default=None, help="the prompt (default: the model's example)"
    )
    gen.add_argument("--no-chat-template", action="store_true", help="send the prompt as it is")


def _add_basic_sampler_options(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("--preset", default=None, help="start from a preset (Greedy, Balanced, ...)")
    for option, kind, help_text in BASIC_SAMPLER_OPTIONS:
        gen.add_argument(option, type=kind, default=None, help=help_text)
    gen.add_argument(
        "--temperature-last",
        action="store_true",
        help="apply temperature after the filters (llama.cpp order)",
    )
    gen.add_argument("--max-new-tokens", type=bounded_int(1, MAX_NEW_TOKENS), default=None)
    gen.add_argument("--seed", type=int, default=None)


def _add_method_options(gen: argparse.ArgumentParser) -> None:
    """The decoding method and the settings of the methods other than sampling."""
    gen.add_argument(
        "--method", default="sampling",
        choices=(SAMPLING, *BEAMS, CONTRASTIVE),
        help="how tokens are chosen (default: sampling); beam methods print the best beam",
    )  # fmt: skip
    gen.add_argument(
        "--num-beams", type=bounded_int(1, MAX_BEAMS), default=4, help="beam methods (default: 4)"
    )
    gen.add_argument(
        "--num-beam-groups", type=int, default=2, help="group_beam: groups (default: 2)"
    )
    gen.add_argument(
        "--diversity-penalty", type=float, default=0.5,
        help="group_beam: Hamming diversity penalty (default: 0.5)",
    )  # fmt: skip
    gen.add_argument(
        "--penalty-alpha", type=float, default=0.6, help="contrastive: alpha (default: 0.6)"
    )
    gen.add_argument(
        "--contrastive-k", type=int, default=4, help="contrastive: candidates (default: 4)"
    )


def _add_output_options(gen: argparse.ArgumentParser) -> None:
    """What is printed or written, and where the model runs."""
    gen.add_argument(
        "--show-probs",
        type=bounded_int(0, MAX_TOP_N),
        default=0,
        metavar="N",
        help="print each step with its top-N candidates",
    )
    gen.add_argument(
        "--engine", choices=("fast", "transformers"), default="fast",
        help="fast: the lean Llama-family decode path where supported; transformers: model.forward",
    )  # fmt: skip
    gen.add_argument("--device", type=device, default="auto", help="auto, cpu, cuda, mps")
    gen.add_argument("--dtype", type=dtype, default="auto", help=DTYPE_HELP)
    gen.add_argument(
        "--html", metavar="FILE", default=None,
        help="also write the run as one self-contained web page to share",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.server:
        return run_served(args)
    return run_local(args)


def run_local(args: argparse.Namespace) -> int:
    """Load the model, build the session, print the run as it streams, then its summary (and
    the web page with --html). Exit codes: 2 for bad settings, 1 for a model or file error."""
    from engine import ModelLoadError

    try:
        settings = settings_from(args)
    except ValueError as exc:
        return _error(exc, 2)
    try:
        bundle = _load_model(args)
    except ModelLoadError as exc:
        return _error(exc, 1)
    prompt = (
        args.prompt
        if args.prompt is not None
        else bundle.extra.get("example_prompt", "Once upon a time")
    )
    try:
        session = _local_session(args, bundle, prompt, settings)
    except ValueError as exc:
        return _error(exc, 2)
    beams = args.method in BEAMS
    steps = _print_steps(args, session, beams)
    if beams and not args.show_probs:
        print(session.text, end="")
    s = session.summary()
    print(
        f"\n[{s.tokens} tokens in {s.seconds:.2f}s = {s.tokens_per_s:.1f} tokens/s; "
        f"stop: {s.stop_reason}{'; ' + INCOMPLETE if s.incomplete else ''}]",
        file=sys.stderr,
    )
    code = grammar_exit(s)
    if args.html:
        steps = list(session.history) if beams else steps  # a beam's final path
        return _write_html(args, prompt, bundle.name, settings, steps, s) or code
    return code


def grammar_exit(summary: RunSummary) -> int:
    """A run the grammar stopped: its reason on one line and exit code 1 (what it made was
    printed); 0 otherwise."""
    if summary.stop_reason != GRAMMAR_STOP:
        return 0
    print(f"error: {summary.note}; the run stops here ({summary.tokens} tokens kept)",
          file=sys.stderr)  # fmt: skip
    return 1


def _error(exc: Exception, code: int) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return code


def _load_model(args: argparse.Namespace) -> ModelBundle:
    from engine.models.catalog import open_model

    t0 = time.perf_counter()
    bundle = open_model(
        args.model,
        device=args.device,
        dtype=args.dtype,
        progress=lambda m: print(f"[{m}]", file=sys.stderr),
    )
    print(f"[loaded {bundle.describe()} in {time.perf_counter() - t0:.1f}s]", file=sys.stderr)
    return bundle


def _local_session(
    args: argparse.Namespace, bundle: ModelBundle, prompt: str, settings: SamplerSettings
) -> Any:
    """The session of the chosen method on the prompt (ValueError for settings it refuses)."""
    from engine import GenerationSession

    ids = bundle.encode_prompt(prompt, use_chat_template=False if args.no_chat_template else None)
    top_n = max(args.show_probs, 20 if args.html else 1)
    if args.method == "sampling":
        return GenerationSession.over(
            bundle, ids, settings, top_n=top_n, fast=args.engine == "fast"
        )
    from engine.drivers.workbench import RunRequest, make_session

    request = RunRequest(
        prompt, method=args.method, settings=settings, num_beams=args.num_beams, top_n=top_n,
        num_beam_groups=args.num_beam_groups, diversity_penalty=args.diversity_penalty,
        penalty_alpha=args.penalty_alpha, contrastive_k=args.contrastive_k,
    )  # fmt: skip
    return make_session(bundle, ids, request)


def _print_steps(args: argparse.Namespace, session: Any, beams: bool) -> list[Step]:
    """Stream the run: the text as it comes (not for a beam method), or one line per step
    with --show-probs. Returns the steps when --html will need them."""
    from engine import Step

    steps = []
    for step in session.stream():
        if not isinstance(step, Step):
            continue
        if args.html:
            steps.append(step)
        if args.show_probs:
            print(
                f"{step.index:4d} {visible(step.token_str)!r:>16} p={step.prob:.3f} "
                f"raw={step.raw_prob:.3f} rank={step.rank} H={step.entropy_raw:.2f}b | "
                f"{_alternatives(step, args.show_probs)}"
            )
            for note in step.stage_notes:
                print(f"{'':22}{note.stage}: {visible(note.text)}")
        elif not beams:
            print(step.text if not step.is_eos else "", end="", flush=True)
    return steps


def _alternatives(step: Step, n: int) -> str:
    """A step's top ``n`` candidates with their model probabilities, for --show-probs."""
    return ", ".join(f"{visible(c.text)!r} {c.raw_prob:.3f}" for c in step.candidates[:n])


def _served_line(step: Step, n: int) -> str:
    """A served step for --show-probs: after-sampler only where it is known, the server's own
    sampler where it sent it (llama-server), the entropy as the lower bound it is."""
    p = f"p={step.prob:.3f}" if step.after_sampler else "p=n/a"  # the server did not say
    line = (
        f"{step.index:4d} {visible(step.token_str)!r:>16} {p} raw={step.raw_prob:.3f} "
        f"other={step.other_p:.3f} H>={step.entropy_raw:.2f}b {step.step_time * 1000:.0f}ms | "
        f"{_alternatives(step, n)}"
    )
    if step.server_sampler:
        theirs = ", ".join(
            f"{visible(c.text)!r} {'?' if c.server_prob is None else f'{c.server_prob:.3f}'}"
            for c in step.candidates[:n]
        )
        line += f" | {step.server_sampler}: {theirs}"
    return line


def _write_html(
    args: argparse.Namespace, prompt: str, model: str, settings: SamplerSettings,
    steps: list[Step], summary: RunSummary,
) -> int:  # fmt: skip
    from engine.classroom.share import write_run_html

    try:
        write_run_html(args.html, prompt, model, settings, steps, method=args.method,
                       ending=summary.ending)  # fmt: skip
    except OSError as exc:
        print(f"error: could not write {args.html}: {exc}", file=sys.stderr)
        return 1
    print(f"[wrote {args.html}]", file=sys.stderr)
    return 0


def run_served(args: argparse.Namespace) -> int:
    from engine.drivers.workbench import RunRequest
    from engine.records import SAMPLING, SERVED_STREAM
    from engine.serve.remote import RemoteError

    try:
        settings = settings_from(args)
        bundle = open_served(args)
        prompt = args.prompt if args.prompt is not None else "Once upon a time"
        ids = bundle.encode_prompt(prompt, False if args.no_chat_template else None)
        method = SERVED_STREAM if args.stream else SAMPLING
        request = RunRequest(prompt, method=method, settings=settings, top_n=args.logprobs)
        session = bundle.make_session(ids, request)
    except (RemoteError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"[{bundle.describe()}; {'stream' if args.stream else 'explore'} mode]", file=sys.stderr)
    try:
        for step in session.stream():
            if args.show_probs:
                print(_served_line(step, args.show_probs))
            else:  # a server's text: its control characters shown, never obeyed
                text = printable(step.text, keep="\n\t") if not step.is_eos else ""
                print(text, end="", flush=True)
    except (RemoteError, ValueError) as exc:  # ValueError: a stream the server cannot report
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    finally:
        s = session.summary()
        print(
            f"\n[{s.tokens} tokens in {s.seconds:.2f}s = {s.tokens_per_s:.1f} tokens/s; "
            f"{session.forward_passes} requests; stop: {s.stop_reason}"
            f"{'; ' + INCOMPLETE if s.incomplete else ''}]",
            file=sys.stderr,
        )
        unknown = unknown_ids_notice(bundle).strip()  # the window's warning, said here too
        if unknown:
            print(unknown.replace("Warning:", "warning:", 1), file=sys.stderr)
    return grammar_exit(s)
