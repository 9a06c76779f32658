"""Replay the 1.5B's own 48 math answers (data/distill-qwen2.5-coder-1.5b-math.jsonl) with looked-up
drafts alone, model-free: in-context only, the 0.5B's bundled store only, priced and either (as
scripts/replay_lookup.py). Run from the repository root: python benchmarks/qwen1.5b-adapter/replay_store.py"""

import json
import sys

sys.path.insert(0, "scripts")  # noqa: E402 (the replay lives in scripts/)
from replay_lookup import replay
from transformers import AutoTokenizer

from pardec.model import datastore as ds
from pardec.model.chat import encode_prompt
from pardec.model.loading import resolve

tok = AutoTokenizer.from_pretrained(str(resolve("qwen2.5-coder-1.5b")))
rows = [json.loads(line) for line in open("data/distill-qwen2.5-coder-1.5b-math.jsonl")]
pairs = [(encode_prompt(tok, r["prompt"]), tok.encode(r["response"], add_special_tokens=False)) for r in rows]
store = ds.load(ds.locate("qwen2.5-coder-1.5b", None))
print(ds.locate("qwen2.5-coder-1.5b", None), sum(len(a) for _, a in pairs), "answer tokens")
print(replay(pairs, store, ["ctx", "store", "priced", "either"]))
