"""Checkpoints: safetensors weights plus a JSON of every setting they were trained with.

A checkpoint folder holds `pardec.json` (base model, mask token id, block size, objective, adapter
kind, ...) and `adapter.safetensors`. Loading checks that the checkpoint was made for this base model
and this mask token, so training and decoding settings cannot drift apart.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from . import adapters
from .errors import PardecError
from .models import PACKAGED

SETTINGS = "pardec.json"
BUNDLED = Path(__file__).parent / "weights"  # adapters shipped with pardec, one folder per model alias
WEIGHTS = "adapter.safetensors"
# full: tensors that replace the base model's parameters of the same name;
# lora / gated-lora: low-rank adapters attached to the base model (adapters.py).
KINDS = ("full", "lora", "gated-lora")


@dataclass(frozen=True)
class CheckpointSettings:
    base_model: str
    mask_token_id: int
    block_size: int
    objective: str
    adapter: str  # one of KINDS
    vocab_size: int
    base_sha256: str | None = None  # of the packaged GGUF, where the base is a packaged alias
    lora: dict | None = None  # LoRAConfig fields, for the lora kinds
    training: dict | None = None  # every training setting, for the record


def save(path: str | Path, settings: CheckpointSettings, tensors: dict[str, torch.Tensor]) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path / WEIGHTS))
    (path / SETTINGS).write_text(json.dumps(asdict(settings), indent=2) + "\n")


def resolve_adapter(model: str, adapter: str | None) -> Path | None:
    """`--adapter` value -> checkpoint folder: "auto" = the adapter bundled for this model, if any;
    "none" (or None) = no adapter; anything else is a folder."""
    if adapter in (None, "none"):
        return None
    if adapter == "auto":
        if model not in PACKAGED:  # only packaged aliases have bundled adapters
            return None
        bundled = BUNDLED / model
        return bundled if (bundled / SETTINGS).is_file() else None
    return Path(adapter)


def read_settings(path: str | Path) -> CheckpointSettings:
    path = Path(path)
    if not (path / SETTINGS).is_file():
        raise PardecError(f"'{path}' is not a pardec checkpoint (no {SETTINGS})")
    try:
        return CheckpointSettings(**json.loads((path / SETTINGS).read_text()))
    except (json.JSONDecodeError, TypeError) as e:
        raise PardecError(f"corrupt checkpoint settings in '{path / SETTINGS}': {e}") from e


def check_fits(settings: CheckpointSettings, path, base_model: str, mask_id: int, vocab_size: int) -> None:
    """Refuse a checkpoint made for another base model, vocabulary or [MASK] token, or of an unknown kind."""
    if settings.base_model != base_model:
        raise PardecError(
            f"checkpoint '{path}' was made for base model '{settings.base_model}', not '{base_model}'"
        )
    if settings.mask_token_id != mask_id or settings.vocab_size != vocab_size:
        raise PardecError(f"checkpoint '{path}' was made with another vocabulary or [MASK] token id")
    if settings.adapter not in KINDS:
        raise PardecError(f"checkpoint '{path}' has adapter kind '{settings.adapter}', which this version cannot load")


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(Path(path) / WEIGHTS))
    except Exception as e:  # safetensors raises several types for truncated or garbled files
        raise PardecError(f"corrupt checkpoint weights in '{path}': {e}") from e


@torch.no_grad()
def apply(model, path: str | Path, base_model: str, mask_id: int) -> CheckpointSettings:
    """Load a checkpoint onto `model` (loaded as `base_model`, with `[MASK]` = mask_id)."""
    settings = read_settings(path)
    check_fits(settings, path, base_model, mask_id, model.get_input_embeddings().weight.shape[0])
    tensors = read_weights(path)
    if settings.adapter in adapters.KINDS:
        cfg = dict(settings.lora or {})
        cfg["targets"] = tuple(cfg.get("targets", adapters.TARGETS))
        adapters.attach(model, adapters.LoRAConfig(**cfg), dtype=torch.float32, freeze=False)
        model.eval()
        missing = set(adapters.adapter_state(model)) - set(tensors)
        if missing:
            raise PardecError(f"checkpoint '{path}' lacks adapter tensors (e.g. '{sorted(missing)[0]}')")
    params = dict(model.named_parameters())
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            continue  # resume state, not weights
        if name not in params or params[name].shape != value.shape:
            raise PardecError(f"checkpoint '{path}' does not fit this model (tensor '{name}')")
        params[name].copy_(value.to(params[name].dtype))
    return settings


def export(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Copy a training checkpoint without its optimizer state, weights cast to `dtype`: the small
    artefact to ship or commit. (Resuming needs the full checkpoint.)"""
    settings = read_settings(src)
    tensors = load_file(str(Path(src) / WEIGHTS))
    save(dst, settings, {k: v.to(dtype) for k, v in tensors.items() if not k.startswith("optimizer.")})
    for extra in ("history.jsonl", "curves.png"):
        if (Path(src) / extra).exists():
            shutil.copyfile(Path(src) / extra, Path(dst) / extra)
