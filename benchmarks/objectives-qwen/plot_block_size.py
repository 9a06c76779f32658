"""TPF against block size per domain, from tune_tpf.py's output (block-size.txt) -> block-size.png.

    python benchmarks/objectives-qwen/plot_block_size.py
"""

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = Path(__file__).parent
rows = {}  # block size -> {domain: TPF}
for line in (here / "block-size.txt").read_text().splitlines():
    m = re.match(r"spec@(\d+)@\S*: TPF ([\d.]+) .*?; (.*)$", line)
    if m:
        rows[int(m[1])] = {"all": float(m[2])} | {
            k: float(v) for k, v in (part.split() for part in m[3].split(", "))
        }
sizes = sorted(rows)
fig, ax = plt.subplots(figsize=(5, 3.5))
for domain in rows[sizes[0]]:
    ax.plot(sizes, [rows[d][domain] for d in sizes], marker="o", label=domain,
            linewidth=2.5 if domain == "all" else 1.2)  # fmt: skip
ax.set_xlabel("block size D (spec@D)")
ax.set_ylabel("TPF (fixed shape, block drafts only)")
ax.set_ylim(1, max(max(r.values()) for r in rows.values()) + 0.5)
ax.set_xticks(sizes)
ax.legend(fontsize=8)
ax.set_title("bundled Qwen adapter, heldout-36, 128 tokens, fp32", fontsize=9)
fig.tight_layout()
fig.savefig(here / "block-size.png", dpi=100)
