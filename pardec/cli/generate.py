"""`pardec generate`: text for a prompt (streamed) or for a JSONL file of prompts (JSON lines)."""

from __future__ import annotations

import json
import sys

from ..errors import PardecError
from . import common

HELP = "generate text for a prompt or a JSONL file of prompts"
DESCRIPTION = "Generate text, streaming it as tokens are committed, or as JSON lines."


# fmt: off
def add_arguments(g) -> None:
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the user message")
    src.add_argument("--prompt-file", help="JSONL file, one object per line with a 'prompt' field")
    common.add_decoding_command_args(g)
    g.add_argument("--no-chat", action="store_true",
                   help="feed the prompt as raw text, without the chat template")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object per prompt (text, new_tokens, forwards, tokens_per_forward, "
                        "seconds, method)")
    g.add_argument("--batch-size", type=int, default=1,
                   help="prompts decoded together with --json (default 1)")
# fmt: on


def run(args) -> None:
    from ..api import configure, generate, settle
    from ..datafiles import read_jsonl
    from ..decoding.engine import check_prompt, context_limit
    from ..model import load_model

    config = common.decode_config(args)
    if args.batch_size < 1:
        raise PardecError(f"batch size must be >= 1, got {args.batch_size}")
    if args.prompt is not None:
        prompts = [args.prompt]
    else:
        prompts = [row["prompt"] for row in read_jsonl(args.prompt_file, ("prompt",))]
    for p in prompts:
        if not p.strip():
            raise PardecError("empty prompt")
    lm = load_model(args.model, common.dtype(args), args.adapter, common.quant(args), args.compile)
    chat = not args.no_chat
    # Fail before any output, and before measuring a step's cost, if one prompt is unusable.
    settled, limit = settle(lm, config, args.block_size is not None), context_limit(lm.model)
    for i, p in enumerate(prompts):
        check_prompt(lm.encode(p, chat), settled, limit, i)  # the rule decoding applies
    config, extras = configure(lm, config, args.block_size is not None, {"drafter": args.drafter})
    if hint := common.quant_hint(args):  # after the checks: a bad input gives one line, the error
        print(hint, file=sys.stderr)
    if args.json:
        for i in range(0, len(prompts), args.batch_size):
            for out in generate(lm, prompts[i : i + args.batch_size], config, chat=chat, extras=extras):
                print(json.dumps(out.as_json()), flush=True)
        return
    for p in prompts:
        out = generate(
            lm,
            [p],
            config,
            chat=chat,
            extras=extras,
            on_text=lambda _i, delta: print(delta, end="", flush=True),
        )[0]
        print()
        print(
            f"[{out.method}: {out.new_tokens} tokens, {out.forwards} forwards, "
            f"{out.tokens_per_forward:.2f} tokens/forward, {out.seconds:.2f} s; "
            f"adapter: {lm.adapter or 'none'}{'' if lm.quant == 'none' else f'; quant {lm.quant}'}]",
            file=sys.stderr,
        )
