"""How well a block drafts when it has seen the bonus token, against today's block that has not.

For positions t of recorded greedy answers (`pardec bench` samples: prompt + the `ar` answer x), three
blocks of D slots are fed beside the clean text, all in one forward (each sees only its own prefix):
  hidden:   after x[:t], every slot [MASK] (what spec feeds: the bonus x[t] is not known yet);
  revealed: after x[:t], slot 0 holding x[t] (spec --reveal, where x[t] was among the candidates);
  clean:    after x[:t + 1], every slot [MASK] (x[t] fed as text: the best a block can know).
Each block's drafts for x[t + 1 :] are accepted while they equal the answer: the mean run is what the
next step would accept after the bonus. Also: how often the block before (after x[:t - 1]) has x[t]
among its k likeliest tokens at that position (how often a revealed block would hold the bonus), and
how often the hidden block's slot 0 holds x[t] itself, with its first draft's accuracy where it does
(a block right about the bonus that still drafts after it worse than one that saw it: the slots'
conditional independence, not the bonus being unknown).

    python scripts/reveal_probe.py --samples benchmarks/amx-forks/mtbench80/samples.jsonl \\
        --task mtbench:0-79 --items 16 --positions 24
"""

from __future__ import annotations

import argparse
import json
import random

import torch

from pardec.training.markov import forward_blocks

KINDS = ("hidden", "revealed", "clean")
TOPS = (1, 2, 4, 8)


def block_logits(
    model, mask_id: int, text: list[int], blocks: list[tuple[int, list[int]]]
) -> list[torch.Tensor]:
    """Logits [D, V] of each block (start position, slot tokens) fed after text[:start], all in one
    forward beside the clean text."""
    logits, _ = forward_blocks(model, mask_id, text, blocks)  # [N, V]
    return list(logits.split([len(slots) for _, slots in blocks]))


def run_length(drafts: list[int], truth: list[int]) -> int:
    """Drafts accepted in a row against the answer's tokens."""
    n = 0
    while n < min(len(drafts), len(truth)) and drafts[n] == truth[n]:
        n += 1
    return n


def probe(model, mask_id: int, x: list[int], positions: list[int], D: int = 8) -> dict:
    """Per kind, the runs accepted after the bonus x[t]; per k, whether the block before held x[t]
    among its k likeliest; whether the hidden block's slot 0 held x[t] as its likeliest."""
    blocks = []
    for t in positions:
        blocks += [(t, [mask_id] * D), (t, [x[t]] + [mask_id] * (D - 1)), (t + 1, [mask_id] * D)]
        blocks.append((t - 1, [mask_id] * D))  # the block before: its slot 1 drafted position t
    logits = block_logits(model, mask_id, x, blocks)
    runs = {k: [] for k in KINDS}
    held = {k: [] for k in TOPS}
    slot0 = []
    for i, t in enumerate(positions):
        hidden, revealed, clean, before = logits[4 * i : 4 * i + 4]
        truth = x[t + 1 : t + D]
        runs["hidden"].append(run_length(hidden[1:].argmax(-1).tolist(), truth))
        slot0.append(hidden[0].argmax().item() == x[t])
        runs["revealed"].append(run_length(revealed[1:].argmax(-1).tolist(), truth))
        runs["clean"].append(run_length(clean[:-1].argmax(-1).tolist(), truth))
        top = before[1].topk(max(TOPS)).indices.tolist()
        for k in TOPS:
            held[k].append(x[t] in top[:k])
    return {"runs": runs, "held": held, "slot0": slot0}


def probe_texts(
    lm, samples: str, task: str, items: int, positions: int, D: int
) -> list[tuple[list[int], list[int]]]:
    """(prompt + answer ids, positions t) of the first `items` `ar` answers of a `pardec bench` samples
    file: up to `positions` random answer positions each (seed 0), with a token of answer before t - 1
    and D after t + 1. The offline checks in benchmarks/ probe the same positions through this."""
    from pardec.tasks import load_tasks

    by_id = {it.id: it for it in load_tasks(task)}
    records = [json.loads(line) for line in open(samples)]
    records = [r for r in records if r["method"] == "ar" and r["id"] in by_id][:items]
    rng, out = random.Random(0), []
    for r in records:
        prompt = lm.encode(by_id[r["id"]].prompt, True)
        x = prompt + r["tokens"]
        span = range(len(prompt) + 2, len(x) - D - 1)
        out.append((x, sorted(rng.sample(span, min(positions, len(span))))))
    return out


def main() -> None:
    from pardec.model.loading import load_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", required=True, help="a `pardec bench` samples.jsonl with `ar` answers")
    p.add_argument("--task", required=True, help="the bench's --task (to rebuild the prompts)")
    p.add_argument("--items", type=int, default=16, help="answers probed (the first ones)")
    p.add_argument("--positions", type=int, default=24, help="random positions per answer")
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--out", help="also write the figures as JSON here")
    args = p.parse_args()
    lm = load_model(args.model, dtype=torch.bfloat16)
    texts = probe_texts(lm, args.samples, args.task, args.items, args.positions, args.block_size)
    total = {"runs": {k: [] for k in KINDS}, "held": {k: [] for k in TOPS}}
    slot0 = []
    for x, positions in texts:
        got = probe(lm.model, lm.mask_id, x, positions, args.block_size)
        for part in total:
            for k in total[part]:
                total[part][k] += got[part][k]
        slot0 += got["slot0"]
    right = [n > 0 for n in total["runs"]["hidden"]]
    where = [r for r, s0 in zip(right, slot0) if s0]
    summary = {
        "answers": len(texts),
        "positions": len(total["runs"]["hidden"]),
        "mean_run": {k: sum(v) / len(v) for k, v in total["runs"].items()},
        "first_draft_right": {k: sum(n > 0 for n in v) / len(v) for k, v in total["runs"].items()},
        "bonus_in_top_k_before": {k: sum(v) / len(v) for k, v in total["held"].items()},
        "hidden_slot0_right": sum(slot0) / len(slot0),
        "hidden_first_draft_right_where_slot0_right": sum(where) / max(len(where), 1),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": vars(args), **summary}, f, indent=1)


if __name__ == "__main__":
    main()
