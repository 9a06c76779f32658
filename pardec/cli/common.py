"""Arguments several subcommands share."""

from __future__ import annotations

import argparse
import sys

DTYPES = ("auto", "float32", "bfloat16")


# fmt: off
def add_model_args(p: argparse.ArgumentParser) -> None:
    from ..model import DEFAULT_MODEL, PACKAGED

    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"Hugging Face id or folder, a .gguf file, or a packaged alias "
                        f"({', '.join(PACKAGED)}); default {DEFAULT_MODEL}")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto (default): bfloat16 where bf16 matmuls run on matrix instructions (a GPU, "
                        "AMX or AVX-512 bf16). On other CPUs they are emulated: float32 for training and "
                        "distillation, whose many-token forwards run several times faster in float32, "
                        "and for decoding too where a one-token float32 matmul is about as fast as a "
                        "bf16 one (timed at start; AVX-512 CPUs), so that spec's multi-token steps are "
                        "far cheaper; float32 for exactness checks")
# fmt: on


def add_forward_args(p: argparse.ArgumentParser) -> None:
    """How the model's forwards run: its weights' quantization, and compiled or eager steps."""
    from ..model.quant import CHOICES

    p.add_argument(
        "--quant",
        choices=CHOICES,
        default=None,  # none, told apart from an explicit none (quant_hint)
        help="quantization of the linear layers (PyTorch's CPU kernels): int8 halves what a "
        "one-token forward reads, int4 (groups of 32) quarters it, gguf takes the GGUF's own "
        "4-bit blocks as shipped (and int8 for its other formats): weight-only, so forwards of more "
        "tokens than the kernel is fast for (timed per layer shape at load) run dense copies of the "
        "same weights (none where the kernel never loses); with -lowmem (int8-lowmem, int4-lowmem, "
        "gguf-lowmem) none are kept: the least memory, slower prefill and block steps. w8a8: int8 "
        "weights times int8 activations per token (fbgemm): forwards of many tokens stay cheap, so "
        "block steps do, with no dense copies; its activations are float32 whatever --dtype says (bf16 "
        "rounding would flip its 7-bit codes and part spec from AR); not with --compile. packed: not "
        "quantized but float32 weights also held in MKL's packed layout (1.75x their bytes more), so "
        "forwards of 4-16 tokens (block steps) skip MKL's repacking of every weight on every call; "
        "float32 whatever --dtype says. Default none (on a "
        "CPU without bf16 matrix instructions with a note that w8a8 is faster there)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run decoding steps through torch.compile: fewer per-op costs, most where the weights are "
        "quantized; the step shapes compile first (minutes on 2 cores: 7-8 for the 0.5B model on int4 "
        "weights, about 2 once inductor's on-disk cache holds them)",
    )


def quant(args) -> str:
    """--quant, its default resolved."""
    return args.quant or "none"


def quant_hint(args) -> str | None:
    """A line for the user where the default --quant leaves speed on the table: unquantized weights on
    a CPU that emulates bf16, where w8a8's integer GEMMs make both AR steps and multi-token steps
    cheaper (than float32 ones too, which read four bytes a weight). Not where --quant was given,
    none included."""
    import torch

    from ..machine import native_bf16

    if args.quant is not None or native_bf16():
        return None
    if dtype(args) == torch.float32:
        return ("note: this CPU has no bf16 matrix instructions (AMX or AVX-512 bf16); --quant w8a8 "
                "(int8 weights x int8 activations) reads a quarter of float32's bytes and usually decodes "
                "faster here, exactly as that model's AR; --quant none hides this note")  # fmt: skip
    return ("note: this CPU has no bf16 matrix instructions (AMX or AVX-512 bf16), so bf16 steps are "
            "emulated and multi-token steps dear; --quant w8a8 (int8 weights x int8 activations) "
            "usually decodes about twice as fast here, exactly as that model's AR; --quant none hides "
            "this note")  # fmt: skip


def dtype(args, compute_bound: bool = False):
    """--dtype as a torch dtype; `compute_bound`: the job feeds many tokens per matmul (training,
    batched distillation), where "auto" takes float32 on CPUs that emulate bf16."""
    import torch

    from ..machine import default_dtype

    return default_dtype(compute_bound) if args.dtype == "auto" else getattr(torch, args.dtype)


# fmt: off
def add_adapter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adapter", default="auto",
                   help="a pardec checkpoint folder trained for this model; 'auto' (default) = the adapter "
                        "bundled with pardec for this model, if any; 'none' = the plain model")
# fmt: on


# fmt: off
def add_drafter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default="auto",
                   help="DFlash drafter folder (pardec train-drafter) for method dflash; 'auto' (default) = "
                        "the drafter bundled with pardec for this model, if any; 'none'")
# fmt: on


