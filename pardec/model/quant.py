"""Weight-only quantized linears on CPU through PyTorch's own kernels.

- `int8`: int8 weights and one scale per output channel (symmetric, max-abs),
  `aten._weight_int8pack_mm`.
- `int4`: 4-bit codes per group of 32 input weights with a scale and a minimum each (affine, the
  shape of the GGUF's Q4 blocks), `aten._weight_int4pack_mm_for_cpu`. The kernel takes output counts
  in multiples of 16, so a head of 151,937 rows gets zero rows added, its extra outputs cut off.
- `w8a8`: int8 weights (a scale per output channel) times int8 activations (a scale per token),
  fbgemm's integer GEMM (`quantized.linear_dynamic`). Unlike the weight-only kernels its cost grows
  slowly with the tokens fed (on an AVX2 CPU a 16-token forward costs 1.7 one-token forwards, a
  compiled int4 one 4.8: benchmarks/w8a8-avx2-zen3.md), so block steps stay cheap and no dense
  copies are needed. Linears that read the same input (q/k/v, gate/up) run as one GEMM each set
  (`W8A8Siblings`): 97 calls a step instead of 169.
- `packed`: not quantized: float32 weights, also held in MKL's packed GEMM layout so that forwards
  of 4-16 tokens do not repack them on every call (model/packed.py).
- `gguf`: the GGUF's own 4-bit blocks (Q4_0, Q4_1, Q4_K) go to the int4 kernel as they were shipped
  (model/gguf_blocks.py); tensors in other formats (5-, 6- and 8-bit blocks, which no PyTorch kernel
  takes group-wise) go to per-channel int8 from their dequantized values.

On a CPU a one-token forward reads every weight once, so fewer bytes per weight pay; for a forward
of many tokens these kernels are slower than a bf16 matmul, so above `max_kernel_tokens` tokens the
same quantized weights run as a dense matmul of their dequantized values. Where that crossover lies
depends on the machine and the layer's shape, so `quantize` times both paths on the model's own
layers, shape by shape, and keeps the kernel up to the most tokens where it is not slower (`tune`);
a shape whose kernel is not slower at any timed count runs the kernel for every forward and keeps no
dense copy. Where bf16 matmuls are emulated (a CPU with neither AMX nor AVX-512 bf16) the dense
copies are float32: there a float32 matmul of a prompt's 64-256 tokens is 1.1-1.6x faster than the
int4 kernel and 4-6x faster than an emulated bf16 one (benchmarks/int4-avx2-zen3.md).
Both paths compute the same function (the quantized model), so `spec` stays lossless with respect
to it. LoRA adapters wrap the quantized base (their update runs as before, on the block slots only
for gated ones).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..machine import fastest_pass as _seconds  # tune's timer (a module attribute, so tests can replace it)
from ..machine import machine, native_bf16
from .packed import PackedLinear
from .packed import available as packed_available

QUANTS = ("none", "int8", "int4", "w8a8", "gguf", "packed")
LOW_MEMORY = "-lowmem"  # int4-lowmem: no dense copies, the kernel for every forward
CHOICES = QUANTS + tuple(q + LOW_MEMORY for q in ("int8", "int4", "gguf"))  # w8a8 keeps no copies
GROUP = 32  # int4 group size: Q4_0/Q4_1/Q4_K's sub-blocks
MAX_KERNEL_TOKENS = {"int8": 4, "int4": 4}  # before tuning: forwards of more tokens run the dense weights
# Timed: 9 and 17 are block steps (1 + 8 slots, + 8 drafts), 64 and 128 prompts.
TUNE_TOKENS = (1, 2, 4, 8, 9, 12, 16, 17, 24, 32, 64, 128)
TUNE_LAYERS = 8  # distinct layers of a shape cycled through, so that weights come from memory as in a forward
# The ops' overloads, looked up once: each of ~170 calls a step would otherwise resolve them again.
_INT8_MM = torch.ops.aten._weight_int8pack_mm.default
_INT4_MM = torch.ops.aten._weight_int4pack_mm_for_cpu.default
_W8A8_MM = torch.ops.quantized.linear_dynamic.default
# Over the anchor's [-1, 1] in 7 bits the steps are 2/127 with zero at code 64, so codes reach -64
# steps below zero but only 63 above: a token's max-abs is shrunk to 63 steps, so that its largest
# entry (the outlier channel that matters most) is represented exactly instead of clipped.
_W8A8_SHRINK = 126 / 127
_TINY = torch.tensor(torch.finfo(torch.float32).tiny)
# Linears of a Llama-like layer that read the same input: w8a8 runs each set as one GEMM.
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric max-abs int8 codes with one float32 scale per output channel: ([N, K] int8, [N])."""
    w = weight.detach().float()  # [N, K]
    scale = (w.abs().amax(1) / 127).clamp_min(1e-12)  # [N]
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


