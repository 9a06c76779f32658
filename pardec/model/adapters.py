"""LoRA adapters, plain or mask-gated, attached by replacing nn.Linear submodules of a model instance.

A gated adapter applies its low-rank update only where the gate is on: at `[MASK]` positions. Every
other position, and through the causal rule every clean position's keys and values, is computed by the
untouched base weights, so the NTP logits stay exactly the base model's. The gate is set per forward
with `gated(model, on)`; outside that context a gated adapter is off, so plain calls such as
transformers' `generate` run the base model.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import PardecError

KINDS = ("lora", "gated-lora")
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Named sets for the CLI. Fewer adapted layers make a decoding step cheaper: each adapter adds small ops
# after a large matmul (benchmarks/step-cost.md).
TARGET_SETS = {"all": TARGETS, "attention": TARGETS[:4], "mlp": TARGETS[4:]}


def parse_targets(spec: str) -> tuple[str, ...]:
    """'all', 'attention', 'mlp', or a comma list of linear layer names (q_proj,v_proj)."""
    names = TARGET_SETS.get(spec.strip()) or tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names or len(set(names)) != len(names):
        raise PardecError(
            f"targets must be one of {', '.join(TARGET_SETS)} or a comma list of distinct "
            f"layer names, not '{spec}'"
        )
    return tuple(names)


@dataclass(frozen=True)
class LoRAConfig:
    kind: str = "gated-lora"
    rank: int = 16
    alpha: float = 32.0
    targets: tuple[str, ...] = TARGETS


class Gate:
    """The positions where gated updates apply in the current forward: [B, Q] bool with at least one
    True, or None (off). `start` is set when they are the same suffix of every row (decoding: the
    block slots come last), so adapters compute only those rows."""

    def __init__(self):
        self.on: torch.Tensor | None = None
        self.start: int | None = None

    def set(self, on: torch.Tensor | None) -> None:
        self.on, self.start = on, None
        if on is not None:
            first = int(on.any(0).nonzero()[0])
            if bool(on[:, first:].all()) and not bool(on[:, :first].any()):
                self.start = first


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float, gate: Gate | None, dtype: torch.dtype):
        super().__init__()
        self.base, self.gate, self.scale = base, gate, alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=dtype))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=dtype))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # B = 0: starts as the identity update

    def _low_rank(self, x: torch.Tensor) -> torch.Tensor:
        """x A^T B^T, unscaled, in the adapter's dtype (float32 when decoding: on CPU these small bf16
        matmuls are several times slower than float32 ones). Under training's bf16 autocast the
        matmuls run in bf16 anyway."""
        a = self.lora_a
        return x.to(a.dtype) @ a.T @ self.lora_b.T  # [B, Q, out]

    def _update(self, x: torch.Tensor) -> torch.Tensor:
        return self._low_rank(x).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, Q, in]
        y = self.base(x)
        if self.gate is None:
            return y + self._update(x) * self.scale
        if self.gate.on is None:
            return y
        if torch.compiler.is_compiling():
            # One graph for every placement of the block: the gated suffix's start would be a constant
            # of the graph (one compile per start), so the update is computed for every row fed (a
            # few dozen at most) and masked, in one fused kernel with the add.
            on = self.gate.on[..., None]  # [B, Q, 1]
            return (y + self._low_rank(x) * (on * self.scale)).to(y.dtype)
        s = self.gate.start
        if s is None:
            return torch.addcmul(y, self._update(x), self.gate.on[..., None].to(x.dtype), value=self.scale)
        if torch.is_grad_enabled():
            return torch.cat([y[:, :s], y[:, s:] + self._update(x[:, s:]) * self.scale], 1)
        # Decoding: only the gated suffix, and one in-place add (y is this call's own output) that
        # also scales and casts back to y's dtype: every small op counts, times ~170 layers.
        y[:, s:].add_(self._low_rank(x[:, s:]), alpha=self.scale)
        return y


def attach(
    model, config: LoRAConfig, dtype: torch.dtype | None = None, freeze: bool = True
) -> dict[str, LoRALinear]:
    """Wrap every targeted linear layer; freeze the base for training. Returns the wrappers by name.
    Adapter weights are `dtype` (default: the base layer's); training and decoding keep them in float32.

    Decoding passes freeze=False: torch 2.13 on CPU runs a bf16 linear whose weight has
    requires_grad=False about 30x slower (measured: 620 ms against 20 ms for the 152k-row output
    head), and decoding runs under no_grad anyway."""
    if config.kind not in KINDS:
        raise ValueError(f"adapter kind must be one of {KINDS}")
    gate = Gate() if config.kind == "gated-lora" else None
    if freeze:
        for p in model.parameters():
            p.requires_grad_(False)
    wrapped = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in config.targets:
            lora = LoRALinear(module, config.rank, config.alpha, gate, dtype or module.weight.dtype)
            model.set_submodule(name, lora)
            wrapped[name] = lora
    if not wrapped:
        raise PardecError(f"no linear layer named {', '.join(config.targets)} in this model")
    _GATES.pop(model, None)
    return wrapped


def lora_modules(model) -> dict[str, LoRALinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def adapter_state(model) -> dict[str, torch.Tensor]:
    """The trainable tensors, keyed for the checkpoint."""
    out = {}
    for name, m in lora_modules(model).items():
        out[f"{name}.lora_a"], out[f"{name}.lora_b"] = m.lora_a, m.lora_b
    return out


# A model's gates, found once: walking its ~1,000 modules every step cost about 1.7 ms, 4% of an int4
# AR step. `attach` forgets a model's entry, so new adapters are found again.
_GATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gates(model) -> tuple[Gate, ...]:
    found = _GATES.get(model)
    if found is None:
        unique = {id(m.gate): m.gate for m in lora_modules(model).values() if m.gate is not None}
        found = _GATES[model] = tuple(unique.values())
    return found


@contextlib.contextmanager
def gated(model, on: torch.Tensor):
    """Turn gated adapters on at positions `on` ([B, Q] bool) for the forwards inside the block.
    With no position on (a plain AR step) the gate stays off, decided here once rather than in every
    wrapped layer."""
    found = gates(model)
    active = on if found and bool(on.any()) else None
    for g in found:
        g.set(active)
    try:
        yield
    finally:
        for g in found:
            g.set(None)
