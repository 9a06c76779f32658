"""The one training loop, shared by the retrofit and the drafter: AdamW, gradient accumulation,
warm-up + cosine schedule, a checkpoint with a held-out TPF check every `eval_every` steps, an exact
resume, and several processes under Hugging Face accelerate.

What is trained is a `Job`: its parameters, the loss of one training sequence, the held-out check and
how a checkpoint is written. Launched as several processes (`accelerate launch`, `torchrun`), each
takes its share of every step's sequences and DDP averages the gradients, so N processes compute the
same update as one process with the same grad_accum.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm import tqdm

from ..errors import PardecError
from .run_state import (
    adam_tensors,
    apply_update,
    read_history,
    restore_adam,
    resume_step,
    step_record,
    step_stats,
    warmup_cosine,
)


class Job(Protocol):
    name: str  # for the progress bar and messages: "retrofit", "train drafter"
    cfg: Any  # lr, weight_decay, warmup_steps, steps, grad_accum, seed, eval_every; and the job's own
    module: torch.nn.Module  # what trains (train() / eval() around the held-out check)
    params: list[torch.nn.Parameter]
    param_names: dict[int, str]  # id(param) -> name in the checkpoint (optimizer moments are keyed by it)
    n_examples: int
    n_slots: int  # block positions the statistics are kept for
    lr_floor: float  # the cosine schedule ends at lr * lr_floor
    distributed: bool  # whether the loss runs through `forward`, so DDP can average its gradients

    def loss(self, example: int, gen: torch.Generator, forward):
        """The loss of one training sequence (an object with loss, tokens, slot_loss, slot_correct,
        slot_count); `forward` is the module, or its DDP wrapper."""

    def evaluate(self) -> float | None:
        """Held-out TPF, with the module in eval mode."""

    def save(self, out: Path, step: int, history: list[dict], moments: dict[str, torch.Tensor]) -> None: ...

    def load(self, path: str | Path) -> tuple[dict | None, dict[str, torch.Tensor]]:
        """Copy a checkpoint's weights into the parameters: (its training settings, all its tensors)."""


def train(job: Job, out: str | Path, resume: str | Path | None = None, progress: bool = True) -> list[dict]:
    """Run `job` for job.cfg.steps optimizer steps; checkpoints go to `out`, and `resume` continues
    from one exactly. Returns the history, one record per step."""
    from accelerate import Accelerator

    cfg = job.cfg
    if job.n_examples < 1:
        raise PardecError("no training examples")
    device = next(job.module.parameters()).device
    acc = Accelerator(cpu=device.type == "cpu")
    world, rank = acc.num_processes, acc.process_index
    if world > 1 and not job.distributed:
        raise PardecError(f"{job.name} runs in one process only")
    if cfg.grad_accum % world:
        raise PardecError(f"grad accum ({cfg.grad_accum}) must be a multiple of the process count ({world})")
    out = Path(out)
    opt = torch.optim.AdamW(job.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    step, history = 0, []
    if resume is not None:
        saved, tensors = job.load(resume)
        step = resume_step(saved, cfg)
        restore_adam(opt, job.param_names, tensors, step)
        history = read_history(resume)
    forward = acc.prepare_model(job.module) if world > 1 else job.module
    order = torch.randperm(job.n_examples, generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    job.module.train()
    main = acc.is_main_process
    bar = tqdm(total=cfg.steps, initial=step, desc=job.name, unit="step", disable=not (progress and main))
    while step < cfg.steps:
        t0 = time.perf_counter()
        stats = torch.zeros(2 + 3 * job.n_slots)  # loss, tokens, slot loss, slot hits, slot counts
        mine = list(range(step * cfg.grad_accum, (step + 1) * cfg.grad_accum))[rank::world]
        for k, i in enumerate(mine):
            # Noise is drawn from a generator seeded by the sequence's index in the run: a resumed or
            # distributed run draws exactly what a single uninterrupted one would.
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + i)
            sync = acc.no_sync(forward) if world > 1 and k < len(mine) - 1 else contextlib.nullcontext()
            with sync:
                lo = job.loss(order[i % job.n_examples], gen, forward)
                # DDP averages over processes: scale so the result is the mean over all grad_accum sequences.
                (lo.loss * world / cfg.grad_accum).backward()
            stats += step_stats(lo, cfg.grad_accum)
        if world > 1:
            stats = acc.reduce(stats, "sum")
        apply_update(
            opt, job.params, warmup_cosine(cfg.lr, cfg.warmup_steps, cfg.steps, step, floor=job.lr_floor)
        )
        step += 1
        rec = step_record(step, stats, time.perf_counter() - t0)
        history.append(rec)
        bar.set_postfix_str(
            f"loss {rec['loss']:.3f} tok/s {rec['tokens'] / rec['seconds']:.0f} acc by slot "
            + "/".join(f"{x:.2f}" for x in rec["slot_acc"])
        )
        bar.update()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            if main:
                job.module.eval()
                tpf = job.evaluate()
                job.module.train()
                history[-1]["heldout_tpf"] = tpf
                job.save(out, step, history, adam_tensors(opt, job.param_names))
                bar.write(
                    f"step {step}: checkpoint {out}, held-out TPF {tpf if tpf is None else round(tpf, 3)}"
                )
            acc.wait_for_everyone()
    bar.close()
    return history
