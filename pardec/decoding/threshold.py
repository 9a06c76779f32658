"""SDLM's next-sequence prediction with a confidence threshold (arXiv 2509.24007).

The first token of a step comes from the NTP logit (exactly the model's next token), the following
ones from the block's slots 1..D-1; keep the longest prefix whose confidence (max probability, or
1 - H / log V) reaches the threshold: at least 1 and at most D tokens a forward. Lossy.

The block's slots 1.. are predicted without knowing slot 0's token. When the block's own most likely
slot 0 differs from the NTP token, its later slots continue a different text (a skipped or doubled
token), so then only the NTP token is kept.
"""

from __future__ import annotations

import dataclasses

import torch

from ..core import sampling
from ..errors import PardecError
from .policy import Method, Policy, register
from .state import Update


def calibrated(lm, config, field: str, method: str):
    """`config` with `field` = None ("auto") replaced by the value the adapter's calibration holds."""
    if getattr(config, field) is not None:
        return config
    value = None if lm.calibration is None else getattr(lm.calibration, field)
    if value is None and lm.calibration is not None:
        raise PardecError(
            f"`pardec calibrate` found no {field} for {method} within its quality target on "
            f"'{lm.adapter}' (its calibration.json reports each candidate): give a {field}"
        )
    if value is None:
        raise PardecError(
            f"{method} with {field} 'auto' needs a calibrated adapter: run `pardec calibrate` on "
            f"'{lm.adapter or 'no adapter'}' first, or give a {field}"
        )
    return dataclasses.replace(config, **{field: value})


class Threshold(Policy):
    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator, model, extras)
        if config.threshold is None:
            raise PardecError("threshold 'auto' is resolved by api.configure from the adapter's calibration")

    def update(self, row, ntp, block):
        logits = torch.cat([ntp[-1:], block[1:]])  # [D, V]: slot 0 is the NTP token
        tokens, _ = self._choose(logits)
        conf = sampling.confidence(logits[1:], self.cfg.confidence)  # [D - 1]
        n = 1
        if int(block[0].argmax()) != int(tokens[0]):
            return Update(commit=tokens[:1].tolist())
        while n < len(tokens) and conf[n - 1] >= self.cfg.threshold:
            n += 1
        return Update(commit=tokens[:n].tolist())


register(
    Method(
        "threshold",
        Threshold,
        "keep block slots while confident (SDLM)",
        lossless=False,
        prepare=lambda lm, config, sets_block_size, options: (
            calibrated(lm, config, "threshold", "threshold"),
            {},
        ),
    )
)
