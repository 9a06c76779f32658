"""`pardec bench`: every method on the same prompts, interleaved, in one run.

Speed is only ever reported as a ratio against `ar` measured in the same run (DESIGN.md): absolute CPU
timings drift with load, ratios of interleaved runs much less.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..api import encode_prompt, stop_token_ids
from ..decoding import DecodeConfig, decode
from ..decoding.config import METHODS
from ..errors import PardecError
from . import scoring
from .tasks import Item

# The value after `method@` without a name sets this setting.
PRIMARY = {"threshold": "threshold", "eb": "gamma", "spec": "block_size", "dflash": "block_size", "ar": None, "hf": None}
HF = "hf"  # transformers' own generate, greedy: a reference for pardec's AR loop


@dataclass(frozen=True)
class MethodSpec:
    label: str  # as given, e.g. "threshold@0.7"
    config: DecodeConfig
    adapter: str | None = None  # a checkpoint folder of its own (spec@adapter=PATH); None: the run's model
    sets: frozenset[str] = frozenset()  # the DecodeConfig fields the label sets (no trained D overrides them)


def parse_methods(text: str, base: DecodeConfig) -> list[MethodSpec]:
    """'ar,threshold@0.9,eb@gamma=0.5,spec@block_size=8@temperature=0' -> specs; `ar` is added first
    if missing, since every speedup is relative to it. `@adapter=PATH` gives a method an adapter of
    its own, to compare adapters against the same `ar` in one run."""
    specs = []
    fields = {f.name: f.type for f in dataclasses.fields(DecodeConfig)}
    ints = {name for name, kind in fields.items() if str(kind).startswith("int")}  # the rest are floats
    for label in [t.strip() for t in text.split(",") if t.strip()]:
        name, *settings = label.split("@")
        if name not in (*METHODS, HF):
            raise PardecError(f"unknown method '{name}' in --methods: choose from {', '.join((*METHODS, HF))}")
        kw, adapter = {}, None
        for s in settings:
            if s.startswith("adapter="):
                adapter = s.partition("=")[2]
                if not adapter or name in ("dflash", HF):
                    raise PardecError(f"bad setting '{s}' in '{label}': adapter=PATH applies to "
                                      f"{', '.join(m for m in METHODS if m != 'dflash')}")
                continue
            key, _, value = s.rpartition("=")
            key = key.replace("-", "_") or PRIMARY.get(name)
            if key is None or key not in fields or key in ("method", "stop"):
                raise PardecError(f"bad setting '{s}' in '{label}'")
            try:
                kw[key] = int(value) if key in ints else float(value)
            except ValueError:
                raise PardecError(f"bad value '{value}' in '{label}'") from None
        method = "ar" if name == HF else name
        specs.append(MethodSpec(label, dataclasses.replace(base, method=method, **kw), adapter, frozenset(kw)))
    if not any(s.label == "ar" for s in specs):
        specs.insert(0, MethodSpec("ar", dataclasses.replace(base, method="ar")))
    if len({s.label for s in specs}) != len(specs):
        raise PardecError("--methods lists a method twice")
    return specs


def _hf_generate(model, ids: list[int], config: DecodeConfig, mask_id: int, stops: set[int]):
    t = time.perf_counter()
    out = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=config.max_new_tokens,
                         do_sample=False, suppress_tokens=[mask_id], eos_token_id=sorted(stops) or None,
                         pad_token_id=sorted(stops)[0] if stops else 0)
    tokens = out[0, len(ids):].tolist()
    return tokens, len(tokens), [1] * len(tokens), time.perf_counter() - t


@torch.no_grad()
def mean_nll(model, prompt: list[int], tokens: list[int]) -> float:
    """Mean negative log-likelihood of `tokens` after `prompt` under `model` (plain causal forward)."""
    if not tokens:
        return float("nan")
    ids = torch.tensor([prompt + tokens], device=model.device)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return float(torch.nn.functional.cross_entropy(logits, ids[0, len(prompt):]))


def _score(item: Item, text: str) -> float | None:
    if item.task == "humaneval":
        return float(scoring.humaneval_passed(text, item.reference))
    if item.task == "gsm8k":
        return float(scoring.gsm8k_correct(text, item.reference["answer"]))
    return None


def run_bench(model, tokenizer, mask_id: int, items: list[Item], specs: list[MethodSpec], task: str,
              nll_model=None, chat: bool = True, progress: bool = True, drafter=None,
              log: Path | None = None, done: dict[tuple[str, str, str], dict] | None = None,
              adapter_models: dict | None = None) -> dict:
    """`log`: a JSONL file that gets every finished run at once, so a long run that is stopped keeps
    what it measured. `done`: runs of an earlier, stopped run (as logged), keyed by (method label,
    task, item id); they are reused, not rerun. `adapter_models`: for specs with an adapter of their
    own, the same base model with that adapter, keyed by the spec's `adapter`."""
    done = done or {}

    def model_for(s: MethodSpec):
        return model if s.adapter is None else adapter_models[s.adapter]

    nll_model = nll_model or model
    stops = stop_token_ids(model, tokenizer)
    prompts = [encode_prompt(tokenizer, it.prompt, chat) for it in items]
    # Warm-up: one short run of every method, untimed (first calls allocate and tune kernels).
    for s in specs:
        warm = dataclasses.replace(s.config, max_new_tokens=4)
        if s.label == HF:
            _hf_generate(model, prompts[0], warm, mask_id, stops)
        else:
            decode(model_for(s), prompts[:1], warm, mask_id, stops, drafter=drafter)
    per = {s.label: [] for s in specs}
    bar = tqdm(total=len(items) * len(specs), desc="bench", unit="run", disable=not progress)
    for i, (item, ids) in enumerate(zip(items, prompts)):
        order = specs[i % len(specs):] + specs[: i % len(specs)]  # rotate: no method always runs first
        for s in order:
            logged = done.get((s.label, item.task, item.id))
            if logged is not None:
                # A log line is the run's record plus its method and task (written below).
                per[s.label].append({k: v for k, v in logged.items() if k not in ("method", "task")})
                bar.update()
                continue
            if s.label == HF:
                tokens, forwards, steps, seconds = _hf_generate(model, ids, s.config, mask_id, stops)
            else:
                r = decode(model_for(s), [ids], s.config, mask_id, stops, drafter=drafter)[0]
                tokens, forwards, steps, seconds = r.tokens, r.forwards, r.accepted_per_step, r.seconds
            text = tokenizer.decode(tokens, skip_special_tokens=True)
            per[s.label].append(dict(id=item.id, tokens=tokens, forwards=forwards, steps=steps,
                                     seconds=seconds, text=text))
            if log is not None:
                with open(log, "a") as f:
                    f.write(json.dumps(dict(method=s.label, task=item.task, **per[s.label][-1])) + "\n")
            runs = per[s.label]
            tpf = sum(len(r["tokens"]) for r in runs) / max(1, sum(r["forwards"] for r in runs))
            bar.set_postfix_str(f"{s.label} TPF {tpf:.2f}")
            bar.update()
    bar.close()
    for label, runs in per.items():
        for r, item, ids in zip(runs, items, prompts):
            r["task"] = item.task
            r["score"] = _score(item, r["text"])
            r["nll"] = mean_nll(nll_model, ids, r["tokens"])
    tasks = list(dict.fromkeys(it.task for it in items))
    by_task = {t: summarize(per, specs, t) for t in tasks} if len(tasks) > 1 else {}
    return dict(task=task, records=summarize(per, specs), by_task=by_task, samples=per)


