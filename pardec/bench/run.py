"""`pardec bench`'s run: every method on the same prompts, interleaved, after an untimed warm-up.

Speed is only ever reported as a ratio against `ar` measured in the same run (DESIGN.md): absolute CPU
timings drift with load, ratios of interleaved runs much less. Every finished run is appended to a
log at once, so a stopped run keeps what it measured and `--resume` reuses it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from .. import tasks
from ..core import cost as step_cost
from ..core.scoring import text_logits
from ..tasks import Item
from .methods import Runner


@dataclass
class RunRecord:
    """One method on one prompt."""

    id: str
    task: str
    tokens: list[int]
    forwards: int
    steps: list[int]  # tokens committed by each forward
    seconds: float
    text: str
    fed: list[int] | None = None  # tokens fed by each forward; None where unknown (hf)
    verified: list | None = None  # [[predicted reach of each fed draft], drafts accepted] per verified step
    score: float | None = None  # the task's score of the text; None where the task has none
    nll: float | None = None  # mean NLL of the tokens under the base model

    def log_line(self, method: str) -> str:
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("score", "nll")}
        return json.dumps(dict(method=method, **fields)) + "\n"


@dataclass
class BenchResult:
    task: str  # the --task value
    records: list[dict]  # one summary per method over all prompts (report.summarize)
    by_task: dict[str, list[dict]]  # the same per task, when the run has several
    samples: dict[str, list[RunRecord]] = field(default_factory=dict)  # by method label, in item order


@torch.no_grad()
def mean_nll(model, prompt: list[int], tokens: list[int]) -> float:
    """Mean negative log-likelihood of `tokens` after `prompt` under `model` (plain causal forward)."""
    if not tokens:
        return float("nan")
    logits = text_logits(model, prompt + tokens, len(prompt))  # [n, V]
    return float(torch.nn.functional.cross_entropy(logits, torch.tensor(tokens, device=logits.device)))


def read_log(path: Path) -> dict[tuple[str, str, str], RunRecord]:
    """The runs a stopped bench logged (progress.jsonl), or a finished one wrote (samples.jsonl),
    keyed by (method label, task, item id). A last line cut off mid-write, and samples written before
    they carried every field, are ignored."""
    names = {f.name for f in dataclasses.fields(RunRecord)}
    done = {}
    for line in Path(path).read_text().splitlines():
        try:
            r = json.loads(line)
            method = r.pop("method")
            rec = RunRecord(**{k: v for k, v in r.items() if k in names and k not in ("score", "nll")})
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        done[(method, rec.task, rec.id)] = rec
    return done


def run_bench(
    runners: list[Runner],
    items: list[Item],
    task: str,
    nll_model,
    chat: bool = True,
    progress: bool = True,
    log: Path | None = None,
    done: dict[tuple[str, str, str], RunRecord] | None = None,
) -> BenchResult:
    """Run every runner on every item, rotating the order per item so no method always runs first.
    `nll_model` scores every text (the base model); `log` gets every finished run at once; `done`
    holds the runs of a stopped run (read_log), reused instead of rerun."""
    from .report import summarize

    done = done or {}
    prompts = [runners[0].lm.encode(it.prompt, chat) for it in items]
    for r in runners:  # warm-up, untimed: first calls allocate and tune kernels
        if r.lm.compile:  # and compile every step shape (model/compiled.py), block steps' too
            config = getattr(r, "config", None)  # a decode runner's; hf and llama.cpp have none
            blocks = config.model_block_slots if config else 0
            seconds = step_cost.warm_up(r.lm.decoder, r.lm.mask_id, block_size=blocks)
            print(f"bench: {r.spec.label}: steps compiled in {seconds:.0f} s", file=sys.stderr)
        r.run(prompts[0], max_new_tokens=4)
    per: dict[str, list[RunRecord]] = {r.spec.label: [] for r in runners}
    bar = tqdm(total=len(items) * len(runners), desc="bench", unit="run", disable=not progress)
    for i, (item, ids) in enumerate(zip(items, prompts)):
        for r in runners[i % len(runners) :] + runners[: i % len(runners)]:
            label = r.spec.label
            rec = done.get((label, item.task, item.id))
            if rec is None:
                d = r.run(ids)
                text = r.lm.tokenizer.decode(d.tokens, skip_special_tokens=True)
                rec = RunRecord(item.id, item.task, d.tokens, d.forwards, d.steps, d.seconds, text, d.fed,
                                d.verified)  # fmt: skip
                if log is not None:
                    with open(log, "a") as f:
                        f.write(rec.log_line(label))
            per[label].append(rec)
            runs = per[label]
            tpf = sum(len(x.tokens) for x in runs) / max(1, sum(x.forwards for x in runs))
            bar.set_postfix_str(f"{label} TPF {tpf:.2f}")
            bar.update()
    bar.close()
    # Each distinct text once: lossless methods repeat ar's.
    texts = {(tuple(ids), tuple(rec.tokens)) for runs in per.values() for rec, ids in zip(runs, prompts)}
    nlls = {key: mean_nll(nll_model, list(key[0]), list(key[1]))
            for key in tqdm(sorted(texts), desc="NLL", unit="text", disable=not progress)}  # fmt: skip
    for runs in per.values():
        for rec, item, ids in zip(runs, items, prompts):
            rec.score = tasks.score(item, rec.text)
            rec.nll = nlls[(tuple(ids), tuple(rec.tokens))]
    specs = [r.spec for r in runners]
    names = list(dict.fromkeys(it.task for it in items))
    by_task = {t: summarize(per, specs, t) for t in names} if len(names) > 1 else {}
    return BenchResult(task, summarize(per, specs), by_task, per)
