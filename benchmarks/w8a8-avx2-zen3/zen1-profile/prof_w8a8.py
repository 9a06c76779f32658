import time, torch, sys
from transformers import DynamicCache
from pardec.model.loading import load_model
torch.set_num_threads(2)
quant = sys.argv[1]; adapter = sys.argv[2] if len(sys.argv) > 2 else "none"
lm = load_model("qwen2.5-coder-0.5b", torch.bfloat16, adapter=adapter, quant=quant)
m = lm.model
ids = torch.randint(0, 1000, (1, 128))
with torch.no_grad():
    c = DynamicCache(config=m.config); m(ids, cache=c, use_cache=True)
    x = ids[:, -1:]
    pos = torch.tensor([[128]])
    def step():
        o = m(x, position_ids=pos, cache=c, use_cache=True); c.crop(-1); return o
    for _ in range(5): step()
    t = time.perf_counter()
    for _ in range(20): step()
    print("step ms", (time.perf_counter()-t)/20*1e3)
    from torch.profiler import profile
    with profile() as p:
        for _ in range(10): step()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
