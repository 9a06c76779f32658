"""The same step-cost curve measured three times in a row: block x AR by both estimators."""
import sys, time, torch
import pardec.core.cost as cost
from pardec.model import load_model
lm = load_model("smollm2-135m", torch.float32, "auto", sys.argv[1] if len(sys.argv) > 1 else "w8a8")
real, seen = cost._per_round_typical, {}
def both(times):
    seen["min"] = {k: min(v) for k, v in times.items()}
    seen["ratio"] = real(times)
    return seen["ratio"]
cost._per_round_typical = both
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    t = time.time()
    c = cost.measure(lm.decoder, lm.mask_id, 8)
    for name, best in seen.items():
        ar = best[(128, 1, 0)]
        rel = [round(best[(128, n, 8)] / ar, 2) for n in (1, 2, 4, 8)]
        plain = [round(best[(128, n, 0)] / ar, 2) for n in (2, 4, 8)]
        print(f"run {i} {name:5s}: spread {c.spread:.3f}, AR {1000 * ar:.1f} ms, block x AR at 1/2/4/8 {rel}, "
              f"plain x AR at 2/4/8 {plain}", flush=True)
