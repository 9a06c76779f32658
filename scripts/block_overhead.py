"""What a block of [MASK] slots adds to a step beyond its tokens: one pending token and a block of
2, 4 and D slots, against as many plain pending tokens and against the same block of non-mask
tokens (the gated adapters off, the block mask kept). Best of `--rounds` per shape, ms.

    python scripts/block_overhead.py --quant int8
"""

from __future__ import annotations

import argparse
import time

import torch

from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step
from pardec.model import load_model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default="auto")
    p.add_argument("--quant", default="none")
    p.add_argument("--context", type=int, default=128, help="committed tokens (default 128)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    lm = load_model(args.model, torch.bfloat16, args.adapter, args.quant)
    model, mask = lm.model, lm.mask_id
    D = lm.trained_block_size or 8
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [list(range(100, 100 + args.context))], None, 1, mask)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)

    def ms(pending: int, slots: int = 0, token: int = mask) -> float:
        best = float("inf")
        for _ in range(args.rounds):
            blocks = [[Block(0, [token] * slots)]] if slots else None
            t0 = time.perf_counter()
            o = block_step(model, cache, [[7] * pending], blocks, pending, mask)
            best = min(best, time.perf_counter() - t0)
            cache.commit(o.fed_pos, torch.zeros_like(o.pending_valid), o.block_logits.shape[1])
        return best * 1000

    print(f"{args.model}, quant {args.quant}, adapter {lm.adapter or 'none'}; AR step {ms(1):.1f} ms")
    cols = ["fed", "plain tokens", "block of [MASK] (adapters on)",
            "non-mask tokens in the block (adapters off)"]  # fmt: skip
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---|---|")
    for slots in sorted({2, 4, D}):
        plain, gated, off = ms(1 + slots), ms(1, slots), ms(1, slots, token=5)
        row = [f"1 pending + {slots} slots", f"{1 + slots} tokens: {plain:.0f} ms",
               f"{gated:.0f} ms", f"{off:.0f} ms"]  # fmt: skip
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