class QuantizedLinear(nn.Module):
    """A weight-only kernel for forwards of few tokens; the dequantized weights as a dense matmul
    for more (`dense`, the same function), unless it was built without them (`dense=None`: the
    kernel for every forward, the least memory)."""

    kind = ""

    def __init__(self, shape: tuple[int, int], dense: torch.Tensor | None, bias: torch.Tensor | None,
                 max_kernel_tokens: int, activation_dtype: torch.dtype):  # fmt: skip
        super().__init__()
        self.activation_dtype = activation_dtype  # what the kernel takes and every path returns
        # [N, K] in the activation dtype or float32 (copies_dtype), or None
        self.register_buffer("dense", dense, persistent=False)
        self.bias = bias
        self.out_features, self.in_features = shape
        self.max_kernel_tokens = max_kernel_tokens

    def kernel(self, x: torch.Tensor) -> torch.Tensor:  # [T, K] -> [T, N]
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., K]
        tokens = x.numel() // self.in_features
        if self.dense is not None and tokens > self.max_kernel_tokens:
            # As rows of a 2-D input: given a slice of a longer [B, Q, K] (the head's kept positions),
            # F.linear with this grad-free weight broadcasts it for a batched matmul and copies the
            # transposed weight: 2 s for the dense head of 152k rows, against 30 ms.
            y = self.dense_matmul(x.reshape(-1, self.in_features))
            return y.reshape(*x.shape[:-1], self.out_features)
        y = self.kernel(x.reshape(-1, x.shape[-1]).contiguous()).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def dense_matmul(self, x: torch.Tensor) -> torch.Tensor:  # [T, K] -> [T, N], bias added
        if self.dense.dtype == x.dtype:
            return F.linear(x, self.dense, self.bias)
        y = F.linear(x.to(self.dense.dtype), self.dense).to(x.dtype)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        upto = "every forward" if self.dense is None else f"up to {self.max_kernel_tokens} tokens"
        return f"in={self.in_features}, out={self.out_features}, kernel {upto}"


class Int8Linear(QuantizedLinear):
    kind = "int8"

    def __init__(self, linear: nn.Linear, max_kernel_tokens: int = MAX_KERNEL_TOKENS["int8"],
                 dense: bool = True, dense_dtype: torch.dtype | None = None):  # fmt: skip
        q, scale = int8_per_channel(linear.weight)
        dtype = linear.weight.dtype
        copy = (q.float() * scale[:, None]).to(dense_dtype or dtype) if dense else None
        super().__init__(tuple(q.shape), copy, linear.bias, max_kernel_tokens, dtype)
        self.register_buffer("weight_int8", q, persistent=False)
        self.register_buffer("scale", scale.to(dtype), persistent=False)

    def kernel(self, x):
        return _INT8_MM(x, self.weight_int8, self.scale)


