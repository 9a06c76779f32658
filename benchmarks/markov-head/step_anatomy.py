"""Session 48's offline check: what adaptive spec's steps are, by the source of their chain (looked-up,
the block's, none), whether they were plain (no block fed) and how many blocks they fed; with the
tokens each committed. One process, the prompts one after another, not interleaved: the tokens/s
printed are a rough guide only (`pardec bench` gives the speeds).

    python benchmarks/markov-head/step_anatomy.py gsm8k:0-5 6 "" plan_ahead=true plan_ahead=true,fallback=true

Each argument after the count is one decoding (comma-separated true/false settings of DecodeConfig;
"" the defaults). `noplain=true` forbids plain steps that verify a looked-up chain.
"""

import collections
import dataclasses
import sys
import time

import torch

from pardec import configure
from pardec.decoding import METHODS, DecodeConfig, decode
from pardec.decoding.spec import Speculative
from pardec.model import load_model
from pardec.tasks import load_tasks

log, settings = [], {"noplain": False}


class Anatomy(Speculative):
    def drafts(self, row):
        d = super().drafts(row)
        st = row.state
        src = "lookup" if st.from_lookup else ("block" if d else "none")
        nblocks = 0 if self.plain(row) else len(self.block_lengths(row))
        self._rec = dict(src=src, fed=len(d), plain=self.plain(row), nblocks=nblocks)
        return d

    def _plain_pays_more(self, row):
        return False if settings["noplain"] else super()._plain_pays_more(row)

    def update(self, row, ntp, block, hidden=None):
        upd = super().update(row, ntp, block, hidden)
        log.append(dict(self._rec, commit=len(upd.commit)))
        return upd


METHODS["spec"] = dataclasses.replace(METHODS["spec"], policy=Anatomy)
task, n, opts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lm = load_model("qwen2.5-coder-0.5b", dtype=torch.bfloat16)
items = load_tasks(task)[:n]
for opt in opts:
    kw = {k: v == "true" for k, v in (kv.split("=") for kv in opt.split(",") if kv)}
    settings["noplain"] = kw.pop("noplain", False)
    cfg, extras = configure(lm, DecodeConfig(method="spec", block_size=8, max_new_tokens=256, **kw))
    log.clear()
    t0 = time.perf_counter()
    for it in items:
        decode(lm.model, [lm.encode(it.prompt, True)], cfg, lm.mask_id, lm.stop_ids, extras=extras)
    seconds = time.perf_counter() - t0
    by = collections.defaultdict(lambda: [0, 0, 0])
    for r in log:
        k = (r["src"], "plain" if r["plain"] else f"{r['nblocks']} block(s)")
        by[k][0] += 1
        by[k][1] += r["commit"]
        by[k][2] += r["fed"]
    tokens = sum(r["commit"] for r in log)
    print(
        f"{opt or 'defaults'}: TPF {tokens / len(log):.3f}, {len(log)} steps, {tokens / seconds:.2f} tokens/s"
    )
    for k, (c, t, f) in sorted(by.items(), key=lambda x: -x[1][0]):
        print(
            f"  chain {k[0]:6s} {k[1]:10s} steps {c:4d}  committed a step {t / c:.2f}  drafts fed a step {f / c:.2f}"
        )
