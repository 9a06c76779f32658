"""Session 48's offline check of the Markov head on recorded benchmark answers (not timed).

    python benchmarks/markov-head/probe_markov.py

The probe positions of scripts/reveal_probe.py (the first 16 `ar` answers, 24 random positions each,
seed 0): a block of 8 [MASK] after x[:t], whose slot 0 sits at the bonus x[t]. With the bonus taken as
known (verification gives it), how many of the block's next drafts are accepted in a row against the
answer: the block alone (each slot's likeliest) against the adapter's Markov head (each draft re-ranked
given the one before it).
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from reveal_probe import probe_texts  # noqa: E402

from pardec.model.loading import load_model  # noqa: E402
from pardec.training.markov import Blocks, feed_blocks, mean_run  # noqa: E402

D = 8
SETS = [
    ("MT-bench", "benchmarks/amx-forks/mtbench80/samples.jsonl", "mtbench:0-79"),
    ("GSM8K", "benchmarks/amx-reveal/gsm8k50/samples.jsonl", "gsm8k:0-49"),
]

lm = load_model("qwen2.5-coder-0.5b", dtype=torch.bfloat16)
for name, samples, task in SETS:
    parts = []
    for x, positions in probe_texts(lm, samples, task, 16, 24, D):
        h, i, v = feed_blocks(lm.model, lm.mask_id, x, positions, D, lm.markov.settings.top_k)
        parts.append((h, i, v, torch.tensor([x[t - 1 : t + D] for t in positions])))
    blocks = Blocks(*(torch.cat(p) for p in zip(*parts)))
    alone, head = mean_run(None, blocks), mean_run(lm.markov, blocks)
    print(
        f"{name}: {len(blocks)} positions, drafts accepted in a row after the bonus: block alone "
        f"{alone:.3f}, with the Markov head {head:.3f} ({head / alone - 1:+.0%})"
    )
