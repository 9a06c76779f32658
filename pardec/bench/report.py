"""The report of a bench run: a summary per method, Markdown tables, plots, and the files written."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import torch

from .. import tasks
from ..core.cost import StepCost, machine
from ..model import calibration
from .methods import MethodSpec
from .run import BenchResult, RunRecord


def summarize(
    per: dict[str, list[RunRecord]], specs: list[MethodSpec], task: str | None = None
) -> list[dict]:
    """One record per method over the runs of `task` (all runs when None). Speedups compare median
    tokens/s with ar's over the same prompts of the same run."""
    per = {label: [r for r in runs if task is None or r.task == task] for label, runs in per.items()}
    ar_runs = per["ar"]
    rates = {label: statistics.median(len(r.tokens) / r.seconds for r in runs) for label, runs in per.items()}
    records = []
    for s in specs:
        runs = per[s.label]
        scores = [r.score for r in runs if r.score is not None]
        nlls = [r.nll for r in runs if r.nll is not None and r.nll == r.nll]
        records.append(
            dict(
                method=s.label,
                config={k: v for k, v in dataclasses.asdict(s.config).items() if k != "stop"},
                adapter=s.adapter,  # None: the run's adapter (meta)
                prompts=len(runs),
                new_tokens=sum(len(r.tokens) for r in runs),
                forwards=sum(r.forwards for r in runs),
                tokens_per_forward=sum(len(r.tokens) for r in runs) / max(1, sum(r.forwards for r in runs)),
                tokens_per_second=rates[s.label],
                speedup_vs_ar=rates[s.label] / rates["ar"],
                identical_to_ar=sum(r.tokens == a.tokens for r, a in zip(runs, ar_runs)) / len(runs),
                score=statistics.mean(scores) if scores else None,
                nll=statistics.mean(nlls) if nlls else None,
                accepted_hist=_hist([n for r in runs for n in r.steps]),
                fed_per_forward=_fed_per_forward(runs),
                **_drafts(runs),
            )
        )
    return records


def _drafts(runs: list[RunRecord]) -> dict:
    """For methods that verify drafts with a predicted reach: drafts fed and accepted, and the
    reliability of the prediction (predicted reach against observed acceptance, by bin)."""
    steps = [(tuple(p), n) for r in runs for p, n in (r.verified or [])]
    if not steps:
        return {}
    fed = sum(len(p) for p, _ in steps)
    accepted = sum(n for _, n in steps)
    predicted = sum(sum(p) for p, _ in steps)
    return dict(drafts_fed=fed, drafts_accepted=accepted, acceptance_rate=accepted / max(fed, 1),
                predicted_accepted=predicted, reliability=calibration.reliability(steps))  # fmt: skip


def _fed_per_forward(runs: list[RunRecord]) -> float | None:
    """Mean tokens fed per forward after the prompt's (pending + slots); None where not recorded."""
    fed = [n for r in runs if r.fed for n in r.fed[1:]]
    return sum(fed) / len(fed) if fed else None


