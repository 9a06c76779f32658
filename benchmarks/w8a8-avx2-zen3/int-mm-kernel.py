import torch, time
torch.set_num_threads(2)
K, N = 896, 4864
def bench(f, n=200):
    for _ in range(10): f()
    t=time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter()-t)/n*1e3
w = torch.randn(N, K)
for M in (1, 9, 16):
    x = torch.randn(M, K)
    a8 = torch.randint(-127,127,(M,K),dtype=torch.int8)
    b8 = torch.randint(-127,127,(K,N),dtype=torch.int8)
    bt = b8.t().contiguous().t()
    try:
        t_int = bench(lambda: torch._int_mm(a8, b8))
        t_int2 = bench(lambda: torch._int_mm(a8, bt))
    except Exception as e:
        t_int = t_int2 = repr(e)[:80]
    packed = torch.ops.quantized.linear_prepack(torch.quantize_per_channel(w, torch.rand(N)*0.01+0.001, torch.zeros(N,dtype=torch.long), 0, torch.qint8), None)
    t_dyn = bench(lambda: torch.ops.quantized.linear_dynamic(x, packed))
    t_f32 = bench(lambda: x @ w.t())
    print(M, 'int_mm', t_int, 'int_mm(colmajor)', t_int2, 'linear_dynamic', t_dyn, 'f32', t_f32)
