"""Replay greedy `ar` answers of a bench run with looked-up drafts alone (no model, no block): each
step commits the drafts that match the answer and one more token, so tokens / steps is the TPF those
drafts would give. It asks what limits the looked-up drafts of spec, per domain:

- data: the datastore rebuilt from growing shares of the distillation answers (a random subset of
  rows, the same seed for every share);
- the choice between the in-context and the store candidate: the one spec's stats price higher
  (`priced`, the learned rates with no block to relate to) against the better one each step
  (`either`, an oracle);
- a tree instead of a chain: the store's trie walked best-first (a node's weight is the product of
  its supports), as many tokens as a chain of `--tree` drafts, accepted along the longest matching
  path (`tree@B`; at the full store only).

    python scripts/replay_lookup.py --samples benchmarks/lookup-agree/mtbench80/samples.jsonl \\
        --samples benchmarks/lookup-agree/gsm8k50/samples.jsonl --out benchmarks/lookup-replay
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import random
import sys
from pathlib import Path

import numpy as np

from pardec.decoding import lookup
from pardec.model import datastore as ds

DRAFTS = 16  # spec's default lookup length


def matched(drafts: list[int], answer: list[int], i: int) -> int:
    """How many of drafts equal answer[i:], from the first."""
    k = 0
    while k < len(drafts) and i + k < len(answer) and drafts[k] == answer[i + k]:
        k += 1
    return k


def children(store: ds.Datastore, start: int, end: int, depth: int) -> list[tuple[int, int, int]]:
    """[(token, lo, hi)] the tokens `depth` after the positions order[start:end], each with the range of
    the positions followed by it (sorted there, so each is one run)."""
    if depth >= store.depth:
        return []
    after = store.tokens[store.order[start:end].astype(np.int64) + depth]  # [end - start] sorted
    bounds = np.concatenate([[0], np.flatnonzero(after[1:] != after[:-1]) + 1, [len(after)]])
    return [
        (int(after[a]), start + int(a), start + int(b))
        for a, b in zip(bounds[:-1], bounds[1:])
        if after[a] != ds.END
    ]


def wide(store: ds.Datastore, start: int, end: int, depth: int, k: int = 8) -> list[tuple[int, int, int]]:
    """As children, over a range too long to read whole: the k most frequent tokens of an even sample,
    each with its exact range (found by bisection, as the walk does)."""
    if depth >= store.depth:
        return []
    at = np.linspace(start, end - 1, ds.SAMPLE).astype(np.int64)
    seen = store.tokens[store.order[at].astype(np.int64) + depth]
    values, counts = np.unique(seen[seen != ds.END], return_counts=True)
    out = []
    for tok in values[np.argsort(-counts)[:k]].tolist():
        key = lambda i: store._token_at(i, depth)  # noqa: E731
        lo = bisect.bisect_left(range(end), tok, lo=start, key=key)
        out.append((tok, lo, bisect.bisect_right(range(end), tok, lo=lo, key=key)))
    return out


def store_tree(store: ds.Datastore, context: list[int], budget: int) -> set[tuple[int, ...]]:
    """The `budget` likeliest paths of the store's trie after the longest suffix of context found in it
    (each node a path from the match; a path's weight the product of its supports)."""
    best = store.longest_match(context)  # where Datastore.propose starts its walk
    if best is None:
        return set()
    n, start, end = best
    nodes: set[tuple[int, ...]] = set()
    heap = [(-1.0, (), start, end, n)]
    while heap and len(nodes) < budget:
        weight, path, start, end, depth = heapq.heappop(heap)
        if path:
            nodes.add(path)
        kids = (
            children(store, start, end, depth) if end - start <= ds.SAMPLE else wide(store, start, end, depth)
        )
        for tok, a, b in kids:
            heapq.heappush(heap, (weight * (b - a) / (end - start), path + (tok,), a, b, depth + 1))
    return nodes


def tree_matched(nodes: set[tuple[int, ...]], answer: list[int], i: int) -> int:
    k = 0
    while i + k < len(answer) and tuple(answer[i : i + k + 1]) in nodes:
        k += 1
    return k


def replay(
    pairs: list[tuple[list[int], list[int]]],  # (prompt ids, answer ids) each
    store: ds.Datastore | None,
    modes: list[str],  # ctx, store, priced, either, tree@B
    drafts: int = DRAFTS,
) -> dict[str, float]:
    """TPF of each mode over the answers."""
    out = {}
    for mode in modes:
        steps = tokens = 0
        ctx_stats, store_stats = lookup.LookupStats(), lookup.LookupStats.for_store()
        for prompt, answer in pairs:
            i = 0
            while i < len(answer):
                text = prompt + answer[:i]
                k = 0
                if mode.startswith("tree@"):
                    k = tree_matched(store_tree(store, text, int(mode[5:])), answer, i)
                else:
                    cands = []  # (drafts, levels, stats)
                    if mode in ("ctx", "priced", "either"):
                        look, match = lookup.propose(text, drafts)
                        if look:
                            cands.append((look, [match] * len(look), ctx_stats))
                    if mode in ("store", "priced", "either") and store is not None:
                        look, support, _ = store.propose(text, drafts)
                        if look:
                            cands.append((look, lookup.support_levels(support), store_stats))
                    if mode == "priced" and cands:
                        alone = lambda c: [lookup.ALONE] * len(c[0])  # noqa: E731
                        best = max(cands, key=lambda c: sum(c[2].reach(c[1], alone(c))))
                        k = matched(best[0], answer, i)
                        for look, levels, stats in cands:  # spec learns from every source each step
                            stats.record(levels, look, answer[i : i + drafts + 1])
                    else:
                        k = max((matched(c[0], answer, i) for c in cands), default=0)
                i += k + 1
                steps += 1
            tokens += len(answer)
        out[mode] = round(tokens / max(steps, 1), 3)
    return out


def recorded(path: str | Path, tok, method: str) -> list[tuple[list[int], dict]]:
    """A bench run's samples of one method, each with its prompt's token ids as the run encoded it."""
    from pardec import tasks
    from pardec.model.chat import encode_prompt

    samples = [json.loads(line) for line in Path(path).read_text().splitlines()]
    prompts = {}
    for name in sorted({s["task"] for s in samples}):
        prompts.update({it.id: it.prompt for it in tasks.load_task(name)})
    return [(encode_prompt(tok, prompts[s["id"]]), s) for s in samples if s["method"] == method]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", action="append", required=True,
                   help="a bench run's samples.jsonl (its `ar` answers replayed; repeatable)")  # fmt: skip
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="whose tokenizer and distillation data")
    p.add_argument("--data", action="append", default=None,
                   help="distilled JSONL for the store (default: data/distill-MODEL*.jsonl)")  # fmt: skip
    p.add_argument("--fractions", default="0.125,0.25,0.5,1", help="shares of the data rows to store")
    p.add_argument("--tree", default="16,32,64", help="tree budgets replayed at the full store ('' for none)")
    p.add_argument("--out", default=None, help="folder for replay.jsonl, replay.md and replay.png")
    args = p.parse_args(argv)

    from tqdm import tqdm
    from transformers import AutoTokenizer

    from pardec.model.loading import resolve
    from pardec.training.data import read_pairs
    from pardec.training.sources import ContaminationFilter

    tok = AutoTokenizer.from_pretrained(str(resolve(args.model)))
    paths = args.data or sorted(str(x) for x in Path("data").glob(f"distill-{args.model}*.jsonl"))
    rows = [r for path in paths for r in read_pairs(path)]
    filt = ContaminationFilter.from_benchmarks()
    rows = [r for r in rows if not filt(r["prompt"]) and not filt(r["response"])]  # as `pardec datastore`
    answers = [tok.encode(r["response"], add_special_tokens=False) for r in tqdm(rows, desc="tokenizing")]
    random.Random(0).shuffle(answers)

    sets = {Path(path).parent.name: [(ids, s["tokens"]) for ids, s in recorded(path, tok, "ar")]
            for path in args.samples}  # fmt: skip

    fractions = [float(f) for f in args.fractions.split(",")]
    trees = [f"tree@{b}" for b in args.tree.split(",") if b]
    results = []
    for frac in fractions:
        part = answers[: max(1, round(len(answers) * frac))]
        store = ds.build(part)
        for name, pairs in sets.items():
            modes = ["ctx", "store", "priced", "either"] + (trees if frac == max(fractions) else [])
            row = dict(set=name, answers=len(part), tokens=sum(map(len, part)), **replay(pairs, store, modes))
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.out:
        write(results, Path(args.out))


def write(results: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    modes = [k for k in results[-1] if k not in ("set", "answers", "tokens")]
    lines = [
        "| answers replayed | store tokens | " + " | ".join(modes) + " |",
        "|---" * (len(modes) + 2) + "|",
    ]
    for r in results:
        cells = [str(r.get(m, "")) for m in modes]
        lines.append(f"| {r['set']} | {r['tokens']:,} | " + " | ".join(cells) + " |")
    (out / "replay.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r["set"] for r in results):
        rows = [r for r in results if r["set"] == name]
        for mode, style in (("either", "-o"), ("priced", "--s"), ("store", ":^")):
            ax.plot([r["tokens"] for r in rows], [r[mode] for r in rows], style, label=f"{name} {mode}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("datastore answer tokens")
    ax.set_ylabel("replayed TPF (looked-up drafts alone)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "replay.png", dpi=120)


if __name__ == "__main__":
    main()
