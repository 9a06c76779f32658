"""Session 47's offline check: can bigram counts of the model's own answers (the bundled datastore)
re-rank the hidden block's first draft after the bonus, now that the bonus is known? Not timed.

    python benchmarks/amx-placement/bigram_rerank.py mtbench:0-79 \
        benchmarks/amx-forks/mtbench80/samples.jsonl 16

The same positions as scripts/reveal_probe.py (seed 0, 24 per answer, blocks of 8). For each: the
hidden block's slot-1 top-32 re-scored by log p + lam * log((count(bonus, x) + 0.5) / (count(bonus) + 16)),
against the block alone (base), the block after the bonus (clean), and the bigram's own argmax;
"gated" re-ranks only where the block's slot 0 did not hold the bonus.
"""

import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from reveal_probe import block_logits, probe_texts  # noqa: E402

from pardec.model.loading import load_model  # noqa: E402

lm = load_model("qwen2.5-coder-0.5b", dtype=torch.bfloat16)
toks = lm.datastore.tokens.astype(np.int64)
a, b = toks[:-1], toks[1:]
ok = (a >= 0) & (b >= 0)
pairs, counts = np.unique(a[ok] * 200000 + b[ok], return_counts=True)
big = defaultdict(dict)
for k, c in zip(pairs.tolist(), counts.tolist()):
    big[k // 200000][k % 200000] = c
uni = Counter(a[ok].tolist())
D, rows = 8, []
for x, pos in probe_texts(lm, sys.argv[2], sys.argv[1], int(sys.argv[3]), 24, D):
    blocks = [blk for t in pos for blk in ((t, [lm.mask_id] * D), (t + 1, [lm.mask_id] * D))]
    lg = block_logits(lm.model, lm.mask_id, x, blocks)
    for i, t in enumerate(pos):
        h, c = lg[2 * i], lg[2 * i + 1]
        top1 = h[1].softmax(-1).topk(32)
        rows.append(
            dict(
                bonus=x[t], truth=x[t + 1], slot0=h[0].argmax().item(), top1=top1, clean=c[0].argmax().item()
            )
        )


def rate(f):
    return sum(f(r) == r["truth"] for r in rows) / len(rows)


def base(r):
    return r["top1"].indices[0].item()


def bigram_argmax(r):
    d = big.get(r["bonus"])
    return max(d, key=d.get) if d else base(r)


def rerank(lam):
    def f(r):
        d, n = big.get(r["bonus"], {}), uni.get(r["bonus"], 0)
        probs, toks = r["top1"].values.tolist(), r["top1"].indices.tolist()
        scores = [np.log(p) + lam * np.log((d.get(t, 0) + 0.5) / (n + 16)) for p, t in zip(probs, toks)]
        return r["top1"].indices[int(np.argmax(scores))].item()

    return f


def gated(f):
    return lambda r: base(r) if r["slot0"] == r["bonus"] else f(r)


clean = rate(lambda r: r["clean"])
print(f"positions {len(rows)}: base {rate(base):.3f}, clean {clean:.3f}, bigram {rate(bigram_argmax):.3f}")
for lam in (0.25, 0.5, 1.0, 2.0):
    print(f"rerank lam={lam}: {rate(rerank(lam)):.3f}, gated {rate(gated(rerank(lam))):.3f}")
