"""Where a decoding step's time goes: `block_step` for the shapes the methods feed, medians of
interleaved rounds, as ratios of an AR step (1 pending token).

Kinds (`--kinds`, a comma list; `full` and `short` name sets):
- full: ar (1 pending token); spec (D pending + D block slots); spec_nogate (spec's shapes with a
  non-mask token in the slots: the gated adapters off, so the difference is their cost); spec3
  (3 draft blocks); plain2D (spec's token count as plain pending tokens).
- short: ar; for S in 2, 4 and D, block{S} (1 pending + a block of S slots), block{S}_nogate (the
  same with non-mask tokens: the adapters off, the block mask kept) and plain{S+1} (as many plain
  pending tokens): what a block adds to a step beyond its tokens.

    python scripts/step_cost.py --adapter pardec/weights/qwen2.5-coder-0.5b --block-size 8
    python scripts/step_cost.py --kinds short --quant int8 --context 128
    python scripts/step_cost.py --kinds block8 --quant w8a8 --profile 10   # where each kind's time goes
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch

from pardec.core.cache import BlockCache
from pardec.core.cost import machine
from pardec.core.step import Block, block_step
from pardec.model import load_model
from pardec.model.quant import CHOICES

TOKEN = 5  # a plain token id fed wherever the text does not matter


def cpu_model() -> str:
    m = machine()
    isa = "amx" if m["amx"] else ("avx512_bf16" if m["avx512_bf16"] else "no bf16 ISA")
    return f"{m['cpu']} ({isa}, {m['threads']} threads)"


def shapes(kinds: str, D: int, mask_id: int) -> dict[str, tuple]:
    """kind -> (pending [B][P], blocks or None, NTP positions) for `block_step`."""
    full = {
        "ar": ([[TOKEN]], None, 1),
        "spec": ([[TOKEN] * D], [[Block(0, [mask_id] * D)]], D),
        "spec_nogate": ([[TOKEN] * D], [[Block(0, [TOKEN] * D)]], D),
        "spec3": ([[TOKEN] * D], [[Block(s, [mask_id] * D) for s in (0, D - 1, D - 2)]], D),
        "plain2D": ([[TOKEN] * (2 * D)], None, 2 * D),
    }
    short = {"ar": full["ar"]}
    for s in sorted({2, 4, D}):
        short[f"block{s}"] = ([[TOKEN]], [[Block(0, [mask_id] * s)]], 1)
        short[f"block{s}_nogate"] = ([[TOKEN]], [[Block(0, [TOKEN] * s)]], 1)
        short[f"plain{s + 1}"] = ([[TOKEN] * (s + 1)], None, s + 1)
    known = {**full, **short}
    chosen: dict[str, tuple] = {"ar": known["ar"]}  # every ratio is against it
    for name in (k.strip() for k in kinds.split(",") if k.strip()):
        group = {"full": full, "short": short}.get(name)
        if group is None and name not in known:
            raise SystemExit(f"unknown kind '{name}': one of full, short, {', '.join(known)}")
        chosen.update(group or {name: known[name]})
    return chosen


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default="auto", help="checkpoint folder, auto or none (default auto)")
    p.add_argument("--quant", default="none", choices=CHOICES, help="weight quantization (default none)")
    p.add_argument("--block-size", type=int, default=8, help="D (default 8)")
    p.add_argument("--kinds", default="full", help="comma list of kinds or sets: full, short (default full)")
    p.add_argument("--context", type=int, default=300, help="committed tokens in the cache (default 300)")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="then run each kind N more times under torch.profiler and print its ops' self "
        "time per step (default 0: no profile)",
    )
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    D = args.block_size
    lm = load_model(args.model, torch.bfloat16, args.adapter, args.quant)
    model, mask_id = lm.model, lm.mask_id
    kinds = shapes(args.kinds, D, mask_id)
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [torch.randint(0, 5000, (args.context,)).tolist()], None, 1, mask_id)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(args.rounds + 1):  # round 0 warms every shape up and is not counted
        for kind, (pending, blocks, n_ntp) in kinds.items():
            t = time.perf_counter()
            out = block_step(model, cache, pending, blocks, n_ntp, mask_id)
            if r:
                times[kind].append(time.perf_counter() - t)
            # Nothing is kept: the cache returns to the same committed text for the next shape.
            cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), out.block_logits.shape[1])
    print(
        f"{args.model}, adapter {lm.adapter or 'none'}, quant {args.quant}, D = {D}, "
        f"context {args.context}, {str(model.dtype).removeprefix('torch.')}; {cpu_model()}"
    )
    base = statistics.median(times["ar"])
    for kind, ts in times.items():
        m = statistics.median(ts)
        print(f"{kind}: {m * 1000:.1f} ms ({m / base:.2f}x ar)", flush=True)
    for kind, (pending, blocks, n_ntp) in kinds.items() if args.profile else ():
        profile(kind, args.profile, partial(block_step, model, cache, pending, blocks, n_ntp, mask_id), cache)


def profile(kind: str, n: int, step, cache, top: int = 14) -> None:
    """Each op's self CPU time per step over `n` steps of one kind, the largest first; the cache is
    rolled back after each step as in the timing rounds."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for _ in range(n):
            out = step()
            cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), out.block_logits.shape[1])
        wall = (time.perf_counter() - t) / n
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops) / n / 1000  # ms a step, profiled
    print(f"\n{kind}: {wall * 1000:.1f} ms a step under the profiler, ops' self time {total:.1f} ms")
    for e in ops[:top]:
        ms = e.self_cpu_time_total / n / 1000
        print(f"  {e.key[:48]:48s} {ms:7.2f} ms  {e.count // n:5d} calls  {100 * ms / total:5.1f}%")


if __name__ == "__main__":
    main()
