"""`pardec distill`: the base model answers prompts; its answers become the training data.

Batched, written as each batch finishes, resumable (ids already in the output are skipped).
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from ..decoding import DecodeConfig, decode
from ..model import LoadedModel
from .sources import ContaminationFilter


def distill(
    lm: LoadedModel,
    prompts: list[dict],
    out: str | Path,
    config: DecodeConfig,
    contamination: ContaminationFilter | None,
    batch_size: int = 8,
    progress: bool = True,
) -> dict:
    """Append {"id", "prompt", "response", "finish"} lines to `out`. Returns counts."""
    out = Path(out)
    done = set()
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError):
                continue  # a line cut by an interruption: its prompt is simply redone
    seen_text, todo, dropped, duplicates = set(), [], 0, 0
    for p in prompts:
        if contamination is not None and contamination(p["prompt"]):
            dropped += 1
            continue
        if p["prompt"] in seen_text:
            duplicates += 1
            continue
        seen_text.add(p["prompt"])
        if p["id"] not in done:
            todo.append(p)
    # Similar lengths batch well: sort by prompt length.
    todo.sort(key=lambda p: len(p["prompt"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(todo), desc="distill", unit="prompt", disable=not progress)
    tokens = 0
    with open(out, "a", encoding="utf-8") as f:
        for i in range(0, len(todo), batch_size):
            batch = todo[i : i + batch_size]
            ids = [lm.encode(p["prompt"]) for p in batch]
            for p, r in zip(batch, decode(lm.model, ids, config, lm.mask_id, lm.stop_ids)):
                text = lm.tokenizer.decode(r.tokens, skip_special_tokens=True)
                f.write(
                    json.dumps({"id": p["id"], "prompt": p["prompt"], "response": text, "finish": r.finish})
                    + "\n"
                )
                tokens += len(r.tokens)
            f.flush()
            bar.update(len(batch))
            bar.set_postfix_str(f"{tokens} tokens")
    bar.close()
    return dict(
        written=len(todo), skipped_done=len(done), contaminated=dropped, duplicates=duplicates, tokens=tokens
    )
