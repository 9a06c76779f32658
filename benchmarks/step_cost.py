# Where a spec step's time goes: block_step for AR (1 pending token), spec (D pending + D block
# slots), spec's shapes with the gate off (no [MASK] in the slots: the adapter's share), spec with
# 3 draft blocks, and spec's token count as plain pending tokens (plain2D).
# Usage: python benchmarks/step_cost.py ADAPTER D   (qwen2.5-coder-0.5b, bf16; medians of 9, interleaved)
import sys, time, statistics, torch
from pardec.api import load_model
from pardec.cache import BlockCache
from pardec.decoding.step import block_step
torch.set_grad_enabled(False)
adapter = sys.argv[1]
D = int(sys.argv[2])
model, tok, mask_id = load_model("qwen2.5-coder-0.5b", torch.bfloat16, adapter)
prompt = torch.randint(0, 5000, (300,)).tolist()
def fresh():
    c = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, c, [prompt], None, 1, mask_id)
    c.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    return c
cache = fresh()
def run(kind):
    c = fresh() if False else cache
    n0 = c.length
    if kind == "ar":
        pend, blocks, nn = [[5]], None, 1
    elif kind == "spec":
        pend, blocks, nn = [[5] * D], [[(0, [mask_id] * D)]], D
    elif kind == "spec3":
        pend, blocks, nn = [[5] * D], [[(0, [mask_id] * D), (D - 1, [mask_id] * D), (D - 2, [mask_id] * D)]], D
    elif kind == "spec_nogate":  # spec's shapes with a non-mask token in the block slots: the adapter's cost
        pend, blocks, nn = [[5] * D], [[(0, [5] * D)]], D
    elif kind == "plain2D":  # same token count, no mask tokens: gate off
        pend, blocks, nn = [[5] * (2 * D)], None, 2 * D
    t = time.perf_counter()
    out = block_step(model, c, pend, blocks, nn, mask_id)
    dt = time.perf_counter() - t
    keep = torch.zeros_like(out.pending_valid)
    c.commit(out.fed_pos, keep, out.block_logits.shape[1])
    return dt
kinds = ["ar", "spec", "spec_nogate", "spec3", "plain2D"]
ts = {k: [] for k in kinds}
for r in range(9):
    for k in kinds:
        ts[k].append(run(k))
base = statistics.median(ts["ar"])
for k in kinds:
    m = statistics.median(ts[k]); print(f"{k}: {m*1000:.1f} ms ({m/base:.2f}x ar)", flush=True)
W = model.get_output_embeddings().weight
h = torch.randn(1, D - 1, W.shape[1], dtype=W.dtype)
hs = []
for r in range(9):
    t = time.perf_counter(); torch.nn.functional.linear(h, W); hs.append(time.perf_counter() - t)
print(f"head for {D-1} positions: {statistics.median(hs)*1000:.1f} ms")