# fmt: off
def add_run_args(p: argparse.ArgumentParser, cfg, checkpoint: str) -> None:
    """Data, checkpoint and schedule options of both training commands; defaults from their config
    (TrainConfig or DrafterTrainConfig, which share these field names)."""
    p.add_argument("--data", required=True, nargs="+", metavar="JSONL",
                   help="distilled JSONL files (prompt, response); the held-out prompts come from each "
                        "file's end")
    p.add_argument("--out", required=True, help=checkpoint)
    p.add_argument("--resume", help=f"{checkpoint} to resume from")
    p.add_argument("--lr", type=float, default=cfg.lr, help=f"peak learning rate (default {cfg.lr})")
    p.add_argument("--steps", type=int, default=cfg.steps, help=f"optimizer steps (default {cfg.steps})")
    p.add_argument("--grad-accum", type=int, default=cfg.grad_accum,
                   help=f"sequences per step (default {cfg.grad_accum})")
    p.add_argument("--max-length", type=int, default=cfg.max_length,
                   help=f"tokens per sequence (default {cfg.max_length})")
    p.add_argument("--eval-every", type=int, default=cfg.eval_every, help="steps between checkpoints")
    p.add_argument("--heldout", type=int, default=cfg.eval_prompts, help="prompts held out for the TPF check")
    p.add_argument("--seed", type=int, default=cfg.seed)
# fmt: on


def run_settings(args) -> dict:
    """The add_run_args settings, as fields of TrainConfig and DrafterTrainConfig."""
    import torch

    return dict(
        lr=args.lr, steps=args.steps, grad_accum=args.grad_accum, max_length=args.max_length,
        bf16=dtype(args, compute_bound=True) == torch.bfloat16, seed=args.seed, eval_every=args.eval_every,
        eval_prompts=args.heldout,
    )  # fmt: skip


def train_and_report(args, cfg, what: str, train) -> None:
    """Read --data (before any model loads), load the plain base model, tokenize, then
    `train(lm, examples, heldout prompts)`; print where the checkpoint went and its held-out TPF."""
    from ..model import load_model
    from ..training.data import read_pairs, split_heldout, tokenize

    train_rows, held_rows = split_heldout([read_pairs(f) for f in args.data], args.data, args.heldout)
    # The base stays in the chosen dtype (frozen); what trains is float32.
    lm = load_model(args.model, dtype(args, compute_bound=True), "none")
    examples = tokenize(lm.model, lm.tokenizer, train_rows, cfg.max_length)
    hist = train(lm, examples, [lm.encode(r["prompt"]) for r in held_rows])
    last = hist[-1]
    print(f"{args.command}: {last['step']} steps, loss {last['loss']:.3f}, held-out {what} TPF "
          f"{last.get('heldout_tpf')}; checkpoint in {args.out}", file=sys.stderr)  # fmt: skip


# fmt: off
def add_decoding_command_args(p: argparse.ArgumentParser) -> None:
    """What every command that decodes takes: the model, its quantization, adapter and drafter, and
    the decoding settings."""
    add_model_args(p)
    add_forward_args(p)
    add_adapter_arg(p)
    add_drafter_arg(p)
    add_decode_args(p)


def auto_or_float(value: str) -> float | None:
    """'auto' -> None (the adapter's calibrated value), else a float."""
    if value == "auto":
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got '{value}'") from None


