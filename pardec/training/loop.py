"""The retrofit: train an adapter (or all weights) to predict blocks, with the one training loop
(trainer.py); warm starts from an earlier checkpoint, also at a larger rank."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ..decoding import DecodeConfig
from ..errors import PardecError
from ..model import LoadedModel, adapters, checkpoint
from . import trainer
from .config import TrainConfig
from .data import Example
from .layout import sample_blocks
from .objective import sequence_loss
from .run_state import heldout_tpf, write_checkpoint


def lora_config(cfg: TrainConfig) -> adapters.LoRAConfig | None:
    """The adapter a run trains (None for `full`): what prepare attaches, save records and
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


class RetrofitJob:
    """Block prediction over the base model (trainer.Job)."""

    name = "retrofit"
    lr_floor = 0.1
    distributed = True

    def __init__(self, lm: LoadedModel, train: list[Example], heldout: list[list[int]], cfg: TrainConfig):
        model = lm.model
        self.lm, self.module, self.mask_id, self.cfg = lm, model, lm.mask_id, cfg
        self.train = [ex for ex in train if ex.response_start < len(ex.ids)]  # something to predict
        self.heldout = heldout
        self.params = prepare(model, cfg)
        self.param_names = {id(p): n for n, p in trainable_state(model, cfg).items()}
        self.n_examples, self.n_slots = len(self.train), cfg.block_size

    def loss(self, example, gen, forward):
        ex = self.train[example]
        blocks = sample_blocks(ex.ids, ex.response_start, self.cfg, self.mask_id, gen)
        return sequence_loss(self.module, ex.ids, ex.response_start, blocks, self.cfg, self.mask_id, forward)

    def evaluate(self):
        if not self.heldout:
            return None
        # Fixed shapes: the held-out TPF measures the drafts, whatever this machine charges for them.
        config = DecodeConfig(method="spec", block_size=max(2, self.cfg.block_size), adaptive=False,
                              max_new_tokens=self.cfg.eval_max_new_tokens)  # fmt: skip
        return heldout_tpf(self.module, self.heldout, config, self.mask_id, self.lm.stop_ids)

    def save(self, out, step, history, moments):
        model, cfg = self.module, self.cfg
        tensors = dict(trainable_state(model, cfg)) | moments  # moments: for an exact resume
        lora = lora_config(cfg)
        settings = checkpoint.CheckpointSettings(
            base_model=self.lm.name,
            mask_token_id=self.mask_id,
            block_size=cfg.block_size,
            objective=cfg.objective,
            adapter=cfg.adapter,
            vocab_size=model.get_input_embeddings().weight.shape[0],
            base_sha256=self.lm.base_sha256,
            lora=None if lora is None else dataclasses.asdict(lora),  # targets: a JSON list
            training=dict(dataclasses.asdict(cfg), step=step),
        )
        write_checkpoint(out, lambda folder: checkpoint.save(folder, settings, tensors), history)

    def load(self, path):
        return checkpoint.read_settings(path).training, _load_trainable(self.module, self.cfg, path)


def retrofit(
    lm: LoadedModel,
    train: list[Example],
    heldout: list[list[int]],
    cfg: TrainConfig,
    out: str | Path,
    resume: str | Path | None = None,
    progress: bool = True,
) -> list[dict]:
    """Train block prediction on a plain LoadedModel; write checkpoints to `out` every cfg.eval_every
    steps and at the end. Returns the history. `cfg.init_from` warm-starts from another checkpoint."""
    job = RetrofitJob(lm, train, heldout, cfg)
    if resume is None and cfg.init_from is not None:
        _init_from(lm.model, cfg, lm.name, lm.mask_id)
    return trainer.train(job, out, resume, progress)


def _init_from(model, cfg: TrainConfig, base_model: str, mask_id: int) -> None:
    """Warm start: the weights of an earlier checkpoint, with a fresh optimizer and schedule. Only the
    kind must match. Block size, objective and data may change (e.g. D 4 -> 8); the run may adapt a
    subset of the checkpoint's layers (e.g. attention only: their tensors are taken, the rest dropped);
    and its rank may be larger (more capacity, starting from exactly the checkpoint's update)."""
    path = cfg.init_from
    settings = checkpoint.read_settings(path)
    checkpoint.check_fits(settings, path, base_model, mask_id, model.get_input_embeddings().weight.shape[0])
    mine, theirs = lora_config(cfg), settings.lora
    if (
        settings.adapter != cfg.adapter
        or (mine is None) != (theirs is None)
        or (mine is not None and theirs["rank"] > mine.rank)
    ):
        shown = "" if theirs is None else f"of rank {theirs['rank']}"
        raise PardecError(
            f"cannot start from '{path}': it is a {settings.adapter} checkpoint {shown}; this run "
            f"trains {cfg.adapter}" + ("" if mine is None else f" of rank {mine.rank} (not less)")
        )
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
        if (
            a is None
            or b is None
            or a.shape[1:] != m.lora_a.shape[1:]
            or b.shape[:1] != m.lora_b.shape[:1]
            or a.shape[0] != rank
            or b.shape[1] != rank
        ):
            raise PardecError(f"checkpoint '{path}' does not fit this run (tensor '{name}.lora_a')")
        m.lora_a[:rank] = a
        m.lora_b.zero_()
        m.lora_b[:, :rank] = b.float() * (scale / m.scale)


@torch.no_grad()
def _load_trainable(model, cfg: TrainConfig, path) -> dict[str, torch.Tensor]:
    """Copy a checkpoint's weights into the trained parameters; returns all its tensors."""
    tensors = checkpoint.read_weights(path)
    for n, p in trainable_state(model, cfg).items():
        if n not in tensors or tensors[n].shape != p.shape:
            raise PardecError(f"checkpoint '{path}' does not fit this run (tensor '{n}')")
        p.copy_(tensors[n])
    return tensors
