"""Ad hoc A/B: spec@quant=int4 with and without feeding a looked-up chain in a plain step when that
pays more than the planned block step (the `_plain_pays_more` check), interleaved per prompt."""
import sys, time, json
import torch
from pardec import DecodeConfig, load_model
from pardec.api import configure, generate
from pardec.decoding import spec as spec_module
from pardec.tasks import load_tasks

torch.set_num_threads(2)
task = sys.argv[1] if len(sys.argv) > 1 else "humaneval:0-5"
max_new = int(sys.argv[2]) if len(sys.argv) > 2 else 512
lm = load_model(quant="int4")
config, extras = configure(lm, DecodeConfig(method="spec", max_new_tokens=max_new))
items = load_tasks(task)
original = spec_module.Speculative._plain_pays_more
tot = {"new": [0, 0.0, 0], "old": [0, 0.0, 0]}
for item in items:
    for arm in ("new", "old"):
        spec_module.Speculative._plain_pays_more = original if arm == "new" else (lambda self, row: False)
        t = time.perf_counter()
        out = generate(lm, [item.prompt], config, extras=extras)[0]
        s = time.perf_counter() - t
        tot[arm][0] += out.new_tokens; tot[arm][1] += s; tot[arm][2] += out.forwards
        print(arm, item.id if hasattr(item, "id") else "", out.new_tokens, f"{out.new_tokens/s:.2f} tok/s", f"TPF {out.tokens_per_forward:.2f}", flush=True)
for arm, (n, s, f) in tot.items():
    print(arm, f"{n} tokens, {s:.1f} s, {n/s:.2f} tok/s, TPF {n/f:.2f}")
