"""Speedup over `ar` per category of a bench run's samples: tokens/s of each method over that
category's prompts (total tokens / total seconds), divided by ar's over the same prompts. The category
is the question's own for an MT-bench id (mtbench/81 -> writing), else the item id's last
`/` field (e.g. the MT-bench selection in benchmarks/adaptive-epyc/).

    python scripts/per_category.py benchmarks/adaptive-epyc/mtbench16-gsm8k10 --task jsonl
    python scripts/per_category.py benchmarks/amx-xeon/mtbench80
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def mtbench_categories() -> dict[str, str]:
    from pardec.tasks import mtbench

    return {f"mtbench/{r['question_id']}": r["category"] for r in mtbench.rows()}


def category(item_id: str, known: dict[str, str]) -> str:
    return known.get(item_id) or item_id.rsplit("/", 1)[-1]


def categories(item_ids: list[str]) -> list[str]:
    """Each id's category; MT-bench ids (the builtin task's, or a jsonl selection of its questions) name
    their question's own."""
    known = mtbench_categories() if any(i.startswith("mtbench/") for i in item_ids) else {}
    return [category(i, known) for i in item_ids]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a bench output folder (with samples.jsonl)")
    p.add_argument("--task", default=None, help="only the samples of this task")
    args = p.parse_args(argv)
    rows = [json.loads(line) for line in (Path(args.run) / "samples.jsonl").read_text().splitlines()]
    rows = [r for r in rows if args.task is None or r["task"] == args.task]
    cats_of = categories([r["id"] for r in rows])
    tokens, seconds, forwards = defaultdict(int), defaultdict(float), defaultdict(int)
    for r, c in zip(rows, cats_of):
        key = (r["method"], c)
        tokens[key] += len(r["tokens"])
        seconds[key] += r["seconds"]
        forwards[key] += r["forwards"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cats = list(dict.fromkeys(cats_of))
    print("| category | " + " | ".join(f"{m} TPF | {m} speedup" for m in methods if m != "ar") + " |")
    print("|---|" + "---|---|" * (len(methods) - 1))
    for c in cats:
        ar = tokens[("ar", c)] / seconds[("ar", c)]
        cells = [f"{tokens[(m, c)] / forwards[(m, c)]:.2f} | {tokens[(m, c)] / seconds[(m, c)] / ar:.2f}x"
                 for m in methods if m != "ar"]  # fmt: skip
        print(f"| {c} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
