"""`tree` and `score`: grow the tree of likely continuations, and read a text through the
model's eyes (issue 25). Both write JSON (``--json OUT``) and print a short summary.

Every option is checked where argparse reads it, before the model loads (texts valid UTF-8,
depth, children, node budget, probabilities, top-N, the output file); a failure is one line
and exit code 2. The work then reports its progress on stderr, and a result that cannot be
written is printed instead (nothing lost)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from engine.cli.args import DTYPE_HELP, bounded_int, device, dtype, output_file, probability, text
from engine.cli.common import add_server_options
from engine.tree.options import DEFAULT_MAX_NODES, MAX_CHILDREN, MAX_DEPTH, MAX_EXPAND_NODES
from engine.validate.limits import MAX_TOP_N


def register(sub: argparse._SubParsersAction) -> None:
    tree = sub.add_parser("tree", help="expand the tree of likely continuations of a prompt")
    tree.add_argument("--prompt", type=text, required=True)
    tree.add_argument("--depth", type=bounded_int(1, MAX_DEPTH), default=3)
    tree.add_argument("--max-children", type=bounded_int(1, MAX_CHILDREN), default=3)
    tree.add_argument("--min-prob", type=probability, default=0.0)
    tree.add_argument(
        "--top-p", type=probability, default=1.0,
        help="cumulative cutoff per node (the child that crosses it is kept; 0: the likeliest)",
    )  # fmt: skip
    tree.add_argument(
        "--max-nodes", type=bounded_int(1, MAX_EXPAND_NODES), default=DEFAULT_MAX_NODES,
        help=f"node budget: the expansion stops after this many nodes (default "
        f"{DEFAULT_MAX_NODES:,}, at most {MAX_EXPAND_NODES:,})",
    )  # fmt: skip
    tree.add_argument("--no-chat-template", action="store_true")
    _common(tree)
    tree.set_defaults(func=run_tree)
    score = sub.add_parser("score", help="log-probability, rank and surprisal of every token")
    score.add_argument("--text", type=text, required=True)
    score.add_argument(
        "--prompt", type=text, default="", help="context before the text (T5: encoder input)"
    )
    score.add_argument("--top-n", type=bounded_int(1, MAX_TOP_N), default=5)
    _common(score)
    add_server_options(score)  # --server URL --model NAME: vLLM's prompt_logprobs
    score.set_defaults(func=run_score)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="as for generate (default: smollm2-135m)")
    p.add_argument("--device", type=device, default="auto")
    p.add_argument("--dtype", type=dtype, default="auto", help=DTYPE_HELP)
    p.add_argument("--json", type=output_file, default=None, help="write the result here")


def _open(args: argparse.Namespace) -> Any:
    from engine.models.catalog import open_model

    return open_model(args.model, device=args.device, dtype=args.dtype,
                      progress=lambda m: print(f"[{m}]", file=sys.stderr))  # fmt: skip


def score_precision_note(bundle: Any) -> str:
    """Why ``score`` of a run's own text can differ from the run in this number format (issue
    56), "" where it does not (float32, or a served model). A score reads the whole text in
    one pass (matrix-matrix products, attention over the text at once); a run computes one
    token at a time from its cache (matrix-vector products, other kernels). Both are exact
    maths; in float32 their roundings stay below the digits shown, in bfloat16 (8 significant
    bits) and the int8 / int4 kernels (bfloat16 activations) they add up through the layers
    to a few hundredths of a probability (measured: 0.424 vs 0.450 in bfloat16)."""
    if getattr(bundle, "model", None) is None:
        return ""
    name = getattr(bundle, "dtype_name", "float32")
    if name == "float32":
        return ""
    return (
        f"In {name}, a score reads the whole text in one pass while a run computes one token "
        "at a time: the same sums rounded in another order, so a token's probability here can "
        "differ from the run's by a few hundredths. In float32 they agree; load the model in "
        "float32 to compare them exactly."
    )


def plain(value: Any) -> Any:
    """``value`` as strict JSON types: a float that is not finite (a -inf log-probability, an
    infinite perplexity) becomes null, as JSON has no infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _write(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """Write the JSON atomically; when that fails, say so and print it (nothing lost)."""
    if not args.json:
        return 0
    from engine.classroom.export import write_atomic

    body = json.dumps(plain(data), ensure_ascii=False, allow_nan=False)
    try:
        write_atomic(args.json, body)
    except OSError as exc:
        print(f"error: could not write {args.json}: {exc.strerror or exc}; the JSON follows on "
              "stdout", file=sys.stderr)  # fmt: skip
        print(body)
        return 1
    return 0


def run_tree(args: argparse.Namespace) -> int:
    from engine import EmptyPromptError, ModelLoadError
    from engine.tree import RunTree
    from engine.tree.expand import ExpandOptions, expand

    opts = ExpandOptions(args.depth, args.max_children, args.min_prob, args.top_p,
                         max_nodes=args.max_nodes)  # fmt: skip
    try:
        bundle = _open(args)
        chat = bundle.has_chat_template and not args.no_chat_template
        ids = bundle.encode_prompt(args.prompt, chat)
    except (ModelLoadError, EmptyPromptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, ModelLoadError) else 2
    tree = RunTree(ids, args.prompt)
    tree.chat_template, tree.model = chat, args.model or "smollm2-135m"

    def progress(done: int, total: int) -> None:
        print(f"[level {done} of {total}: {len(tree.nodes) - 1:,} nodes]", file=sys.stderr)

    stats = expand(bundle, tree, 0, opts, progress=progress)
    for leaf in tree.leaves():
        node = tree.nodes[leaf]
        print(f"{node.path_logprob:9.3f}  ppl {tree.perplexity(leaf):8.2f}  "
              f"{tree.path_text(leaf)!r}")  # fmt: skip
    print(f"[{stats.describe()}]", file=sys.stderr)
    written = _write(args, {**tree.to_json(), "forwards": stats.forwards})
    if stats.added == 0:
        print("error: no continuation passed the cutoffs (--min-prob, --top-p): the tree has "
              "no nodes", file=sys.stderr)  # fmt: skip
        return 1
    return written


def run_score(args: argparse.Namespace) -> int:
    from engine import ModelLoadError
    from engine.cli.common import open_served
    from engine.serve.remote import RemoteError
    from engine.tree.score import score_text

    try:
        bundle = open_served(args) if args.server else _open(args)
    except (ModelLoadError, RemoteError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        res = score_text(bundle, args.text, prompt=args.prompt, top_n=args.top_n)
    except (ValueError, RemoteError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.server:
            bundle.client.close()
    for t in res.tokens:
        print(
            f"{t.text!r:>16}  logp {t.logprob:8.3f}  rank {t.rank_text:>6}  {t.surprisal:6.2f} bits"
        )
    print(f"total log-prob {res.total_logprob:.3f}, perplexity {res.perplexity:.2f}")
    note = score_precision_note(bundle)
    if note:
        print(f"[note: {note}]", file=sys.stderr)
    data = res.to_json()
    if note and isinstance(data, dict):
        data["precision_note"] = note
    return _write(args, data)