def add_decode_args(p: argparse.ArgumentParser) -> None:
    from .. import methods  # noqa: F401  (every method registered, for the list below)
    from ..decoding import METHODS, DecodeConfig

    d = DecodeConfig()
    listed = "; ".join(f"{m.name} = {m.summary}, {'lossless' if m.lossless else 'lossy'}"
                       for m in METHODS.values())
    p.add_argument("--method", default=d.method, help=f"{listed} (default {d.method})")
    p.add_argument("--block-size", type=int, default=None,
                   help=f"D, slots per forward (default: the block size the adapter was trained with, else "
                        f"{d.block_size}; dflash: the drafter's)")
    p.add_argument("--threshold", type=auto_or_float, default=d.threshold,
                   help="threshold: confidence at which a draft is committed without verification, in [0, 1] "
                        "(1: as spec), or 'auto': the one `pardec calibrate` chose for the adapter "
                        f"(default {d.threshold})")
    p.add_argument("--confidence", choices=("prob", "entropy"), default=d.confidence,
                   help="threshold: max probability, or 1 - entropy / log V")
    p.add_argument("--draft-blocks", type=int, default=d.draft_blocks,
                   help="spec, threshold: blocks fed per forward, one per likely acceptance length (more "
                        f"drafts after a rejection, longer forwards; default {d.draft_blocks})")
    p.add_argument("--block-at", type=int, default=d.block_at,
                   help="spec, threshold: feed the block after at most this many drafts, fixed; it yields "
                        "the next drafts after any acceptance at least that long (0: always; D - 1 or more: "
                        "only after all drafts are accepted, with the most drafts). Default: placed by "
                        "--block-reach")
    p.add_argument("--draft-cutoff", type=float, default=d.draft_cutoff,
                   help="spec, threshold, dflash: feed the next drafts while the product of their "
                        "confidences stays at or above this, in [0, 1]; unlikely drafts cost a fed token "
                        f"each and are rarely accepted. Still lossless (default {d.draft_cutoff}: feed them "
                        "all)")
    p.add_argument("--block-reach", type=float, default=d.block_reach,
                   help="spec, threshold: feed the block after the drafts whose confidences' product stays "
                        "at or above this, in [0, 1]: the likely accepted ones, so it sees more text and "
                        f"its nearest slots become the next drafts (default {d.block_reach}; 0: after all "
                        "drafts; ignored with --block-at)")
    p.add_argument("--adaptive", action=argparse.BooleanOptionalAction, default=d.adaptive,
                   help="spec, threshold: choose each step how many drafts to feed, or a plain AR step, by "
                        "what a step costs on this machine (measured once, cached) and how likely the "
                        f"drafts are; lossless (default {'on' if d.adaptive else 'off'}; --no-adaptive: the "
                        "fixed shapes)")
    p.add_argument("--min-block-size", type=int, default=d.min_block_size,
                   help="spec, threshold with --adaptive: the shortest block a step may feed; each step's "
                        "block size is chosen between this and --block-size by the step cost and the "
                        "drafts' reach (default: the adapter's, if it was trained with sampled block sizes, "
                        "else always --block-size)")
    p.add_argument("--tree", type=int, default=d.tree,
                   help="spec, threshold: branches per step, a tree: the next choices for the draft most "
                        "worth an alternative, each carrying on with the drafts after it (default 0: a "
                        "chain; with --adaptive fed only where they pay on this machine); lossless")
    p.add_argument("--tree-depth", type=int, default=d.tree_depth,
                   help=f"spec, threshold: drafts each branch carries on with (default {d.tree_depth})")
    p.add_argument("--lookup", type=int, default=d.lookup,
                   help="spec, threshold: most drafts looked up per step in the prompt and the text so far "
                        "(the tokens that followed an earlier occurrence of the last few); they replace the "
                        "block's drafts where more are expected to be accepted, the other candidate fed as "
                        f"a branch where it pays; lossless (default {d.lookup}; 0: block drafts only)")
    p.add_argument("--lookup-forks", type=int, default=d.lookup_forks,
                   help="spec, threshold: also look drafts up after each of the chain's first N drafts (as "
                        "if accepted) and feed those that part from the chain as branches, where they pay "
                        f"(--no-adaptive: up to N more); lossless (default {d.lookup_forks}: off)")
    p.add_argument("--reveal", type=int, default=d.reveal,
                   help="spec, threshold: N more blocks after the same drafts as the first, each with its "
                        "first slot holding one of the N likeliest tokens there: where the token committed "
                        "there is one of them, the next drafts have seen it; fed with every block, not "
                        f"priced by the schedule; lossless (default {d.reveal}: off)")
    p.add_argument("--fallback", action=argparse.BooleanOptionalAction, default=d.fallback,
                   help="spec with --adaptive: also feed a block after no drafts where the drafts before "
                        "the first block may be rejected and its drafts then pay for their slots on this "
                        f"machine; lossless (default {'on' if d.fallback else 'off'})")
    p.add_argument("--plan-ahead", action=argparse.BooleanOptionalAction, default=d.plan_ahead,
                   help="spec with --adaptive: where a looked-up chain would be verified in a plain step, "
                        "also count the next step's drafts a block step brings; lossless "
                        f"(default {'on' if d.plan_ahead else 'off'})")
    p.add_argument("--markov", action=argparse.BooleanOptionalAction, default=d.markov,
                   help="spec, threshold: draw each block draft after the one before it with the adapter's "
                        "Markov head (`pardec train-markov`), where it has one; lossless "
                        f"(default {'on' if d.markov else 'off'})")
    p.add_argument("--datastore", action=argparse.BooleanOptionalAction, default=d.datastore,
                   help="spec, threshold: also look drafts up in the datastore of the model's own answers "
                        "(`pardec datastore`), where the adapter's folder or the packaged model has one; the "
                        f"--lookup cap holds for them; lossless (default {'on' if d.datastore else 'off'})")
    p.add_argument("--gamma", type=auto_or_float, default=d.gamma,
                   help="eb: entropy budget in nats per forward, or 'auto': the one `pardec calibrate` "
                        f"chose for the adapter (default {d.gamma})")
    p.add_argument("--temperature", type=float, default=d.temperature, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=d.top_p, help="nucleus sampling mass (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help=f"default {d.max_new_tokens}")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
# fmt: on


def decode_config(args):
    """The DecodeConfig the decode arguments give (validated here, before any model loads)."""
    from ..decoding import DecodeConfig

    block = {} if args.block_size is None else {"block_size": args.block_size}
    return DecodeConfig(
        method=args.method,
        threshold=args.threshold,
        confidence=args.confidence,
        gamma=args.gamma,
        draft_blocks=args.draft_blocks,
        block_at=args.block_at,
        draft_cutoff=args.draft_cutoff,
        block_reach=args.block_reach,
        adaptive=args.adaptive,
        min_block_size=args.min_block_size,
        tree=args.tree,
        tree_depth=args.tree_depth,
        lookup=args.lookup,
        datastore=args.datastore,
        markov=args.markov,
        fallback=args.fallback,
        plan_ahead=args.plan_ahead,
        lookup_forks=args.lookup_forks,
        reveal=args.reveal,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        stop=tuple(args.stop),
        **block,
    )
