"""What one linear layer costs by tokens fed, for each way PyTorch's CPU kernels can hold its weights:
bf16 (dense), int8 weight-only (`_weight_int8pack_mm`), int4 weight-only in groups of 32
(`_weight_int4pack_mm_for_cpu`), and int8 weights with int8 activations quantized per token
(`torch._int_mm`, the quantization included). Many distinct weights are cycled through so that they
are read from memory, as in a forward, not from cache. Prints milliseconds per linear, and each as a
multiple of its own one-token time (what a block step costs against an AR step with that kernel).

    python scripts/linear_kernels.py --out 4864 --in 896
"""

from __future__ import annotations

import argparse
import time

import torch


def per_call(f, layers: int, rounds: int) -> float:
    f()
    t0 = time.perf_counter()
    for _ in range(rounds):
        f()
    return (time.perf_counter() - t0) / rounds / layers * 1e3


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=int, default=4864, help="output features N (default 4864: Qwen 0.5B's MLP)")
    p.add_argument("--in", dest="inp", type=int, default=896, help="input features K (default 896)")
    p.add_argument("--layers", type=int, default=48, help="distinct weights cycled through (default 48)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--tokens", default="1,2,4,8,9,16,17,32")
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    N, K, L = args.out, args.inp, args.layers
    g = torch.Generator().manual_seed(0)
    dense, int8, int4 = [], [], []
    for _ in range(L):
        w = torch.randn(N, K, generator=g)
        dense.append(w.bfloat16())
        scale = w.abs().amax(1) / 127
        int8.append(((w / scale[:, None]).round().to(torch.int8), scale))
        wg = w.reshape(N, K // 32, 32)
        low, step = wg.amin(-1), (wg.amax(-1) - wg.amin(-1)) / 15
        codes = ((wg - low[..., None]) / step[..., None]).round().clamp(0, 15).reshape(N, K).to(torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        sz = torch.stack([step, low + 8 * step], -1).transpose(0, 1).contiguous().bfloat16()
        int4.append((packed, sz))

    aten = torch.ops.aten

    def w8a8(x, q, scale):  # per-token symmetric int8 activations, int32 accumulation
        xs = x.float().abs().amax(1, keepdim=True).clamp_min(1e-8) / 127
        xq = (x.float() / xs).round().to(torch.int8)
        return torch._int_mm(xq, q.T).float() * xs * scale

    kinds = {
        "bf16": lambda x: [x @ w.T for w in dense],
        "int8 (weights)": lambda x: [aten._weight_int8pack_mm(x, q, s.bfloat16()) for q, s in int8],
        "int4 (weights)": lambda x: [aten._weight_int4pack_mm_for_cpu(x, pk, 32, sz) for pk, sz in int4],
        "int8 x int8 (_int_mm)": lambda x: [w8a8(x, q, s) for q, s in int8],
    }
    tokens = [int(t) for t in args.tokens.split(",")]
    times = {}
    for kind, f in kinds.items():
        times[kind] = []
        for t in tokens:
            x = torch.randn(t, K, generator=g).bfloat16()
            times[kind].append(per_call(lambda f=f, x=x: f(x), L, args.rounds))
    print(f"[{N} x {K}] linear, {torch.get_num_threads()} threads; ms per linear (x its 1-token time)")
    print("| kernel | " + " | ".join(f"{t} tok" for t in tokens) + " |")
    print("|---|" + "---|" * len(tokens))
    for k, ts in times.items():
        print(f"| {k} | " + " | ".join(f"{x:.3f} ({x / ts[0]:.1f})" for x in ts) + " |")


if __name__ == "__main__":
    main()
