"""The retrofit loop: AdamW over the adapter, gradient accumulation, checkpoints with a held-out TPF
check, resumable."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .. import adapters, checkpoint
from ..decoding import DecodeConfig
from ..errors import PardecError
from .config import TrainConfig
from .data import Example
from .layout import sample_blocks
from .objective import sequence_loss
from .run_state import (adam_tensors, apply_update, heldout_tpf, read_history, restore_adam, resume_step, step_record,
                        step_stats, warmup_cosine, write_checkpoint)


def lora_config(cfg: TrainConfig) -> adapters.LoRAConfig | None:
    """The adapter a run trains (None for `full`): what prepare attaches, _save records and
    _init_from checks, derived in one place."""
    if cfg.adapter == "full":
        return None
    return adapters.LoRAConfig(cfg.adapter, cfg.lora_rank, cfg.lora_alpha, tuple(cfg.lora_targets))


def prepare(model, cfg: TrainConfig) -> list[torch.nn.Parameter]:
    """Make the adapter's parameters (or all, for `full`) trainable; return them."""
    if cfg.adapter == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return [p for p in model.parameters()]
    adapters.attach(model, lora_config(cfg), dtype=torch.float32)
    return [p for p in model.parameters() if p.requires_grad]


def trainable_state(model, cfg: TrainConfig) -> dict[str, torch.Tensor]:
    if cfg.adapter == "full":
        return {n: p for n, p in model.named_parameters()}
    return adapters.adapter_state(model)


def retrofit(model, mask_id: int, train: list[Example], heldout: list[list[int]], cfg: TrainConfig,
             out: str | Path, base_model: str, base_sha256: str | None, stop_ids=frozenset(),
             resume: str | Path | None = None, progress: bool = True) -> list[dict]:
    """Train; write checkpoints to `out` every cfg.eval_every steps and at the end. Returns the history.

    Runs under Hugging Face accelerate: launched as several processes (`accelerate launch` or
    `torchrun`), each process takes its share of every optimizer step's sequences and DDP averages the
    gradients, so N processes compute the same update as one process with the same grad_accum.
    """
    from accelerate import Accelerator

    train = [ex for ex in train if ex.response_start < len(ex.ids)]  # something to predict
    if not train:
        raise PardecError("no training examples")
    acc = Accelerator(cpu=model.device.type == "cpu")
    world, rank = acc.num_processes, acc.process_index
    if cfg.grad_accum % world:
        raise PardecError(f"grad accum ({cfg.grad_accum}) must be a multiple of the process count ({world})")
    out = Path(out)
    params = prepare(model, cfg)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    names = {id(p): n for n, p in trainable_state(model, cfg).items()}
    step, history = 0, []
    if resume is not None:
        step, history = _resume(model, opt, resume, cfg, names)
    elif cfg.init_from is not None:
        _init_from(model, cfg, base_model, mask_id)
    forward = acc.prepare_model(model) if world > 1 else model
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    model.train()
    main = acc.is_main_process
    bar = tqdm(total=cfg.steps, initial=step, desc="retrofit", unit="step", disable=not (progress and main))
    D = cfg.block_size
    while step < cfg.steps:
        t0 = time.perf_counter()
        stats = torch.zeros(2 + 3 * D)  # loss, tokens, slot loss [D], slot hits [D], slot counts [D]
        mine = list(range(step * cfg.grad_accum, (step + 1) * cfg.grad_accum))[rank::world]
        for k, i in enumerate(mine):
            ex = train[order[i % len(train)]]
            # Blocks are drawn from a generator seeded by the sequence's index in the run: a resumed or
            # distributed run draws exactly what a single uninterrupted one would.
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + i)
            blocks = sample_blocks(ex.ids, ex.response_start, cfg, mask_id, gen)
            sync = acc.no_sync(forward) if world > 1 and k < len(mine) - 1 else contextlib.nullcontext()
            with sync:
                lo = sequence_loss(model, ex.ids, ex.response_start, blocks, cfg, mask_id, forward)
                # DDP averages over processes: scale so the result is the mean over all grad_accum sequences.
                (lo.loss * world / cfg.grad_accum).backward()
            stats += step_stats(lo, cfg.grad_accum)
        if world > 1:
            stats = acc.reduce(stats, "sum")
        apply_update(opt, params, warmup_cosine(cfg.lr, cfg.warmup_steps, cfg.steps, step, floor=0.1))
        step += 1
        rec = step_record(step, stats, time.perf_counter() - t0)
        history.append(rec)
        bar.set_postfix_str(f"loss {rec['loss']:.3f} tok/s {rec['tokens'] / rec['seconds']:.0f} by slot "
                            + "/".join(f"{x:.2f}" for x in rec["slot_loss"]))
        bar.update()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            if main:
                config = DecodeConfig(method="spec", block_size=max(2, cfg.block_size),
                                      max_new_tokens=cfg.eval_max_new_tokens)
                tpf = heldout_tpf(model, model, heldout, config, mask_id, stop_ids) if heldout else None
                history[-1]["heldout_tpf"] = tpf
                _save(model, opt, out, cfg, step, history, base_model, base_sha256, mask_id, names)
                bar.write(f"step {step}: checkpoint {out}, held-out spec TPF {tpf if tpf is None else round(tpf, 3)}")
            acc.wait_for_everyone()
    bar.close()
    return history


