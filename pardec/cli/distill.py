"""`pardec distill`: the base model answers prompts; its answers are the retrofit's training data."""

from __future__ import annotations

import sys

from ..errors import PardecError
from . import common

HELP = "have the base model answer prompts: training data for retrofit"
DESCRIPTION = (
    "Generate self-distilled training data (JSONL: id, prompt, response). "
    "Resumable; prompts overlapping HumanEval, GSM8K or MT-bench are left "
    "out."
)


# fmt: off
def add_arguments(d) -> None:
    from ..training.sources import BUILTIN

    common.add_model_args(d)
    d.add_argument("--prompts", default="builtin:code,builtin:sharegpt",
                   help="comma list of sources: " + ", ".join(BUILTIN)
                        + ", or JSONL files with a 'prompt' field")
    d.add_argument("--out", required=True, help="output JSONL (appended to; existing ids are skipped)")
    d.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    d.add_argument("--max-new-tokens", type=int, default=256)
    d.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    d.add_argument("--batch-size", type=int, default=8)
    d.add_argument("--seed", type=int, default=0)
# fmt: on


def run(args) -> None:
    from ..decoding import DecodeConfig
    from ..machine import EMULATED_BF16_LOSES_FROM
    from ..model import load_model
    from ..training.distill import distill
    from ..training.sources import ContaminationFilter, read_prompt_source

    if args.batch_size < 1:
        raise PardecError("batch size must be >= 1")
    config = DecodeConfig(
        method="ar", temperature=args.temperature, seed=args.seed, max_new_tokens=args.max_new_tokens
    )
    prompts = [
        p for spec in args.prompts.split(",") if spec.strip() for p in read_prompt_source(spec.strip())
    ]
    prompts = prompts[: args.limit] if args.limit else prompts
    filt = ContaminationFilter.from_benchmarks()
    compute_bound = args.batch_size >= EMULATED_BF16_LOSES_FROM  # a batch's rows share each matmul
    lm = load_model(args.model, common.dtype(args, compute_bound=compute_bound), "none")
    stats = distill(lm, prompts, args.out, config, filt, args.batch_size)
    print(
        f"distill: wrote {stats['written']} answers ({stats['tokens']} tokens) to {args.out}; "
        f"{stats['skipped_done']} already there; left out {stats['contaminated']} prompts overlapping "
        f"HumanEval/GSM8K/MT-bench and {stats['duplicates']} duplicates",
        file=sys.stderr,
    )