def _hist(values: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def markdown_table(result: BenchResult) -> str:
    """The results table; with several tasks, one table per task and one over all prompts."""
    if not result.by_task:
        return _table(result.records, result.task.split(":")[0])  # "humaneval:0-7" scores as humaneval
    parts = [
        f"### {task} ({recs[0]['prompts']} prompts)\n\n" + _table(recs, task)
        for task, recs in result.by_task.items()
    ]
    total = result.records[0]["prompts"]
    parts.append(
        f"### all tasks ({total} prompts; score over the scored prompts)\n\n" + _table(result.records, "all")
    )
    return "\n".join(parts)


def _table(records: list[dict], task: str) -> str:
    score_name = tasks.score_name(task)
    lines = [
        f"| method | TPF | fed/forward | tokens/s | speedup vs ar | identical to ar | {score_name} | NLL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        score = "-" if r["score"] is None else f"{r['score']:.3f}"
        nll = "-" if r["nll"] is None else f"{r['nll']:.3f}"
        fed = "-" if r.get("fed_per_forward") is None else f"{r['fed_per_forward']:.1f}"
        lines.append(
            f"| {r['method']} | {r['tokens_per_forward']:.2f} | {fed} | {r['tokens_per_second']:.2f} | "
            f"{r['speedup_vs_ar']:.2f}x | {r['identical_to_ar']:.2f} | {score} | {nll} |"
        )
    drafted = [r for r in records if r.get("drafts_fed")]
    if drafted:
        lines.append("")
    for r in drafted:  # how well each verifying method predicted its acceptance
        lines.append(
            f"{r['method']}: {r['drafts_accepted']} of {r['drafts_fed']} fed drafts accepted "
            f"({r['acceptance_rate']:.0%}); predicted {r['predicted_accepted']:.0f}."
        )
    return "\n".join(lines) + "\n"


def memory_line(memory: dict) -> str:
    """Weights each method's model holds (with the dense copies quantized layers keep for many-token
    forwards) and the run's peak resident set (all models of the run together)."""
    parts = [
        f"{label} {w['weights']:.0f}" + (f" (+{w['dense_copies']:.0f} dense)" if w["dense_copies"] else "")
        for label, w in memory["weights_mb"].items()
    ]
    return (
        f"Weights in MiB: {', '.join(parts)}; peak resident set of the run {memory['peak_rss_mb']:.0f} MiB."
    )


def lookup_lines(label: str, table: dict) -> str:
    """A method's looked-up drafts: per level (match length; a datastore's support), accepted of those
    that were tried (accepted plus the first failure) by relation to the block's drafts, and the learned
    rate."""
    level = next(iter(table), "match").partition(">=")[0]
    rows = [f"{label}: looked-up drafts accepted / decided (learned rate), by relation to the block's draft",
            "", f"| {level} | agree | disagree | alone |", "|---|---|---|---|"]  # fmt: skip
    for match, rels in table.items():
        cells = [f"{r['accepted']:.0f} / {r['accepted'] + r['rejected']:.0f} ({r['rate']:.2f})"
                 for r in rels.values()]  # fmt: skip
        rows.append(f"| {match} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(result: BenchResult, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = result.records
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    quality = [(r["score"] if r["score"] is not None else -(r["nll"] or 0)) for r in recs]
    ax.scatter([r["speedup_vs_ar"] for r in recs], quality)
    for r, q in zip(recs, quality):
        ax.annotate(r["method"], (r["speedup_vs_ar"], q), fontsize=8)
    ax.set_xlabel("speedup vs ar (wall clock, same run)")
    ax.set_ylabel("task score" if recs[0]["score"] is not None else "-NLL under the base model")
    ax.set_title(f"speed vs quality: {result.task}")
    fig.tight_layout()
    paths.append(out / "speed_quality.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(recs)
    for k, r in enumerate(recs):
        xs = [int(x) for x in r["accepted_hist"]]
        total = sum(r["accepted_hist"].values())
        ax.bar(
            [x - 0.4 + (k + 0.5) * width for x in xs],
            [v / total for v in r["accepted_hist"].values()],
            width,
            label=r["method"],
        )
    ax.set_xlabel("tokens committed per forward")
    ax.set_ylabel("fraction of forwards")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "accepted_hist.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    checked = [r for r in recs if r.get("reliability")]
    if checked:
        paths.append(out / "reliability.png")
        plot_reliability(checked, paths[-1])
    return paths


def plot_reliability(records: list[dict], path: Path) -> None:
    """Predicted reach (the probability that a draft and every draft before it are accepted) against
    the observed acceptance, per method: on the diagonal when the predictions are calibrated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], ":", color="grey")
    for r in records:
        rel = r["reliability"]
        ax.plot([b["predicted"] for b in rel], [b["observed"] for b in rel], marker="o", label=r["method"])
    ax.set_xlabel("predicted reach")
    ax.set_ylabel("observed: drafts up to here all accepted")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_cost(cost: StepCost, path: Path) -> None:
    """A step's time against the pending tokens fed, without and with a block, as multiples of an AR step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in cost.contexts:
        for block, style in ((False, "-"), (True, "--")):
            label = f"context {c}" + (f", + {cost.block_size} block slots" if block else "")
            ax.plot(
                cost.pending,
                [cost.relative(n, c, block) for n in cost.pending],
                style,
                marker="o",
                label=label,
            )
    for slots in cost.short_slots:  # shorter blocks, at the first context
        c = cost.contexts[0]
        ax.plot(cost.short_pending, [cost.relative(n, c, slots) for n in cost.short_pending], ":", marker=".",
                label=f"context {c}, + {slots} block slots")  # fmt: skip
    ax.set_xlabel("pending tokens fed")
    ax.set_ylabel("step time / AR step time")
    ax.set_title(cost.key.get("cpu", "step cost"), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(result: BenchResult, out: Path, command: str, adapter: str | None = None,
          cost: StepCost | None = None, memory: dict | None = None,
          lookups: dict | None = None, dtype: str | None = None) -> None:  # fmt: skip
    """`adapter`: the checkpoint the run's model carries (methods without an adapter of their own);
    `cost`: the machine's step cost for the run's model, recorded with the results and plotted;
    `memory`: the run's peak resident set and each method's weights in MiB (`memory_line`);
    `lookups`: per method, what it learned of its looked-up drafts (LookupStats.to_json);
    `dtype`: the run's model dtype (--dtype auto decides it by the machine)."""
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(command=command, adapter=adapter, dtype=dtype, torch=torch.__version__,
                threads=torch.get_num_threads(), machine=machine(),
                step_cost=None if cost is None else cost.to_json())  # fmt: skip
    meta["memory"] = memory
    meta["lookup"] = lookups or {}
    if cost is not None:
        plot_cost(cost, out / "step_cost.png")
    (out / "results.json").write_text(
        json.dumps(
            dict(meta=meta, task=result.task, records=result.records, by_task=result.by_task), indent=2
        )
        + "\n"
    )
    (out / "samples.jsonl").write_text(
        "".join(
            json.dumps(dict(method=m, **dataclasses.asdict(r))) + "\n"
            for m, runs in result.samples.items()
            for r in runs
        )
    )
    memory_text = "" if memory is None else "\n" + memory_line(memory) + "\n"
    lookup_text = "".join(f"\n{lookup_lines(label, table)}\n" for label, table in (lookups or {}).items())
    (out / "results.md").write_text(f"`{command}`\n\n" + markdown_table(result) + memory_text + lookup_text)
    plot(result, out)
