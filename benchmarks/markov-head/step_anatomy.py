"""Offline check of what adaptive spec's steps are, by the source of their chain (looked-up, the
block's, none), whether they were plain (no block fed) and how many blocks they fed; with the tokens
each committed. One process, the prompts one after another, not interleaved: the tokens/s printed are a
rough guide only (`pardec bench` gives the speeds). "modeled" prices every step on this machine's
measured step-cost curve (what the schedule plans with): free of timing noise, it compares schedules
on the same text (in bf16 the texts may still part at near-ties).

    python benchmarks/markov-head/step_anatomy.py gsm8k:0-5 6 "" plan_ahead=true plan_ahead=true,fallback=true

Each argument after the count is one decoding (comma-separated true/false settings of DecodeConfig;
"" the defaults). `noplain=true` forbids plain steps that verify a looked-up chain; `gaincredit=true`
credits `plan_ahead` with the block drafts' counterfactual gain (what a step with them committed beyond
what its best looked-up drafts alone would have; 0 at a plain step) instead of the drafts the block's
chains accepted (session 49's comparison, `benchmarks/plan-ahead.md`; its logs name the default credit
`oldcredit=true` and this one plain `plan_ahead=true`).

With FP32=1 the model decodes in float32, where spec's output is AR's token for token whatever the
schedule, while every step is still priced and planned on the bf16 curve: the modeled speeds then
compare schedules on one text.
"""

import collections
import dataclasses
import os
import sys
import time

import torch

from pardec import configure
from pardec.core import cost as step_cost
from pardec.decoding import METHODS, DecodeConfig, decode, schedule
from pardec.decoding.spec import Speculative, _shared
from pardec.model import load_model
from pardec.tasks import load_tasks

log, settings = [], {"noplain": False, "gaincredit": False}
clock = {"last": None}  # the end of the row's last step (None: the next one follows the prefill)


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

    def draft_from(self, row, *args, **kwargs):
        row.state.from_block = True  # the next step has the block's drafts
        super().draft_from(row, *args, **kwargs)

    def update(self, row, ntp, block, hidden=None):
        st = row.state
        extra = (0 if st.fork is None else self.branch_tokens(row)) + self.extra_slots(row)
        slots = False if self.plain(row) else self.width
        modeled = schedule.step_seconds(self.cost, 1 + len(st.tokens) + extra, len(row.committed), slots)
        plan, look, plain = st.plan, list(st.look), self.plain(row)
        from_block, st.from_block = getattr(st, "from_block", False), False
        upd = super().update(row, ntp, block, hidden)
        if settings["gaincredit"]:
            if from_block:
                commit = upd.commit
                alone = min(len(commit), 1 + _shared(look, commit))  # a plain step on the lookups
                gain = 0 if plain else len(commit) - alone
                got = getattr(plan, "gain", None)
                plan.gain = gain if got is None else got + schedule.EMA * (gain - got)
            plan.block_drafts = getattr(plan, "gain", None)
        now, last = time.perf_counter(), clock["last"]
        clock["last"] = now
        real = None if last is None else now - last  # the whole step: lookups, drafts, forward, verdict
        log.append(dict(self._rec, commit=len(upd.commit), modeled=modeled, real=real))
        return upd


METHODS["spec"] = dataclasses.replace(METHODS["spec"], policy=Anatomy)
task, n, opts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lm = load_model("qwen2.5-coder-0.5b", dtype=torch.bfloat16)
bf16_cost = step_cost.for_model(lm, 8)
if os.environ.get("FP32") == "1":
    del lm
    lm = load_model("qwen2.5-coder-0.5b", dtype=torch.float32)
items = load_tasks(task)[:n]
for opt in opts:
    kw = {k: v == "true" for k, v in (kv.split("=") for kv in opt.split(",") if kv)}
    for k in settings:
        settings[k] = kw.pop(k, False)
    cfg, extras = configure(lm, DecodeConfig(method="spec", block_size=8, max_new_tokens=256, **kw))
    extras["cost"] = bf16_cost
    log.clear()
    t0 = time.perf_counter()
    for it in items:
        clock["last"] = None
        decode(lm.model, [lm.encode(it.prompt, True)], cfg, lm.mask_id, lm.stop_ids, extras=extras)
    seconds = time.perf_counter() - t0
    by = collections.defaultdict(lambda: [0, 0, 0, 0.0, 0.0, 0])
    for r in log:
        k = (r["src"], "plain" if r["plain"] else f"{r['nblocks']} block(s)")
        by[k][0] += 1
        by[k][1] += r["commit"]
        by[k][2] += r["fed"]
        if r["real"] is not None:
            by[k][3] += r["real"]
            by[k][4] += r["modeled"]
            by[k][5] += 1
    tokens = sum(r["commit"] for r in log)
    modeled = sum(r["modeled"] for r in log)
    print(
        f"\n{opt or 'defaults'}: TPF {tokens / len(log):.3f}, {len(log)} steps, {tokens} tokens, "
        f"{tokens / seconds:.2f} tokens/s, modeled {tokens / modeled:.2f} tokens/s",
        flush=True,
    )
    for k, (c, t, f, real, mod, timed) in sorted(by.items(), key=lambda x: -x[1][0]):
        print(
            f"  chain {k[0]:6s} {k[1]:10s} steps {c:4d}  committed a step {t / c:.2f}  drafts fed a step {f / c:.2f}"
            f"  ms a step: real {1000 * real / max(timed, 1):.0f}, modeled {1000 * mod / max(timed, 1):.0f}"
        )
