"""sdpa against the batch-invariant attention (model/invariant_attention.py) on the w8a8 model: an AR
step and a block step (1 pending + 8 slots), interleaved in one process, medians.

    python scripts/attention_ab.py --context 300 --rounds 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step
from pardec.model import load_model
from pardec.model.invariant_attention import NAME


def primed_cache(model, context: int, mask_id: int) -> BlockCache:
    """A cache holding `context` committed random tokens (the same ones for every model: seed 0)."""
    prompt = torch.randint(0, 5000, (context,), generator=torch.Generator().manual_seed(0)).tolist()
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [prompt], None, 1, mask_id)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    return cache


def timed_step(model, cache: BlockCache, blocks, mask_id: int) -> tuple[float, torch.Tensor]:
    """One step of a pending token (and `blocks`, or none: an AR step), rolled back after: (seconds, the
    pending token's logits [1, 1, V])."""
    t = time.perf_counter()
    out = block_step(model, cache, [[5]], blocks, 1, mask_id)
    seconds = time.perf_counter() - t
    n_block = 0 if blocks is None else out.block_logits.shape[1]
    cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), n_block)
    return seconds, out.ntp_logits


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--context", type=int, default=300, help="committed tokens in the cache (default 300)")
    p.add_argument("--rounds", type=int, default=8, help="interleaved rounds, the first not counted")
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    lm = load_model(quant="w8a8", adapter="auto")
    model, mask_id = lm.model, lm.mask_id
    cache = primed_cache(model, args.context, mask_id)
    kinds = {"ar": None, "block8": [[Block(0, [mask_id] * 8)]]}
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for attention in ("sdpa", NAME):
            model.set_attn_implementation(attention)
            for kind, blocks in kinds.items():
                seconds, _ = timed_step(model, cache, blocks, mask_id)
                if r:
                    times.setdefault((attention, kind), []).append(seconds)
    for (attention, kind), ts in times.items():
        print(f"{attention} {kind}: {statistics.median(ts) * 1000:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
