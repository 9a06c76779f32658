"""What a training run keeps besides its weights (trainer.py uses it): the per-step statistics and
update, the learning-rate schedule, AdamW moments for an exact resume, the settings a resume must not
change, the history, and the checkpoint folder written beside its destination and swapped in."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from ..decoding import DecodeConfig, decode
from ..errors import PardecError
from .curves import plot_history

MOMENTS = ("exp_avg", "exp_avg_sq")
FREE_ON_RESUME = ("steps", "eval_every")  # settings a resumed run may change


def warmup_cosine(lr: float, warmup: int, steps: int, step: int, floor: float) -> float:
    """Linear warm-up, then cosine decay from lr to floor * lr at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def step_stats(lo, grad_accum: int) -> torch.Tensor:
    """One sequence's share of a step's statistics, to be summed over the step:
    [loss / grad_accum, tokens, slot loss [S], slot hits [S], slot counts [S]]."""
    return torch.cat(
        [
            torch.tensor([lo.loss.item() / grad_accum, lo.tokens]),
            lo.slot_loss.cpu(),
            lo.slot_correct.cpu(),
            lo.slot_count.cpu(),
        ]
    )


def step_record(step: int, stats: torch.Tensor, seconds: float) -> dict:
    """Summed step_stats -> the history record: mean loss and accuracy by block slot."""
    S = (len(stats) - 2) // 3
    n = stats[2 + 2 * S :].clamp_min(1)
    return dict(
        step=step,
        loss=float(stats[0]),
        tokens=int(stats[1]),
        seconds=seconds,
        slot_loss=(stats[2 : 2 + S] / n).tolist(),
        slot_acc=(stats[2 + S : 2 + 2 * S] / n).tolist(),
    )


def apply_update(opt: torch.optim.Optimizer, params, lr: float, max_norm: float = 1.0) -> None:
    """Set the learning rate, clip the gradient norm, step and clear the gradients."""
    for g in opt.param_groups:
        g["lr"] = lr
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)


def adam_tensors(opt: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, torch.Tensor]:
    """AdamW moments as `optimizer.<param name>.<moment>` tensors (names: id(param) -> name)."""
    return {f"optimizer.{names[id(p)]}.{k}": st[k] for p, st in opt.state.items() for k in MOMENTS}


def restore_adam(
    opt: torch.optim.Optimizer, names: dict[int, str], tensors: dict[str, torch.Tensor], step: int
) -> None:
    for p in opt.param_groups[0]["params"]:
        n = names[id(p)]
        opt.state[p] = {
            "step": torch.tensor(float(step)),
            **{k: tensors[f"optimizer.{n}.{k}"].clone() for k in MOMENTS},
        }


def resume_step(saved: dict | None, cfg) -> int:
    """The step a checkpoint's training record stopped at; refuses settings that changed since."""
    saved = dict(saved or {})
    step = saved.pop("step", 0)
    now = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}  # JSON form
    changed = [k for k, v in saved.items() if k not in FREE_ON_RESUME and now.get(k) != v]
    if changed:
        raise PardecError(f"cannot resume: settings differ from the checkpoint's ({', '.join(changed)})")
    return step


def read_history(path: str | Path) -> list[dict]:
    f = Path(path) / "history.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def write_checkpoint(out: str | Path, write: Callable[[Path], None], history: list[dict], **plot_kw) -> None:
    """write(folder) saves the weights and settings; history.jsonl and curves.png go beside them. All
    lands in a sibling folder first, then replaces `out`: a crash mid-save never leaves a half-written
    checkpoint."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    write(tmp)
    (tmp / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    plot_history(history, tmp / "curves.png", **plot_kw)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


@torch.no_grad()
def heldout_tpf(
    target, prompts: list[list[int]], config: DecodeConfig, mask_id: int, stop_ids, extras: dict | None = None
) -> float:
    """Tokens per target forward over held-out prompts, decoded with `config`."""
    res = decode(target, prompts, config, mask_id, stop_ids, extras=extras)
    return sum(len(r.tokens) for r in res) / max(1, sum(r.forwards for r in res))
