"""Your own prompts: a JSONL file, one object per line with a `prompt` (and an optional `id`). Not scored."""

from __future__ import annotations

from ..datafiles import read_jsonl
from .base import Item, Task

PREFIX = "jsonl:"


def task(path: str) -> Task:
    def items() -> list[Item]:
        return [
            Item(str(r.get("id", i)), r["prompt"], r) for i, r in enumerate(read_jsonl(path, ("prompt",)))
        ]

    return Task("jsonl", items)
