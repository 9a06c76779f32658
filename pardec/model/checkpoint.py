"""Checkpoints: one versioned folder format for everything pardec trains.

A checkpoint folder holds `pardec.json` (format version, `kind`, base model, and every setting it was
trained with) and `<kind>.safetensors`. Kinds: `adapter` (a retrofit: LoRA, gated LoRA or full
weights over the base model) and `drafter` (a separate draft model, e.g. DFlash's). Loading checks
that a checkpoint was made for this base model and this `[MASK]` token, so training and decoding
settings cannot drift apart. Version 1 folders (an adapter's `pardec.json` without a format, a
drafter's `drafter.json`) are read as well.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import PardecError
from . import adapters
from .packaged import PACKAGED

FORMAT = 2
SETTINGS = "pardec.json"
KINDS = ("adapter", "drafter")
LEGACY_SETTINGS = {"drafter": "drafter.json"}  # version 1 drafters; version 1 adapters used SETTINGS
BUNDLED = Path(__file__).resolve().parent.parent / "weights"  # shipped with pardec
BUNDLED_SUFFIX = {"adapter": "", "drafter": "-dflash"}  # weights/<alias><suffix>/
EXTRAS = ("history.jsonl", "curves.png")  # training records that travel with an export


def weights_file(path: str | Path, kind: str) -> Path:
    return Path(path) / f"{kind}.safetensors"


def write(path: str | Path, kind: str, header: dict, tensors: dict[str, torch.Tensor]) -> None:
    """Save a checkpoint: `header` (JSON-able settings) and `tensors`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(weights_file(path, kind)))
    (path / SETTINGS).write_text(json.dumps(dict(format=FORMAT, kind=kind, **header), indent=2) + "\n")


def read_header(path: str | Path, kind: str | None = None) -> dict:
    """The settings of a checkpoint folder (with `format` and `kind`); refuses another kind than `kind`."""
    path = Path(path)
    found = path / SETTINGS
    legacy = [k for k, name in LEGACY_SETTINGS.items() if (path / name).is_file()]
    if not found.is_file() and not legacy:
        raise PardecError(f"'{path}' is not a pardec checkpoint (no {SETTINGS})")
    f = found if found.is_file() else path / LEGACY_SETTINGS[legacy[0]]
    try:
        header = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise PardecError(f"corrupt checkpoint settings in '{f}': {e}") from e
    if not isinstance(header, dict):
        raise PardecError(f"corrupt checkpoint settings in '{f}': not a JSON object")
    if f.name != SETTINGS:  # version 1 drafter: its format string named the kind
        header = dict(header, format=1, kind=legacy[0])
    elif "format" not in header:  # version 1 adapter
        header = dict(header, format=1, kind="adapter")
    if header.get("format") not in (1, FORMAT) or header.get("kind") not in KINDS:
        raise PardecError(
            f"'{path}' has checkpoint format {header.get('format')!r} of kind "
            f"{header.get('kind')!r}, which this version cannot load"
        )
    if kind is not None and header["kind"] != kind:
        raise PardecError(
            f"'{path}' is a {header['kind']} checkpoint, where a checkpoint of kind {kind} is needed"
        )
    return header


def read_tensors(path: str | Path, kind: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(weights_file(path, kind)))
    except Exception as e:  # safetensors raises several types for truncated or garbled files
        noun = "checkpoint" if kind == "adapter" else kind
        raise PardecError(f"corrupt {noun} weights in '{path}': {e}") from e


def resolve(model: str, value: str | None, kind: str) -> Path | None:
    """A `--adapter` / `--drafter` value -> checkpoint folder: "auto" = the one bundled with pardec for
    this packaged model, if any; "none" (or None) = none; anything else is a folder."""
    if value in (None, "none"):
        return None
    if value == "auto":
        if model not in PACKAGED:  # only packaged aliases have bundled checkpoints
            return None
        bundled = BUNDLED / f"{model}{BUNDLED_SUFFIX[kind]}"
        return bundled if (bundled / SETTINGS).is_file() else None
    return Path(value)


def export(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Copy a training checkpoint without its optimizer state, floating tensors cast to `dtype`: the
    small artefact to ship or commit. (Resuming needs the full checkpoint.) Written in the current format."""
    header = read_header(src)
    kind = header.pop("kind")
    header.pop("format")
    tensors = {
        k: v.to(dtype) if v.is_floating_point() else v
        for k, v in read_tensors(src, kind).items()
        if not k.startswith("optimizer.")
    }
    write(dst, kind, header, tensors)
    for extra in EXTRAS:
        if (Path(src) / extra).exists():
            shutil.copyfile(Path(src) / extra, Path(dst) / extra)


# ---------------------------------------------------------------- adapters

# full: tensors that replace the base model's parameters of the same name;
# lora / gated-lora: low-rank adapters attached to the base model (adapters.py).
ADAPTER_KINDS = ("full", "lora", "gated-lora")


@dataclass(frozen=True)
class CheckpointSettings:
    """An adapter checkpoint's settings."""

    base_model: str
    mask_token_id: int
    block_size: int
    objective: str
    adapter: str  # one of ADAPTER_KINDS
    vocab_size: int
    base_sha256: str | None = None  # of the packaged GGUF, where the base is a packaged alias
    lora: dict | None = None  # LoRAConfig fields, for the lora kinds
    training: dict | None = None  # every training setting, for the record


def save(path: str | Path, settings: CheckpointSettings, tensors: dict[str, torch.Tensor]) -> None:
    write(path, "adapter", asdict(settings), tensors)


def resolve_adapter(model: str, adapter: str | None) -> Path | None:
    return resolve(model, adapter, "adapter")


def read_settings(path: str | Path) -> CheckpointSettings:
    header = read_header(path, "adapter")
    try:
        return CheckpointSettings(**{k: v for k, v in header.items() if k not in ("format", "kind")})
    except TypeError as e:
        raise PardecError(f"corrupt checkpoint settings in '{Path(path) / SETTINGS}': {e}") from e


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    return read_tensors(path, "adapter")


def check_fits(settings: CheckpointSettings, path, base_model: str, mask_id: int, vocab_size: int) -> None:
    """Refuse a checkpoint made for another base model, vocabulary or [MASK] token, or of an unknown kind."""
    if settings.base_model != base_model:
        raise PardecError(
            f"checkpoint '{path}' was made for base model '{settings.base_model}', not '{base_model}'"
        )
    if settings.mask_token_id != mask_id or settings.vocab_size != vocab_size:
        raise PardecError(f"checkpoint '{path}' was made with another vocabulary or [MASK] token id")
    if settings.adapter not in ADAPTER_KINDS:
        raise PardecError(
            f"checkpoint '{path}' has adapter kind '{settings.adapter}', which this version cannot load"
        )


@torch.no_grad()
def apply(model, path: str | Path, base_model: str, mask_id: int) -> CheckpointSettings:
    """Load an adapter checkpoint onto `model` (loaded as `base_model`, with `[MASK]` = mask_id)."""
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
