"""TPF of decoding settings on a tuning split, batched: TPF per row does not depend on the batch, so
this is much faster than `pardec bench`, which times one prompt at a time. Tune on prompts the
reported benchmark does not use, e.g. HumanEval 80-163 (the reported runs use 0-79).

    python scripts/tune_tpf.py --task humaneval:80-163 --methods spec,spec@block_reach=0.5
"""

from __future__ import annotations

import argparse

import torch

from pardec import configure
from pardec.bench import parse_methods
from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model import load_model
from pardec.tasks import load_tasks


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="as `pardec bench --task`, e.g. humaneval:80-163")
    p.add_argument("--methods", required=True, help="as `pardec bench --methods` (no @adapter=, no hf)")
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--adapter", default="auto")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument(
        "--batch-size", type=int, default=12, help="rows per batch (little padding, bounded memory)"
    )
    args = p.parse_args(argv)
    lm = load_model(args.model, torch.bfloat16, args.adapter)
    prompts = [lm.encode(it.prompt) for it in load_tasks(args.task)]
    for spec in parse_methods(args.methods, DecodeConfig(max_new_tokens=args.max_new_tokens)):
        if spec.label == "ar":
            continue
        if spec.adapter is not None or spec.hf:
            raise SystemExit(f"{spec.label}: one model per run here; give the adapter as --adapter")
        try:
            config, extras = configure(lm, spec.config, "block_size" in spec.sets)
        except PardecError as e:
            raise SystemExit(f"error: {e}") from None
        tokens = forwards = 0
        for i in range(0, len(prompts), args.batch_size):
            for r in decode(
                lm.model, prompts[i : i + args.batch_size], config, lm.mask_id, lm.stop_ids, extras=extras
            ):
                tokens, forwards = tokens + len(r.tokens), forwards + r.forwards
        print(f"{spec.label}: TPF {tokens / forwards:.3f} ({tokens} tokens, {forwards} forwards)", flush=True)


if __name__ == "__main__":
    main()
