# Wall-clock comparison of several adapters in one process: ar, and spec with each adapter,
# interleaved per prompt (the order rotates), batch 1, bf16, greedy, D = 8, max 128 new tokens.
# `pardec bench` loads one adapter per run; this gives every adapter's ratio to the same ar in the
# same run. Tune on prompts the reported benchmark does not use (HumanEval 80-163).
# Usage: python benchmarks/ab_adapters.py TASKS OUT.json ADAPTER [ADAPTER ...]
#   e.g. python benchmarks/ab_adapters.py humaneval:80-103 ab.json pardec/weights/qwen2.5-coder-0.5b runs/other
import json
import sys
import time

import torch

from pardec.api import encode_prompt, load_model, stop_token_ids
from pardec.bench.tasks import load_tasks
from pardec.decoding import DecodeConfig, decode

tasks, out, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
models = {}
for path in paths:
    models[path], tok, mask_id = load_model("qwen2.5-coder-0.5b", torch.bfloat16, path)
first = models[paths[0]]
stop = stop_token_ids(first, tok)
prompts = [encode_prompt(tok, it.prompt) for it in load_tasks(tasks)]
spec = DecodeConfig(method="spec", block_size=8, max_new_tokens=128)
runs = {"ar": (first, DecodeConfig(method="ar", max_new_tokens=128))} | {f"spec:{p}": (models[p], spec) for p in paths}
totals = {k: {"tokens": 0, "forwards": 0, "seconds": 0.0} for k in runs}


def summary(totals):
    """Each run's totals with TPF, tokens/s and its speedup over ar so far."""
    ar_speed = totals["ar"]["tokens"] / totals["ar"]["seconds"]
    out = {}
    for k, v in totals.items():
        speed = v["tokens"] / v["seconds"]
        out[k] = v | {"tpf": v["tokens"] / v["forwards"], "tokens_per_s": speed, "speedup_vs_ar": speed / ar_speed}
    return out


decode(first, prompts[:1], runs["ar"][1], mask_id, stop)  # warm-up, not counted
names = list(runs)
for i, p in enumerate(prompts):
    r0 = i % len(names)
    for k in names[r0:] + names[:r0]:
        model, cfg = runs[k]
        t = time.perf_counter()
        r = decode(model, [p], cfg, mask_id, stop)[0]
        tot = totals[k]
        tot["seconds"] += time.perf_counter() - t
        tot["tokens"] += len(r.tokens)
        tot["forwards"] += r.forwards
    print(i, "  ".join(f"{k}: TPF {v['tpf']:.3f} tok/s {v['tokens_per_s']:.2f} x{v['speedup_vs_ar']:.3f}"
                       for k, v in summary(totals).items()), flush=True)
json.dump({"tasks": tasks, "max_new_tokens": 128, "prompts": len(prompts), "runs": summary(totals)}, open(out, "w"), indent=1)
