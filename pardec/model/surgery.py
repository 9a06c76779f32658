"""Retrofit surgery: give a causal LM a `[MASK]` token that block slots are filled with."""

from __future__ import annotations

import torch

MASK_TOKEN = "[MASK]"


@torch.no_grad()
def add_mask_token(model, tokenizer) -> int:
    """Add `[MASK]` to the tokenizer and embeddings; return its id.

    The new input row starts at the mean of the existing input embeddings: a neutral vector of typical
    norm, which keeps the first training steps stable (a random row of the wrong scale does not).
    Idempotent, and deterministic (the id is len(tokenizer) before the call), so a checkpoint's
    recorded id can be checked against a fresh load. Models whose embedding matrix has spare rows
    (Qwen pads its vocabulary) reuse one instead of resizing.
    """
    if MASK_TOKEN in tokenizer.get_vocab():
        mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    else:
        tokenizer.add_special_tokens({"additional_special_tokens": [MASK_TOKEN]})
        mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    emb = model.get_input_embeddings()
    n_rows = emb.weight.shape[0]
    if mask_id >= n_rows:
        model.resize_token_embeddings(mask_id + 1, mean_resizing=False)
        emb = model.get_input_embeddings()
    # Mean over the rows the tokenizer actually uses, excluding the mask row itself.
    emb.weight[mask_id] = emb.weight[:mask_id].float().mean(0).to(emb.weight.dtype)
    model.config.mask_token_id = mask_id  # recorded in the saved config
    return mask_id
