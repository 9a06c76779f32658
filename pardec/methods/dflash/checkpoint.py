"""Drafter checkpoints: pardec's own (model/checkpoint.py, kind `drafter`), and an export to the
layout of the public DFlash drafters (a Hugging Face folder: `config.json` with a Qwen3-style config
and `dflash_config`, `model.safetensors` with the same tensor names), which SGLang's DFLASH
speculative algorithm and z-lab's `dflash` package load next to the target."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ...errors import PardecError
from ...model import checkpoint
from .model import Drafter, DrafterConfig

KIND = "drafter"


def save(
    path: str | Path,
    drafter: Drafter,
    base_model: str,
    base_sha256: str | None,
    training: dict | None = None,
    extra: dict[str, torch.Tensor] | None = None,
) -> None:
    tensors = dict(drafter.state_dict())  # parameters and the feature scale
    tensors.update(extra or {})
    checkpoint.write(
        path,
        KIND,
        dict(
            base_model=base_model, base_sha256=base_sha256, drafter=drafter.cfg.to_dict(), training=training
        ),
        tensors,
    )


def read_settings(path: str | Path) -> dict:
    s = checkpoint.read_header(path, KIND)
    try:
        DrafterConfig.from_dict(s["drafter"])
    except (KeyError, TypeError) as e:
        raise PardecError(f"corrupt drafter settings in '{path}': {e}") from e
    return s


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    return checkpoint.read_tensors(path, KIND)


def load(path: str | Path, target, base_model: str, mask_id: int) -> Drafter:
    """A drafter checkpoint for `target` (loaded as `base_model` with [MASK] = mask_id), in the
    target's dtype and device."""
    s = read_settings(path)
    if s["base_model"] != base_model:
        raise PardecError(f"drafter '{path}' was made for base model '{s['base_model']}', not '{base_model}'")
    cfg = DrafterConfig.from_dict(s["drafter"])
    head = target.get_output_embeddings().weight
    if (
        cfg.mask_token_id != mask_id
        or cfg.hidden_size != head.shape[1]
        or cfg.n_target_layers != target.config.num_hidden_layers
    ):
        raise PardecError(
            f"drafter '{path}' does not fit this model (vocabulary, [MASK] id or widths differ)"
        )
    drafter = Drafter(cfg)
    tensors = read_tensors(path)
    params = drafter.state_dict()
    missing = set(params) - set(tensors)
    if missing:
        raise PardecError(f"drafter '{path}' lacks tensor '{sorted(missing)[0]}'")
    if (
        "draft_vocab" in tensors
        and not ((tensors["draft_vocab"] >= 0) & (tensors["draft_vocab"] < head.shape[0])).all()
    ):
        raise PardecError(f"drafter '{path}': draft vocabulary holds ids outside the model's vocabulary")
    with torch.no_grad():
        for n, p in params.items():
            if tensors[n].shape != p.shape:
                raise PardecError(
                    f"drafter '{path}': tensor '{n}' has shape {tuple(tensors[n].shape)}, "
                    f"expected {tuple(p.shape)}"
                )
            p.copy_(tensors[n])
    return drafter.to(device=target.device, dtype=target.dtype).eval()


def export_dflash(src: str | Path, dst: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Write the drafter in the layout of the public DFlash drafters (`DFlashDraftModel`, model_type
    qwen3). The drafter embeds [MASK] with the target's embedding row `mask_token_id`: pardec adds
    that row to the target (model/surgery.py), so an engine must load the target with it."""
    s = read_settings(src)
    cfg = DrafterConfig.from_dict(s["drafter"])
    # The draft vocabulary is pardec's own speed-up (their engines draft over the whole head).
    tensors = {
        k: v for k, v in read_tensors(src).items() if not k.startswith("optimizer.") and k != "draft_vocab"
    }
    # Their fc reads the raw features: fold pardec's fixed feature scale into its columns.
    tensors["fc.weight"] = tensors["fc.weight"].float() * tensors.pop("feature_scale").float()[None, :]
    tensors = {k: v.to(dtype) for k, v in tensors.items()}
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "num_hidden_layers": cfg.n_layers,
        "num_target_layers": cfg.n_target_layers,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_eps,
        "rope_parameters": {"rope_theta": cfg.rope_theta, "rope_type": "default"},
        "rope_theta": cfg.rope_theta,
        "vocab_size": cfg.vocab_size,
        "tie_word_embeddings": False,
        "use_cache": False,
        "dtype": str(dtype).removeprefix("torch."),
        "dflash_config": {
            "block_size": cfg.block_size,
            "mask_token_id": cfg.mask_token_id,
            "target_layer_ids": list(cfg.target_layers),
            "input_embedding_scale": cfg.embed_scale,
        },
        "pardec": {"base_model": s["base_model"], "base_sha256": s.get("base_sha256")},
    }
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
