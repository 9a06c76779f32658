"""Plain autoregressive decoding: one token per forward from the last NTP logit; no block."""

from __future__ import annotations

from .policy import Method, Policy, register
from .state import Update


class AR(Policy):
    def blocks(self, row):
        return None

    def update(self, row, ntp, block):
        tokens, _ = self._choose(ntp[-1:])
        return Update(commit=tokens.tolist())


register(Method("ar", AR, "one token per forward", lossless=True))
