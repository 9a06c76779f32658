"""What a DFlash drafter needs at decoding time: the target's head over the draft vocabulary, and the
cache of context keys and values (one slot per committed target token)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .model import Drafter


class DraftHead:
    """The target's output head as the drafter uses it. With a draft vocabulary only those Vd rows are
    multiplied (copied once per decode): logits come over the draft vocabulary, `token_ids` maps a
    choice back to token ids, and `full` spreads draft probabilities over the whole vocabulary for
    verification. Never materialising [.., V] keeps greedy drafting cheap. [MASK] is never drafted."""

    def __init__(self, head: nn.Module, vocab: torch.Tensor | None, mask_id: int):
        self.head, self.vocab, self.V = head, vocab, head.weight.shape[0]
        if vocab is None:
            self.weight, self.bias, self.mask_slot = head.weight, getattr(head, "bias", None), mask_id
        else:
            self.weight = head.weight[vocab]  # [Vd, H]
            bias = getattr(head, "bias", None)
            self.bias = None if bias is None else bias[vocab]
            hit = (vocab == mask_id).nonzero()
            self.mask_slot = int(hit[0]) if len(hit) else None

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., H] -> float logits [..., Vd] over the draft vocabulary (Vd = V without one)."""
        logits = F.linear(h.to(self.weight.dtype), self.weight, self.bias).float()
        if self.mask_slot is not None and self.mask_slot < logits.shape[-1]:
            logits[..., self.mask_slot] = float("-inf")
        return logits

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        return idx if self.vocab is None else self.vocab[idx]

    def full(self, probs: torch.Tensor) -> torch.Tensor:
        """probs [..., Vd] -> [..., V], zero outside the draft vocabulary."""
        if self.vocab is None:
            return probs
        out = probs.new_zeros((*probs.shape[:-1], self.V))
        out[..., self.vocab] = probs
        return out


def block_inputs(anchor_tokens: torch.Tensor, D: int, mask_id: int) -> torch.Tensor:
    """anchor tokens [N] -> block token ids [N, D]: the anchor, then D - 1 masks."""
    ids = torch.full((anchor_tokens.shape[0], D), mask_id, dtype=torch.long, device=anchor_tokens.device)
    ids[:, 0] = anchor_tokens
    return ids


class ContextCache:
    """The drafter's cache of context keys and values, one slot per committed target token.

    Only committed tokens ever enter (a rejected draft's features are never projected), so there is
    nothing to roll back after a partial acceptance; rows of a batch append different numbers of
    slots, padded with invalid ones. The block's own keys and values are never cached: each block is new.
    """

    def __init__(self, drafter: Drafter, batch: int, device):
        self.drafter = drafter
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer [B, kv, S, d]
        self.pos = torch.zeros(batch, 0, dtype=torch.long, device=device)  # [B, S]
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)  # [B, S]

    @torch.no_grad()
    def append(self, features: torch.Tensor, pos: torch.Tensor, keep: torch.Tensor) -> None:
        """features [B, P, F] at positions pos [B, P]; keep [B, P]: the slots now committed."""
        n = keep.sum(1)  # [B]
        m = int(n.max()) if n.numel() else 0
        if m == 0:
            return
        # Kept slots first, in order (stable sort), then pad: each row gains m slots.
        idx = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :m]  # [B, m]
        f = features.gather(1, idx[..., None].expand(-1, -1, features.shape[-1]))
        p = pos.gather(1, idx)
        valid = torch.arange(m, device=keep.device)[None, :] < n[:, None]  # [B, m]
        new = self.drafter.context_kv(f, p)
        self.kv = (
            new
            if self.kv is None
            else [
                (torch.cat([k0, k1], 2), torch.cat([v0, v1], 2)) for (k0, v0), (k1, v1) in zip(self.kv, new)
            ]
        )
        self.pos = torch.cat([self.pos, p], 1)
        self.valid = torch.cat([self.valid, valid], 1)

    def select(self, rows: list[int]) -> None:
        idx = torch.tensor(rows, dtype=torch.long, device=self.pos.device)
        if self.kv is not None:
            self.kv = [(k[idx], v[idx]) for k, v in self.kv]
        self.pos, self.valid = self.pos[idx], self.valid[idx]

    @torch.no_grad()
    def draft_logits(
        self, embed, head: DraftHead, anchors: torch.Tensor, anchor_pos: torch.Tensor, D: int
    ) -> torch.Tensor:
        """One drafter forward: anchors [B] (the last committed token, not yet seen by the target) at
        positions anchor_pos [B] -> logits [B, D - 1, Vd] over head's draft vocabulary, for the tokens
        after it."""
        ids = block_inputs(anchors, D, self.drafter.cfg.mask_token_id)  # [B, D]
        pos = anchor_pos[:, None] + torch.arange(D, device=anchors.device)[None, :]  # [B, D]
        B, S = self.valid.shape
        mask = torch.cat(
            [
                self.valid[:, None, :].expand(B, D, S),
                torch.ones(B, D, D, dtype=torch.bool, device=anchors.device),
            ],
            2,
        )  # [B, D, S + D]
        h = self.drafter(embed(ids), pos, self.kv or _empty_kv(self.drafter, B, anchors.device), mask)
        return head(h[:, 1:])  # [B, D - 1, Vd] float


def _empty_kv(drafter: Drafter, B: int, device):
    c = drafter.cfg
    z = torch.zeros(B, c.n_kv_heads, 0, c.head_dim, dtype=drafter.dtype, device=device)
    return [(z, z) for _ in drafter.layers]
