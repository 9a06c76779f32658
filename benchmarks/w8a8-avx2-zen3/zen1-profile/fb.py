import torch, time
torch.set_num_threads(2)
print(hasattr(torch, "fbgemm_linear_int8_weight_fp32_activation"), hasattr(torch, "fbgemm_pack_quantized_matrix"))
N, K = 4864, 896
w = torch.randn(N, K)
wq, col_offsets, scale, zp = torch.fbgemm_linear_quantize_weight(w)
packed = torch.fbgemm_pack_quantized_matrix(wq)
print(type(packed), packed.dtype, packed.shape)
b = torch.zeros(N)
x = torch.randn(1, K)
y = torch.fbgemm_linear_int8_weight_fp32_activation(x, wq, packed, col_offsets, scale, zp, b)
print(y.shape, (y - x @ w.t()).abs().max())
def bench(f, n=300):
    for _ in range(20): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e3
print("aten fbgemm 1 tok ms", bench(lambda: torch.fbgemm_linear_int8_weight_fp32_activation(x, wq, packed, col_offsets, scale, zp, b)))
qw = torch.quantize_per_channel(w, w.abs().amax(1)/127, torch.zeros(N, dtype=torch.long), 0, torch.qint8)
pk = torch.ops.quantized.linear_prepack(qw, None)
print("quantized::linear_dynamic 1 tok ms", bench(lambda: torch.ops.quantized.linear_dynamic(x, pk, True)))
f = torch.compile(lambda x: torch.fbgemm_linear_int8_weight_fp32_activation(x * 2, wq, packed, col_offsets, scale, zp, b) + 1, fullgraph=True)
try:
    f(x); print("compiled ok", bench(lambda: f(x)))
except Exception as e:
    print("compile failed", type(e).__name__, str(e)[:400])
@torch.library.register_fake("aten::fbgemm_linear_int8_weight_fp32_activation")
def _fake(input, weight, packed, col_offsets, weight_scale, weight_zero_point, bias):
    return input.new_empty(*input.shape[:-1], weight.shape[0])
torch._dynamo.reset()
f = torch.compile(lambda x: torch.fbgemm_linear_int8_weight_fp32_activation(x * 2, wq, packed, col_offsets, scale, zp, b) + 1, fullgraph=True)
try:
    r = f(x); print("compiled ok", bench(lambda: f(x)), (r - (torch.fbgemm_linear_int8_weight_fp32_activation(x * 2, wq, packed, col_offsets, scale, zp, b) + 1)).abs().max())
except Exception as e:
    print("compile failed", type(e).__name__, str(e)[:600])
