"""Training a DFlash drafter: target features cached on disk, random anchors, position-decayed loss.

The target never trains and never runs during training steps: its features (the chosen layers'
outputs at every position of every example) are computed once, without gradients, and stored as
safetensors shards, so many epochs cost only drafter forwards. Each training sequence contributes
K blocks at random anchors a in its response: the block [x_a, MASK x (D - 1)] at positions
a .. a + D - 1 sees the features of positions < a and itself, and learns x_{a+1} .. x_{a+D-1},
slot j weighted exp(-(j - 1) / decay) (early slots decide acceptance).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ..decoding import DecodeConfig
from ..dflash import checkpoint as dcheckpoint
from ..dflash.model import Drafter, block_inputs, target_features
from ..errors import PardecError
from .data import Example
from .run_state import (adam_tensors, apply_update, heldout_tpf, read_history, restore_adam, resume_step, step_record,
                        step_stats, warmup_cosine, write_checkpoint)


@dataclass(frozen=True)
class DrafterTrainConfig:
    block_size: int = 8  # D: the drafter proposes D - 1 tokens per forward
    layers: int = 2  # drafter depth
    target_layers: tuple[int, ...] | None = None  # None: 3 spread over the target's depth
    # "norm": random layers, the target's final norm (default; copies of the target's last layers,
    # "target", fed embeddings instead of a deep residual stream, trained worse); "random": all random
    init: str = "norm"
    anchors_per_sequence: int = 32  # K blocks per training sequence
    decay: float | None = 4.0  # slot j weighs exp(-(j - 1) / decay); None = flat
    lr: float = 6e-4
    weight_decay: float = 0.0
    warmup_steps: int = 20
    steps: int = 400  # optimizer steps
    grad_accum: int = 4  # sequences per step
    max_length: int = 768
    bf16: bool = True
    seed: int = 0
    eval_every: int = 100
    eval_prompts: int = 4
    eval_max_new_tokens: int = 64
    draft_vocab: int = 32768  # drafts use the N most frequent tokens of the data (0 = all); see DrafterConfig

    def __post_init__(self):
        if self.block_size < 2 or self.layers < 1 or self.anchors_per_sequence < 1:
            raise PardecError("drafter training needs block size >= 2, layers >= 1, anchors >= 1")
        if self.steps < 1 or self.grad_accum < 1 or self.lr <= 0:
            raise PardecError("steps and grad accum must be >= 1 and lr > 0")
        if self.init not in ("norm", "target", "random"):
            raise PardecError("init must be 'norm', 'target' or 'random'")
        if self.decay is not None and self.decay <= 0:
            raise PardecError("decay must be > 0")
        if self.draft_vocab < 0:
            raise PardecError("draft vocabulary size must be >= 0 (0 = the whole vocabulary)")


# ---------------------------------------------------------------- target features, cached on disk

SHARD = 64  # examples per shard file


def features_key(base_model: str, layers: tuple[int, ...], examples: list[Example], dtype: torch.dtype) -> str:
    h = hashlib.sha256(json.dumps([base_model, list(layers), str(dtype)]).encode())
    for ex in examples:
        h.update(json.dumps(ex.ids).encode())
    return h.hexdigest()[:16]


@torch.no_grad()
def cache_features(target, examples: list[Example], layers: tuple[int, ...], folder: str | Path,
                   progress: bool = True) -> Path:
    """Run the target over every example once (no gradients) and store the chosen layers' outputs
    [len(ids), H * len(layers)] as safetensors shards in `folder`; shards already there are kept,
    so an interrupted run resumes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n_shards = math.ceil(len(examples) / SHARD)
    todo = [s for s in range(n_shards) if not (folder / f"shard-{s:05d}.safetensors").exists()]
    bar = tqdm(total=sum(len(ex.ids) for s in todo for ex in examples[s * SHARD : (s + 1) * SHARD]),
               desc="target features", unit="tok", disable=not progress)
    for s in todo:
        tensors = {}
        for i in range(s * SHARD, min(len(examples), (s + 1) * SHARD)):
            ids = torch.tensor([examples[i].ids], device=target.device)
            hs = target(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states
            tensors[f"f{i}"] = target_features(hs, layers)[0].to(torch.bfloat16).cpu()
            bar.update(len(examples[i].ids))
        tmp = folder / f"shard-{s:05d}.tmp"
        save_file(tensors, str(tmp))
        tmp.rename(folder / f"shard-{s:05d}.safetensors")  # a killed run never leaves half a shard
    bar.close()
    return folder


def load_features(folder: str | Path, n: int) -> list[torch.Tensor]:
    out: dict[int, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("shard-*.safetensors")):
        out.update({int(k[1:]): v for k, v in load_file(str(f)).items()})
    missing = [i for i in range(n) if i not in out]
    if missing:
        raise PardecError(f"feature cache '{folder}' lacks example {missing[0]}; delete it to recompute")
    return [out[i] for i in range(n)]


# ---------------------------------------------------------------- the loss


def sample_anchors(ex: Example, k: int, gen: torch.Generator) -> torch.Tensor:
    """Up to k distinct anchors a with response_start <= a <= len - 2 (x_{a+1} exists), sorted."""
    lo, hi = ex.response_start, len(ex.ids) - 2
    if hi < lo:
        return torch.zeros(0, dtype=torch.long)
    perm = torch.randperm(hi - lo + 1, generator=gen)[:k] + lo
    return perm.sort().values


@dataclass
class DraftLoss:
    loss: torch.Tensor  # weighted mean cross-entropy (differentiable)
    tokens: int
    slot_loss: torch.Tensor  # [D - 1] summed CE by slot
    slot_correct: torch.Tensor  # [D - 1] argmax hits by slot
    slot_count: torch.Tensor  # [D - 1]


def drafter_loss(drafter: Drafter, target, ids: list[int], features: torch.Tensor, anchors: torch.Tensor,
                 decay: float | None) -> DraftLoss:
    """One sequence: features [L, F] of the target, anchors [K] -> the loss over K blocks at once."""
    D, dev = drafter.cfg.block_size, features.device
    L, K = len(ids), len(anchors)
    x = torch.tensor(ids, device=dev)
    pos = torch.arange(L, device=dev)
    ctx = drafter.context_kv(features[None], pos[None])  # per layer [1, kv, L, d]
    blk = block_inputs(x[anchors], D, drafter.cfg.mask_token_id)  # [K, D]
    q_pos = anchors[:, None] + torch.arange(D, device=dev)  # [K, D]
    q_anchor = anchors.repeat_interleave(D)  # [K * D]
    q_block = torch.arange(K, device=dev).repeat_interleave(D)
    mask = torch.cat([pos[None, :] < q_anchor[:, None],  # context strictly before the block's anchor
                      q_block[:, None] == q_block[None, :]], 1)  # [K * D, L + K * D]
    emb = target.get_input_embeddings()(blk.view(1, -1))
    h = drafter(emb, q_pos.view(1, -1), ctx, mask[None])[0].view(K, D, -1)[:, 1:]  # [K, D - 1, H]
    labels = x[q_pos[:, 1:].clamp(max=L - 1)]  # [K, D - 1]
    valid = q_pos[:, 1:] < L
    logits = target.get_output_embeddings()(h[valid]).float()  # [N, V]
    logits[:, drafter.cfg.mask_token_id] = float("-inf")
    ce = F.cross_entropy(logits, labels[valid], reduction="none")  # [N]
    slot = torch.arange(1, D, device=dev).expand(K, -1)[valid]  # [N] slot index 1 .. D - 1
    w = torch.ones_like(ce) if decay is None else torch.exp(-(slot - 1).float() / decay)
    loss = (w * ce).sum() / w.sum().clamp_min(1e-9)
    hit = (logits.argmax(-1) == labels[valid]).float()
    z = torch.zeros(D - 1, device=dev)
    return DraftLoss(loss, int(valid.sum()), z.index_add(0, slot - 1, ce.detach()),
                     z.index_add(0, slot - 1, hit), z.index_add(0, slot - 1, torch.ones_like(hit)))


# ---------------------------------------------------------------- the loop


def train_drafter(target, drafter: Drafter, train: list[Example], features: list[torch.Tensor],
                  heldout: list[list[int]], cfg: DrafterTrainConfig, out: str | Path, base_model: str,
                  base_sha256: str | None, stop_ids=frozenset(), resume: str | Path | None = None,
                  progress: bool = True) -> list[dict]:
    """Train `drafter` (float32 weights, bf16 autocast) on cached target features; checkpoint to
    `out` every cfg.eval_every steps with a held-out DFlash TPF. Returns the history."""
    keep = [i for i, ex in enumerate(train) if len(ex.ids) - 2 >= ex.response_start]
    if not keep:
        raise PardecError("no training examples with a response to predict")
    for p in target.parameters():
        p.requires_grad_(False)  # the target is frozen; only the drafter trains
    params = [p for p in drafter.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    step, history = 0, []
    if resume is not None:
        step, history = _resume(drafter, opt, resume, cfg)
    order = [keep[i] for i in torch.randperm(len(keep), generator=torch.Generator().manual_seed(cfg.seed))]
    D = cfg.block_size
    drafter.train()
    bar = tqdm(total=cfg.steps, initial=step, desc="train drafter", unit="step", disable=not progress)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16 and target.device.type == "cpu")
    while step < cfg.steps:
        t0 = time.perf_counter()
        stats = torch.zeros(2 + 3 * (D - 1))
        for i in range(step * cfg.grad_accum, (step + 1) * cfg.grad_accum):
            j = order[i % len(order)]
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + i)  # resume draws the same anchors
            anchors = sample_anchors(train[j], cfg.anchors_per_sequence, gen).to(target.device)
            with autocast:
                lo = drafter_loss(drafter, target, train[j].ids, features[j].to(target.device), anchors, cfg.decay)
            (lo.loss / cfg.grad_accum).backward()
            stats += step_stats(lo, cfg.grad_accum)
        apply_update(opt, params, warmup_cosine(cfg.lr, cfg.warmup_steps, cfg.steps, step, floor=0.05))
        step += 1
        rec = step_record(step, stats, time.perf_counter() - t0)
        history.append(rec)
        bar.set_postfix_str(f"loss {rec['loss']:.3f} acc by slot " + "/".join(f"{a:.2f}" for a in rec["slot_acc"]))
        bar.update()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            config = DecodeConfig(method="dflash", block_size=cfg.block_size, max_new_tokens=cfg.eval_max_new_tokens)
            tpf = (heldout_tpf(drafter, target, heldout, config, drafter.cfg.mask_token_id, stop_ids, drafter)
                   if heldout else None)
            history[-1]["heldout_tpf"] = tpf
            _save(drafter, opt, out, cfg, step, history, base_model, base_sha256)
            bar.write(f"step {step}: checkpoint {out}, held-out dflash TPF {tpf if tpf is None else round(tpf, 3)}")
    bar.close()
    return history


def _save(drafter, opt, out, cfg, step, history, base_model, base_sha256):
    moments = adam_tensors(opt, {id(p): n for n, p in drafter.named_parameters()})
    write_checkpoint(out, lambda folder: dcheckpoint.save(folder, drafter, base_model, base_sha256,
                                                          training=dict(dataclasses.asdict(cfg), step=step),
                                                          extra=moments),
                     history, tpf_label="held-out dflash TPF", first_slot=1)


def _resume(drafter, opt, path, cfg: DrafterTrainConfig) -> tuple[int, list[dict]]:
    step = resume_step(dcheckpoint.read_settings(path).get("training"), cfg)
    tensors = dcheckpoint.read_tensors(path)
    with torch.no_grad():
        for n, p in drafter.state_dict().items():
            if n == "draft_vocab" and n not in tensors:
                continue  # a checkpoint from before draft vocabularies: keep the one chosen from the data
            if n not in tensors or tensors[n].shape != p.shape:
                raise PardecError(f"cannot resume from '{path}': tensor '{n}' is missing or has another shape")
            p.copy_(tensors[n])
    restore_adam(opt, {id(p): n for n, p in drafter.named_parameters()}, tensors, step)
    return step, read_history(path)
