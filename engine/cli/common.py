"""What the commands share: the sampler options and the settings they make, the served-model
options, and printing a token visibly."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.cli.args import bounded_int
from engine.validate.limits import MAX_TOP_N

SERVER_KINDS = ("auto", "vllm", "llama-server", "ollama", "sglang")  # engine.serve.backends


def add_server_options(parser: argparse.ArgumentParser, what: str = "") -> None:
    """A model served elsewhere (vLLM, llama.cpp's llama-server, Ollama, SGLang): --model is
    then its served name (``what``: which model the server is, for lockstep's B)."""
    g = parser.add_argument_group(f"served model{what} (vLLM, llama-server, Ollama, SGLang)")
    g.add_argument("--server", default=None, metavar="URL", help="e.g. http://host:8000")
    g.add_argument(
        "--server-kind", choices=SERVER_KINDS, default="auto",
        help="which server it is (auto: asked of the server)",
    )  # fmt: skip
    g.add_argument(
        "--server-sampler", action="store_true",
        help="llama-server: also show its own sampler's probabilities beside ours (explore)",
    )  # fmt: skip
    g.add_argument(
        "--raw-logprobs", action="store_true",
        help="SGLang: the server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1 (raw at any "
        "temperature)",
    )  # fmt: skip
    g.add_argument(
        "--key-source", choices=("env", "keyring", "none"), default="env",
        help="API key from $DECODING_LAB_API_KEY (env) or the system keychain",
    )  # fmt: skip
    g.add_argument("--tokenizer", default=None, help="local hub id or folder of its tokenizer")
    g.add_argument(
        "--logprobs",
        type=bounded_int(1, MAX_TOP_N),
        default=20,
        help="candidates per step (server max)",
    )
    g.add_argument("--insecure", action="store_true", help="do not verify HTTPS certificates")


def open_served(args: argparse.Namespace, model: str | None = None) -> Any:
    """The served model of ``args`` (``model``: its name, default ``--model``); its capability
    line goes to stderr, so a user reads what the numbers are before they come."""
    from engine.serve.remote import KeySource
    from engine.serve.remote_session import open_served
    from engine.validate.served import redact_url

    print(f"[connecting to {redact_url(args.server)}]", file=sys.stderr)
    bundle = open_served(
        args.server, model or args.model, KeySource(args.key_source), kind=args.server_kind,
        tokenizer=args.tokenizer, n_logprobs=args.logprobs, verify=not args.insecure,
        server_sampler=args.server_sampler, raw_logprobs=args.raw_logprobs,
    )  # fmt: skip
    print(f"[{bundle.capability()}]", file=sys.stderr)
    return bundle


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


def add_sampler_options(gen: argparse.ArgumentParser) -> None:
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


def settings_from(args: argparse.Namespace) -> Any:
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


def visible(text: str) -> str:
    return text.replace("\n", "\\n").replace("\t", "\\t")
