"""`pardec train-drafter`: train a DFlash drafter for a model (a drafter checkpoint out)."""

from __future__ import annotations

from ..errors import PardecError
from . import common

HELP = "train a DFlash drafter for a model (drafter checkpoint out)"
DESCRIPTION = (
    "Train a small block drafter conditioned on the target's hidden states "
    "(DFlash) on distilled data. The target's features are computed once and "
    "cached on disk; checkpoints carry a held-out DFlash TPF check."
)


# fmt: off
def add_arguments(t) -> None:
    from ..methods.dflash.training import DrafterTrainConfig

    dt = DrafterTrainConfig()
    common.add_model_args(t)
    common.add_run_args(t, dt, "drafter checkpoint folder")
    t.add_argument("--features", default=None,
                   help="folder for the cached target features (default: under the pardec cache, keyed by "
                        "model, layers and data)")
    t.add_argument("--layers", type=int, default=dt.layers, help=f"drafter layers (default {dt.layers})")
    t.add_argument("--block-size", type=int, default=dt.block_size, help=f"D (default {dt.block_size})")
    t.add_argument("--target-layers", default=None,
                   help="comma list of target layer indices to condition on (default: 3 spread over the "
                        "depth)")
    t.add_argument("--init", choices=("norm", "target", "random"), default=dt.init,
                   help="norm (default): random layers, the target's final norm; target: also copy the "
                        "target's last layers; random")
    t.add_argument("--anchors", type=int, default=dt.anchors_per_sequence,
                   help="blocks per training sequence")
    t.add_argument("--decay", type=float, default=dt.decay, help="slot j weighs exp(-(j-1)/decay)")
    t.add_argument("--draft-vocab", type=int, default=dt.draft_vocab,
                   help=f"draft only the N tokens most frequent in the data, plus stop tokens (default "
                        f"{dt.draft_vocab}; 0 = all): cuts the shared head's cost per draft; output "
                        f"unchanged")
# fmt: on


def run(args) -> None:
    from ..methods.dflash.training import DrafterTrainConfig, train_for

    try:
        target_layers = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else None
    except ValueError:
        raise PardecError(
            f"--target-layers must be a comma list of integers, got '{args.target_layers}'"
        ) from None
    cfg = DrafterTrainConfig(
        block_size=args.block_size, layers=args.layers, target_layers=target_layers, init=args.init,
        anchors_per_sequence=args.anchors, decay=args.decay, draft_vocab=args.draft_vocab,
        **common.run_settings(args),
    )  # fmt: skip

    def train(lm, examples, heldout):
        return train_for(lm, examples, heldout, cfg, args.out, features=args.features, resume=args.resume)

    common.train_and_report(args, cfg, "dflash", train)
