"""The training loss for one sequence: block prediction (+ optional next-token loss).

Two layouts of the same attention picture:
- frozen clean stream (gated-lora): the clean sequence runs once without gradients into a KV cache;
  then only the block slots run, with gradients, attending to that cache. Clean positions are the
  base model's anyway, so nothing is lost and the clean stream costs a no-grad forward.
- joint (lora, full): clean sequence and blocks in one forward with gradients, since the adapter
  changes the clean keys and values the blocks attend to.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from ..core.masks import CLEAN, additive, block_attention
from ..model.adapters import gated
from .config import TrainConfig
from .layout import IGNORE, Blocks


@dataclass
class LossOut:
    loss: torch.Tensor  # scalar, with grad
    slot_loss: torch.Tensor  # [D] summed CE by slot index (for loss by block position)
    slot_correct: torch.Tensor  # [D] argmax hits by slot index
    slot_count: torch.Tensor  # [D] trained slots by slot index
    tokens: int  # tokens run through the model (clean + block)


def _autocast(cfg: TrainConfig):
    return torch.autocast("cpu", dtype=torch.bfloat16) if cfg.bf16 else contextlib.nullcontext()


def _forward(fwd, model, ids, allowed, pos, cfg: TrainConfig, mask_id: int, **kw) -> torch.Tensor:
    """One forward of ids [1, Q] at positions pos [1, Q] under the attention rule `allowed` [1, Q, K],
    gated where the input is [MASK] -> float logits [Q or fewer, V]."""
    with gated(model, ids == mask_id), _autocast(cfg):
        out = fwd(input_ids=ids, attention_mask=additive(allowed, model.dtype), position_ids=pos, **kw)
    return out.logits[0].float()


def sequence_loss(
    model, ids: list[int], response_start: int, blocks: Blocks, cfg: TrainConfig, mask_id: int, forward=None
) -> LossOut:
    """`forward` runs the model (a DDP wrapper under accelerate); `model` is the plain module."""
    fwd = forward or model
    device = model.device
    T, N = len(ids), len(blocks.ids)
    clean = torch.tensor([ids], device=device)  # [1, T]
    clean_pos = torch.arange(T, device=device)
    b_ids, b_pos = blocks.ids.to(device)[None], blocks.pos.to(device)[None]  # [1, N]
    b_block, b_start = blocks.block.to(device)[None], blocks.start.to(device)[None]
    ntp = None
    if cfg.adapter == "gated-lora":
        cache = DynamicCache(config=model.config)
        with torch.no_grad(), _autocast(cfg):
            fwd(input_ids=clean, position_ids=clean_pos[None], cache=cache, use_cache=True, logits_to_keep=1)
        allowed = block_attention(
            b_pos,
            b_block,
            b_start,
            k_pos=torch.cat([clean_pos[None], b_pos], 1),
            k_block=torch.cat([torch.full((1, T), CLEAN, device=device), b_block], 1),
            k_valid=torch.ones(1, T + N, dtype=torch.bool, device=device),
        )  # [1, N, T + N]
        logits = _forward(
            fwd, model, b_ids, allowed, b_pos, cfg, mask_id, cache=cache, use_cache=True
        )  # [N, V]
    else:
        all_ids = torch.cat([clean, b_ids], 1)
        pos = torch.cat([clean_pos[None], b_pos], 1)
        blk = torch.cat([torch.full((1, T), CLEAN, device=device), b_block], 1)
        start = torch.cat([torch.zeros(1, T, dtype=torch.long, device=device), b_start], 1)
        allowed = block_attention(pos, blk, start, pos, blk, torch.ones_like(pos, dtype=torch.bool))
        keep = 0 if cfg.ntp_weight > 0 else N  # 0 = all positions (the clean ones too)
        out = _forward(
            fwd, model, all_ids, allowed, pos, cfg, mask_id, logits_to_keep=keep
        )  # [T + N or N, V]
        logits = out[-N:]
        if cfg.ntp_weight > 0:
            ntp = F.cross_entropy(out[response_start - 1 : T - 1], clean[0, response_start:])

    labels = blocks.labels.to(device)
    logits[:, mask_id] = float("-inf")  # never a target; keeps training and decoding consistent
    ce = F.cross_entropy(logits, labels.clamp_min(0), reduction="none")  # [N]
    trained = labels != IGNORE
    w = blocks.weight.to(device) * trained
    loss = (ce * w).sum() / w.sum().clamp_min(1e-8)
    if ntp is not None:
        loss = loss + cfg.ntp_weight * ntp
    D = cfg.block_size
    slot = blocks.slot.to(device)
    hits = (logits.argmax(-1) == labels) & trained
    zeros = torch.zeros(D, device=device)
    return LossOut(
        loss=loss,
        slot_loss=zeros.index_add(0, slot, (ce * trained).detach()),
        slot_correct=zeros.index_add(0, slot, hits.float()),
        slot_count=zeros.index_add(0, slot, trained.float()),
        tokens=T + N,
    )
