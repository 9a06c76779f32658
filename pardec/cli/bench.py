"""`pardec bench`: methods side by side on a benchmark, interleaved in one run."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from . import common

HELP = "side-by-side speed and quality of decoding methods on a benchmark"
DESCRIPTION = (
    "Run every method on the same prompts, interleaved, after a warm-up; "
    "report TPF, tokens/s, speedup vs ar (same run), identity to ar, task "
    "score and NLL; write results.json, results.md and plots."
)


# fmt: off
def add_arguments(b) -> None:
    from ..decoding import DecodeConfig
    from ..tasks import TASKS

    common.add_model_args(b)
    common.add_adapter_arg(b)
    common.add_drafter_arg(b)
    b.add_argument("--methods", default="ar,threshold,eb,spec",
                   help="comma list; settings after @, e.g. ar,threshold@0.9,threshold@0.7,eb@gamma=0.5,"
                        "spec@block_size=8,dflash; 'hf' = transformers' generate (greedy) for reference; "
                        "@adapter=PATH gives a method its own adapter (e.g. ar,spec,spec@adapter=runs/new "
                        "compares two adapters against the same ar; @adapter=none decodes the bare model); "
                        "@quant=int4 (none, int8, int4, gguf, ...) its weights quantized; @compile=true "
                        "its steps through torch.compile; @dtype=float32 (or bfloat16) a model in that "
                        "dtype instead of --dtype's, e.g. ar,spec@dtype=float32@compile=true where bf16 is "
                        "emulated; 'llamacpp' = llama.cpp on the same GGUF")
    from ..model.quant import CHOICES
    b.add_argument("--quant", choices=CHOICES, default="none",
                   help="quantization of every pardec method without a @quant= of its own, ar (the "
                        "baseline every speedup is against) included: e.g. --quant w8a8 --methods spec,"
                        "llamacpp compares spec with AR on the same quantized weights (default none)")
    b.add_argument("--task", default="humaneval",
                   help=f"{' | '.join(TASKS)} | jsonl:PATH; several in one run, with inclusive ranges, e.g. "
                        "humaneval:0-79,mtbench:0-19,jsonl:mine.jsonl (prompts interleaved, one table per "
                        "task); a task named again adds a range, e.g. mtbench:0-3,mtbench:10-13")
    b.add_argument("--limit", type=int, default=None, help="number of items")
    b.add_argument("--offset", type=int, default=0, help="first item")
    b.add_argument("--max-new-tokens", type=int, default=256)
    b.add_argument("--block-size", type=int, default=None,
                   help="default D for every method (default: the block size the adapter was trained with, "
                        f"else {DecodeConfig.block_size}; dflash: the drafter's, unless dflash@block_size=N)")
    b.add_argument("--no-chat", action="store_true")
    b.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    b.add_argument("--resume", action="store_true",
                   help="continue a stopped run in --out, or extend a finished one to more prompts: runs "
                        "already made (OUT/progress.jsonl or samples.jsonl) are reused, not rerun")
# fmt: on


def run(args) -> None:
    from ..bench import BenchOptions, bench, markdown_table

    result = bench(
        BenchOptions(
            model=args.model,
            methods=args.methods,
            quant=args.quant,
            task=args.task,
            out=Path(args.out),
            dtype=common.dtype(args),
            adapter=args.adapter,
            drafter=args.drafter,
            limit=args.limit,
            offset=args.offset,
            max_new_tokens=args.max_new_tokens,
            block_size=args.block_size,
            chat=not args.no_chat,
            resume=args.resume,
            command="pardec " + " ".join(shlex.quote(a) for a in args.argv),
        )
    )
    print(markdown_table(result), end="")
    print(f"wrote {args.out}/results.json, results.md, speed_quality.png, accepted_hist.png", file=sys.stderr)
