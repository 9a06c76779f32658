"""What a benchmark task is: its items (prompts with what the scorer needs) and how to score an answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str  # the user message
    reference: dict = field(default_factory=dict)  # what the scorer needs
    task: str = ""  # the task it came from: picks the scorer and the per-task table


@dataclass(frozen=True)
class Task:
    name: str
    items: Callable[[], list[Item]]  # every item, in the data set's order
    score: Callable[[Item, str], float] | None = None  # answer text -> score; None: not scored
    score_name: str = "score"
    # Every text of the benchmark (all splits, all turns): training data must not overlap them.
    texts: Callable[[], list[str]] | None = None
