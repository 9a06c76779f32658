# Held-out spec TPF of adapters on the same 6 held-out prompts (the last 3 of each distilled file,
# as `pardec retrofit --heldout 6` holds them out), 96 new tokens, bf16.
# Usage: python benchmarks/heldout_compare.py ADAPTER:D:DRAFT_BLOCKS[:BLOCK_AT[:DRAFT_CUTOFF]] [...]
# (BLOCK_AT empty or missing: after all drafts; DRAFT_CUTOFF default 0: every draft fed).
import sys

import torch

from pardec.api import encode_prompt, load_model, stop_token_ids
from pardec.decoding import DecodeConfig, decode
from pardec.training.data import read_pairs, split_heldout

files = ["data/distill-qwen2.5-coder-0.5b.jsonl", "data/distill-qwen2.5-coder-0.5b-chat.jsonl"]
_, held = split_heldout([read_pairs(f) for f in files], files, 6)
loaded = {}
for arg in sys.argv[1:]:
    adapter, D, db, *rest = arg.split(":")
    at, cutoff = (rest[0] if rest else ""), (rest[1] if len(rest) > 1 else "0")
    if adapter not in loaded:
        loaded = {adapter: load_model("qwen2.5-coder-0.5b", torch.bfloat16, adapter)}
    model, tok, mask_id = loaded[adapter]
    prompts = [encode_prompt(tok, r["prompt"]) for r in held]
    config = DecodeConfig(method="spec", block_size=int(D), draft_blocks=int(db),
                          block_at=int(at) if at else None, block_reach=0.0, draft_cutoff=float(cutoff),
                          max_new_tokens=96)
    res = decode(model, prompts, config, mask_id, stop_token_ids(model, tok))
    def tpf(rs):
        return sum(len(r.tokens) for r in rs) / sum(r.forwards for r in rs)
    print(f"{arg}: code {tpf(res[:3]):.2f} chat {tpf(res[3:]):.2f} all {tpf(res):.2f}", flush=True)
