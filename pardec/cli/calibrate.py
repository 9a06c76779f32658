"""`pardec calibrate`: fit what the adapter's confidences mean, and choose threshold / eb settings."""

from __future__ import annotations

import json
import sys

from ..errors import PardecError
from . import common

HELP = "fit draft acceptance and choose threshold/eb settings for an adapter (--threshold auto)"
DESCRIPTION = (
    "Decode held-out prompts with spec (every draft verified) and fit each draft's acceptance "
    "probability from its confidence; then decode them with threshold and eb at each candidate "
    "setting, and keep the fastest (by this machine's step cost) whose rate of severe deviations "
    "(tokens the model finds at least e times less likely than its own greedy choice; bf16's "
    "near-ties are not severe) stays within --target of lossless spec's. Writes "
    "calibration.json beside the adapter: adaptive spec plans with it, --threshold auto and "
    "--gamma auto read it."
)


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PardecError(f"expected a comma list of numbers, got '{text}'") from None


# fmt: off
def add_arguments(p) -> None:
    from ..training.calibrate import CalibrateConfig
    from ..training.sources import BUILTIN

    d = CalibrateConfig()
    common.add_model_args(p)
    common.add_adapter_arg(p)
    p.add_argument("--prompts", default="builtin:heldout",
                   help="comma list of prompt sources (" + ", ".join(BUILTIN) + ", or JSONL files with a "
                        "'prompt' field); default builtin:heldout, prompts no training source holds")
    p.add_argument("--limit", type=int, default=12, help="prompts used, from the start (default 12)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens,
                   help=f"tokens per answer (default {d.max_new_tokens})")
    p.add_argument("--target", type=float, default=d.target,
                   help="most severe deviations per generated token above lossless spec's (default "
                        f"{d.target}: 1 in 20,000 tokens)")
    p.add_argument("--thresholds", default=",".join(map(str, d.thresholds)),
                   help="threshold candidates, safest first (default %(default)s)")
    p.add_argument("--gammas", default=",".join(map(str, d.gammas)),
                   help="eb candidates, safest first (default %(default)s)")
    p.add_argument("--methods", default=",".join(d.methods),
                   help="lossy methods to choose settings for: threshold, eb, both or none (''); a "
                        "method left out keeps what an earlier calibration of these weights chose")
    p.add_argument("--block-size", type=int, default=None,
                   help="D (default: the adapter's trained block size)")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="prompts decoded together where the shapes are fixed; adaptive candidates "
                        "decode one at a time, as a lone request")
    p.add_argument("--dry-run", action="store_true", help="print the result; write nothing")
# fmt: on


def run(args) -> None:
    from ..core import cost as step_cost
    from ..decoding import DecodeConfig
    from ..model import calibration, load_model
    from ..training.calibrate import CalibrateConfig, calibrate
    from ..training.sources import read_prompt_source

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if set(methods) - {"threshold", "eb"}:
        raise PardecError(f"--methods takes threshold and eb, got '{args.methods}'")
    if args.limit < 1 or args.batch_size < 1 or args.max_new_tokens < 1:
        raise PardecError("--limit, --batch-size and --max-new-tokens must be >= 1")
    if not 0.0 <= args.target <= 1.0:
        raise PardecError(f"--target must lie in [0, 1], got {args.target}")
    cfg = CalibrateConfig(
        target=args.target,
        thresholds=_floats(args.thresholds),
        gammas=_floats(args.gammas),
        methods=methods,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )
    for t in cfg.thresholds:
        DecodeConfig(method="threshold", threshold=t)  # the same checks as decoding's
    for g in cfg.gammas:
        DecodeConfig(method="eb", gamma=g)
    prompts = [p for s in args.prompts.split(",") if s.strip() for p in read_prompt_source(s.strip())]
    prompts = prompts[: args.limit]
    if not prompts:
        raise PardecError(f"no prompts in '{args.prompts}'")
    lm = load_model(args.model, common.dtype(args), args.adapter)
    if lm.adapter is None:
        raise PardecError("calibrate needs an adapter (--adapter auto or a folder): the plain model's "
                          "block slots are untrained")  # fmt: skip
    D = args.block_size or lm.trained_block_size or DecodeConfig().block_size
    base = DecodeConfig(method="spec", block_size=D)
    cost = step_cost.for_model(lm, D)
    result = calibrate(lm, [lm.encode(p["prompt"]) for p in prompts], cfg, base, cost)
    rep = result.report
    print("| method | setting | TPF | deviation | severe (per 1k) | predicted speedup | within target |")
    print("|---|---|---|---|---|---|---|")
    for c in rep["candidates"]:
        within = {True: "yes", False: "no", None: "(floor)"}[c.get("within_target")]
        method = c["method"] + (" (earlier run, kept)" if c.get("earlier") else "")
        print(f"| {method} | {c['value'] if c['value'] is not None else '-'} | {c['tpf']:.2f} | "
              f"{c['deviation']:.4f} | {c['severe']} ({1000 * c['severe'] / max(c['tokens'], 1):.2f}) | "
              f"{c.get('predicted_speedup') or '-'} | {within} |")  # fmt: skip
    print(f"chosen: threshold {result.threshold}, gamma {result.gamma}; acceptance fitted on "
          f"{rep['drafts_observed']} drafts")  # fmt: skip
    for method, flag, value in (
        ("threshold", "--threshold", result.threshold),
        ("eb", "--gamma", result.gamma),
    ):
        row = next((c for c in rep["candidates"] if c["method"] == method and c["value"] == value), None)
        speedup = None if row is None else row.get("predicted_speedup")
        if value is None and method in cfg.methods:
            print(f"note: no {method} setting stays within the target; {flag} auto will refuse this adapter")
        elif speedup is not None and speedup < 1.0:
            print(f"note: {method} at {value} is predicted slower than ar here ({speedup:.2f}x); "
                  "lossless spec is the faster choice on this machine")  # fmt: skip
    print(
        "reliability (predicted reach -> observed), raw:",
        json.dumps([(r["predicted"], r["observed"], r["drafts"]) for r in rep["reliability_raw"]]),
    )
    print(
        "calibrated:",
        json.dumps([(r["predicted"], r["observed"], r["drafts"]) for r in rep["reliability_calibrated"]]),
    )
    if args.dry_run:
        return
    try:
        path = calibration.save(lm.adapter, result)
    except OSError as e:
        raise PardecError(f"cannot write beside the adapter '{lm.adapter}': {e}; copy it with "
                          "`pardec export` to a folder of your own and calibrate that") from e  # fmt: skip
    print(f"wrote {path}", file=sys.stderr)
