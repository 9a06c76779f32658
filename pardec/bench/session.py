"""A whole `pardec bench`: load the models, make the runners, run (or resume), write the files."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core import cost as step_cost
from ..core.memory import peak_rss_mb
from ..decoding import DecodeConfig
from ..errors import PardecError
from ..model import checkpoint, load_model
from ..model.quant import copies_dtype, weight_bytes
from ..tasks import load_tasks
from .methods import make_runners, model_for, own_key, parse_methods
from .report import write
from .run import BenchResult, read_log, run_bench


@dataclass(frozen=True)
class BenchOptions:
    model: str
    methods: str  # --methods
    task: str  # --task
    out: Path
    dtype: torch.dtype = torch.bfloat16
    adapter: str | None = "auto"
    drafter: str | None = "auto"
    quant: str = "none"  # every pardec method's without a @quant= of its own, ar's too
    limit: int | None = None
    offset: int = 0
    max_new_tokens: int = 256
    block_size: int | None = None  # None: each method's trained D (its adapter's, or its drafter's)
    chat: bool = True
    resume: bool = False
    command: str = ""  # recorded with the results
    progress: bool = True


def scoring_model(model):
    """The model NLL is scored under: a float32 copy where bf16 matmuls are emulated (a CPU with neither
    AMX nor AVX-512 bf16; quant.copies_dtype), there several times faster than bf16 and no less exact;
    else the model itself."""
    if model.dtype == torch.bfloat16 and copies_dtype(model.dtype) == torch.float32:
        return copy.deepcopy(model).float()
    return model


def bench(opts: BenchOptions) -> BenchResult:
    base = DecodeConfig(
        max_new_tokens=opts.max_new_tokens,
        **({} if opts.block_size is None else {"block_size": opts.block_size}),
    )
    specs = parse_methods(opts.methods, base, opts.quant)
    # A method's @dtype= that is the run's own is no dtype of its own: it shares the run's model.
    specs = [dataclasses.replace(s, dtype=None) if s.dtype and getattr(torch, s.dtype) == opts.dtype else s
             for s in specs]  # fmt: skip
    # Each method's own adapter is checked before any model loads, so a bad path fails fast.
    own_paths = {s.adapter for s in specs if s.adapter not in (None, "none")}  # none: the bare model
    for path in own_paths:
        checkpoint.read_settings(path)
    own_keys = {own_key(s) for s in specs} - {None}
    items = load_tasks(opts.task, opts.limit, opts.offset)
    out = Path(opts.out)
    progress, samples = out / "progress.jsonl", out / "samples.jsonl"
    if opts.resume and not progress.is_file() and not samples.is_file():
        raise PardecError(f"nothing to resume: {out} has neither progress.jsonl nor samples.jsonl")
    lm = load_model(opts.model, opts.dtype, opts.adapter)
    own = {(path, quant, dtype): load_model(opts.model, getattr(torch, dtype) if dtype else opts.dtype,
                                            opts.adapter if path is None else path, quant)
           for path, quant, dtype in own_keys}  # fmt: skip
    runners = make_runners(lm, specs, own, opts.block_size is not None, {"drafter": opts.drafter})
    # NLL is measured under the untouched base model. A gated adapter is off in plain forwards, so
    # there the adapted model already is the base model.
    kinds = {m.adapter_settings.adapter for m in [lm, *own.values()] if m.adapter_settings is not None}
    nll_model = lm.model if kinds <= {"gated-lora"} else load_model(opts.model, opts.dtype, "none").model
    nll_model = scoring_model(nll_model)
    # What a step costs here, for the record: the curve the first adaptive method reads (its own
    # model's where it has one: with --quant the run's model decodes nothing but NLL), else the run's
    # model's (measured once per model and machine, then cached) at the block size its methods decode
    # with (api.configure's rule).
    cost = next((r.extras["cost"] for r in runners if "cost" in getattr(r, "extras", {})), None)
    cost = cost or step_cost.for_model(lm, opts.block_size or lm.trained_block_size or base.block_size)
    out.mkdir(parents=True, exist_ok=True)
    if not opts.resume:
        progress.unlink(missing_ok=True)
    elif not progress.is_file():  # a finished run, extended: its samples seed the log
        progress.write_text(
            "".join(rec.log_line(method) for (method, _, _), rec in read_log(samples).items())
        )
    done = read_log(progress) if opts.resume else {}
    result = run_bench(
        runners, items, opts.task, nll_model, chat=opts.chat, progress=opts.progress, log=progress, done=done
    )
    memory = dict(peak_rss_mb=peak_rss_mb(), weights_mb={})
    for s, runner in zip(specs, runners):  # what each method decodes with holds (a shared model under each)
        held = runner.held() if hasattr(runner, "held") else weight_bytes(model_for(s, lm, own).model)
        memory["weights_mb"][s.label] = dict(
            weights=held["kernel"] / 2**20, dense_copies=held["dense"] / 2**20
        )
    for runner in runners:
        getattr(runner, "close", lambda: None)()  # llamacpp's model
    # What each method learned of its looked-up drafts' acceptance over the run.
    lookups = {s.label: r.extras["lookup"].to_json() for s, r in zip(specs, runners)
               if "lookup" in getattr(r, "extras", {}) and s.config.lookup}  # fmt: skip
    lookups |= {f"{s.label} (datastore)": r.extras["store_lookup"].to_json() for s, r in zip(specs, runners)
                if "store_lookup" in getattr(r, "extras", {}) and s.config.datastore}  # fmt: skip
    write(result, out, opts.command, None if lm.adapter is None else str(lm.adapter), cost, memory, lookups,
          dtype=str(lm.model.dtype).removeprefix("torch."))  # fmt: skip
    progress.unlink()  # samples.jsonl now holds every run
    return result
