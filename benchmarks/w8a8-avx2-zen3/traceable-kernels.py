"""One [4864 x 896] linear, 2 threads, ms per call: kernels torch.compile could trace (torch._int_mm,
oneDNN's qlinear) against fbgemm's linear_dynamic (what --quant w8a8 runs) and a float32 matmul."""

import time

import torch

torch.set_num_threads(2)
K, N = 896, 4864


def bench(f, n=200):
    for _ in range(10):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e3


w = torch.randn(N, K)

print("== torch._int_mm, fbgemm linear_dynamic, float32")
packed = torch.ops.quantized.linear_prepack(
    torch.quantize_per_channel(w, torch.rand(N) * 0.01 + 0.001, torch.zeros(N, dtype=torch.long), 0, torch.qint8),
    None,
)
for M in (1, 9, 16):
    x = torch.randn(M, K)
    a8 = torch.randint(-127, 127, (M, K), dtype=torch.int8)
    b8 = torch.randint(-127, 127, (K, N), dtype=torch.int8)
    bt = b8.t().contiguous().t()
    try:
        t_int = bench(lambda: torch._int_mm(a8, b8))
        t_int2 = bench(lambda: torch._int_mm(a8, bt))
    except Exception as e:
        t_int = t_int2 = repr(e)[:80]
    t_dyn = bench(lambda: torch.ops.quantized.linear_dynamic(x, packed))
    t_f32 = bench(lambda: x @ w.t())
    print(M, "int_mm", t_int, "int_mm(colmajor)", t_int2, "linear_dynamic", t_dyn, "f32", t_f32)

# maxerr: against a reference this script may lay out wrongly; speed only
print("== oneDNN qlinear_pointwise;", [o for o in dir(torch.ops.onednn) if "lin" in o])
w_scale = (w.abs().amax(1) / 127).float()
qw = torch.round(w / w_scale[:, None]).to(torch.int8)
onednn_packed = torch.ops.onednn.qlinear_prepack(qw, [1, K])
w_zp = torch.zeros(N, dtype=torch.long)
for M in (1, 9, 16):
    x = torch.randn(M, K)
    s = float(x.abs().max() / 127)
    qx = torch.round(x / s).clamp(-128, 127).to(torch.int8)
    qxu = (torch.round(x / s) + 128).clamp(0, 255).to(torch.uint8)  # u8: oneDNN's fast path on x86
    for name, q, zp in (("s8", qx, 0), ("u8", qxu, 128)):
        try:

            def f():
                return torch.ops.onednn.qlinear_pointwise(
                    q, s, zp, onednn_packed, w_scale, w_zp, None, 1.0, 0, torch.float32, "none", [], ""
                )

            out = f()
            ref = (q.float() - zp) * s @ (qw.float() * w_scale[:, None]).t()
            print(M, name, "onednn", round(bench(f), 3), "ms", "maxerr", float((out - ref).abs().max()))
        except Exception as e:
            print(M, name, repr(e)[:300])
