"""SDLM's next-sequence prediction with a confidence threshold (arXiv 2509.24007).

The first token of a step comes from the NTP logit (exactly the model's next token), the following
ones from the block's slots 1..D-1; keep the longest prefix whose confidence (max probability, or
1 - H / log V) reaches the threshold: at least 1 and at most D tokens a forward. Lossy.

The block's slots 1.. are predicted without knowing slot 0's token. When the block's own most likely
slot 0 differs from the NTP token, its later slots continue a different text (a skipped or doubled
token), so then only the NTP token is kept.
"""

from __future__ import annotations

import torch

from ..core import sampling
from .policy import Method, Policy, register
from .state import Update


class Threshold(Policy):
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


register(Method("threshold", Threshold, "keep block slots while confident (SDLM)", lossless=False))
