"""w8a8 with sibling linears as one GEMM each (q/k/v, gate/up: `quant.W8A8Siblings`, the default)
against one GEMM per linear: an AR step and a block step (1 pending + 8 slots) of the two models,
interleaved in one process, medians.

    python scripts/siblings_ab.py --context 300 --rounds 8
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
from pardec.model.quant import quantize


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--context", type=int, default=300, help="committed tokens in the cache (default 300)")
    p.add_argument("--rounds", type=int, default=8, help="interleaved rounds, the first not counted")
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    fused = load_model(quant="w8a8", adapter="auto")
    apart = load_model(quant="none", adapter="auto", dtype=torch.float32)  # quantized below, unfused
    quantize(apart.model, "w8a8", siblings=False)
    apart.model.set_attn_implementation(NAME)
    mask_id = fused.mask_id
    models = {"siblings fused": fused.model, "one per linear": apart.model}
    prompt = [torch.randint(0, 5000, (args.context,)).tolist()]
    caches = {}
    for name, model in models.items():
        cache = caches[name] = BlockCache.empty(1, model.config, model.device)
        out = block_step(model, cache, prompt, None, 1, mask_id)
        cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    kinds = {"ar": None, "block8": [[Block(0, [mask_id] * 8)]]}
    times: dict[tuple[str, str], list[float]] = {}
    logits: dict[tuple[str, str], torch.Tensor] = {}
    for r in range(args.rounds):
        for name, model in models.items():
            for kind, blocks in kinds.items():
                t = time.perf_counter()
                out = block_step(model, caches[name], [[5]], blocks, 1, mask_id)
                if r:
                    times.setdefault((name, kind), []).append(time.perf_counter() - t)
                logits[(name, kind)] = out.ntp_logits
                n_block = 0 if blocks is None else out.block_logits.shape[1]
                caches[name].commit(out.fed_pos, torch.zeros_like(out.pending_valid), n_block)
    for (name, kind), ts in times.items():
        print(f"{name} {kind}: {statistics.median(ts) * 1000:.1f} ms", flush=True)
    for kind in kinds:
        a, b = logits[("siblings fused", kind)], logits[("one per linear", kind)]
        finite = a.isfinite() & b.isfinite()  # ids past the tokenizer's vocabulary are -inf in both
        diff = (a - b)[finite].abs().max().item()
        same = "equal" if torch.equal(a, b) else f"differ by {diff:.3g}"
        print(f"{kind}: the pending token's logits {same}")


if __name__ == "__main__":
    main()
