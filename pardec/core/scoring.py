"""Scoring a given text under the model: one causal forward over its ids, no [MASK] input (so gated
adapters stay off and the logits are the base model's), for NLL, deviation and logprobs."""

from __future__ import annotations

import torch


@torch.no_grad()
def text_logits(model, ids: list[int], start: int, mask_id: int | None = None) -> torch.Tensor:
    """float32 logits [len(ids) - start, V] predicting ids[start:] from the ids before each; the
    [MASK] column at -inf when `mask_id` is given (it is never a choice)."""
    n = len(ids) - start
    x = torch.tensor([ids], device=model.device)  # [1, T]
    logits = model(input_ids=x, logits_to_keep=n + 1).logits[0, :-1].float()  # [n, V]
    if mask_id is not None:
        logits[:, mask_id] = float("-inf")
    return logits
