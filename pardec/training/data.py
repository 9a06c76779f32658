"""Training examples from distilled JSONL ({"prompt", "response"} per line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..datafiles import read_jsonl
from ..errors import PardecError
from ..model.chat import encode_prompt, stop_token_ids


@dataclass(frozen=True)
class Example:
    ids: list[int]  # prompt (chat-formatted) + response + end-of-turn
    response_start: int


def read_pairs(path: str | Path) -> list[dict]:
    return read_jsonl(path, ("prompt", "response"))


def split_heldout(files: list[list[dict]], names: list, heldout: int) -> tuple[list[dict], list[dict]]:
    """(train, held out): the held-out rows come from the end of every file in turn (the first files
    give one more where `heldout` does not divide evenly), so that each kind of data is checked."""
    shares = [heldout // len(files) + (i < heldout % len(files)) for i in range(len(files))]
    train, held = [], []
    for rows, name, k in zip(files, names, shares):
        if len(rows) <= k:
            raise PardecError(f"{name}: {len(rows)} examples, not more than its {k} held-out prompts")
        train += rows[: len(rows) - k]
        held += rows[len(rows) - k :]
    return train, held


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
        response = tokenizer.encode(row["response"], add_special_tokens=False) + (
            [end] if end is not None else []
        )
        ids = (prompt + response)[:max_length]
        if len(ids) > len(prompt):
            out.append(Example(ids, len(prompt)))
    return out