def _save(model, opt, out: Path, cfg, step, history, base_model, base_sha256, mask_id, names):
    tensors = dict(trainable_state(model, cfg)) | adam_tensors(opt, names)  # moments: for an exact resume
    lora = lora_config(cfg)
    settings = checkpoint.CheckpointSettings(
        base_model=base_model, mask_token_id=mask_id, block_size=cfg.block_size, objective=cfg.objective,
        adapter=cfg.adapter, vocab_size=model.get_input_embeddings().weight.shape[0], base_sha256=base_sha256,
        lora=None if lora is None else dataclasses.asdict(lora),  # targets: a JSON list
        training=dict(dataclasses.asdict(cfg), step=step),
    )
    write_checkpoint(out, lambda folder: checkpoint.save(folder, settings, tensors), history)


def _init_from(model, cfg: TrainConfig, base_model: str, mask_id: int) -> None:
    """Warm start: the weights of an earlier checkpoint, with a fresh optimizer and schedule. Only the
    kind must match. Block size, objective and data may change (e.g. D 4 -> 8); the run may adapt a
    subset of the checkpoint's layers (e.g. attention only: their tensors are taken, the rest dropped);
    and its rank may be larger (more capacity, starting from exactly the checkpoint's update)."""
    path = cfg.init_from
    settings = checkpoint.read_settings(path)
    checkpoint.check_fits(settings, path, base_model, mask_id, model.get_input_embeddings().weight.shape[0])
    mine, theirs = lora_config(cfg), settings.lora
    if (settings.adapter != cfg.adapter or (mine is None) != (theirs is None)
            or (mine is not None and theirs["rank"] > mine.rank)):
        shown = "" if theirs is None else f"of rank {theirs['rank']}"
        raise PardecError(f"cannot start from '{path}': it is a {settings.adapter} checkpoint {shown}; this run "
                          f"trains {cfg.adapter}" + ("" if mine is None else f" of rank {mine.rank} (not less)"))
    if mine is None:
        _load_trainable(model, cfg, path)
    else:
        _load_grown(model, path, theirs["rank"], theirs["alpha"] / theirs["rank"])


@torch.no_grad()
def _load_grown(model, path, rank: int, scale: float) -> None:
    """Copy a checkpoint's LoRA tensors (rank `rank`, update scale `scale`) into this run's adapters,
    which may have a larger rank and another scale. A's extra rows keep their random init and B's
    extra columns are zero, so the update x A^T B^T * scale is exactly the checkpoint's at step 0;
    the extra rank trains from there."""
    tensors = checkpoint.read_weights(path)
    for name, m in adapters.lora_modules(model).items():
        a, b = tensors.get(f"{name}.lora_a"), tensors.get(f"{name}.lora_b")
        if a is None or b is None or a.shape[1:] != m.lora_a.shape[1:] or b.shape[:1] != m.lora_b.shape[:1] \
                or a.shape[0] != rank or b.shape[1] != rank:
            raise PardecError(f"checkpoint '{path}' does not fit this run (tensor '{name}.lora_a')")
        m.lora_a[:rank] = a
        m.lora_b.zero_()
        m.lora_b[:, :rank] = b.float() * (scale / m.scale)


def _resume(model, opt, path, cfg: TrainConfig, names) -> tuple[int, list[dict]]:
    step = resume_step(checkpoint.read_settings(path).training, cfg)
    tensors = _load_trainable(model, cfg, path)
    restore_adam(opt, names, tensors, step)
    return step, read_history(path)


@torch.no_grad()
def _load_trainable(model, cfg: TrainConfig, path) -> dict[str, torch.Tensor]:
    """Copy a checkpoint's weights into the trained parameters; returns all its tensors."""
    tensors = checkpoint.read_weights(path)
    for n, p in trainable_state(model, cfg).items():
        if n not in tensors or tensors[n].shape != p.shape:
            raise PardecError(f"checkpoint '{path}' does not fit this run (tensor '{n}')")
        p.copy_(tensors[n])
    return tensors