def read_log(path: Path) -> dict[tuple[str, str, str], dict]:
    """The runs a stopped bench logged, keyed as run_bench's `done` wants them. A last line cut off
    mid-write is ignored."""
    done = {}
    for line in Path(path).read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[(r["method"], r["task"], r["id"])] = r
    return done


def summarize(per: dict[str, list[dict]], specs: list[MethodSpec], task: str | None = None) -> list[dict]:
    """One record per method over the runs of `task` (all runs when None). Speedups compare median
    tokens/s with ar's over the same prompts of the same run."""
    per = {label: [r for r in runs if task is None or r["task"] == task] for label, runs in per.items()}
    ar_runs = per["ar"]
    rates = {label: statistics.median(len(r["tokens"]) / r["seconds"] for r in runs) for label, runs in per.items()}
    records = []
    for s in specs:
        runs = per[s.label]
        scores = [r["score"] for r in runs if r["score"] is not None]
        nlls = [r["nll"] for r in runs if r["nll"] == r["nll"]]
        records.append(dict(
            method=s.label,
            config={k: v for k, v in dataclasses.asdict(s.config).items() if k != "stop"},
            adapter=s.adapter,  # None: the run's adapter (meta)
            prompts=len(runs),
            new_tokens=sum(len(r["tokens"]) for r in runs),
            forwards=sum(r["forwards"] for r in runs),
            tokens_per_forward=sum(len(r["tokens"]) for r in runs) / max(1, sum(r["forwards"] for r in runs)),
            tokens_per_second=rates[s.label],
            speedup_vs_ar=rates[s.label] / rates["ar"],
            identical_to_ar=sum(r["tokens"] == a["tokens"] for r, a in zip(runs, ar_runs)) / len(runs),
            score=statistics.mean(scores) if scores else None,
            nll=statistics.mean(nlls) if nlls else None,
            accepted_hist=_hist([n for r in runs for n in r["steps"]]),
        ))
    return records


