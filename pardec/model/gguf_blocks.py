"""The GGUF's own 4-bit blocks as int4 kernel weights, without a round trip through dense floats.

Q4_0, Q4_1 and Q4_K all store, per group of 32 weights along a row, 4-bit codes q in 0..15 with
w = q * scale + minimum (Q4_0: scale d, minimum -8d; Q4_1: d and m; Q4_K: a super-block of 256 holds
d and dmin and eight 6-bit sub-scales and sub-minima, scale d * sc, minimum -dmin * m). That is the
int4 kernel's affine group format, so the shipped codes go to it unchanged. Layouts as ggml defines
them (ggml-common.h); checked against gguf's own dequantization in the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..errors import PardecError
from .quant import dequantized, linears

Codes = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # codes [N, K] uint8, scale, minimum [N, K / 32]


def _f16(raw: np.ndarray) -> np.ndarray:  # [..., 2] uint8 -> [...] float32
    return raw.copy().view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[..., 16] bytes -> [..., 32] codes: the low nibbles are elements 0..15, the high ones 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _q4_0(blocks: np.ndarray):  # [B, 18]
    d = _f16(blocks[:, 0:2])
    return _nibbles(blocks[:, 2:18]), d[:, None], -8 * d[:, None]


def _q4_1(blocks: np.ndarray):  # [B, 20]
    d, m = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
    return _nibbles(blocks[:, 4:20]), d[:, None], m[:, None]


def _q4_k(blocks: np.ndarray):  # [B, 144] -> codes [B, 256], scale and minimum [B, 8]
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
    s = blocks[:, 4:16].astype(np.uint8)  # 12 bytes of packed 6-bit sub-scales and sub-minima
    sc = np.empty((len(blocks), 8), np.uint8)
    mn = np.empty((len(blocks), 8), np.uint8)
    sc[:, :4], mn[:, :4] = s[:, 0:4] & 63, s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    qs = blocks[:, 16:144].reshape(-1, 4, 32)  # four chunks of 64 weights
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(-1, 256)  # sub-blocks 2j, 2j+1
    return codes, d[:, None] * sc, -dmin[:, None] * mn


_DECODERS = {"Q4_0": (18, _q4_0), "Q4_1": (20, _q4_1), "Q4_K": (144, _q4_k)}  # bytes per block, decoder


def decode_int4(raw: np.ndarray, type_name: str, k: int) -> Codes | None:
    """Rows of a GGUF tensor ([N, bytes per row] uint8) as (codes, scale, minimum), or None when
    the format is not a 4-bit affine one."""
    if type_name not in _DECODERS:
        return None
    size, decoder = _DECODERS[type_name]
    n = raw.shape[0]
    codes, scale, minimum = decoder(np.ascontiguousarray(raw).reshape(-1, size))
    return (
        torch.from_numpy(codes.reshape(n, k).astype(np.uint8)),
        torch.from_numpy(scale.reshape(n, k // 32).astype(np.float32)),
        torch.from_numpy(minimum.reshape(n, k // 32).astype(np.float32)),
    )


def _llama_rows(n: int, heads: int) -> np.ndarray:
    """llama.cpp's converter interleaves the rotary halves of each Llama q/k head; row r of the GGUF
    is row `order[r]` of the Hugging Face weight."""
    return np.arange(n).reshape(heads, 2, n // heads // 2).swapaxes(1, 2).reshape(n)


def int4_tensors(path: Path, model) -> dict[str, Codes]:
    """The model's linear layers whose GGUF tensors are 4-bit affine blocks, by module name, as
    int4 kernel weights in the model's own row order. Each is checked against the model's dense
    weights (which were dequantized from the same file): a GGUF that is not the model's is refused."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields["general.architecture"]
    arch_name = bytes(field.parts[field.data[0]]).decode()
    arch = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}.get(arch_name)
    if arch is None:
        raise PardecError(f"{path.name}: unknown GGUF architecture '{arch_name}'")
    config = model.config
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    tensors = {t.name: t for t in reader.tensors}
    out: dict[str, Codes] = {}
    for _, _, full, module in linears(model):
        name, weight = full.removesuffix(".base"), module.weight  # (a LoRA wrapper's base layer)
        gguf_name = names.get_name(name + ".weight", try_suffixes=(".weight",))
        if gguf_name is None and name == "lm_head" and getattr(config, "tie_word_embeddings", False):
            gguf_name = "token_embd.weight"
        t = tensors.get(gguf_name) if gguf_name else None
        if t is None:
            continue
        n, k = weight.shape
        raw = np.asarray(t.data)
        if raw.shape[0] != n:  # the [MASK] row added to a tied head, or a mismatched file
            continue
        if arch_name == "llama" and name.endswith(("q_proj", "k_proj")):
            heads = config.num_attention_heads if name.endswith("q_proj") else config.num_key_value_heads
            order = _llama_rows(n, heads)
            restored = np.empty_like(raw)
            restored[order] = raw
            raw = restored
        decoded = decode_int4(raw, t.tensor_type.name, k)
        if decoded is None:
            continue
        _check(name, decoded, weight)
        out[name] = decoded
    return out


def _check(name: str, decoded: Codes, weight: torch.Tensor) -> None:
    w = dequantized(*(t[:8] for t in decoded))  # a few rows are enough to catch a wrong file
    ref = weight[:8].detach().float()
    if not torch.allclose(w, ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max())):
        raise PardecError(
            f"the GGUF's weights for {name} are not the model's: give the GGUF it was loaded from"
        )
