"""What one linear layer costs by tokens fed, for each way PyTorch's CPU kernels can hold its weights:
bf16 and fp32 (dense), fp32 with MKL-packed weights (`--quant packed`), int8 weight-only
(`_weight_int8pack_mm`), int4 weight-only in groups of 32 (`_weight_int4pack_mm_for_cpu`), int8
weights with int8 activations quantized per token (`torch._int_mm`, the quantization included), and
pardec's `w8a8` (fbgemm's integer GEMM, int8 activations per token, as decoding runs it). Many
distinct weights are cycled through so that they are read from memory, as in a forward, not from
cache. Prints milliseconds per linear, and each as a multiple of its own one-token time (what a
block step costs against an AR step with that kernel).

    python scripts/linear_kernels.py --out 4864 --in 896
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from pardec.model.packed import PackedLinear
from pardec.model.quant import Int4Linear, Int8Linear, W8A8Linear


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
    # pardec's own quantized linears: the kernels decoding runs
    dense, dense32, packed, int8, int4, w8a8s = [], [], [], [], [], []
    for _ in range(L):
        linear = nn.Linear(K, N, bias=False).bfloat16()
        nn.init.normal_(linear.weight, generator=g)
        dense.append(linear.weight)
        dense32.append(linear.weight.float())
        packed.append(PackedLinear(nn.Linear(K, N, bias=False)))
        int8.append(Int8Linear(linear))
        int4.append(Int4Linear.from_linear(linear))
        w8a8s.append(W8A8Linear(linear))

    def w8a8(x, q, scale):  # per-token symmetric int8 activations, int32 accumulation
        xs = x.float().abs().amax(1, keepdim=True).clamp_min(1e-8) / 127
        xq = (x.float() / xs).round().to(torch.int8)
        return torch._int_mm(xq, q.T).float() * xs * scale

    kinds = {
        "bf16": lambda x: [x @ w.T for w in dense],
        "fp32": lambda x: [x.float() @ w.T for w in dense32],
        "fp32 packed": lambda x: [q(x.float()) for q in packed],
        "int8 (weights)": lambda x: [q.kernel(x) for q in int8],
        "int4 (weights)": lambda x: [q.kernel(x) for q in int4],
        "int8 x int8 (_int_mm)": lambda x: [w8a8(x, q.weight_int8, q.scale.float()) for q in int8],
        "w8a8 (fbgemm)": lambda x: [q.kernel(x) for q in w8a8s],
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
