"""Decoding Lab entry point: the window (no command) or the headless CLI (a command)."""

from __future__ import annotations

import os
import sys

# A windowed (packaged) build has no console: sys.stdout / sys.stderr are None there, and
# transformers' and tqdm's progress output would crash the app. Point them somewhere first.
if sys.stdout is None:
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
if sys.stderr is None:
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115

import argparse  # noqa: E402
import time  # noqa: E402


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decoding-lab",
        description="Explore by hand how a language model turns probabilities into text.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gen = sub.add_parser("generate", help="stream a generation to the terminal")
    gen.add_argument(
        "--model",
        default=None,
        help="bundled name, Hugging Face id, folder or .gguf (default: smollm2-135m)",
    )
    gen.add_argument("--prompt", default=None, help="the prompt (default: the model's example)")
    gen.add_argument("--no-chat-template", action="store_true", help="send the prompt as it is")
    gen.add_argument("--preset", default=None, help="start from a preset (Greedy, Balanced, ...)")
    gen.add_argument("--temperature", type=float, default=None, help="0 = greedy")
    gen.add_argument("--top-k", type=int, default=None, help="0 = off")
    gen.add_argument("--top-p", type=float, default=None, help="1 = off")
    gen.add_argument("--min-p", type=float, default=None, help="0 = off")
    gen.add_argument("--repetition-penalty", type=float, default=None, help="1 = off")
    gen.add_argument(
        "--temperature-last",
        action="store_true",
        help="apply temperature after the filters (llama.cpp order)",
    )
    gen.add_argument("--max-new-tokens", type=int, default=None)
    gen.add_argument("--seed", type=int, default=None)
    _add_sampler_options(gen)
    gen.add_argument(
        "--method", default="sampling",
        choices=("sampling", "beam", "sampled_beam", "group_beam", "contrastive"),
        help="how tokens are chosen (default: sampling); beam methods print the best beam",
    )  # fmt: skip
    gen.add_argument("--num-beams", type=int, default=4, help="beam methods (default: 4)")
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
    gen.add_argument(
        "--show-probs",
        type=int,
        default=0,
        metavar="N",
        help="print each step with its top-N candidates",
    )
    gen.add_argument(
        "--engine", choices=("fast", "transformers"), default="fast",
        help="fast: the lean Llama-family decode path where supported; transformers: model.forward",
    )  # fmt: skip
    gen.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    gen.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    gen.add_argument(
        "--html", metavar="FILE", default=None,
        help="also write the run as one self-contained web page to share",
    )  # fmt: skip

    cmp = sub.add_parser("compare", help="run several decoding methods on one prompt, side by side")
    cmp.add_argument("--model", default=None, help="as for generate (default: smollm2-135m)")
    cmp.add_argument("--prompt", default=None)
    cmp.add_argument("--no-chat-template", action="store_true")
    cmp.add_argument("--draft-model", default=None, help="a smaller model with the same tokenizer")
    cmp.add_argument(
        "--methods", default=None, help="comma-separated subset, e.g. 'plain, KV cache,beam search'"
    )
    cmp.add_argument("--max-new-tokens", type=int, default=64)
    cmp.add_argument("--num-beams", type=int, default=4)
    cmp.add_argument("--gamma", type=int, default=5, help="draft tokens per target pass")
    cmp.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    cmp.add_argument("--seed", type=int, default=0)
    cmp.add_argument("--show-text", action="store_true", help="print each method's output")
    cmp.add_argument(
        "--presets", default=None,
        help="compare sampler presets instead of methods, e.g. 'Greedy,Creative,Mirostat 2' "
        "(same prompt and seed; distinct-1/2 and rep-4 next to the speed)",
    )  # fmt: skip
    cmp.add_argument("--device", default="auto")
    cmp.add_argument("--dtype", default="auto")

    bench = sub.add_parser(
        "bench", help="measure speed against transformers and the hardware limit"
    )
    bench.add_argument("--new-tokens", type=int, default=128)
    bench.add_argument("--rss-tokens", type=int, default=2000, help="length of the peak-RSS run")
    bench.add_argument("--skip-gui", action="store_true", help="engine figures only")
    bench.add_argument("--gpu-only", action="store_true", help="only the GPU part")
    bench.add_argument(
        "--families", action="store_true", help="only the families at real shapes (CPU)"
    )
    bench.add_argument("--family-tokens", type=int, default=32)
    bench.add_argument("--json", default=None, help="also write the figures to this file")

    sub.add_parser("models", help="list the bundled models")
    les = sub.add_parser("lessons", help="list the bundled lessons, or check lesson files")
    les.add_argument("files", nargs="*", metavar="FILE", help="lesson files (.yaml) to check")
    _add_server_options(gen, cmp)
    return parser


