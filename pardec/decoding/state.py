"""Per-sequence decoding state, passed explicitly between the engine and the policies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Row:
    index: int  # position in the caller's prompt list
    committed: list[int]  # prompt + generated tokens, all final
    n_prompt: int
    budget: int  # most new tokens this row may commit (length limit and context)
    state: Any = None  # the method's own state for this row (Policy.new_state)
    forwards: int = 0
    accepted: list[int] = field(default_factory=list)  # tokens committed by each forward
    fed: list[int] = field(default_factory=list)  # tokens each forward fed for this row
    slots: list[int] = field(default_factory=list)  # of those, block slots and branches (0: none)
    verified: list[tuple[tuple[float, ...], int]] = field(default_factory=list)  # see Update.predicted
    drafted: list[tuple[int, int]] = field(default_factory=list)  # (drafts fed, accepted) per forward
    seconds: float = 0.0
    finish: str | None = None  # "stop", "length"

    @property
    def new_tokens(self) -> list[int]:
        return self.committed[self.n_prompt :]


@dataclass(frozen=True)
class Update:
    """What a policy decided after one forward, for one row."""

    commit: list[int]  # tokens to append to the committed text
    keep_drafts: int = 0  # how many fed drafts (extra pending tokens) hold committed text now
    # Verifying methods: the predicted reach of each fed draft (the probability that it and every draft
    # before it are accepted), to be held against keep_drafts (calibration, reliability)
    predicted: tuple[float, ...] | None = None
