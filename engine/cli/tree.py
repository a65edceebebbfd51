"""`tree` and `score`: grow the tree of likely continuations, and read a text through the
model's eyes (issue 25). Both write JSON (``--json OUT``) and print a short summary."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.cli.common import add_server_options


def register(sub: argparse._SubParsersAction) -> None:
    tree = sub.add_parser("tree", help="expand the tree of likely continuations of a prompt")
    tree.add_argument("--prompt", required=True)
    tree.add_argument("--depth", type=int, default=3)
    tree.add_argument("--max-children", type=int, default=3)
    tree.add_argument("--min-prob", type=float, default=0.0)
    tree.add_argument("--top-p", type=float, default=1.0, help="cumulative cutoff per node")
    tree.add_argument("--no-chat-template", action="store_true")
    _common(tree)
    tree.set_defaults(func=run_tree)
    score = sub.add_parser("score", help="log-probability, rank and surprisal of every token")
    score.add_argument("--text", required=True)
    score.add_argument("--prompt", default="", help="context before the text (T5: encoder input)")
    score.add_argument("--top-n", type=int, default=5)
    _common(score)
    add_server_options(score)  # --server URL --model NAME: vLLM's prompt_logprobs
    score.set_defaults(func=run_score)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="as for generate (default: smollm2-135m)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--json", default=None, help="write the result here")


def _open(args: argparse.Namespace) -> Any:
    from engine.models.catalog import open_model

    return open_model(args.model, device=args.device, dtype=args.dtype,
                      progress=lambda m: print(f"[{m}]", file=sys.stderr))  # fmt: skip


def _write(args: argparse.Namespace, data: dict[str, Any]) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def run_tree(args: argparse.Namespace) -> int:
    from engine import ModelLoadError
    from engine.tree import RunTree
    from engine.tree.expand import ExpandOptions, expand

    if not (0 < args.depth <= 12 and 0 < args.max_children <= 50):
        print("error: --depth must be 1..12 and --max-children 1..50", file=sys.stderr)
        return 2
    try:
        bundle = _open(args)
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ids = bundle.encode_prompt(args.prompt, False if args.no_chat_template else None)
    tree = RunTree(ids, args.prompt)
    opts = ExpandOptions(args.depth, args.max_children, args.min_prob, args.top_p)
    stats = expand(bundle, tree, 0, opts)
    for leaf in tree.leaves():
        node = tree.nodes[leaf]
        print(f"{node.path_logprob:9.3f}  ppl {tree.perplexity(leaf):8.2f}  "
              f"{tree.path_text(leaf)!r}")  # fmt: skip
    print(f"[{len(tree.nodes) - 1} nodes, {stats.forwards} forward passes]", file=sys.stderr)
    _write(args, {**tree.to_json(), "forwards": stats.forwards})
    return 0


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
        print(f"{t.text!r:>16}  logp {t.logprob:8.3f}  rank {t.rank:6d}  {t.surprisal:6.2f} bits")
    print(f"total log-prob {res.total_logprob:.3f}, perplexity {res.perplexity:.2f}")
    _write(args, res.to_json())
    return 0