def _add_server_options(gen: argparse.ArgumentParser, cmp: argparse.ArgumentParser) -> None:
    """A model served elsewhere (vLLM, SGLang, llama.cpp's server): --model is then its
    served name."""
    for p in (gen, cmp):
        g = p.add_argument_group("served model (OpenAI-compatible /v1 endpoint)")
        g.add_argument("--server", default=None, metavar="URL", help="e.g. http://host:8000")
        g.add_argument(
            "--key-source", choices=("env", "keyring", "none"), default="env",
            help="API key from $DECODING_LAB_API_KEY (env) or the system keychain",
        )  # fmt: skip
        g.add_argument("--tokenizer", default=None, help="local hub id or folder of its tokenizer")
        g.add_argument("--logprobs", type=int, default=20, help="candidates per step (server max)")
        g.add_argument("--insecure", action="store_true", help="do not verify HTTPS certificates")
    gen.add_argument(
        "--stream", action="store_true",
        help="with --server: the server samples in one streaming request (default: explore)",
    )  # fmt: skip
    cmp.add_argument(
        "--local-model", default=None,
        help="with --server: also run this local model (same tokenizer), e.g. smollm2-135m",
    )  # fmt: skip


def _open_served(args: argparse.Namespace):
    from engine.serve.remote import KeySource
    from engine.serve.remote_session import open_served

    print(f"[connecting to {args.server}]", file=sys.stderr)
    return open_served(
        args.server, args.model, KeySource(args.key_source), tokenizer=args.tokenizer,
        n_logprobs=args.logprobs, verify=not args.insecure,
    )  # fmt: skip


def cmd_generate_served(args: argparse.Namespace) -> int:
    from engine.drivers.workbench import RunRequest
    from engine.records import SAMPLING, SERVED_STREAM
    from engine.serve.remote import RemoteError

    try:
        settings = _settings_from(args)
        bundle = _open_served(args)
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
                alts = ", ".join(
                    f"{_visible(c.text)!r} {c.raw_prob:.3f}"
                    for c in step.candidates[: args.show_probs]
                )
                print(
                    f"{step.index:4d} {_visible(step.token_str)!r:>16} p={step.prob:.3f} "
                    f"raw={step.raw_prob:.3f} other={step.other_p:.3f} "
                    f"H>={step.entropy_raw:.2f}b {step.step_time * 1000:.0f}ms | {alts}"
                )
            else:
                print(step.text if not step.is_eos else "", end="", flush=True)
    except RemoteError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    finally:
        s = session.summary()
        print(
            f"\n[{s.tokens} tokens in {s.seconds:.2f}s = {s.tokens_per_s:.1f} tokens/s; "
            f"{session.forward_passes} requests; stop: {s.stop_reason}]",
            file=sys.stderr,
        )
    return 0


def cmd_compare_served(args: argparse.Namespace) -> int:
    from engine import SamplerSettings
    from engine.drivers.compare import compare_served, format_table
    from engine.models.catalog import open_model
    from engine.records import ROW_SERVED_EXPLORE, MethodResult
    from engine.serve.remote import RemoteError

    try:
        bundle = _open_served(args)
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


# The newer sampler settings as options: (settings field, how the option's text becomes it).
def _csv_ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(",", " ").split())


def _csv_names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _bias(text: str) -> tuple[str, float]:
    key, sep, value = text.rpartition(":")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"write WORD:BIAS or #ID:BIAS, got {text!r}")
    return key, float(value)


LIST_OPTIONS = {  # field: (option, type, metavar, appends)
    "logit_bias": ("--logit-bias", _bias, "WORD:BIAS", True),
    "banned_strings": ("--ban", str, "WORD", True),
    "suppress_tokens": ("--suppress-tokens", _csv_ints, "ID,ID", False),
    "dry_sequence_breakers": ("--dry-sequence-breaker", str, "TEXT", True),
    "stage_order": ("--stage-order", _csv_names, "STAGE,STAGE", False),
}
BASIC = {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_new_tokens",
         "seed", "order"}  # fmt: skip


