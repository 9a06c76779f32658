"""Per-sequence decoding state, passed explicitly between the engine and the policies."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Row:
    index: int  # position in the caller's prompt list
    committed: list[int]  # prompt + generated tokens, all final
    n_prompt: int
    budget: int  # most new tokens this row may commit (length limit and context)
    drafts: list[int] = field(default_factory=list)  # spec: proposed tokens, not yet verified
    draft_probs: torch.Tensor | None = None  # spec sampling: [len(drafts), V] draft distributions
    draft_reach: torch.Tensor | None = None  # spec: [len(drafts)] product of draft confidences up to each
    block: list[int] | None = None  # eb: the block being filled ([MASK] where not yet revealed)
    forwards: int = 0
    accepted: list[int] = field(default_factory=list)  # tokens committed by each forward
    seconds: float = 0.0
    finish: str | None = None  # "stop", "length"

    def clear_drafts(self) -> None:
        """No drafts for the next forward; their distributions and confidences go with them."""
        self.drafts, self.draft_probs, self.draft_reach = [], None, None

    @property
    def new_tokens(self) -> list[int]:
        return self.committed[self.n_prompt :]


@dataclass(frozen=True)
class Update:
    """What a policy decided after one forward, for one row."""

    commit: list[int]  # tokens to append to the committed text
    keep_drafts: int = 0  # how many fed drafts (extra pending tokens) hold committed text now
