# TPF of decoding settings on a tuning split, batched (TPF per row does not depend on the batch, so
# this is much faster than `pardec bench`, which times one prompt at a time). Tune on prompts the
# reported benchmark does not use, e.g. HumanEval 80-163 (the bench reports 0-79).
# Usage: python benchmarks/tune_tpf.py TASKS METHODS [ADAPTER] [MAX_NEW_TOKENS]
#   e.g. python benchmarks/tune_tpf.py humaneval:80-163 spec,spec@block_reach=0.7 pardec/weights/qwen2.5-coder-0.5b 128
import sys

import torch

from pardec.api import encode_prompt, load_model, stop_token_ids
from pardec.bench.runner import parse_methods
from pardec.bench.tasks import load_tasks
from pardec.decoding import DecodeConfig, decode

tasks, methods = sys.argv[1], sys.argv[2]
adapter = sys.argv[3] if len(sys.argv) > 3 else "auto"
max_new = int(sys.argv[4]) if len(sys.argv) > 4 else 128
model, tok, mask_id = load_model("qwen2.5-coder-0.5b", torch.bfloat16, adapter)
prompts = [encode_prompt(tok, it.prompt) for it in load_tasks(tasks)]
base = DecodeConfig(block_size=8, max_new_tokens=max_new)
for spec in parse_methods(methods, base):
    if spec.label == "ar":
        continue
    if spec.adapter is not None:
        sys.exit(f"{spec.label}: give the adapter as the ADAPTER argument (one model per run here)")
    tokens = forwards = 0
    for i in range(0, len(prompts), 12):  # batches of 12 rows: little padding, bounded memory
        for r in decode(model, prompts[i : i + 12], spec.config, mask_id, stop_token_ids(model, tok)):
            tokens, forwards = tokens + len(r.tokens), forwards + r.forwards
    print(f"{spec.label}: TPF {tokens / forwards:.3f} ({tokens} tokens, {forwards} forwards)", flush=True)
