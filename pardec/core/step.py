"""The one step primitive every decoder is a policy over.

A step feeds, per row, [pending tokens (causal)] + [D block slots (bidirectional among themselves,
seeing all committed and pending text)] in one forward, and returns the NTP logits of the last pending
tokens and the block logits. Rows are left-padded to the same number of pending tokens, so the last
pending token of every row sits at the same index and the block slots follow it.

Block slot j of a block that starts at position t sits at position t + j and predicts the token at
its own position (slot 0 of a block after all pending text predicts what the last NTP logit predicts).
Own-position prediction is what lets the entropy-bounded sampler reveal any subset of slots: a revealed
slot holds its token at its own position. A row may feed several blocks, each starting after a
different prefix of its pending tokens; each sees only that prefix and itself.

A causal block is a tree's branch: tokens (an alternative to a draft, then the drafts after it) that
continue the prefix before its start, each seeing only its ancestors; its logits predict the token
after each, as NTP logits do. Every row feeds blocks of the same sizes and kinds, in the same order.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..model.adapters import gated
from .cache import BlockCache
from .masks import CLEAN, additive, block_attention


@dataclass
class StepOutput:
    ntp_logits: torch.Tensor  # [B, N, V] float32: NTP logits of the last N pending slots
    block_logits: torch.Tensor  # [B, sum of block sizes, V] float32, block after block
    fed_pos: torch.Tensor  # [B, P] logical positions of the pending slots (padding: 0)
    pending_valid: torch.Tensor  # [B, P] bool: real (not padding) pending slots
    # When asked: transformers' hidden states (embeddings, then each layer's output), each [B, P, H]
    # at the pending slots.
    hidden_states: tuple[torch.Tensor, ...] | None = None
    # When asked: the block slots' final hidden states (the output head's input), [B, N, H]
    block_hidden: torch.Tensor | None = None


class Block(NamedTuple):
    """A block as a policy asks for it. It starts after all pending tokens but the last `back`, which
    it does not see (spec feeds blocks for several possible acceptance lengths)."""

    back: int
    slots: list[int]  # D slot tokens: [MASK], or a revealed token; a branch's tokens when causal
    causal: bool = False  # a branch of a tree: causal inside, not bidirectional


@torch.no_grad()
def block_step(
    model,
    cache: BlockCache,
    pending: list[list[int]],  # per row: tokens fed causally, at positions n_cached, n_cached + 1, ...
    blocks: list[list[Block]] | None,  # per row: blocks of the same sizes and kinds; None = AR
    n_ntp: int,  # NTP logits wanted per row, counted from the end of pending
    mask_id: int,  # never predicted; gated adapters act where it is the input
    pad_id: int = 0,
    hidden_states: bool = False,  # also return every layer's output at the pending slots
    block_hidden: bool = False,  # also return the block slots' final hidden states
) -> StepOutput:
    device = cache.k_pos.device
    B = len(pending)
    P = max(len(p) for p in pending)
    shape = [(len(b.slots), b.causal) for b in blocks[0]] if blocks else []
    assert all([(len(b.slots), b.causal) for b in row] == shape for row in blocks or ()), "ragged blocks"
    sizes = [n for n, _ in shape]
    NB, N = len(sizes), sum(sizes)  # blocks per row, slots per row
    n_ntp = min(n_ntp, P)

    lens = torch.tensor([len(p) for p in pending], device=device)  # [B]
    start = torch.tensor(cache.n_cached, device=device)  # [B] position of the first pending token
    col = torch.arange(P, device=device)[None, :]  # [1, P]
    pending_valid = col >= (P - lens[:, None])  # [B, P] left padding
    fed_pos = (start[:, None] + col - (P - lens[:, None])).clamp_min(0) * pending_valid
    ids = torch.full((B, P + N), pad_id, dtype=torch.long, device=device)
    for b, p in enumerate(pending):
        if p:
            ids[b, P - len(p) : P] = torch.tensor(p, device=device)
    q_pos, q_block = fed_pos, torch.full((B, P), CLEAN, device=device)
    q_start = torch.zeros(B, P, dtype=torch.long, device=device)
    q_causal = None
    if NB:
        ids[:, P:] = torch.tensor([[t for b in row for t in b.slots] for row in blocks], device=device)
        backs = torch.tensor([[b.back for b in row] for row in blocks], device=device)  # [B, NB]
        block_start = (start + lens)[:, None] - backs  # [B, NB]
        per_slot = torch.tensor(sizes, device=device)
        slot_start = block_start.repeat_interleave(per_slot, 1)  # [B, N]
        offset = torch.cat([torch.arange(n, device=device) for n in sizes])  # [N] slot index in its block
        slot_pos = slot_start + offset[None, :]
        q_pos = torch.cat([q_pos, slot_pos], 1)
        q_block = torch.cat(
            [q_block, torch.arange(NB, device=device).repeat_interleave(per_slot)[None, :].expand(B, -1)], 1
        )
        q_start = torch.cat([q_start, slot_start], 1)
        if any(c for _, c in shape):
            causal = torch.tensor([c for n, c in shape for _ in range(n)], device=device)  # [N]
            q_causal = torch.cat([torch.zeros(P, dtype=torch.bool, device=device), causal])[None].expand(
                B, -1
            )
    q_valid = torch.cat([pending_valid, torch.ones(B, N, dtype=torch.bool, device=device)], 1)

    allowed = block_attention(
        q_pos,
        q_block,
        q_start,
        k_pos=torch.cat([cache.k_pos, q_pos], 1),
        k_block=torch.cat([torch.full_like(cache.k_pos, CLEAN), q_block], 1),
        k_valid=torch.cat([cache.k_valid, q_valid], 1),
        q_valid=q_valid,
        q_causal=q_causal,
    )  # [B, P + N, S + P + N]
    # The head's input is caught on every block step, asked for or not: compiled steps then run one
    # family of block-step graphs (dynamo guards on the hook) whichever policy feeds them.
    with gated(model, ids == mask_id), head_input(model, N > 0) as fed_head:
        out = model(
            input_ids=ids,
            attention_mask=additive(allowed, model.dtype),
            position_ids=q_pos,
            cache=cache.kv,
            use_cache=True,
            logits_to_keep=n_ntp + N,
            output_hidden_states=hidden_states,
        )
    logits = out.logits.float()  # [B, n_ntp + N, V]
    logits[..., mask_id] = float("-inf")
    hidden = tuple(h[:, :P] for h in out.hidden_states) if hidden_states else None
    slots_hidden = fed_head["h"][:, -N:] if block_hidden and N > 0 else None  # [B, N, H]
    return StepOutput(logits[:, :n_ntp], logits[:, n_ntp:], fed_pos, pending_valid, hidden, slots_hidden)


@contextmanager
def head_input(model, wanted: bool = True):
    """Within: what the output head is fed ({"h": [B, Q', H]}, the positions whose logits are kept),
    the one final hidden state every architecture has; an empty dict where not `wanted`."""
    got = {}
    hook = None
    if wanted:
        hook = model.get_output_embeddings().register_forward_hook(
            lambda module, args, output: got.__setitem__("h", args[0])
        )
    try:
        yield got
    finally:
        if hook is not None:
            hook.remove()
