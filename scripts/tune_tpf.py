"""TPF of decoding settings on a tuning split, batched: TPF per row does not depend on the batch, so
this is much faster than `pardec bench`, which times one prompt at a time. Tune on prompts the
reported benchmark does not use, e.g. HumanEval 80-163 (the reported runs use 0-79).

    python scripts/tune_tpf.py --task humaneval:80-163 --methods spec,spec@block_reach=0.5

`--by-category` adds the TPF of each category, named as `per_category.py` names them: an MT-bench
question's own category, else the id's last `/` field (held-out prompts with ids such as
heldout-writing/3-0/chat give one TPF per domain).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from per_category import categories  # this folder's: run as python scripts/tune_tpf.py
from tqdm import tqdm

from pardec import configure
from pardec.bench import parse_methods
from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model import load_model
from pardec.tasks import load_tasks


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="as `pardec bench --task`, e.g. humaneval:80-163")
    p.add_argument("--methods", required=True, help="as `pardec bench --methods` (no @adapter=, no hf)")
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default="auto")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="float32 where the CPU emulates bf16 (no avx512_bf16): faster there for batched steps",
    )
    p.add_argument("--by-category", action="store_true", help="also the TPF of each category (see above)")
    p.add_argument(
        "--batch-size", type=int, default=12, help="rows per batch (little padding, bounded memory)"
    )
    args = p.parse_args(argv)
    lm = load_model(args.model, getattr(torch, args.dtype), args.adapter)
    items = load_tasks(args.task)
    prompts = [lm.encode(it.prompt) for it in items]
    cats = categories([it.id for it in items])
    for spec in parse_methods(args.methods, DecodeConfig(max_new_tokens=args.max_new_tokens)):
        if spec.label == "ar":
            continue
        if spec.adapter is not None or spec.external or spec.quant != "none" or spec.compile:
            raise SystemExit(f"{spec.label}: one model per run here (no @adapter=, @quant=, @compile=, hf)")
        try:
            config, extras = configure(lm, spec.config, "block_size" in spec.sets)
        except PardecError as e:
            raise SystemExit(f"error: {e}") from None
        tokens, forwards = defaultdict(int), defaultdict(int)  # by category
        starts = range(0, len(prompts), args.batch_size)
        for i in tqdm(starts, desc=spec.label, unit="batch", leave=False):
            rows = decode(
                lm.model, prompts[i : i + args.batch_size], config, lm.mask_id, lm.stop_ids, extras=extras
            )
            for c, r in zip(cats[i : i + args.batch_size], rows):
                tokens[c] += len(r.tokens)
                forwards[c] += r.forwards
        t, f = sum(tokens.values()), sum(forwards.values())
        line = f"{spec.label}: TPF {t / f:.3f} ({t} tokens, {f} forwards)"
        if args.by_category:
            line += "; " + ", ".join(f"{c} {tokens[c] / forwards[c]:.3f}" for c in sorted(tokens))
        print(line, flush=True)


if __name__ == "__main__":
    main()
