"""Float32 linears whose weights are also held in MKL's packed GEMM layout (`--quant packed`).

MKL's sgemm repacks the weight matrix on every call once a matmul has more than three rows, and for
the few-token forwards of spec's block steps (9 to 17 tokens: the bonus, drafts and block slots)
that repacking costs more than the multiplication itself. Packed once at load (`cblas_sgemm_pack`,
through PyTorch's own `mkl::_mkl_linear` op), a forward of `rows` tokens reads the packed copy and
nothing else. The layout is packed for exactly `rows` rows, so a forward of fewer is padded with
zero rows; up to three rows (an AR step, or one verifying a draft or two: MKL multiplies so few
without repacking) and more than `rows` (prompts) run the plain weights. Both paths compute the same
function up to float32 rounding, so spec stays exactly the model's greedy output as far as float32
AR itself is (what the step-cost curve gains: benchmarks/packed-icelake.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROWS = 16  # the rows the weights are packed for: a block step of D = 8 with up to 7 drafts
PLAIN_ROWS = 3  # forwards of at most this many rows use the plain weights (MKL multiplies them unpacked)


def available() -> str | None:
    """Why packed weights cannot run here, or None when they can."""
    if not torch.backends.mkl.is_available():
        return "this PyTorch build has no MKL"
    if not hasattr(torch.ops.mkl, "_mkl_linear") or not hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"):
        return "this PyTorch build has no mkl::_mkl_linear op"
    return None


class PackedLinear(nn.Module):
    """A float32 linear on CPU with its weight also packed for `rows`-row matmuls."""

    kind = "packed"

    def __init__(self, linear: nn.Linear, rows: int = ROWS):
        super().__init__()
        if linear.weight.dtype != torch.float32 or linear.weight.device.type != "cpu":
            raise ValueError(f"packed weights need float32 on the CPU, not {linear.weight.dtype} on "
                             f"{linear.weight.device}")  # fmt: skip
        self.in_features, self.out_features, self.rows = linear.in_features, linear.out_features, rows
        self.weight, self.bias = linear.weight, linear.bias  # [N, K], [N] or None: shared, not copied
        # MKL's opaque layout for [rows, K] x [K, N] (a tensor without storage): neither a parameter
        # nor a buffer, so never saved, moved or copied with the model; rebuilt at each load.
        self.packed = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight.detach(), rows)

    @property
    def packed_bytes(self) -> int:
        return self.packed.numel() * self.packed.element_size()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., K] -> [..., N]
        flat = x.reshape(-1, self.in_features)  # [M, K]
        m = flat.shape[0]
        if m <= PLAIN_ROWS or m > self.rows:
            return F.linear(x, self.weight, self.bias)
        if m < self.rows:
            flat = torch.cat([flat, flat.new_zeros(self.rows - m, self.in_features)])  # [rows, K]
        out = torch.ops.mkl._mkl_linear(flat, self.packed, self.weight, self.bias, self.rows)[:m]  # [M, N]
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rows={self.rows}"
