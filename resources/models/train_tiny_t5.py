"""Train the bundled tiny T5 (byte-level) on the verbalisation task in engine/models/verbalize.py.

    .venv/bin/python resources/models/train_tiny_t5.py --minutes 24 --out resources/models/tiny-t5

The data is generated on the fly; the held-out evaluation inputs are never trained on.
Writes model.safetensors, config.json, generation_config.json, the tokenizer files and
metrics.json into --out.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from transformers import ByT5Tokenizer, T5Config, T5ForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.models.verbalize import held_out_inputs, random_pair, renderings  # noqa: E402

HELD_OUT = 300


def build_model(seed: int) -> T5ForConditionalGeneration:
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=384,  # ByT5: 3 specials + 256 bytes + 125 extra ids
        d_model=128,
        d_kv=32,
        d_ff=384,
        num_layers=3,
        num_decoder_layers=3,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    return T5ForConditionalGeneration(config)


def batch(tok: ByT5Tokenizer, rng: random.Random, size: int, exclude: set[str]):
    pairs = []
    while len(pairs) < size:
        prompt, target = random_pair(rng)
        if prompt not in exclude:
            pairs.append((prompt, target))
    enc = tok([p for p, _ in pairs], padding=True, return_tensors="pt")
    labels = tok([t for _, t in pairs], padding=True, return_tensors="pt").input_ids
    labels[labels == tok.pad_token_id] = -100
    return enc.input_ids, enc.attention_mask, labels


@torch.no_grad()
def evaluate(model, tok, inputs: list[str]) -> float:
    model.eval()
    ok = 0
    for start in range(0, len(inputs), 100):
        chunk = inputs[start : start + 100]
        enc = tok(chunk, padding=True, return_tensors="pt")
        out = model.generate(**enc, max_new_tokens=64, do_sample=False, num_beams=1)
        for prompt, ids in zip(chunk, out, strict=True):
            ok += tok.decode(ids, skip_special_tokens=True) in renderings(prompt)
    model.train()
    return ok / len(inputs)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "tiny-t5")
    ap.add_argument("--minutes", type=float, default=24.0, help="wall-clock training budget")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    tok = ByT5Tokenizer()
    model = build_model(args.seed)
    params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {params:,}", flush=True)
    held = held_out_inputs(HELD_OUT)
    exclude = set(held)
    rng = random.Random(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    budget = args.minutes * 60
    warmup = 200
    start = time.time()
    model.train()
    step = 0
    while step < args.max_steps:
        elapsed = time.time() - start
        if elapsed > budget:
            break
        # Cosine schedule on the time budget (steps per second is only known while running).
        progress = min(1.0, elapsed / budget)
        lr = (
            args.lr
            * min(1.0, (step + 1) / warmup)
            * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
        )
        for group in opt.param_groups:
            group["lr"] = lr
        ids, mask, labels = batch(tok, rng, args.batch, exclude)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            print(
                f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.time() - start:.0f}s",
                flush=True,
            )
        if step % 1000 == 0:
            print(f"  held-out greedy accuracy: {evaluate(model, tok, held[:100]):.3f}", flush=True)
    train_seconds = time.time() - start
    accuracy = evaluate(model, tok, held)
    print(f"done: {step} steps in {train_seconds:.0f}s; held-out greedy accuracy {accuracy:.4f}")
    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config.max_new_tokens = 64
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    metrics = {
        "parameters": params,
        "steps": step,
        "batch": args.batch,
        "train_seconds": round(train_seconds, 1),
        "held_out_inputs": len(held),
        "held_out_greedy_accuracy": accuracy,
        "command": "python resources/models/train_tiny_t5.py " + " ".join(sys.argv[1:]),
        "torch_threads": args.threads,
    }
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


if __name__ == "__main__":
    main()
