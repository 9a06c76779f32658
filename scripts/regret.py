"""Deviations of a bench run's answers from the model's own greedy choices, per method: every token's
regret (nats by which the base model prefers its greedy choice given the text before it), counted
above 0 (any deviation), above `pardec calibrate`'s SEVERE_NATS, and summed; and each answer with a
severe deviation, its score beside the largest regrets. This is what `calibrate` judges lossy
settings by, measured on a benchmark's answers.

    python scripts/regret.py benchmarks/threshold-spec-xeon/humaneval40 --task humaneval:0-39
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="bench output folders (with samples.jsonl)")
    p.add_argument("--task", required=True, help="the --task the runs were benched with (their prompts)")
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--out", default=None, help="write every answer's counts here (JSONL)")
    args = p.parse_args(argv)

    import torch

    from pardec.model import load_model
    from pardec.tasks import load_tasks
    from pardec.training.calibrate import SEVERE_NATS, regret

    lm = load_model(args.model, torch.bfloat16, "none")
    items = {it.id: it for it in load_tasks(args.task)}
    totals: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    answers, severe_answers = [], []
    for run in args.runs:
        for line in (Path(run) / "samples.jsonl").read_text().splitlines():
            r = json.loads(line)
            x = regret(lm, lm.encode(items[r["id"]].prompt), r["tokens"])  # [n]
            largest = [round(v, 2) for v in x.sort(descending=True).values[:4].tolist() if v > 0]
            row = {"run": run, "method": r["method"], "id": r["id"], "score": r.get("score"),
                   "tokens": len(x), "deviations": int((x > 0).sum()),
                   "severe": int((x > SEVERE_NATS).sum()), "regret": round(float(x.sum()), 3),
                   "largest": largest}  # fmt: skip
            answers.append(row)
            t = totals[(run, r["method"])]
            for k in ("tokens", "deviations", "severe", "regret"):
                t[k] += row[k]
            if row["severe"]:
                severe_answers.append(row)
    print(f"| run | method | tokens | deviations | severe (> {SEVERE_NATS} nat) | regret, nats |")
    print("|---|---|---|---|---|---|")
    for (run, method), t in totals.items():
        print(f"| {Path(run).name} | {method} | {int(t['tokens'])} | {int(t['deviations'])} | "
              f"{int(t['severe'])} | {t['regret']:.2f} |")  # fmt: skip
    print("\nanswers with a severe deviation (score, largest regrets):")
    for row in severe_answers:
        name = Path(row["run"]).name
        print(f"- {name} {row['method']} {row['id']}: score {row['score']}, {row['largest']}")
    if args.out:
        Path(args.out).write_text("".join(json.dumps(a) + "\n" for a in answers))


if __name__ == "__main__":
    main()
