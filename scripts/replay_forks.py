"""Replay `spec` answers of a bench run with lookups after the chain's first drafts (`--lookup-forks`):
how many more tokens each step would have committed, model-free.

Each step of a recorded `spec` answer committed c tokens: a = c - 1 drafts of its chain, then the
bonus. A lookup after the chain's first k drafts (k <= a, so that those drafts are the answer's own
tokens) reads the text up to there; it matches the answer for m tokens from there, so a branch at
that fork would have committed k + m drafts. With branches at forks 0 .. F - 1, each up to B drafts
long, from the text (`ctx`), the datastore (`store`) or both, a step commits max(a, k + m) drafts:
the longest verified path of such a tree. The gain is an upper bound for what `--lookup-forks F`
adds, with every branch fed (no schedule) and no stats choosing among them; fork 0 is the lookups
before the chain, which spec already feeds as its other candidate where the run had them.

    python scripts/replay_forks.py --samples benchmarks/lookup-agree/mtbench80/samples.jsonl \\
        --samples benchmarks/lookup-agree/gsm8k50/samples.jsonl --out benchmarks/lookup-forks/replay
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from replay_lookup import matched, recorded  # this folder's: run as python scripts/replay_forks.py

from pardec.decoding import lookup
from pardec.model import datastore as ds

SOURCES = ("ctx", "store", "both")


def replay(
    runs: list[tuple[list[int], list[int], list[int]]],  # (prompt ids, answer ids, tokens committed per step)
    store: ds.Datastore | None,
    forks: list[int],
    depths: list[int],
    lookup_cap: int = 32,
) -> dict[str, float]:
    """TPF of the runs as recorded ("spec") and with branches at forks 0 .. F - 1 of up to B drafts
    from each source ("F=..,B=..,source" keys)."""
    steps = tokens = 0
    gains = {(f, b, s): 0 for f in forks for b in depths for s in SOURCES}
    for prompt, answer, committed in runs:
        t = 0
        for c in committed:
            a = c - 1  # the chain's drafts accepted
            found = {}  # fork -> (in-context drafts, store drafts)
            for k in range(0, min(a, max(forks) - 1) + 1):
                if t + k >= len(answer):
                    break
                text = prompt + answer[: t + k]
                ctx = lookup.propose(text, lookup_cap)[0]
                st = store.propose(text, lookup_cap)[0] if store is not None else []
                found[k] = (ctx, st)
            for f, b, s in gains:
                best = 0
                for k, (ctx, st) in found.items():
                    if k >= f:
                        continue
                    cands = {"ctx": [ctx], "store": [st], "both": [ctx, st]}[s]
                    m = max((matched(x[:b], answer, t + k) for x in cands), default=0)
                    best = max(best, k + m - a)
                gains[(f, b, s)] += best
            t += c
            steps += 1
        tokens += len(answer)
    out = {"steps": steps, "tokens": tokens, "spec": round(tokens / max(steps, 1), 3)}
    for (f, b, s), g in gains.items():
        out[f"F={f},B={b},{s}"] = round((tokens + g) / max(steps, 1), 3)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", action="append", required=True,
                   help="a bench run's samples.jsonl (its `spec` answers replayed; repeatable)")  # fmt: skip
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="whose tokenizer and bundled datastore")
    p.add_argument("--forks", default="1,2,3,4,8", help="F: branches at forks 0 .. F - 1")
    p.add_argument("--depths", default="4,8,16", help="B: drafts per branch")
    p.add_argument("--out", default=None, help="folder for replay.json and replay.md")
    args = p.parse_args(argv)

    from transformers import AutoTokenizer

    from pardec.model.loading import resolve

    tok = AutoTokenizer.from_pretrained(str(resolve(args.model)))
    where = ds.locate(args.model, None)
    store = ds.load(where) if where is not None else None
    forks = [int(x) for x in args.forks.split(",")]
    depths = [int(x) for x in args.depths.split(",")]
    results = {}
    for path in args.samples:
        runs = [(ids, s["tokens"], s["steps"]) for ids, s in recorded(path, tok, "spec")]
        name = Path(path).parent.name
        results[name] = replay(runs, store, forks, depths)
        print(name, json.dumps(results[name]), flush=True)
    if args.out:
        write(results, forks, depths, Path(args.out))


def write(results: dict[str, dict], forks: list[int], depths: list[int], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "replay.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = []
    for name, r in results.items():
        lines += [f"## {name}: recorded spec TPF {r['spec']} ({r['tokens']} tokens, {r['steps']} steps)", ""]
        lines += ["| F | " + " | ".join(f"B={b} ctx / store / both" for b in depths) + " |"]
        lines += ["|---|" + "---|" * len(depths)]
        for f in forks:
            cells = [" / ".join(f"{r[f'F={f},B={b},{s}']:.2f}" for s in SOURCES) for b in depths]
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
        lines.append("")
    (out / "replay.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
