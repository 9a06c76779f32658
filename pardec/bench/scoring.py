"""Task scorers: HumanEval functional correctness and GSM8K exact answers."""

from __future__ import annotations

import re

from .sandbox import run_program

_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


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


def humaneval_passed(response: str, task: dict, timeout: float = 10.0) -> bool:
    program = extract_code(response, task["prompt"], task["entry_point"])
    program += "\n\n" + task["test"] + f"\n\ncheck({task['entry_point']})\n"
    return run_program(program, timeout=timeout).passed


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").rstrip("."))
    except ValueError:
        return None


def gsm8k_answer(response: str) -> float | None:
    """The final answer: after '####' if present, else the last number in the text."""
    tail = response.split("####")[-1] if "####" in response else response
    nums = _NUMBER.findall(tail if "####" in response else response)
    if not nums:
        return None
    return _number(nums[0] if "####" in response else nums[-1])


def gsm8k_correct(response: str, reference: str) -> bool:
    got, want = gsm8k_answer(response), _number(reference.split("####")[-1].strip())
    return got is not None and want is not None and abs(got - want) < 1e-6
