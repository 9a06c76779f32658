"""w8a8 with sibling linears as one GEMM each (q/k/v, gate/up: `quant.W8A8Siblings`, the default)
against one GEMM per linear: an AR step and a block step (1 pending + 8 slots) of the two models,
interleaved in one process, medians.

    python scripts/siblings_ab.py --context 300 --rounds 8
"""

from __future__ import annotations

import argparse
import statistics

import torch
from attention_ab import primed_cache, timed_step  # this folder's: run as python scripts/siblings_ab.py

from pardec.core.step import Block
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
    caches = {name: primed_cache(model, args.context, mask_id) for name, model in models.items()}
    kinds = {"ar": None, "block8": [[Block(0, [mask_id] * 8)]]}
    times: dict[tuple[str, str], list[float]] = {}
    logits: dict[tuple[str, str], torch.Tensor] = {}
    for r in range(args.rounds):
        for name, model in models.items():
            for kind, blocks in kinds.items():
                seconds, logits[(name, kind)] = timed_step(model, caches[name], blocks, mask_id)
                if r:
                    times.setdefault((name, kind), []).append(seconds)
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
