"""Training examples from distilled JSONL ({"prompt", "response"} per line)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..api import encode_prompt, stop_token_ids
from ..errors import PardecError


@dataclass(frozen=True)
class Example:
    ids: list[int]  # prompt (chat-formatted) + response + end-of-turn
    response_start: int


def read_pairs(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise PardecError(f"no such data file: {path}")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PardecError(f"{path}:{n}: not valid JSON ({e.msg})") from e
        if not isinstance(row.get("prompt"), str) or not isinstance(row.get("response"), str):
            raise PardecError(f"{path}:{n}: needs string 'prompt' and 'response' fields")
        rows.append(row)
    if not rows:
        raise PardecError(f"{path}: no examples")
    return rows


def tokenize(model, tokenizer, rows: list[dict], max_length: int, chat: bool = True) -> list[Example]:
    """Loss goes on the response (and its end-of-turn token) only."""
    vocab = tokenizer.get_vocab()
    end = next((vocab[t] for t in ("<|im_end|>", "<|eot_id|>") if t in vocab), None)
    if end is None:
        stops = sorted(stop_token_ids(model, tokenizer))
        end = stops[0] if stops else None
    out = []
    for row in rows:
        prompt = encode_prompt(tokenizer, row["prompt"], chat)
        response = tokenizer.encode(row["response"], add_special_tokens=False) + ([end] if end is not None else [])
        ids = (prompt + response)[:max_length]
        if len(ids) > len(prompt):
            out.append(Example(ids, len(prompt)))
    return out
