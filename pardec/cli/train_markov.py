"""`pardec train-markov`: train an adapter's Markov head, which re-ranks each block draft given the one
before it, and save it beside the adapter."""

from __future__ import annotations

import sys
import time

from ..errors import PardecError
from . import common

HELP = "train the adapter's Markov head (block drafts re-ranked given the draft before)"
DESCRIPTION = (
    "Feed blocks of [MASK] over distilled answers with the adapter (no gradients), keep each slot's "
    "final hidden state and likeliest tokens, and train a small head that re-ranks them given the "
    "--context tokens before the slot. Writes markov.safetensors and markov.json into the adapter's "
    "folder: spec (and threshold) then draw each draft after the one before it (turn off with markov=false). "
    "Decoding stays lossless: the head only proposes. Rows overlapping a benchmark are left out. "
    "DATA may end in ':N' to take N rows of that file, drawn with --seed."
)


# fmt: off
def add_arguments(p) -> None:
    from ..training.markov import MarkovConfig

    d = MarkovConfig()
    common.add_model_args(p)
    common.add_adapter_arg(p)
    p.add_argument("--data", action="append", required=True, metavar="DATA",
                   help="distilled JSONL with 'prompt' and 'response' fields, optionally FILE:N (repeatable)")
    p.add_argument("--blocks-per-text", type=int, default=d.blocks_per_text,
                   help=f"blocks fed over each answer (default {d.blocks_per_text})")
    p.add_argument("--max-length", type=int, default=512, help="tokens of prompt + answer kept (default 512)")
    p.add_argument("--rank", type=int, default=d.rank, help=f"the head's hidden width (default {d.rank})")
    p.add_argument("--top-k", type=int, default=d.top_k,
                   help=f"tokens per slot it re-ranks (default {d.top_k})")
    p.add_argument("--context", type=int, default=d.context, choices=(1, 2),
                   help=f"tokens before a draft the head conditions on (default {d.context})")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"default {d.epochs}")
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"default {d.seed}")
    p.add_argument("--dry-run", action="store_true", help="train and report; write nothing")
# fmt: on


def read_data(specs: list[str], seed: int) -> list[dict]:
    """FILE or FILE:N per spec -> rows (N drawn at random with `seed`, in file order otherwise)."""
    import random
    from pathlib import Path

    from ..training.data import read_pairs

    rows = []
    for spec in specs:
        path, count = spec, None
        head, sep, tail = spec.rpartition(":")
        if sep and tail.isdigit():
            path, count = head, int(tail)
        if not Path(path).is_file():
            raise PardecError(f"no data file '{path}'")
        got = read_pairs(path)
        if count is not None:
            got = random.Random(seed).sample(got, min(count, len(got)))
        rows += got
    return rows


def run(args) -> None:
    import dataclasses

    from ..model import load_model
    from ..model import markov as markov_head
    from ..training.data import tokenize
    from ..training.markov import MarkovConfig, train
    from ..training.sources import ContaminationFilter

    for name in ("blocks_per_text", "rank", "top_k", "epochs", "max_length"):
        if getattr(args, name) < 1:
            raise PardecError(f"--{name.replace('_', '-')} must be >= 1")
    if not args.lr > 0:
        raise PardecError("--lr must be > 0")
    lm = load_model(args.model, dtype=common.dtype(args, compute_bound=True), adapter=args.adapter)
    if lm.adapter is None or lm.trained_block_size is None:
        raise PardecError(
            f"'{args.model}' has no adapter here (--adapter): a Markov head re-ranks a trained block"
        )
    rows = read_data(args.data, args.seed)
    kept = ContaminationFilter.from_benchmarks().clean_rows(rows)
    examples = tokenize(lm.model, lm.tokenizer, kept, args.max_length)
    if not examples:
        raise PardecError("no answers to train on (every row empty or overlapping a benchmark)")
    cfg = MarkovConfig(blocks_per_text=args.blocks_per_text, rank=args.rank, top_k=args.top_k,
                       epochs=args.epochs, lr=args.lr, seed=args.seed, context=args.context)  # fmt: skip
    t = time.perf_counter()
    head, history = train(lm, examples, lm.trained_block_size, cfg)
    head.settings = dataclasses.replace(
        head.settings,
        training={
            **head.settings.training,
            "data": args.data,
            "left_out": len(rows) - len(kept),
            "seconds": round(time.perf_counter() - t),
        },  # fmt: skip
    )
    last = history[-1]
    print(
        f"markov: {len(examples)} answers, {head.settings.training['blocks']} blocks; held out: slot "
        f"accuracy {last['heldout_slot_accuracy']:.3f}, drafts accepted in a row after the bonus "
        f"{last['heldout_run']:.3f} (block alone {last['heldout_run_block_alone']:.3f}); "
        f"{time.perf_counter() - t:.0f} s",
        file=sys.stderr,
    )
    if not args.dry_run:
        path = markov_head.save(lm.adapter, head)
        print(f"wrote {path}", file=sys.stderr)
