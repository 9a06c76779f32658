"""The training loss for one sequence: block prediction (+ optional next-token loss).

Targets: the clean token (cross-entropy), mixed with `kl_weight` of the base model's own next-token
distribution at the slot's position (the clean stream computes it anyway: soft targets carry what the
model would accept beyond its argmax). With `chain`, slot j's loss is weighted by the probability the
block gives the right tokens at slots 0..j-1 (detached): the loss of acceptance length, not of each
slot alone.

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
    logits: torch.Tensor  # [N, V] the slots' logits, detached ([MASK] at -inf)


def _autocast(cfg: TrainConfig):
    return torch.autocast("cpu", dtype=torch.bfloat16) if cfg.bf16 else contextlib.nullcontext()


def _forward(fwd, model, ids, allowed, pos, cfg: TrainConfig, mask_id: int, **kw) -> torch.Tensor:
    """One forward of ids [1, Q] at positions pos [1, Q] under the attention rule `allowed` [1, Q, K],
    gated where the input is [MASK] -> float logits [Q or fewer, V]."""
    with gated(model, ids == mask_id), _autocast(cfg):
        out = fwd(input_ids=ids, attention_mask=additive(allowed, model.dtype), position_ids=pos, **kw)
    return out.logits[0].float()


def _chain_weights(log_right: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """log_right [N]: log-probability of the right token per slot (0 where not trained), slots of a
    block contiguous and in order; block [N] -> [N] product of the right-token probabilities at the
    block's earlier slots (1 at each block's first slot)."""
    before = log_right.cumsum(0) - log_right  # [N] sum over every earlier slot, all blocks
    first = torch.ones_like(block, dtype=torch.bool)
    first[1:] = block[1:] != block[:-1]
    start = torch.cummax(torch.where(first, torch.arange(len(block), device=block.device), 0), 0).values
    return (before - before[start]).exp()


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
    ntp = teacher = None
    if cfg.adapter == "gated-lora":
        cache = DynamicCache(config=model.config)
        # With soft targets: the base model's logits predicting each slot's position (from the one before).
        keep = (blocks.pos - 1).unique().to(device) if cfg.kl_weight > 0 else 1  # [U] sorted, or 1
        with torch.no_grad(), _autocast(cfg):
            out = fwd(input_ids=clean, position_ids=clean_pos[None], cache=cache, use_cache=True,
                      logits_to_keep=keep)  # fmt: skip
        if cfg.kl_weight > 0:
            rows = torch.searchsorted(keep, blocks.pos.to(device) - 1)  # [N] row of each slot's target
            teacher = out.logits[0].float()[rows]  # [N, V]
            teacher[:, mask_id] = float("-inf")
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
    loss_per_slot = ce
    if teacher is not None:
        soft = -(teacher.softmax(-1) * logits.log_softmax(-1).nan_to_num(neginf=0.0)).sum(-1)  # [N]
        loss_per_slot = (1 - cfg.kl_weight) * ce + cfg.kl_weight * soft
    w = blocks.weight.to(device) * trained
    if cfg.chain:
        w = w * _chain_weights(-ce.detach() * trained, blocks.block.to(device))
    loss = (loss_per_slot * w).sum() / w.sum().clamp_min(1e-8)
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
        logits=logits.detach(),
    )
