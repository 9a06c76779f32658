"""`pardec profile`: what a decoding step costs on this machine, by tokens fed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import common

HELP = "measure what a decoding step costs on this machine (the curve adaptive spec follows)"
DESCRIPTION = (
    "Time one forward by the number of pending tokens fed, with and without a block of [MASK] slots, "
    "at two context lengths, for the model as loaded (adapter, dtype, quantization), and what it holds in "
    "memory. The result is cached and is what `--adaptive` decoding reads; --refresh measures again."
)


# fmt: off
def add_arguments(p) -> None:
    common.add_model_args(p)
    common.add_forward_args(p)
    common.add_adapter_arg(p)
    p.add_argument("--block-size", type=int, default=None,
                   help="block slots in the block shapes (default: the adapter's trained D, else 8)")
    p.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    p.add_argument("--out", default=None, help="folder for step_cost.json and step_cost.png (optional)")
# fmt: on


def run(args) -> None:
    from ..bench.report import plot_cost
    from ..core import cost as step_cost
    from ..core.memory import peak_rss_mb, rss_mb
    from ..errors import PardecError
    from ..model import load_model
    from ..model.quant import crossovers, weight_bytes

    if args.block_size is not None and args.block_size < 1:
        raise PardecError(f"block size must be an integer >= 1, got {args.block_size}")
    lm = load_model(args.model, common.dtype(args), args.adapter, common.quant(args), args.compile)
    D = args.block_size or lm.trained_block_size or 8
    cost = step_cost.for_model(lm, D, refresh=args.refresh)
    m = cost.key
    print(f"{m.get('cpu')} (AMX: {'yes' if m.get('amx') else 'no'}, avx512_bf16: "
          f"{'yes' if m.get('avx512_bf16') else 'no'}, {m.get('threads')} threads); {lm.name}, "
          f"adapter {lm.adapter or 'none'}, {m.get('dtype')}; a shape's two fastest times "
          f"{cost.spread:.0%} apart")  # fmt: skip
    head = " | ".join(f"ctx {c}: ms, x AR, + {D} slots x AR" for c in cost.contexts)
    print(f"| pending | {head} |")
    print("|---|" + "---|" * (3 * len(cost.contexts)))
    for n in cost.pending:
        cells = " | ".join(f"{1000 * cost.seconds(n, c):.1f} | {cost.relative(n, c):.2f} | "
                           f"{cost.relative(n, c, block=True):.2f}" for c in cost.contexts)  # fmt: skip
        print(f"| {n} | {cells} |")
    for slots in cost.short_slots:  # shorter blocks, which adaptive spec may feed (--min-block-size)
        cells = ", ".join(f"{n} pending {cost.relative(n, cost.contexts[0], slots):.2f}"
                          for n in cost.short_pending)  # fmt: skip
        print(f"+ {slots} slots, x AR at ctx {cost.contexts[0]}: {cells}")
    if shapes := crossovers(lm.model):
        print(
            "quantized kernels, most tokens per forward before the dense copy (timed at load): "
            + ", ".join(f"{shape} {'always' if t is None else t}" for shape, t in shapes.items())
        )
    held = weight_bytes(lm.model)
    memory = dict(weights_mb=held["kernel"] / 2**20, dense_copies_mb=held["dense"] / 2**20,
                  rss_mb=rss_mb(), peak_rss_mb=peak_rss_mb())  # fmt: skip
    copies = "MKL-packed copies for few-token" if lm.quant == "packed" else "dense copies for many-token"
    print(f"memory ({lm.quant}): weights {memory['weights_mb']:.0f} MiB, {copies} "
          f"forwards {memory['dense_copies_mb']:.0f} MiB; resident {memory['rss_mb']:.0f} MiB, "
          f"peak {memory['peak_rss_mb']:.0f} MiB")  # fmt: skip
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        record = dict(cost.to_json(), memory=memory)
        (out / "step_cost.json").write_text(json.dumps(record, indent=1) + "\n")
        plot_cost(cost, out / "step_cost.png")
        print(f"wrote {out}/step_cost.json, step_cost.png", file=sys.stderr)
