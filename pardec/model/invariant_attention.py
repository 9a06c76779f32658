"""Batch-invariant attention: a query's output is the same however many queries are fed with it and
however many keys lie beyond what it sees.

Lossless `spec` needs a verify step to compute each token as an AR step does. sdpa does not quite:
a token fed alone and the same token first of 9 differ in the last bits, because the BLAS groups the
sums over the head dimension and over keys by the shapes fed (and no grouping of float32 sums is
the same for every shape on every CPU). Mostly harmless, but where activations are rounded to codes
per token (w8a8) a last-bit difference can flip a code, and spec's text parted from its own AR's
(benchmarks/w8a8-avx2-zen3.md). Here the scores, softmax and weighted sum run in float64 and only
the output is rounded to float32: float32 products are exact in float64 and a different grouping of
the sums moves the result by about 1e-16 relative, far below float32's last bit (6e-8), so the
rounded outputs agree but by rare chance (bit for bit in every case the tests try, and on 20
HumanEval answers of 512 tokens). It costs about twice sdpa's attention, a few percent of a step.

Registered as the attention implementation "pardec_invariant" (transformers' AttentionInterface).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

NAME = "pardec_invariant"


def invariant_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, Q, d]
    key: torch.Tensor,  # [B, Hkv, K, d]
    value: torch.Tensor,  # [B, Hkv, K, d]
    attention_mask: torch.Tensor | None,  # [B, 1, Q, K]: bool (True: seen) or additive float
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None:
        raise ValueError(
            f"{NAME} attention has no logit soft-capping or attention sinks (this model needs them)"
        )
    B, H, Q, d = query.shape
    Hkv, K = key.shape[1], key.shape[2]
    g = H // Hkv  # query heads per KV head
    scaling = d**-0.5 if scaling is None else scaling
    # The g query heads of a KV head share its keys: one matmul each, [B, Hkv, g * Q, d] @ [B, Hkv, d, K].
    scores = query.reshape(B, Hkv, g * Q, d).double() @ key.double().transpose(-1, -2)
    scores = scores.view(B, H, Q, K) * scaling  # [B, H, Q, K] float64
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is None and Q > 1 and causal:
        # The queries are the last Q positions: query i sees keys up to K - Q + i.
        attention_mask = torch.ones(Q, K, dtype=torch.bool, device=query.device).tril(K - Q)[None, None]
    if attention_mask is not None:
        attention_mask = attention_mask[..., :K]
        if attention_mask.dtype == torch.bool:
            # The lowest float, not -inf: a row that sees nothing (padding) averages, not NaN.
            scores = scores.masked_fill(~attention_mask, torch.finfo(torch.float64).min)
        else:
            scores = scores + attention_mask
    weights = torch.softmax(scores, -1).view(B, Hkv, g * Q, K)  # [B, Hkv, g * Q, K] float64
    out = (weights @ value.double()).view(B, H, Q, d).to(query.dtype)  # [B, H, Q, d]
    return out.transpose(1, 2).contiguous(), None  # [B, Q, H, d], as transformers' other kernels


AttentionInterface.register(NAME, invariant_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the same masks as sdpa: bool, None where causal suffices