def _add_sampler_options(gen: argparse.ArgumentParser) -> None:
    """One option per SamplerSettings field not above, with its help and default."""
    from dataclasses import fields

    from engine.sampling.help import tooltip
    from engine.sampling.settings import STAGE_NAMES, SamplerSettings

    defaults = SamplerSettings()
    group = gen.add_argument_group("more samplers (each off at its default)")
    for f in fields(SamplerSettings):
        if f.name in BASIC:
            continue
        default = getattr(defaults, f.name)
        shown = default if not isinstance(default, tuple) else (list(default) or "none")
        text = f"{tooltip(f.name)} (default: {shown})".replace("%", "%%")
        if f.name in LIST_OPTIONS:
            option, kind, metavar, appends = LIST_OPTIONS[f.name]
            if f.name == "stage_order":
                text += f" Stages: {', '.join(STAGE_NAMES)}."
            group.add_argument(
                option, dest=f.name, type=kind, metavar=metavar, default=None,
                action="append" if appends else "store", help=text,
            )  # fmt: skip
        else:
            group.add_argument(
                "--" + f.name.replace("_", "-"), dest=f.name, type=type(default), default=None,
                help=text,
            )  # fmt: skip


def _settings_from(args: argparse.Namespace):
    from engine import DEFAULT_SETTINGS, PRESETS

    if args.preset is not None and args.preset not in PRESETS:
        raise SystemExit(f"Unknown preset {args.preset!r}: choose one of {', '.join(PRESETS)}")
    base = PRESETS[args.preset] if args.preset else DEFAULT_SETTINGS
    changes = {
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "min_p": args.min_p,
        "repetition_penalty": args.repetition_penalty,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
    }
    from dataclasses import fields

    from engine.sampling.settings import SamplerSettings

    for f in fields(SamplerSettings):
        if f.name not in BASIC and getattr(args, f.name, None) is not None:
            value = getattr(args, f.name)
            changes[f.name] = tuple(value) if isinstance(value, list) else value
    changes = {k: v for k, v in changes.items() if v is not None}
    if args.temperature_last:
        changes["order"] = "temperature_last"
    return base.with_(**changes)


def _visible(text: str) -> str:
    return text.replace("\n", "\\n").replace("\t", "\\t")


def cmd_generate(args: argparse.Namespace) -> int:
    from engine import GenerationSession, ModelLoadError, Step
    from engine.models.catalog import open_model

    try:
        settings = _settings_from(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        bundle = open_model(
            args.model,
            device=args.device,
            dtype=args.dtype,
            progress=lambda m: print(f"[{m}]", file=sys.stderr),
        )
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"[loaded {bundle.describe()} in {time.perf_counter() - t0:.1f}s]", file=sys.stderr)
    prompt = (
        args.prompt
        if args.prompt is not None
        else bundle.extra.get("example_prompt", "Once upon a time")
    )
    try:
        ids = bundle.encode_prompt(
            prompt, use_chat_template=False if args.no_chat_template else None
        )
        if args.method == "sampling":
            session = GenerationSession(
                bundle.model,
                ids,
                settings,
                tokenizer=bundle.tokenizer,
                eos_token_ids=bundle.eos_token_ids,
                top_n=max(args.show_probs, 20 if args.html else 1),
                fast=args.engine == "fast",
            )
        else:
            from engine.drivers.workbench import RunRequest, make_session

            request = RunRequest(
                prompt, method=args.method, settings=settings, num_beams=args.num_beams,
                top_n=max(args.show_probs, 20 if args.html else 1),
                num_beam_groups=args.num_beam_groups, diversity_penalty=args.diversity_penalty,
                penalty_alpha=args.penalty_alpha, contrastive_k=args.contrastive_k,
            )  # fmt: skip
            session = make_session(bundle, ids, request)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    beams = args.method in ("beam", "sampled_beam", "group_beam")
    steps = []
    for step in session.stream():
        if not isinstance(step, Step):
            continue
        if args.html:
            steps.append(step)
        if args.show_probs:
            alts = ", ".join(
                f"{_visible(c.text)!r} {c.raw_prob:.3f}" for c in step.candidates[: args.show_probs]
            )
            print(
                f"{step.index:4d} {_visible(step.token_str)!r:>16} p={step.prob:.3f} "
                f"raw={step.raw_prob:.3f} rank={step.rank} H={step.entropy_raw:.2f}b | {alts}"
            )
            for note in step.stage_notes:
                print(f"{'':22}{note.stage}: {_visible(note.text)}")
        elif not beams:
            print(step.text if not step.is_eos else "", end="", flush=True)
    if beams and not args.show_probs:
        print(session.text, end="")
    s = session.summary()
    print(
        f"\n[{s.tokens} tokens in {s.seconds:.2f}s = {s.tokens_per_s:.1f} tokens/s; "
        f"stop: {s.stop_reason}]",
        file=sys.stderr,
    )
    if args.html:
        from engine.classroom.share import write_run_html

        try:
            steps = list(session.history) if beams else steps  # a beam's final path
            write_run_html(args.html, prompt, bundle.name, settings, steps, method=args.method)
        except OSError as exc:
            print(f"error: could not write {args.html}: {exc}", file=sys.stderr)
            return 1
        print(f"[wrote {args.html}]", file=sys.stderr)
    return 0


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