def _hist(values: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def markdown_table(result: dict) -> str:
    """The results table; with several tasks, one table per task and one over all prompts."""
    if not result.get("by_task"):
        return _table(result["records"], result["task"].split(":")[0])  # "humaneval:0-7" scores as humaneval
    parts = [f"### {task} ({recs[0]['prompts']} prompts)\n\n" + _table(recs, task) for task, recs in result["by_task"].items()]
    total = result["records"][0]["prompts"]
    parts.append(f"### all tasks ({total} prompts; score over the scored prompts)\n\n" + _table(result["records"], "all"))
    return "\n".join(parts)


def _table(records: list[dict], task: str) -> str:
    score_name = {"humaneval": "pass@1", "gsm8k": "accuracy"}.get(task, "score")
    lines = [f"| method | TPF | tokens/s | speedup vs ar | identical to ar | {score_name} | NLL |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        score = "-" if r["score"] is None else f"{r['score']:.3f}"
        nll = "-" if r["nll"] is None else f"{r['nll']:.3f}"
        lines.append(f"| {r['method']} | {r['tokens_per_forward']:.2f} | {r['tokens_per_second']:.2f} | "
                     f"{r['speedup_vs_ar']:.2f}x | {r['identical_to_ar']:.2f} | {score} | {nll} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = result["records"]
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    quality = [(r["score"] if r["score"] is not None else -(r["nll"] or 0)) for r in recs]
    ax.scatter([r["speedup_vs_ar"] for r in recs], quality)
    for r, q in zip(recs, quality):
        ax.annotate(r["method"], (r["speedup_vs_ar"], q), fontsize=8)
    ax.set_xlabel("speedup vs ar (wall clock, same run)")
    ax.set_ylabel("task score" if recs[0]["score"] is not None else "-NLL under the base model")
    ax.set_title(f"speed vs quality: {result['task']}")
    fig.tight_layout()
    paths.append(out / "speed_quality.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(recs)
    for k, r in enumerate(recs):
        xs = [int(x) for x in r["accepted_hist"]]
        total = sum(r["accepted_hist"].values())
        ax.bar([x - 0.4 + (k + 0.5) * width for x in xs], [v / total for v in r["accepted_hist"].values()], width, label=r["method"])
    ax.set_xlabel("tokens committed per forward")
    ax.set_ylabel("fraction of forwards")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "accepted_hist.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def write(result: dict, out: Path, command: str, adapter: str | None = None) -> None:
    """`adapter`: the checkpoint the run's model carries (methods without an adapter of their own)."""
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(command=command, adapter=adapter, torch=torch.__version__, threads=torch.get_num_threads())
    (out / "results.json").write_text(json.dumps(dict(meta=meta, task=result["task"], records=result["records"],
                                                      by_task=result["by_task"]), indent=2) + "\n")
    (out / "samples.jsonl").write_text("".join(
        json.dumps(dict(method=m, **{k: v for k, v in r.items() if k != "steps"})) + "\n"
        for m, runs in result["samples"].items() for r in runs))
    (out / "results.md").write_text(f"`{command}`\n\n" + markdown_table(result))
    plot(result, out)
