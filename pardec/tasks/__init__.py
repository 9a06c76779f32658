"""Benchmark tasks, one module each (data, prompt template, scorer), and the `--task` syntax.

Tasks stand alone: they import no other part of pardec but its data-file helpers. The bench and the
contamination filter of the training data read them.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..errors import PardecError
from . import gsm8k, humaneval, jsonl, mtbench
from .base import Item, Task

TASKS: dict[str, Task] = {t.name: t for t in (humaneval.TASK, gsm8k.TASK, mtbench.TASK)}
_RANGE = re.compile(r"^(?P<first>\d+)-(?P<last>\d+)$")
_STARTS_TASK = re.compile(rf"^(?:{'|'.join(TASKS)})(?::|$)|^{jsonl.PREFIX}")


def get(name: str) -> Task:
    if name.startswith(jsonl.PREFIX):
        return jsonl.task(name[len(jsonl.PREFIX) :])
    if name not in TASKS:
        raise PardecError(f"unknown task '{name}': {', '.join(TASKS)} or {jsonl.PREFIX}PATH")
    return TASKS[name]


def benchmark_texts() -> list[str]:
    """Every text of every benchmark task: what training data must not overlap."""
    return [t for task in TASKS.values() if task.texts is not None for t in task.texts()]


def _parts(spec: str) -> list[str]:
    """Split a --task value at commas, except inside a jsonl path (a comma there continues the path
    unless what follows starts another task)."""
    parts: list[str] = []
    for piece in spec.split(","):
        if parts and parts[-1].startswith(jsonl.PREFIX) and not _STARTS_TASK.match(piece.strip()):
            parts[-1] += "," + piece
        elif piece.strip():
            parts.append(piece.strip())
    return parts


def _name_and_range(part: str) -> tuple[str, str]:
    """'humaneval:0-79' -> ('humaneval', '0-79'); 'jsonl:PATH' or 'jsonl:PATH:0-9' (a range only
    where PATH itself is not an existing file) -> ('jsonl:PATH', '' or '0-9')."""
    if not part.startswith(jsonl.PREFIX):
        name, _, rng = part.partition(":")
        return name, rng
    path, sep, rng = part.rpartition(":")
    if (
        sep
        and path != jsonl.PREFIX[:-1]
        and _RANGE.match(rng)
        and not Path(part[len(jsonl.PREFIX) :]).is_file()
    ):
        return path, rng
    return part, ""


def load_tasks(spec: str, limit: int | None = None, offset: int = 0) -> list[Item]:
    """'humaneval:0-79,mtbench:0-19,jsonl:my.jsonl' -> items of every task, merged round-robin so that
    drift in machine speed hits every task alike. A range is inclusive; a task without one takes
    `limit` / `offset`; a task named again adds that range to its items ('mtbench:0-3,mtbench:10-13')."""
    parts = _parts(spec)
    if not parts:
        raise PardecError("--task is empty")
    lists: dict[str, list[Item]] = {}  # per task, its ranges in the order given
    for part in parts:
        name, rng = _name_and_range(part)
        task = get(name)
        have = lists.setdefault(task.name, [])
        if not rng:
            _add(have, load_task(task, limit, offset))
            continue
        m = _RANGE.match(rng)
        if m is None or int(m["last"]) < int(m["first"]):
            raise PardecError(f"bad range '{rng}' in --task: write START-END, e.g. humaneval:0-79")
        first, n = int(m["first"]), int(m["last"]) - int(m["first"]) + 1
        items = load_task(task, n, first)
        if len(items) < n:
            raise PardecError(
                f"task '{task.name}' has items {first}-{first + len(items) - 1} only, not {rng}"
            )
        _add(have, items)
    merged = []
    for k in range(max(len(items) for items in lists.values())):
        merged += [items[k] for items in lists.values() if k < len(items)]
    return merged


def _add(have: list[Item], items: list[Item]) -> None:
    """Append a range of a task to the ones it already has (several ranges of one task select, say,
    a few MT-bench questions per category), refusing an item selected twice."""
    ids = {it.id for it in have}
    twice = next((it.id for it in items if it.id in ids), None)
    if twice is not None:
        raise PardecError(f"--task selects {twice} twice")
    have += items


def load_task(task: Task | str, limit: int | None = None, offset: int = 0) -> list[Item]:
    task = get(task) if isinstance(task, str) else task
    if offset < 0 or (limit is not None and limit < 1):
        raise PardecError("--offset must be >= 0 and --limit >= 1")
    items = task.items()[offset : None if limit is None else offset + limit]
    if not items:
        raise PardecError(f"task '{task.name}' has no items in that range")
    return [dataclasses.replace(it, task=task.name) for it in items]


def score(item: Item, text: str) -> float | None:
    task = TASKS.get(item.task)
    return None if task is None or task.score is None else task.score(item, text)


def score_name(task: str) -> str:
    t = TASKS.get(task)
    return "score" if t is None else t.score_name


__all__ = [
    "TASKS",
    "Item",
    "Task",
    "benchmark_texts",
    "get",
    "load_task",
    "load_tasks",
    "score",
    "score_name",
]