class Int4Linear(QuantizedLinear):
    """w = code * scale + minimum per group of `group` input weights, code in 0..15."""

    kind = "int4"

    def __init__(
        self,
        codes: torch.Tensor,  # [N, K] integers 0..15
        scale: torch.Tensor,  # [N, K / group]
        minimum: torch.Tensor,  # [N, K / group]
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        max_kernel_tokens: int = MAX_KERNEL_TOKENS["int4"],
        dense: bool = True,
        dense_dtype: torch.dtype | None = None,  # the dense copy's (default: dtype)
    ):
        n, k = codes.shape
        group = k // scale.shape[1]
        if not fits_int4(k, group):
            raise ValueError(f"the int4 kernel takes no [{n} x {k}] weight in groups of {group}")
        scale, minimum = scale.float(), minimum.float()
        copy = dequantized(codes, scale, minimum).to(dense_dtype or dtype) if dense else None
        super().__init__((n, k), copy, bias, max_kernel_tokens, dtype)
        self.group = group
        extra = -n % 16  # zero rows up to the kernel's multiple of 16: their outputs are cut off
        codes, scale, minimum = (F.pad(t, (0, 0, 0, extra)) for t in (codes, scale, minimum))
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)
        self.register_buffer("packed", packed, persistent=False)  # [N, K / 2] uint8
        # The kernel computes (code - 8) * scale + zero, its groups along K.
        zero = minimum + 8 * scale
        self.register_buffer(
            "scale_zero",
            torch.stack([scale, zero], -1).transpose(0, 1).contiguous().to(dtype),
            persistent=False,
        )

    @classmethod
    def from_linear(cls, linear: nn.Linear, group: int = GROUP, dense: bool = True,
                    dense_dtype: torch.dtype | None = None) -> Int4Linear:  # fmt: skip
        w = linear.weight.detach().float()  # [N, K]
        n, k = w.shape
        wg = w.reshape(n, k // group, group)
        low, high = wg.amin(-1), wg.amax(-1)  # [N, K/g]
        scale = ((high - low) / 15).clamp_min(1e-12)
        codes = torch.round((wg - low[..., None]) / scale[..., None]).clamp(0, 15).reshape(n, k)
        return cls(codes, scale, low, linear.bias, linear.weight.dtype, dense=dense, dense_dtype=dense_dtype)

    def kernel(self, x):
        y = _INT4_MM(x, self.packed, self.group, self.scale_zero)
        return y[:, : self.out_features]  # [T, N] of [T, N rounded up to 16] (a view when none were added)


class W8A8Linear(QuantizedLinear):
    """y = (x_q * s_x) @ (w_q * s_w).T: int8 weights with one scale per output channel (symmetric,
    max-abs) and activations quantized per token, with integer products summed exactly.

    fbgemm's op quantizes the whole input with one scale, from its minimum and maximum, so alone a
    token's result would depend on the tokens fed beside it, and a verified draft's logits would differ
    from AR's. Each token is divided by its own max-abs first (every row then lies in [-1, 1]) and a
    fixed anchor row holding -1 and 1 is fed beside them: the range, so the scale, is the same for
    every forward, the rows are multiplied back after, and each token's output is the same however
    many are fed (tested bit for bit). x86 fbgemm keeps activations to 7 bits (its `reduce_range`)
    so that its 8-bit products cannot saturate."""

    kind = "w8a8"

    def __init__(self, linear: nn.Linear):
        n, k = linear.weight.shape
        if k < 2:
            raise ValueError("w8a8 needs at least 2 input features (its anchor row holds -1 and 1)")
        super().__init__((n, k), None, linear.bias, 0, linear.weight.dtype)
        q, scale = int8_per_channel(linear.weight)
        with warnings.catch_warnings():  # quantized tensors are deprecated; torch is pinned (2.13)
            warnings.simplefilter("ignore", UserWarning)
            zero = torch.zeros(n, dtype=torch.long)
            qw = torch._make_per_channel_quantized_tensor(q, scale.double(), zero, 0)
        self.packed = torch.ops.quantized.linear_prepack(qw, None)  # fbgemm's own layout (a copy)
        self.packed_bytes = q.numel() + 4 * n  # codes and scales, for weight_bytes
        anchor = torch.zeros(1, k)
        anchor[0, 0], anchor[0, -1] = -1.0, 1.0
        self.register_buffer("anchor", anchor, persistent=False)  # [1, K]

    def kernel(self, x):  # [T, K] -> [T, N]
        x = x.float()
        # Each token's divisor: its max-abs over the shrink, plus the least float so that an all-zero
        # token divides by a positive number. Its largest entry lands within a rounding of 126/127,
        # never outside the anchor's range. As few small ops as that takes: each costs its dispatch,
        # times ~100 linears a step.
        divisor = torch.add(_TINY, x.abs().amax(1, keepdim=True), alpha=1 / _W8A8_SHRINK)  # [T, 1]
        y = _W8A8_MM(torch.cat([x / divisor, self.anchor]), self.packed, True)[:-1]  # [T, N]
        return y.mul_(divisor).to(self.activation_dtype)


class W8A8Siblings(W8A8Linear):
    """Linears of one layer that read the same input (`SIBLINGS`) as one w8a8 GEMM over their stacked
    weights: the input is quantized once and the op called once instead of per sibling (each call
    costs its own dispatch and quantization pass, a large share of a one-token step's linear time).
    Each sibling becomes a `W8A8Part` returning its columns. The first part called with an input
    computes them all; another part called with the same tensor, unchanged since (identity and
    version), takes its columns from that result, once; any other call computes again, so a part's
    output is always its own columns of its own input, whatever order or inputs its caller uses."""

    def __init__(self, linears: list[nn.Linear]):
        k = linears[0].in_features
        bounds = [0]
        for lin in linears:
            bounds.append(bounds[-1] + lin.out_features)
        stacked = nn.Linear(k, bounds[-1], bias=any(lin.bias is not None for lin in linears))
        with torch.no_grad():
            stacked.weight.copy_(torch.cat([lin.weight.detach().float() for lin in linears]))
            if stacked.bias is not None:
                stacked.bias.copy_(torch.cat([
                    torch.zeros(lin.out_features) if lin.bias is None else lin.bias.detach().float()
                    for lin in linears
                ]))  # fmt: skip
        super().__init__(stacked.to(linears[0].weight.dtype))
        self.bounds = bounds
        self._memo: tuple | None = None  # (input, its version, output [..., N], parts not yet served)

    def part(self, index: int, x: torch.Tensor) -> torch.Tensor:  # x: [..., K] -> [..., N_index]
        memo = self._memo  # one read: the tuple is replaced, never changed, except its served set
        if memo is None or memo[0] is not x or memo[1] != x._version or index not in memo[3]:
            memo = self._memo = (x, x._version, self(x), set(range(len(self.bounds) - 1)))
        memo[3].discard(index)
        if not memo[3]:
            self._memo = None  # every part served: hold neither tensor past this forward
        return memo[2][..., self.bounds[index] : self.bounds[index + 1]]


class W8A8Part(nn.Module):
    """One sibling's columns of a `W8A8Siblings` GEMM, in that sibling's place."""

    kind = "w8a8"

    def __init__(self, siblings: W8A8Siblings, index: int):
        super().__init__()
        self.siblings, self.index = siblings, index
        self.in_features = siblings.in_features
        self.out_features = siblings.bounds[index + 1] - siblings.bounds[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.siblings.part(self.index, x)

    def extra_repr(self) -> str:
        parts = len(self.siblings.bounds) - 1
        return f"part {self.index} of {parts}, in={self.in_features}, out={self.out_features}"


def fuse_siblings(model) -> int:
    """Replace each set of `SIBLINGS` linears found under one module (plain, or the bases of LoRA
    wrappers) with the parts of one `W8A8Siblings`; returns how many linears were replaced."""
    fused = 0
    for module in list(model.modules()):
        for names in SIBLINGS:
            found = []  # (parent, attribute, linear)
            for name in names:
                child = getattr(module, name, None)
                if type(child) is nn.Linear:
                    found.append((module, name, child))
                elif isinstance(child, nn.Module) and type(getattr(child, "base", None)) is nn.Linear:
                    found.append((child, "base", child.base))
            kinds = {(lin.in_features, lin.weight.dtype) for *_, lin in found}
            if len(found) != len(names) or len(kinds) != 1:
                continue
            siblings = W8A8Siblings([lin for *_, lin in found])
            for index, (parent, attr, _) in enumerate(found):
                setattr(parent, attr, W8A8Part(siblings, index))
            fused += len(found)
    return fused


def parse(quant: str) -> tuple[str, bool]:
    """A --quant value -> (kind, whether dense copies are kept): "int4" -> ("int4", True),
    "int4-lowmem" -> ("int4", False)."""
    if quant not in CHOICES:
        raise ValueError(f"unknown quantization '{quant}': one of {', '.join(CHOICES)}")
    return quant.removesuffix(LOW_MEMORY), not quant.endswith(LOW_MEMORY)


def crossovers(model) -> dict[str, int | None]:
    """The most tokens each quantized layer shape runs on its kernel, as "int4 [4864 x 896]" -> 12
    (None: no dense copies, the kernel for every forward)."""
    return {f"{m.kind} [{m.out_features} x {m.in_features}]": None if m.dense is None else m.max_kernel_tokens
            for m in model.modules() if isinstance(m, QuantizedLinear)}  # fmt: skip


def dequantized(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    """code * scale + minimum per group along each row: [N, K] float32 (codes [N, K], scale and
    minimum [N, K / group])."""
    n, k = codes.shape
    grouped = codes.float().reshape(n, scale.shape[1], -1)  # [N, K / g, g]
    return (grouped * scale[..., None] + minimum[..., None]).reshape(n, k)


def unavailable(kind: str) -> str | None:
    """Why weights of this kind cannot run on this PyTorch build, or None where they can."""
    why = packed_available() if kind == "packed" else None
    return None if why is None else f"--quant {kind} cannot run here: {why}"


def activation_dtype(kind: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype a model quantized by `kind` runs its activations in: float32 for w8a8 and packed
    (MKL's packed GEMM is float32's), else `dtype`.
    w8a8 rounds each token's activations to 7-bit codes; bf16's rounding in attention and norms
    differs between a token fed alone and in a block by enough to flip codes, and then a verified
    token is not the one AR would pick (benchmarks/w8a8-avx2-zen3.md, last section)."""
    return torch.float32 if kind in ("w8a8", "packed") else dtype


def copies_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of dense copies for activations of `dtype`: float32 for bf16 on a CPU without bf16
    matrix instructions (neither AMX nor AVX-512 bf16), whose bf16 matmuls are emulated; else `dtype`."""
    return torch.float32 if dtype == torch.bfloat16 and not native_bf16() else dtype


def fits_int4(k: int, group: int = GROUP) -> bool:  # k: input count; any output count is padded
    return k % group == 0 and k % 2 == 0


def linears(model, head: bool = True):
    """(parent, attribute, full name, linear) for every plain nn.Linear, those inside LoRA wrappers too."""
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and (head or not full.endswith("lm_head")):
                yield module, child_name, full, child


def quantize(model, kind: str, head: bool = True, gguf: Path | None = None, tuned: bool = True,
             dense: bool = True, tune_cache: Path | None = None,
             dense_dtype: torch.dtype | None = None, siblings: bool = True) -> dict[str, int]:  # fmt: skip
    """Replace the model's linear layers (the output head too if `head`) with quantized ones, in
    place, and (if `tuned`) choose by timing where each shape's kernel gives way to its dense copy;
    `dense=False` keeps no dense copies (the kernel for every forward: the least memory);
    `dense_dtype`: the copies' dtype (default: `copies_dtype` of the model's, by this machine);
    `tune_cache`: a folder where the timed choice is kept for later loads.
    `gguf`: the GGUF file the model was converted from (for kind "gguf"); `siblings`: w8a8 runs each
    set of `SIBLINGS` as one GEMM (`W8A8Siblings`; False: one per linear, for comparison). Returns how many
    layers each kernel took, e.g. {"int4": 169, "int8": 0}; a weight the int4 kernel cannot take
    (an input count not a multiple of the group) goes to int8."""
    if kind not in QUANTS:
        raise ValueError(f"unknown quantization '{kind}': one of {', '.join(QUANTS)}")
    counts = {"int4": 0, "int8": 0} | ({kind: 0} if kind in ("w8a8", "packed") else {})
    if kind == "none":
        return counts
    if refusal := unavailable(kind):
        raise ValueError(refusal)
    shipped = {}
    if kind == "gguf":
        if gguf is None:
            raise ValueError("quantization 'gguf' needs the GGUF file the model came from")
        from . import gguf_blocks

        shipped = gguf_blocks.int4_tensors(gguf, model)
    if kind == "w8a8" and siblings:
        counts["w8a8"] += fuse_siblings(model)
    by_dtype: dict[torch.dtype, torch.dtype] = {}  # decided once per activation dtype, not per layer
    for parent, attr, full, linear in linears(model, head):
        name = full.removesuffix(".base")  # a LoRA wrapper's base is the model's own layer
        dtype = linear.weight.dtype
        if dense_dtype is None and dtype not in by_dtype:
            by_dtype[dtype] = copies_dtype(dtype)
        copies = dense_dtype or by_dtype[dtype]
        if kind == "gguf" and name in shipped:
            codes, scale, minimum = shipped[name]
            q = Int4Linear(
                codes, scale, minimum, linear.bias, linear.weight.dtype, dense=dense, dense_dtype=copies
            )
        elif kind == "w8a8":
            q = W8A8Linear(linear)
        elif kind == "packed":
            q = PackedLinear(linear)
        elif kind == "int4" and fits_int4(linear.in_features):
            q = Int4Linear.from_linear(linear, dense=dense, dense_dtype=copies)
        else:
            q = Int8Linear(linear, dense=dense, dense_dtype=copies)
        setattr(parent, attr, q)
        counts[q.kind] += 1
    if tuned:
        tune(model, cache=tune_cache)
    return counts


def crossover(tokens: tuple[int, ...], kernel: list[float], dense: list[float]) -> int:
    """The most tokens up to which the kernel was never slower than the dense matmul (0: slower even
    for one token), from their times at each of `tokens` (ascending)."""
    most = 0
    for t, k, d in zip(tokens, kernel, dense):
        if k > d:
            break
        most = t
    return most


@torch.no_grad()
def tune(
    model, tokens: tuple[int, ...] = TUNE_TOKENS, cache: Path | None = None
) -> dict[tuple[str, int, int], int]:
    """Time the kernel against the dense matmul on the model's quantized layers, one (kind, N, K)
    shape at a time, and set each layer's `max_kernel_tokens` to its shape's crossover. Returns the
    crossovers by shape. A few seconds for a 0.5B model, so with `cache` (a folder) the choice is
    kept per machine, shapes, dtype and this file's code, and read back on later loads: the same
    model then gets the same path (and the same step cost) each time. Layers without dense copies
    keep the kernel."""
    shapes = defaultdict(list)
    for m in model.modules():
        if isinstance(m, QuantizedLinear) and m.dense is not None:
            shapes[(m.kind, m.out_features, m.in_features)].append(m)
    if not shapes:
        return {}
    first = next(iter(shapes.values()))[0]
    dtype = first.activation_dtype
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    key = dict(machine(), dtype=str(dtype), dense_dtype=str(first.dense.dtype), tokens=list(tokens),
               shapes=sorted(shapes), code=code)  # fmt: skip
    path = None
    if cache is not None:
        path = cache / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16] + ".json")
    chosen = _read_crossovers(path, shapes)
    if chosen is None:
        chosen = {}
        for (kind, n, k), layers in shapes.items():
            sample = layers[:: max(1, len(layers) // TUNE_LAYERS)][:TUNE_LAYERS]
            times_kernel, times_dense = [], []
            for t in tokens:
                x = torch.randn(t, k).to(dtype)  # [T, K]
                times_kernel.append(_seconds(lambda m, x: m.kernel(x), x, sample))
                times_dense.append(_seconds(lambda m, x: m.dense_matmul(x), x, sample))
                if times_kernel[-1] > times_dense[-1]:
                    break  # the crossover is decided: more tokens are not timed
            chosen[(kind, n, k)] = crossover(tokens, times_kernel, times_dense)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            rows = [[kind, n, k, t] for (kind, n, k), t in chosen.items()]
            path.write_text(json.dumps(dict(key=key, crossovers=rows), indent=1) + "\n")
    for shape, layers in shapes.items():
        for m in layers:
            m.max_kernel_tokens = chosen[shape]
            if chosen[shape] >= max(tokens):
                # Never slower where timed: the kernel for every forward, prompts too, and the
                # copy is dropped.
                m.dense = None
    return chosen


def _read_crossovers(path: Path | None, shapes) -> dict | None:
    """A cached choice for exactly these shapes, or None (absent or unreadable: timed again)."""
    if path is None or not path.exists():
        return None
    try:
        chosen = {(kind, n, k): int(t) for kind, n, k, t in json.loads(path.read_text())["crossovers"]}
    except (ValueError, KeyError, TypeError):
        return None
    return chosen if set(chosen) == set(shapes) else None


def weight_bytes(model) -> dict[str, int]:
    """Bytes the model holds in parameters and buffers: `kernel` (what a few-token forward reads:
    packed codes and scales, or the dense weights where nothing is quantized) and `dense` (the
    dequantized copies many-token forwards read; packed's copies in MKL's layout)."""
    kernel = dense = 0
    seen = set()  # a tied weight (embeddings and head) is held once
    for m in model.modules():
        own = list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False))
        for name, t in own:
            if t.data_ptr() in seen:
                continue
            seen.add(t.data_ptr())
            size = t.numel() * t.element_size()
            if isinstance(m, QuantizedLinear) and name == "dense":
                dense += size
            else:
                kernel += size
        if isinstance(m, PackedLinear):  # a copy for few-token forwards, beside the weights
            dense += m.packed_bytes
        else:
            kernel += getattr(m, "packed_bytes", 0)  # weights held by an op's own packed object (w8a8)
    return {"kernel": kernel, "dense": dense}
