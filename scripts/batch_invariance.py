"""How much a token's logits change when it is fed alone (an AR step) or first of 9 (a verify step),
for the model as loaded: the packaged default, a GSM8K question as prompt, no adapter. Lossless `spec`
relies on these being equal; a difference near the argmax's margin makes spec's text drift from AR's.

    python scripts/batch_invariance.py --quant w8a8 --dtype bfloat16
    python scripts/batch_invariance.py --quant w8a8 --attention sdpa   # w8a8 with sdpa, not its own

It also names the first linear layer whose input differs between the two (forward hooks): where the
difference starts.
"""

from __future__ import annotations

import argparse

import torch

from pardec.model.loading import load_model
from pardec.model.quant import QuantizedLinear

PROMPT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quant", default="none")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--attention", default=None, help="an attention implementation instead of the one "
                   "load_model picks (sdpa, or pardec_invariant: model/invariant_attention.py)")  # fmt: skip
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    from transformers import DynamicCache

    lm = load_model(quant=args.quant, adapter="none", dtype=getattr(torch, args.dtype))
    if args.attention:
        lm.model.set_attn_implementation(args.attention)
    seen: list[tuple[str, torch.Tensor]] = []  # (linear, its input's first row) in call order
    names = {m: n for n, m in lm.model.named_modules()}
    for m in names:
        if isinstance(m, torch.nn.Linear | QuantizedLinear):
            m.register_forward_pre_hook(
                lambda mod, a: seen.append((names[mod], a[0].reshape(-1, a[0].shape[-1])[0]))
            )
    ids = torch.tensor([lm.encode(PROMPT)])  # [1, P]
    fed = torch.tensor([[785, 2790, 1372, 315, 26111, 374, 220, 19, 23]])  # [1, 9] any tokens
    n = ids.shape[1]
    cache = DynamicCache()
    lm.model(ids, cache=cache)
    seen.clear()
    alone = lm.model(fed[:, :1], cache=cache, position_ids=torch.tensor([[n]])).logits[0, 0].float()
    alone_inputs = list(seen)
    seen.clear()
    cache.crop(-1)
    first_of_9 = lm.model(fed, cache=cache, position_ids=torch.arange(n, n + 9)[None]).logits[0, 0].float()
    differs = next((name for (name, x), (_, y) in zip(alone_inputs, seen) if not torch.equal(x, y)), "none")
    print(f"{args.quant} {args.dtype}: max |logit difference| {(alone - first_of_9).abs().max().item():.3g}, "
          f"argmax {alone.argmax().item()} alone, {first_of_9.argmax().item()} first of 9; attention "
          f"{lm.model.config._attn_implementation}; first linear input that differs: "
          f"{differs}")  # fmt: skip


if __name__ == "__main__":
    main()
