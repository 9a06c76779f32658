"""Where a decoding step's time goes: `block_step` for the shapes the methods feed, medians of
interleaved rounds, as ratios of an AR step (1 pending token).

Kinds: ar (1 pending token); spec (D pending + D block slots); spec_nogate (spec's shapes with a
non-mask token in the slots: the gated adapter off, so the difference is the adapter's cost); spec3
(3 draft blocks); plain2D (spec's token count as plain pending tokens).

    python scripts/step_cost.py --adapter pardec/weights/qwen2.5-coder-0.5b --block-size 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from pardec.core.cache import BlockCache
from pardec.core.cost import machine
from pardec.core.step import Block, block_step
from pardec.model import load_model


def cpu_model() -> str:
    m = machine()
    isa = "amx" if m["amx"] else ("avx512_bf16" if m["avx512_bf16"] else "no bf16 ISA")
    return f"{m['cpu']} ({isa}, {m['threads']} threads)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default="auto", help="checkpoint folder, auto or none (default auto)")
    p.add_argument("--block-size", type=int, default=8, help="D (default 8)")
    p.add_argument("--context", type=int, default=300, help="committed tokens in the cache (default 300)")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    D = args.block_size
    lm = load_model(args.model, torch.bfloat16, args.adapter)
    model, mask_id = lm.model, lm.mask_id
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [torch.randint(0, 5000, (args.context,)).tolist()], None, 1, mask_id)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    masks = [mask_id] * D
    shapes = {
        "ar": ([[5]], None, 1),
        "spec": ([[5] * D], [[Block(0, masks)]], D),
        "spec_nogate": ([[5] * D], [[Block(0, [5] * D)]], D),
        "spec3": ([[5] * D], [[Block(0, masks), Block(D - 1, masks), Block(D - 2, masks)]], D),
        "plain2D": ([[5] * (2 * D)], None, 2 * D),
    }
    times: dict[str, list[float]] = {k: [] for k in shapes}
    for _ in range(args.rounds):
        for kind, (pending, blocks, n_ntp) in shapes.items():
            t = time.perf_counter()
            out = block_step(model, cache, pending, blocks, n_ntp, mask_id)
            times[kind].append(time.perf_counter() - t)
            # Nothing is kept: the cache returns to the same committed text for the next shape.
            cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), out.block_logits.shape[1])
    print(
        f"{args.model}, adapter {lm.adapter or 'none'}, D = {D}, context {args.context}, bf16; {cpu_model()}"
    )
    base = statistics.median(times["ar"])
    for kind, ts in times.items():
        m = statistics.median(ts)
        print(f"{kind}: {m * 1000:.1f} ms ({m / base:.2f}x ar)", flush=True)


if __name__ == "__main__":
    main()
