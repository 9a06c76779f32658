"""`pardec retrofit`: train a model to predict blocks (an adapter checkpoint out)."""

from __future__ import annotations

from . import common

HELP = "train a model to predict blocks (adapter checkpoint out)"
DESCRIPTION = "Train block prediction on distilled data; checkpoints with a held-out TPF check."


# fmt: off
def add_arguments(r) -> None:
    from ..training.config import ADAPTERS, OBJECTIVES, TrainConfig

    common.add_model_args(r)
    t = TrainConfig()
    common.add_run_args(r, t, "checkpoint folder")
    r.add_argument("--objective", choices=OBJECTIVES, default=t.objective, help="nsp (SDLM) or sbd (SBD)")
    r.add_argument("--kind", choices=ADAPTERS, default=t.adapter,
                   help="what is trained: gated-lora (LoRA at [MASK] positions only: NTP stays the base "
                        "model's), lora, full")
    r.add_argument("--block-size", type=int, default=t.block_size)
    r.add_argument("--min-block-size", type=int, default=None, help="sample block sizes in [min, block size]")
    r.add_argument("--blocks-per-sequence", type=int, default=t.blocks_per_sequence)
    r.add_argument("--ntp-weight", type=float, default=t.ntp_weight, help="sbd: next-token loss weight")
    r.add_argument("--decay", type=float, default=None, help="position-decayed loss weights exp(-j/decay)")
    r.add_argument("--kl-weight", type=float, default=t.kl_weight,
                   help="share of each slot's loss taken against the base model's own next-token "
                        "distribution instead of the clean token, in [0, 1] (gated-lora; default 0)")
    r.add_argument("--chain", action="store_true",
                   help="weight each slot's loss by the probability its block gets the earlier slots right "
                        "(acceptance length)")
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
# fmt: on


def run(args) -> None:
    from ..model.adapters import parse_targets
    from ..training.config import TrainConfig
    from ..training.loop import retrofit

    cfg = TrainConfig(
        objective=args.objective, adapter=args.kind, block_size=args.block_size,
        min_block_size=args.min_block_size, blocks_per_sequence=args.blocks_per_sequence,
        ntp_weight=args.ntp_weight, decay=args.decay, kl_weight=args.kl_weight, chain=args.chain,
        lora_rank=args.rank, lora_alpha=args.alpha,
        lora_targets=parse_targets(args.targets), init_from=args.init_from, **common.run_settings(args),
    )  # fmt: skip

    def train(lm, examples, heldout):
        return retrofit(lm, examples, heldout, cfg, args.out, resume=args.resume)

    common.train_and_report(args, cfg, "spec", train)
