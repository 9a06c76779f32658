"""Session 50: does the Markov head gain from more answers, a wider rank or more epochs? (not timed)

    python benchmarks/markov-head/sweep_markov.py CACHE_DIR [FILE:N ...] [VARIANT ...]

Feeds the adapter's blocks over each file's drawn answers once (cached in CACHE_DIR as safetensors, so
a rerun only trains), then trains heads on the first `share` of each file's answers at several ranks and
epochs, and reports each head's held-out run (blocks of the training files) and its run on the probe
positions of recorded benchmark answers (probe_markov.py's: MT-bench and GSM8K `ar` answers).
"""

import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from reveal_probe import probe_texts  # noqa: E402

from pardec.cli.train_markov import read_data  # noqa: E402
from pardec.model import markov  # noqa: E402
from pardec.model.loading import load_model  # noqa: E402
from pardec.training.data import tokenize  # noqa: E402
from pardec.training.markov import Blocks, MarkovConfig, collect, feed_blocks, fit, mean_run  # noqa: E402
from pardec.training.sources import ContaminationFilter  # noqa: E402

D = 8
DEFAULT_DATA = [
    "data/distill-qwen2.5-coder-0.5b-chat-kinds.jsonl:600",
    "data/distill-qwen2.5-coder-0.5b-chat-kinds2.jsonl:600",
    "data/distill-qwen2.5-coder-0.5b-chat.jsonl:400",
    "data/distill-qwen2.5-coder-0.5b-math.jsonl:480",
    "data/distill-qwen2.5-coder-0.5b-code2.jsonl:120",
    "data/distill-qwen2.5-coder-0.5b-code3.jsonl:120",
    "data/distill-qwen2.5-coder-0.5b-complete.jsonl:100",
]
# the bundled head's draw (benchmarks/markov-head/train-markov.log), as answers per file
BUNDLED = {"chat-kinds": 240, "chat-kinds2": 240, "chat": 160, "math": 240, "code2": 80, "code3": 80, "complete": 60}
PROBES = [
    ("MT-bench", "benchmarks/amx-forks/mtbench80/samples.jsonl", "mtbench:0-79"),
    ("GSM8K", "benchmarks/amx-reveal/gsm8k50/samples.jsonl", "gsm8k:0-49"),
]
FIELDS = ("hidden", "top_ids", "top_logits", "text")


def cached(path: Path, make) -> tuple[Blocks, torch.Tensor]:
    """(blocks, owner [n]: the answer each block came from), made once."""
    if path.exists():
        t = load_file(path)
        return Blocks(*(t[f] for f in FIELDS)), t["owner"]
    blocks, owner = make()
    save_file({**{f: getattr(blocks, f).contiguous() for f in FIELDS}, "owner": owner}, path)
    return blocks, owner


def per_answer_blocks(lm, examples, cfg) -> tuple[Blocks, torch.Tensor]:
    # One collect per answer keeps which blocks came from which answer (the first n answers' blocks
    # make a subset); the block positions are drawn per answer with cfg.seed + index.
    parts, owner = [], []
    for i, ex in enumerate(examples):
        try:
            parts.append(collect(lm, [ex], D, replace(cfg, seed=cfg.seed + i), progress=False))
        except ValueError:
            continue
        owner.append(torch.full((len(parts[-1]),), i))
        if i % 50 == 0:
            print(f"  {i}/{len(examples)} answers fed", flush=True)
    return Blocks(*(torch.cat([getattr(p, f) for p in parts]) for f in FIELDS)), torch.cat(owner)


def main():
    cache = Path(sys.argv[1])
    cache.mkdir(parents=True, exist_ok=True)
    # FILE:N arguments draw other data; others pick the variants whose label contains them
    specs = [a for a in sys.argv[2:] if ".jsonl" in a] or DEFAULT_DATA
    want = [a for a in sys.argv[2:] if ".jsonl" not in a]
    lm = load_model("qwen2.5-coder-0.5b", dtype=torch.bfloat16)
    cfg = MarkovConfig()
    screen = ContaminationFilter.from_benchmarks()
    per_file = {}
    for spec in specs:
        name = Path(spec.rpartition(":")[0]).stem.removeprefix("distill-qwen2.5-coder-0.5b-")
        t = time.perf_counter()

        def make(spec=spec):
            rows = screen.clean_rows(read_data([spec], cfg.seed))
            return per_answer_blocks(lm, tokenize(lm.model, lm.tokenizer, rows, 512), cfg)

        blocks, owner = cached(cache / f"{name}.safetensors", make)
        per_file[name] = blocks, owner
        print(f"{name}: {len(owner.unique())} answers, {len(blocks)} blocks ({time.perf_counter() - t:.0f} s)",
              flush=True)  # fmt: skip

    probes = {}
    for name, samples, task in PROBES:

        def make(samples=samples, task=task):
            parts = []
            for x, positions in probe_texts(lm, samples, task, 16, 24, D):
                h, i, v = feed_blocks(lm.model, lm.mask_id, x, positions, D, cfg.top_k)
                parts.append((h, i, v, torch.tensor([x[t - 1 : t + D] for t in positions])))
            return Blocks(*(torch.cat(p) for p in zip(*parts))), torch.zeros(0)

        probes[name] = cached(cache / f"probe-{name}.safetensors", make)[0]

    def report(label, head):
        runs = {name: mean_run(head, b) for name, b in probes.items()}
        print(f"{label}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs.items()), flush=True)

    report("block alone", None)
    report("bundled head", lm.markov)

    def subset(limits):  # the blocks of each file's first limits[file] answers (None: all), and answers
        parts, answers = [], 0
        for k, (b, owner) in per_file.items():
            keep = owner < (limits[k] if limits else len(owner) + 1)
            parts.append(b.select(keep.nonzero()[:, 0]))
            answers += len(owner[keep].unique())
        return Blocks(*(torch.cat([getattr(p, f) for p in parts]) for f in FIELDS)), answers

    variants = [
        ("bundled draw, rank 256, 4 epochs", BUNDLED, cfg),
        ("all drawn, rank 256, 4 epochs", None, cfg),
        ("all drawn, rank 256, 4 epochs, context 2", None, replace(cfg, context=2)),
        ("all drawn, rank 512, 4 epochs", None, replace(cfg, rank=512)),
        ("all drawn, rank 256, 6 epochs", None, replace(cfg, epochs=6)),
        ("all drawn, rank 512, 4 epochs, context 2", None, replace(cfg, rank=512, context=2)),
    ]
    only = [v for v in variants if not want or any(w in v[0] for w in want)]
    for label, limits, c in only:
        blocks, answers = subset(limits)
        t = time.perf_counter()
        head, history = fit(lm, blocks, D, c, answers, progress=False)
        head.settings = replace(
            head.settings,
            training={**head.settings.training, "data": specs if limits is None else limits,
                      "seconds": round(time.perf_counter() - t), "script": "benchmarks/markov-head/sweep_markov.py"},
        )  # fmt: skip
        folder = cache / "heads" / label.replace(", ", "-").replace(" ", "")
        folder.mkdir(parents=True, exist_ok=True)
        markov.save(folder, head)  # a winner is copied beside the adapter
        last = history[-1]
        report(
            f"{label} ({len(blocks)} blocks; held out run {last['heldout_run']:.3f}, "
            f"slot accuracy {last['heldout_slot_accuracy']:.3f}; {time.perf_counter() - t:.0f} s)",
            head,
        )


if __name__ == "__main__":
    main()
