"""Slot accuracy of an adapter fed blocks shorter than the one it was trained with.

For answers the model wrote itself (a distillation file's last N rows), blocks of m [MASK] slots are
fed after 12 random points of each answer, all in one forward per answer and block size; a slot is
right when its argmax is the answer's token at its position. Prints per-slot accuracy and the mean
run of right slots from the first (what spec could accept), for m = 2, 3, 4, 6 and D.

    python scripts/short_blocks.py data/distill-qwen2.5-coder-0.5b-math.jsonl 20 [--adapter PATH]
"""

import argparse
import json

import torch

from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step
from pardec.model.chat import encode_prompt
from pardec.model.loading import load_model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("n", type=int, help="the file's last N rows")
    p.add_argument("--adapter", default="auto")
    p.add_argument("--max-tokens", type=int, default=200, help="answer tokens kept per row")
    args = p.parse_args()
    torch.set_num_threads(2)
    lm = load_model(adapter=args.adapter)
    D = lm.trained_block_size
    sizes = sorted({2, 3, 4, 6, D} - {s for s in (3, 4, 6) if s >= D})
    rows = [json.loads(line) for line in open(args.data)][-args.n :]
    hits = {m: torch.zeros(m) for m in sizes}
    runs = dict.fromkeys(sizes, 0.0)
    g, points = torch.Generator().manual_seed(0), 0
    for r in rows:
        prompt = encode_prompt(lm.tokenizer, r["prompt"])
        answer = lm.tokenizer(r["response"], add_special_tokens=False)["input_ids"][: args.max_tokens]
        if len(answer) <= D + 1:
            continue
        ids = prompt + answer
        backs = sorted(set((torch.randperm(len(answer) - D - 1, generator=g)[:12] + D + 1).tolist()))
        for m in sizes:
            cache = BlockCache.empty(1, lm.model.config, lm.model.device)
            out = block_step(
                lm.model, cache, [ids], [[Block(b, [lm.mask_id] * m) for b in backs]], 1, lm.mask_id
            )
            pred = out.block_logits[0].argmax(-1).view(len(backs), m)  # [blocks, m]
            for i, b in enumerate(backs):
                start = len(ids) - b  # slot j predicts the token at position start + j
                right = (pred[i] == torch.tensor(ids[start : start + m])).float()
                hits[m] += right
                runs[m] += float(right.cumprod(0).sum())
        points += len(backs)
    print(f"adapter {lm.adapter} (trained D = {D}), {points} blocks per size from {args.data}")
    print("| slots | accuracy by slot | mean run of right slots |\n|---|---|---|")
    for m in sizes:
        print(
            f"| {m} | {' '.join(f'{x:.2f}' for x in (hits[m] / points).tolist())} | {runs[m] / points:.2f} |"
        )


if __name__ == "__main__":
    main()
