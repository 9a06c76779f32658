"""`pardec eval-tasks`: lm-evaluation-harness task files over the installed GSM8K data."""

from __future__ import annotations

import sys

from ..errors import PardecError

HELP = "write lm-evaluation-harness tasks over local GSM8K files (for lm_eval against pardec serve)"
DESCRIPTION = (
    "Write pardec_gsm8k (generation, exact match of the final number) and pardec_gsm8k_choice "
    "(log-likelihood of the right number against three near ones) with their JSONL to --out. Then: "
    "lm_eval --model local-completions --model_args model=NAME,"
    "base_url=http://127.0.0.1:8000/v1/completions,tokenizer_backend=huggingface,tokenizer=TOKENIZER "
    "--include_path OUT --tasks pardec_gsm8k,pardec_gsm8k_choice"
)


# fmt: off
def add_arguments(p) -> None:
    p.add_argument("--out", required=True, help="folder for the task YAMLs and gsm8k.jsonl")
    p.add_argument("--limit", type=int, default=50, help="GSM8K test items, from the first (default 50)")
    p.add_argument("--max-gen-toks", type=int, default=256, help="tokens per generated answer (default 256)")
# fmt: on


def run(args) -> None:
    from ..tasks import lmeval

    if args.limit < 1 or args.max_gen_toks < 1:
        raise PardecError("--limit and --max-gen-toks must be >= 1")
    for path in lmeval.write(args.out, args.limit, args.max_gen_toks):
        print(path)
    print(
        "tasks: pardec_gsm8k, pardec_gsm8k_choice (lm_eval --include_path " + args.out + ")", file=sys.stderr
    )
