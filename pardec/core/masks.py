"""The block attention rule, in one place, and its dense 4D form for transformers.

Every token (query or key) is described by its logical position and a block id: -1 for the clean
stream (committed and pending text, causal), b >= 0 for the b-th block of slots. The rule:
  - a clean query sees clean keys at positions <= its own (causal);
  - a block query sees clean keys before its block's start, and every key of its own block
    (bidirectional inside the block), or, in a causal block, the keys of its block up to its own
    position;
  - nothing sees an invalid key (padding, a rejected draft left in the cache).
Decoding uses it with one block per sequence; training with the clean sequence plus many blocks. A
causal block is a tree's branch: tokens that continue the clean prefix before its start, each seeing
its ancestors (that prefix and the branch's earlier tokens) and nothing of the other branches.
"""

from __future__ import annotations

import torch

CLEAN = -1


def block_attention(
    q_pos: torch.Tensor,  # [B, Q] logical positions of the queries
    q_block: torch.Tensor,  # [B, Q] block id of each query, CLEAN for the clean stream
    q_block_start: torch.Tensor,  # [B, Q] first position of the query's block (ignored for CLEAN)
    k_pos: torch.Tensor,  # [B, K]
    k_block: torch.Tensor,  # [B, K]
    k_valid: torch.Tensor,  # [B, K] bool
    q_valid: torch.Tensor | None = None,  # [B, Q] bool; padding queries see nothing
    q_causal: torch.Tensor | None = None,  # [B, Q] bool: the query's block is causal (a branch)
) -> torch.Tensor:  # [B, Q, K] bool, True = may attend
    qp, qb, qs = q_pos[:, :, None], q_block[:, :, None], q_block_start[:, :, None]
    kp, kb = k_pos[:, None, :], k_block[:, None, :]
    k_clean = kb == CLEAN
    clean_q = (qb == CLEAN) & k_clean & (kp <= qp)
    own = kb == qb
    if q_causal is not None:
        own = own & (~q_causal[:, :, None] | (kp <= qp))
    block_q = (qb != CLEAN) & ((k_clean & (kp < qs)) | own)
    allowed = (clean_q | block_q) & k_valid[:, None, :]
    return allowed if q_valid is None else allowed & q_valid[:, :, None]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, Q, K] bool -> [B, 1, Q, K] float mask (0 keep, dtype-min drop) that sdpa and eager accept.

    A query that may see nothing (a padding slot) gets a row of zeros instead of all dtype-min: its
    output is discarded anyway, and a fully masked row would put NaNs into the softmax.
    """
    empty = ~allowed.any(-1, keepdim=True)
    keep = allowed | empty
    out = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
    out.masked_fill_(~keep, torch.finfo(dtype).min)
    return out[:, None]
