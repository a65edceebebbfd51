"""`bench`: speed against transformers and the hardware limit, as ratios measured in one run.
The window's figures come from ``args.gui_bench`` (given by main.py: the engine never imports
Qt)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    bench.add_argument(
        "--experiments", action="store_true",
        help="only the experiments: step sampler, grammar cost, fp32 vs bf16 lockstep (CPU)",
    )  # fmt: skip
    bench.add_argument(
        "--quant", action="store_true",
        help="only the quantised rows: SmolLM2 and a Qwen2.5-0.5B shape in fp32/bf16/int8/int4",
    )  # fmt: skip
    bench.add_argument("--tree-only", action="store_true", help="only the tree expansion part")
    bench.add_argument(
        "--internals", action="store_true",
        help="only inside the step: the decision strip, one step's views, decode before/after, "
        "a 512-token run's steps and the window's clicks, integrated gradients on the lesson "
        "prompts (issue 54: before/after)",
    )  # fmt: skip
    bench.add_argument(
        "--pipeline", action="store_true",
        help="only the pipelined session vs today's (CPU; the GPU rows where CUDA is; with "
        "--gpu-only, the GPU rows alone)",
    )  # fmt: skip
    bench.add_argument(
        "--contention", action="store_true",
        help="only decoding on a busy machine: 0, 1, 2 busy background processes, SmolLM2 "
        "fp32/bf16/int4, ours (adaptive threads, one thread, fixed threads) and "
        "transformers.generate; then the window under one busy process vs the CLI (skipped "
        "with --skip-gui) (a few minutes)",
    )  # fmt: skip
    bench.add_argument("--json", default=None, help="also write the figures to this file")
    bench.set_defaults(func=run)
    return bench


def run(args: argparse.Namespace) -> int:
    """The chosen part of the benchmark, then whether the adaptive thread count reduced the
    threads while it ran (issue 57)."""
    status = _run(args)
    print(threads_line(), flush=True)
    return status


def threads_line() -> str:
    """One line: whether ``engine.runtime.threads`` reduced torch's threads in this process."""
    from engine.runtime.threads import switched_on, thread_state

    state = thread_state()
    if not switched_on():
        return "threads: the adaptive thread count is off (DECODING_LAB_ADAPTIVE_THREADS=0)"
    if state.ceiling == 0:
        return "threads: the adaptive thread count had no one-token CPU step to time"
    if state.reductions == 0:
        return f"threads: never reduced during this run ({state.threads} of {state.ceiling})"
    return (f"threads: reduced {state.reductions} time(s) during this run because the machine "
            f"was busy; {state.threads} of {state.ceiling} at its end")  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    import os

    from engine.drivers.bench import (
        family_section,
        header,
        run_engine_bench,
        run_gpu_bench,
        t5_section,
    )
    from engine.drivers.bench_tree import tree_section
    from engine.models.catalog import open_model

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    def say(message: str) -> None:
        print(message, flush=True)

    say(header())
    if args.gpu_only:
        return _gpu_only(args, say, run_gpu_bench)
    figures: dict = {}
    if args.families:
        return _written(_families(say, args.family_tokens), args.json)
    if args.quant:
        from engine.drivers.bench_quant import quant_section

        figures["quant"] = quant_section(say, args.family_tokens * 2)
        return _written(figures, args.json)
    if args.pipeline:
        return _pipeline_only(args, say)
    if args.contention:
        return _written(_contention(args, say), args.json)
    bundle = open_model("smollm2-135m", device="cpu", dtype="float32")
    if args.experiments:
        from engine.drivers.bench_experiments import experiments_section

        figures["experiments"] = experiments_section(bundle, say)
        return _written(figures, args.json)
    from engine.drivers.bench_internals import internals_section

    figures["internals"] = internals_section(bundle, say)
    if args.internals:
        return _written(_with_window(figures, bundle, say, args), args.json)
    figures["tree"] = tree_section(bundle, say)
    if args.tree_only:
        return _written(figures, args.json)
    figures["engine"] = run_engine_bench(bundle, say, args.new_tokens)
    figures["families"] = family_section(say, args.family_tokens)
    figures["t5"] = t5_section(say, args.family_tokens)
    from engine.drivers.bench_quant import quant_section

    figures["quant"] = quant_section(say, args.family_tokens * 2)
    if not args.skip_gui and args.gui_bench is not None:
        figures.update(args.gui_bench(bundle, say, args))
    run_gpu_bench(say)
    return _written(figures, args.json)


def _with_window(
    figures: dict, bundle: object, say: Callable[[str], None], args: argparse.Namespace
) -> dict:
    """``figures`` and the window's (main.py's hook: for ``--internals``, the Inside tab's
    clicks), unless ``--skip-gui``."""
    if not args.skip_gui and args.gui_bench is not None:
        figures.update(args.gui_bench(bundle, say, args))
    return figures


def _contention(args: argparse.Namespace, say: Callable[[str], None]) -> dict:
    """``--contention``: section 12, then the window under load (section 13, from main.py's
    ``gui_bench``) unless ``--skip-gui``."""
    from engine.drivers.bench_contention import contention_section

    figures = {"contention": contention_section(say)}
    if not args.skip_gui and args.gui_bench is not None:
        figures.update(args.gui_bench(None, say, args))
    return figures


def _families(say: Callable[[str], None], tokens: int) -> dict:
    """``--families``: the families at real models' shapes, T5, and the static CPU step."""
    from engine.drivers.bench import family_section, static_cpu_section, t5_section

    return {"families": family_section(say, tokens), "t5": t5_section(say, tokens),
            "static_cpu": static_cpu_section(say, new_tokens=tokens)}  # fmt: skip


def _gpu_only(
    args: argparse.Namespace, say: Callable[[str], None], run_gpu_bench: Callable[..., None]
) -> int:
    """``--gpu-only``: the GPU part (sections 7 and 11); with ``--pipeline``, section 11's GPU
    rows alone."""
    if args.pipeline:
        from engine.drivers.bench_pipeline import gpu_pipeline_section

        return _written({"pipeline_gpu": gpu_pipeline_section(say, args.new_tokens)}, args.json)
    run_gpu_bench(say)
    return 0


def _pipeline_only(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """``--pipeline``: section 11, the pipelined session vs today's (CPU; GPU where CUDA is)."""
    from engine.drivers.bench_pipeline import cpu_pipeline_section, gpu_pipeline_section
    from engine.models.catalog import open_model

    bundle = open_model("smollm2-135m", device="cpu", dtype="float32")
    figures = {"pipeline_cpu": cpu_pipeline_section(bundle, say, args.new_tokens)}
    figures["pipeline_gpu"] = gpu_pipeline_section(say, args.new_tokens)
    return _written(figures, args.json)


def _written(figures: dict, path: str | None) -> int:
    """Write the figures as JSON where ``--json`` asks for them; the command's exit status."""
    if path:
        import json

        with open(path, "w") as f:
            json.dump(figures, f, indent=1)
    return 0
