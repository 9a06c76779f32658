"""The `pardec` command line: one module per subcommand (HELP, DESCRIPTION, add_arguments, run), each
parsing its arguments and calling the library. Errors the user can fix (PardecError) print one line
and exit 2."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from ..errors import PardecError
from . import (
    bench,
    calibrate,
    datastore,
    distill,
    eval_tasks,
    export,
    generate,
    models,
    profile,
    retrofit,
    serve,
    train_markov,
)

COMMANDS = {"generate": generate, "bench": bench, "profile": profile, "calibrate": calibrate,
            "serve": serve, "distill": distill, "datastore": datastore, "retrofit": retrofit,
            "export": export, "models": models, "eval-tasks": eval_tasks,
            "train-markov": train_markov}  # fmt: skip
if importlib.util.find_spec("pardec.methods.dflash") is not None:  # a method plug-in, with its trainer
    from . import train_drafter

    COMMANDS["train-drafter"] = train_drafter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pardec",
        description="Decode several tokens per forward pass with a retrofitted causal LM.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded with bench results: the exact command
    try:
        COMMANDS[args.command].run(args)
    except PardecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
