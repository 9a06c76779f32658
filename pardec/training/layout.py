"""Training layout: one clean sequence plus K noised blocks, in one forward.

Block b covers positions s_b .. s_b + k_b - 1 of the clean sequence; its slots hold [MASK] (or, with
the sbd objective, some revealed clean tokens) and are trained to predict the clean token at their own
position, seeing the clean prefix before s_b and their own block (masks.block_attention). This is the
decoding step's picture, many times over.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import TrainConfig

IGNORE = -100


@dataclass
class Blocks:
    ids: torch.Tensor  # [N] block slot inputs: mask id or a revealed token
    pos: torch.Tensor  # [N] logical positions
    block: torch.Tensor  # [N] block index
    start: torch.Tensor  # [N] start position of the slot's block
    labels: torch.Tensor  # [N] clean token at the slot's position, IGNORE where not trained
    slot: torch.Tensor  # [N] index of the slot inside its block (for loss by block position)
    weight: torch.Tensor  # [N] loss weight


def sample_blocks(
    ids: list[int], response_start: int, cfg: TrainConfig, mask_id: int, gen: torch.Generator
) -> Blocks | None:
    """Choose K blocks inside the response (prediction targets are response tokens only)."""
    T = len(ids)
    n_starts = T - response_start
    if n_starts < 1:
        return None
    K = min(cfg.blocks_per_sequence, n_starts)
    starts = (torch.randperm(n_starts, generator=gen)[:K] + response_start).sort().values.tolist()
    clean = torch.tensor(ids)
    parts = {k: [] for k in ("ids", "pos", "block", "start", "labels", "slot", "weight")}
    for b, s in enumerate(starts):
        k = cfg.block_size
        if cfg.min_block_size is not None:
            k = int(torch.randint(cfg.min_block_size, cfg.block_size + 1, (), generator=gen))
        k = min(k, T - s)
        labels = clean[s : s + k].clone()
        slot_ids = torch.full((k,), mask_id)
        if cfg.objective == "sbd":
            ratio = float(torch.rand((), generator=gen))
            masked = torch.rand(k, generator=gen) < ratio
            masked[int(torch.randint(k, (), generator=gen))] = True  # at least one slot to predict
            slot_ids = torch.where(masked, slot_ids, labels)
            labels = torch.where(masked, labels, torch.full_like(labels, IGNORE))
        j = torch.arange(k)
        w = torch.ones(k) if cfg.decay is None else torch.exp(-j.float() / cfg.decay)
        for key, val in (
            ("ids", slot_ids),
            ("pos", s + j),
            ("block", torch.full((k,), b)),
            ("start", torch.full((k,), s)),
            ("labels", labels),
            ("slot", j),
            ("weight", w),
        ):
            parts[key].append(val)
    return Blocks(**{k: torch.cat(v) for k, v in parts.items()})
