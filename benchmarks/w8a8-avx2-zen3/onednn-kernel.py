import torch, time
torch.set_num_threads(2)
K, N = 896, 4864
def bench(f, n=200):
    for _ in range(10): f()
    t=time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter()-t)/n*1e3
print([o for o in dir(torch.ops.onednn) if 'lin' in o])
w = torch.randn(N, K)
w_scale = (w.abs().amax(1)/127).float()
qw = torch.round(w / w_scale[:,None]).to(torch.int8)
packed = torch.ops.onednn.qlinear_prepack(qw, [1, K])
w_zp = torch.zeros(N, dtype=torch.long)
for M in (1, 9, 16):
    x = torch.randn(M, K)
    s = float(x.abs().max()/127)
    qx = torch.round(x/s).clamp(-128,127).to(torch.uint8 if False else torch.int8)
    # u8 activations are oneDNN's fast path on x86; try both
    qxu = (torch.round(x/s)+128).clamp(0,255).to(torch.uint8)
    for name, q, zp in (("s8", qx, 0), ("u8", qxu, 128)):
        try:
            f = lambda: torch.ops.onednn.qlinear_pointwise(q, s, zp, packed, w_scale, w_zp, None, 1.0, 0, torch.float32, "none", [], "")
            out = f()
            ref = (q.float()-zp)*s @ (qw.float()*w_scale[:,None]).t()
            print(M, name, 'onednn', round(bench(f),3), 'ms', 'maxerr', float((out-ref).abs().max()))
        except Exception as e:
            print(M, name, repr(e)[:300])
