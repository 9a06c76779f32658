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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--context", type=int, default=300, help="committed tokens in the cache (default 300)")
    p.add_argument("--rounds", type=int, default=8, help="interleaved rounds, the first not counted")
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    lm = load_model(quant="w8a8", adapter="auto")
    model, mask_id = lm.model, lm.mask_id
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [torch.randint(0, 5000, (args.context,)).tolist()], None, 1, mask_id)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    kinds = {"ar": None, "block8": [[Block(0, [mask_id] * 8)]]}
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for attention in ("sdpa", NAME):
            model.set_attn_implementation(attention)
            for kind, blocks in kinds.items():
                t = time.perf_counter()
                out = block_step(model, cache, [[5]], blocks, 1, mask_id)
                if r:
                    times.setdefault((attention, kind), []).append(time.perf_counter() - t)
                n_block = 0 if blocks is None else out.block_logits.shape[1]
                cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), n_block)
    for (attention, kind), ts in times.items():
        print(f"{attention} {kind}: {statistics.median(ts) * 1000:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
