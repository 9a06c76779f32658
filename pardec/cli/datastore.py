"""`pardec datastore`: a store of the model's own answers for spec to look drafts up in."""

from __future__ import annotations

import sys
import time

from ..errors import PardecError

HELP = "build the datastore of the model's own answers that spec looks drafts up in"
DESCRIPTION = (
    "Build datastore.safetensors from distilled JSONL files (`pardec distill`: prompt, response): the "
    "responses' tokens, indexed so that spec finds where the text so far occurred in them and drafts "
    "what most often followed. Write it into an adapter's folder (or any folder: the bundled weights "
    "folder of a packaged model). Rows overlapping HumanEval, GSM8K or MT-bench are left out. Decoding "
    "stays lossless whatever the store holds; a store of the model's own answers is what gets accepted."
)


# fmt: off
def add_arguments(d) -> None:
    from ..model import DEFAULT_MODEL

    d.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"the model whose tokenizer the store is built with (default {DEFAULT_MODEL})")
    d.add_argument("--data", action="append", required=True,
                   help="distilled JSONL with 'prompt' and 'response' fields (repeatable)")
    d.add_argument("--out", required=True, help="folder to write datastore.safetensors into")
# fmt: on


def run(args) -> None:
    from pathlib import Path

    from tqdm import tqdm
    from transformers import AutoTokenizer

    from ..model import datastore
    from ..model.loading import resolve
    from ..training.data import read_pairs
    from ..training.sources import ContaminationFilter

    rows = [r for path in args.data for r in read_pairs(path)]
    kept = ContaminationFilter.from_benchmarks().clean_rows(rows)
    if not kept:
        raise PardecError("no answers left to store (every row empty or overlapping a benchmark)")
    t = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(resolve(args.model)))
    answers = [
        tok.encode(r["response"], add_special_tokens=False)
        for r in tqdm(kept, desc="tokenizing", unit="answer", file=sys.stderr)
    ]
    store = datastore.build(answers)
    meta = dict(
        model=args.model,
        data=[Path(p).name for p in args.data],
        answers=len(answers),
        tokens=store.size - len(answers),
        left_out=len(rows) - len(kept),
    )
    path = datastore.save(store, args.out, meta)
    mb = path.stat().st_size / 2**20
    print(
        f"datastore: {meta['tokens']} tokens of {len(answers)} answers ({meta['left_out']} rows left out as "
        f"overlapping a benchmark) -> {path} ({mb:.1f} MiB, {time.perf_counter() - t:.0f} s)",
        file=sys.stderr,
    )