def cmd_compare(args: argparse.Namespace) -> int:
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
                args.draft_model, device=args.device, dtype=args.dtype, progress=say
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


def cmd_bench(args: argparse.Namespace) -> int:
    import json
    import os

    from engine.drivers.bench import (
        family_section,
        header,
        run_engine_bench,
        run_gpu_bench,
        static_cpu_section,
        t5_section,
    )
    from engine.models.catalog import open_model

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    def say(message: str) -> None:
        print(message, flush=True)

    say(header())
    if args.gpu_only:
        run_gpu_bench(say)
        return 0
    figures: dict = {}
    if args.families:
        figures["families"] = family_section(say, args.family_tokens)
        figures["t5"] = t5_section(say, args.family_tokens)
        figures["static_cpu"] = static_cpu_section(say, new_tokens=args.family_tokens)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f, indent=1)
        return 0
    bundle = open_model("smollm2-135m", device="cpu", dtype="float32")
    figures["engine"] = run_engine_bench(bundle, say, args.new_tokens)
    figures["families"] = family_section(say, args.family_tokens)
    figures["t5"] = t5_section(say, args.family_tokens)
    if not args.skip_gui:
        from gui.bench import run_gui_bench, run_startup_bench

        figures["gui"] = run_gui_bench(bundle, say, args.new_tokens)
        figures["startup"] = run_startup_bench(say, args.rss_tokens)
    run_gpu_bench(say)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


def cmd_models(_args: argparse.Namespace) -> int:
    from engine.models.catalog import list_bundled

    for m in list_bundled():
        state = "installed" if m.available() else "missing"
        print(f"{m.name:14} {m.kind:16} {state:9} {m.title}\n{'':14} {m.description}")
    return 0


def cmd_lessons(args: argparse.Namespace) -> int:
    from engine.classroom.lessons import LessonError, bundled_lessons, load_lesson

    if not args.files:
        for lesson in bundled_lessons():
            name = lesson.path.name if lesson.path else ""
            print(f"{name:36} {len(lesson.stages)} stages  {lesson.model:14} {lesson.title}")
        return 0
    failed = 0
    for path in args.files:
        try:
            lesson = load_lesson(path)
        except LessonError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
        else:
            print(f"{path}: OK, {lesson.title!r}, {len(lesson.stages)} stages")
    return 1 if failed else 0


def cli(argv: list[str] | None = None) -> int:
    """Headless entry point (`decoding-lab-cli`)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command in ("generate", "compare") and args.server:
        return cmd_generate_served(args) if args.command == "generate" else cmd_compare_served(args)
    if args.command == "generate":
        return cmd_generate(args)
    if args.command == "models":
        return cmd_models(args)
    if args.command == "lessons":
        return cmd_lessons(args)
    if args.command == "compare":
        return cmd_compare(args)
    if args.command == "bench":
        return cmd_bench(args)
    parser.print_help()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`decoding-lab`: the window, or the CLI when a command is given."""
    argv = sys.argv[1:] if argv is None else argv
    if "--self-test" in argv:
        from gui.selftest import run_self_test

        rest = [a for a in argv if a != "--self-test"]
        return run_self_test(rest[0] if rest else None)
    if argv and not argv[0].startswith("-") or any(a in ("-h", "--help") for a in argv):
        return cli(argv)
    try:
        from gui.app import run_app
    except ImportError as exc:
        # Qt or one of the system libraries it loads is missing: say which, still be useful.
        print(
            f"The window cannot start ({exc}). The README's set-up installs what Qt needs; "
            "streaming the default model in the terminal instead.",
            file=sys.stderr,
        )
        return cli(["generate", *argv])
    return run_app(argv)


if __name__ == "__main__":
    sys.exit(main())
