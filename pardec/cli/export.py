"""`pardec export`: a checkpoint without optimizer state, in bf16 (to ship or commit)."""

from __future__ import annotations

import importlib.util
import sys

from ..errors import PardecError

HELP = "copy a checkpoint without optimizer state, in bf16 (to ship or commit)"
DESCRIPTION = (
    "Export an adapter or drafter checkpoint without optimizer state, in "
    "bf16. "
    "--format dflash writes a drafter in the layout of the public DFlash "
    "drafters."
)


# fmt: off
def add_arguments(e) -> None:
    e.add_argument("src")
    e.add_argument("dst")
    e.add_argument("--format", choices=("pardec", "dflash"), default="pardec",
                   help="dflash: config.json + model.safetensors as z-lab's DFlash drafters (drafters only)")
# fmt: on


def run(args) -> None:
    from ..model import checkpoint

    if args.format == "dflash":
        if importlib.util.find_spec("pardec.methods.dflash") is None:
            raise PardecError("the dflash method is not part of this installation")
        from ..methods.dflash.checkpoint import KIND, export_dflash

        if checkpoint.read_header(args.src)["kind"] != KIND:
            raise PardecError(
                f"'{args.src}' is not a drafter checkpoint: only drafters export to the DFlash format"
            )
        export_dflash(args.src, args.dst)
    else:
        checkpoint.export(args.src, args.dst)
    print(f"exported {args.src} -> {args.dst}", file=sys.stderr)
