"""Turning logits into tokens: temperature / top-p, confidence and entropy (verify.py draws with
these). Confidence and entropy are measured on the plain softmax (temperature 1): they
describe the model's certainty, whatever temperature the tokens are then drawn at."""

from __future__ import annotations

import math

import torch


def distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """logits [..., V] -> probabilities [..., V] (float32) that tokens are drawn from.
    temperature 0 gives the one-hot argmax (greedy)."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    probs = torch.softmax(logits / temperature, -1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        # Keep the smallest set whose mass reaches top_p (the first token always stays).
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """probs [N, V] -> tokens [N]."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def choose(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] -> (tokens [N], the distribution they were drawn from [N, V])."""
    probs = distribution(logits, temperature, top_p)
    if temperature == 0:
        return logits.argmax(-1), probs
    return draw(probs, generator), probs


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] -> entropy in nats [...] of the temperature-1 softmax."""
    # entr(0) = 0: suppressed tokens (logit -inf) contribute nothing instead of 0 * -inf = NaN.
    return torch.special.entr(torch.softmax(logits.float(), -1)).sum(-1)


def confidence(logits: torch.Tensor, kind: str) -> torch.Tensor:
    """logits [..., V] -> confidence in [0, 1]: max probability, or 1 - H / log V."""
    if kind == "prob":
        return torch.softmax(logits.float(), -1).amax(-1)
    return 1.0 - entropy(logits) / math.log(logits.shape[-1])
