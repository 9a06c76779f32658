"""Weight-only int8 linears on CPU through PyTorch's own kernel (`aten._weight_int8pack_mm`).

Each output channel keeps int8 weights and one scale (symmetric, max-abs). On a CPU a one-token
forward reads every weight once, so int8 halves what it reads; for a forward of many tokens the int8
kernel is slower than a bf16 matmul, so above `max_int8_tokens` tokens the same quantized weights
run as a dense matmul of their dequantized values. Both paths compute the same function (the
quantized model), so `spec` stays lossless with respect to it. LoRA adapters wrap the quantized base
(their update runs as before, on the block slots only for gated ones).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

QUANTS = ("none", "int8")
MAX_INT8_TOKENS = 4  # forwards of more tokens run the dequantized weights as a dense matmul


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear, max_int8_tokens: int = MAX_INT8_TOKENS):
        super().__init__()
        w = linear.weight.detach().float()  # [N, K]
        scale = (w.abs().amax(1) / 127).clamp_min(1e-12)  # [N]
        q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        dtype = linear.weight.dtype
        self.register_buffer("weight_int8", q, persistent=False)
        self.register_buffer("scale", scale.to(dtype), persistent=False)
        # The same quantized weights, dequantized, for forwards of many tokens.
        self.register_buffer("dense", (q.float() * scale[:, None]).to(dtype), persistent=False)
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.max_int8_tokens = max_int8_tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., K]
        tokens = x.numel() // x.shape[-1]
        if tokens > self.max_int8_tokens:
            return F.linear(x, self.dense, self.bias)
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), self.weight_int8, self.scale)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


def quantize(model, kind: str, max_int8_tokens: int = MAX_INT8_TOKENS, head: bool = True) -> int:
    """Replace the model's linear layers (those inside LoRA wrappers too; the output head if `head`)
    with quantized ones, in place. Returns how many were replaced."""
    if kind == "none":
        return 0
    if kind not in QUANTS:
        raise ValueError(f"unknown quantization '{kind}': one of {', '.join(QUANTS)}")
    count = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and (head or not full.endswith("lm_head")):
                setattr(module, child_name, Int8Linear(child, max_int8_tokens))
                count += 1
    return count
