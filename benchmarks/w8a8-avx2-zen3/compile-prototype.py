"""Prototype: w8a8 through torch.compile with fbgemm's op behind a custom op keyed by an int handle."""
import statistics, time, sys
import torch
from pardec.core.cache import BlockCache
from pardec.core.step import block_step
from pardec.model import load_model
from pardec.model import quant as Q
from pardec.model.compiled import CompiledSteps

REG = {}

@torch.library.custom_op("proto::w8a8_mm", mutates_args=())
def w8a8_mm(x: torch.Tensor, handle: int) -> torch.Tensor:
    return Q._W8A8_MM(x, REG[handle], True)

@w8a8_mm.register_fake
def _(x, handle):
    return x.new_empty(x.shape[0], REG_N[handle])

REG_N = {}

def kernel(self, x):
    x = x.float()
    divisor = torch.add(Q._TINY, x.abs().amax(1, keepdim=True), alpha=1 / Q._W8A8_SHRINK)
    y = w8a8_mm(torch.cat([x / divisor, self.anchor]), self.handle)[:-1]
    return (y * divisor).to(self.activation_dtype)

def part(self, index, x):
    return self(x)[..., self.bounds[index] : self.bounds[index + 1]]

torch.set_grad_enabled(False)
lm = load_model("qwen2.5-coder-0.5b", torch.float32, "auto", "w8a8")
model, mask_id = lm.model, lm.mask_id
for m in model.modules():
    if isinstance(m, Q.W8A8Linear):
        h = len(REG); REG[h] = m.packed; REG_N[h] = m.out_features; m.handle = h
ctx = int(sys.argv[1]) if len(sys.argv) > 1 else 128
def run(model, label, rounds=15):
    cache = BlockCache.empty(1, model.config, model.device)
    torch.manual_seed(0)
    out = block_step(model, cache, [torch.randint(0, 5000, (ctx,)).tolist()], None, 1, mask_id)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    ts, logits = [], None
    t0 = time.perf_counter()
    for r in range(rounds + 2):
        t = time.perf_counter()
        out = block_step(model, cache, [[17]], None, 1, mask_id)
        if r >= 2: ts.append(time.perf_counter() - t)
        if r == 0: print(label, "first step (compile)", round(time.perf_counter() - t, 1), "s", flush=True)
        logits = out.ntp_logits if hasattr(out, "ntp_logits") else None
        cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), 0)
    with torch.profiler.profile() as prof:
        out = block_step(model, cache, [[17]], None, 1, mask_id)
        cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), 0)
    ev = [e for e in prof.key_averages() if "w8a8" in e.key or "linear_dynamic" in e.key]
    for e in ev: print(label, e.key, e.count, round(e.self_cpu_time_total / 1000, 2), "ms")
    print(label, "ar step median", round(statistics.median(ts) * 1000, 1), "ms", flush=True)
    return out
eager = run(model, "eager (memo siblings)", 15)
Q.W8A8Linear.kernel = kernel
Q.W8A8Siblings.part = part
comp = run(CompiledSteps(model), "compiled")
for f in ("ntp_logits", "logits"):
    if hasattr(eager, f):
        a, b = getattr(eager, f), getattr(comp, f)
        print(f, a.shape, "nan eager", int(a.isnan().sum()), "nan compiled", int(b.isnan().sum()), a[0,-1,:5], b[0,-1,:5])
        fin = a.isfinite()
        print(f, "max diff", float((a[fin] - b[fin]).abs().max()), "equal", torch.equal(a, b))
