# One linear of each of the model's shapes (and the head), 2 threads, median ms by rows fed:
# fbgemm w8a8 (reduce_range and full range), float32 dense, and aten._weight_int8pack_mm.
import time, torch

torch.set_num_threads(2)
shapes = {
    "qkv": (1152, 896),
    "o": (896, 896),
    "gate_up": (9728, 896),
    "down": (896, 4864),
    "head": (151936, 896),
}


def t(f, n=20):
    f()
    f()
    ts = []
    for _ in range(n):
        a = time.perf_counter()
        f()
        ts.append(time.perf_counter() - a)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


for name, (N, K) in shapes.items():
    w = torch.randn(N, K) * 0.02
    lin = torch.nn.Linear(K, N, bias=False)
    lin.weight.data = w
    q = torch.ao.nn.quantized.dynamic.Linear(K, N, bias_=False, dtype=torch.qint8)
    qw = torch.quantize_per_channel(
        w, w.abs().amax(1) / 127, torch.zeros(N, dtype=torch.long), 0, torch.qint8
    )
    q.set_weight_bias(qw, None)
    packed = q._packed_params._packed_params
    w8 = (w / (w.abs().amax(1, keepdim=True) / 127)).round().to(torch.int8)
    sc = (w.abs().amax(1) / 127).contiguous()
    wb = w.bfloat16()
    n = 5 if name == "head" else 20
    for M in (1, 2, 4, 9, 16):
        x = torch.randn(M, K)
        r = dict(
            fbgemm=t(lambda: torch.ops.quantized.linear_dynamic(x, packed, True), n),
            fbgemm_full=t(lambda: torch.ops.quantized.linear_dynamic(x, packed, False), n),
            f32=t(lambda: torch.nn.functional.linear(x, w), n),
            int8pack=t(lambda: torch.ops.aten._weight_int8pack_mm(x, w8, sc), n),
        )
        print(name, M, " ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
