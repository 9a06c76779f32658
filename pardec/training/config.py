"""Training settings: one frozen dataclass, saved with every checkpoint."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PardecError
from ..model.adapters import TARGETS

OBJECTIVES = ("nsp", "sbd")
ADAPTERS = ("gated-lora", "lora", "full")


@dataclass(frozen=True)
class TrainConfig:
    objective: str = "nsp"  # nsp: blocks fully masked (SDLM); sbd: mask ratio ~ U(0, 1) per block (SBD)
    adapter: str = "gated-lora"
    block_size: int = 4  # D, the largest block trained (and the decoding default)
    min_block_size: int | None = None  # sample the size per block in [min, D]; None = always D
    blocks_per_sequence: int = 16  # K noised blocks trained per sequence in one forward
    ntp_weight: float = 0.0  # sbd: weight of the next-token loss on the clean stream (not gated-lora)
    decay: float | None = None  # position-decayed weights exp(-(j)/decay) along the block; None = flat
    # Soft targets: this share of each slot's loss is the cross-entropy against the base model's own
    # next-token distribution at the slot's position (gated-lora, whose clean stream is the base model)
    kl_weight: float = 0.0
    # Aim at acceptance length: slot j's loss is weighted by the probability the block gives the right
    # tokens at its earlier slots (detached), so later slots count only while the earlier ones are right
    chain: bool = False
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = TARGETS  # linear layers adapted (by name), in every transformer layer
    lr: float = 2e-4
    weight_decay: float = 0.0
    warmup_steps: int = 10
    steps: int = 200  # optimizer steps
    grad_accum: int = 4  # sequences per optimizer step
    max_length: int = 512  # tokens per training sequence (prompt + response)
    bf16: bool = True  # bf16 autocast on CPU
    seed: int = 0
    eval_every: int = 50  # steps between checkpoints (with a held-out TPF check)
    eval_prompts: int = 4
    eval_max_new_tokens: int = 48
    init_from: str | None = None  # warm start from this checkpoint's weights (same kind, rank >= its
    # rank; any D, and any subset of its targets)

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise PardecError(f"objective must be one of {', '.join(OBJECTIVES)}")
        if self.adapter not in ADAPTERS:
            raise PardecError(f"adapter must be one of {', '.join(ADAPTERS)}")
        if self.block_size < 1 or (
            self.min_block_size is not None and not 1 <= self.min_block_size <= self.block_size
        ):
            raise PardecError("block sizes must satisfy 1 <= min block size <= block size")
        if self.blocks_per_sequence < 1 or self.steps < 1 or self.grad_accum < 1 or self.lr <= 0:
            raise PardecError("blocks per sequence, steps, grad accum must be >= 1 and lr > 0")
        if self.ntp_weight < 0 or (self.ntp_weight > 0 and self.adapter == "gated-lora"):
            raise PardecError(
                "the next-token loss needs a non-negative weight, and does nothing with "
                "gated-lora (the clean stream is the frozen base model)"
            )
        if self.adapter != "full" and not self.lora_targets:
            raise PardecError("a LoRA run needs at least one target layer")
        if self.decay is not None and self.decay <= 0:
            raise PardecError("decay must be > 0")
        if not 0.0 <= self.kl_weight <= 1.0:
            raise PardecError(f"kl weight must lie in [0, 1], got {self.kl_weight}")
        if self.kl_weight > 0 and self.adapter != "gated-lora":
            raise PardecError("the KL target is the base model's distribution: it needs gated-lora, whose "
                              "clean stream is the base model")  # fmt: skip
