"""KV cache bookkeeping for ragged batches: which cache slots hold committed text, at what position.

Sequences in a batch advance by different amounts each step. Rather than moving tensors around, the
cache grows by the same number of slots for every row, and a per-row validity mask hides slots that
do not hold committed text (left padding, drafts that were rejected). The block slots, always last
in a step's input, are cropped off after every step with the Cache API, so the cache only ever holds
committed tokens (plus hidden holes). With batch 1 there are never holes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class BlockCache:
    kv: DynamicCache
    k_pos: torch.Tensor  # [B, S] logical position held by each cache slot
    k_valid: torch.Tensor  # [B, S] bool: slot holds a committed token of this row
    n_cached: list[int] = field(default_factory=list)  # per row: committed tokens with K/V in cache

    @classmethod
    def empty(cls, batch: int, config, device) -> BlockCache:
        return cls(
            kv=DynamicCache(config=config),
            k_pos=torch.zeros(batch, 0, dtype=torch.long, device=device),
            k_valid=torch.zeros(batch, 0, dtype=torch.bool, device=device),
            n_cached=[0] * batch,
        )

    @property
    def length(self) -> int:
        return self.k_pos.shape[1]

    def commit(self, fed_pos: torch.Tensor, keep: torch.Tensor, n_block: int) -> None:
        """After a forward that appended P pending slots and then `n_block` block slots:
        drop the block slots and record which pending slots now hold committed text.

        fed_pos: [B, P] logical positions of the pending slots; keep: [B, P] bool.
        """
        if n_block:
            self.kv.crop(-n_block)  # transformers 5: a negative count = tokens to drop
        self.k_pos = torch.cat([self.k_pos, fed_pos], 1)
        self.k_valid = torch.cat([self.k_valid, keep], 1)
        # Trailing slots no row keeps (drafts rejected everywhere) are cropped, not hidden: with
        # batch 1 the cache then holds exactly the committed tokens.
        used = self.k_valid.any(0).nonzero()
        tail = self.length - (int(used[-1]) + 1 if len(used) else 0)
        if tail:
            self.kv.crop(-tail)
            self.k_pos, self.k_valid = self.k_pos[:, :-tail], self.k_valid[:, :-tail]
        for b, n in enumerate(keep.sum(1).tolist()):
            self.n_cached[b] += n
        assert self.kv.get_seq_length() == self.length

    def add_rows(self, n: int) -> None:
        """n new rows with nothing cached: their slots hold copies of row 0's K/V (the public Cache API
        can select rows, not create them), all marked invalid, so the new rows see none of it."""
        B = self.k_pos.shape[0]
        if self.kv.get_seq_length() > 0:
            if B == 0:
                raise ValueError("cannot add rows to an empty batch that still holds K/V")
            self.kv.batch_select_indices(torch.tensor(list(range(B)) + [0] * n, device=self.k_pos.device))
        S = self.length
        self.k_pos = torch.cat([self.k_pos, self.k_pos.new_zeros(n, S)], 0)
        self.k_valid = torch.cat([self.k_valid, self.k_valid.new_zeros(n, S)], 0)
        self.n_cached += [0] * n

    def select(self, rows: list[int]) -> None:
        """Keep only these batch rows (finished sequences leave the batch)."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.k_pos.device)
        if self.kv.get_seq_length() > 0:
            self.kv.batch_select_indices(idx)
        self.k_pos, self.k_valid = self.k_pos[idx], self.k_valid[idx]
        self.n_cached = [self.n_cached[r] for r in rows]
