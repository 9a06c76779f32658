"""What a decoding method is: a policy over the block step, and the registry of methods.

A policy answers three questions per row: which tokens to feed after its uncached committed text
(`drafts`), which blocks to feed (`blocks`, None for none), and, given the forward's logits, which
tokens to commit (`update`). Two hooks serve methods with a model of their own (a drafter): the raw
hidden states of the step (`hidden_states`) and batch-level work after every step (`after_step`).
Sampling uses the caller's generator, so runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..core import sampling
from ..core.step import Block
from .state import Row, Update


class Policy:
    hidden_states: bool = False  # the step returns every layer's output at the pending slots
    block_hidden: bool = False  # the step returns the block slots' final hidden states (update's `hidden`)
    joinable: bool = True  # rows may join a running batch (per-row state only, nothing batch-wide)
    # With `adaptive`, plans each row's step from the step cost, priced as the batch's: a row decoded
    # in a batch may take other steps than alone
    batch_priced: bool = False

    def __init__(
        self,
        config,
        mask_id: int,
        generator: torch.Generator | None,
        model=None,
        extras: Mapping[str, Any] | None = None,
    ):
        self.cfg, self.mask_id, self.gen = config, mask_id, generator

    def new_state(self) -> Any:
        """This method's state for a new row (Row.state)."""
        return None

    def before_step(self, rows: list[Row]) -> None:
        """Batch-level planning before the step's drafts and blocks are asked for."""

    def drafts(self, row: Row) -> list[int]:
        return []

    def n_ntp(self, drafts: list[list[int]]) -> int:
        """NTP logits needed per row this step, counted from the end of the pending tokens."""
        return 1

    def blocks(self, row: Row) -> list[Block] | None:
        """One fully masked block after all pending tokens."""
        return [Block(0, [self.mask_id] * self.cfg.block_size)]

    def update(
        self, row: Row, ntp: torch.Tensor, block: torch.Tensor, hidden: torch.Tensor | None = None
    ) -> Update:
        """ntp: [n, V] NTP logits of this row's last n pending tokens (n may be 0);
        block: [NB * D, V] block logits, block after block; hidden: [NB * D, H] the slots' final hidden
        states where the policy asked for them (block_hidden)."""
        raise NotImplementedError

    def after_step(self, rows: list[Row], out, keep: torch.Tensor, alive: list[int]) -> None:
        """Batch-level work after every row committed. rows: the rows still decoding; alive: their
        indices in this step's batch; keep [B, P]: pending slots now committed; out: the StepOutput."""

    def _choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return sampling.choose(logits, self.cfg.temperature, self.cfg.top_p, self.gen)


@dataclass(frozen=True)
class Method:
    name: str
    policy: Callable[..., Policy]  # (config, mask_id, generator, model, extras) -> Policy
    summary: str  # one line for --help
    lossless: bool  # output exactly the model's (greedy) or equal in distribution (sampling)
    min_block_size: int = 1
    own_model: bool = False  # drafts with a model of its own (a drafter), not the adapted model
    # Loads what the method needs beyond the model and settles its defaults:
    # (loaded model, config, whether the user set the block size, options) -> (config, extras).
    prepare: Callable[..., tuple[Any, dict]] | None = None


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    METHODS[method.name] = method
    return method
