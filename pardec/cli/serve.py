"""`pardec serve`: an OpenAI-compatible server (FastAPI + uvicorn) with continuous batching."""

from __future__ import annotations

import signal
import sys

from ..errors import PardecError
from . import common

HELP = "serve the model over OpenAI's HTTP API (completions, chat, streaming, /metrics)"
DESCRIPTION = (
    "An OpenAI-compatible server: /v1/completions, /v1/chat/completions (streaming with SSE), "
    "/v1/models, /health, and Prometheus /metrics (drafts, accepted tokens, latencies). Requests join "
    "the running batch at the next step and leave when done. Binds to 127.0.0.1 unless --host says "
    "otherwise. Decoding options set the server's method; requests set temperature, top_p, seed, "
    "max_tokens, stop and n."
)


# fmt: off
def add_arguments(p) -> None:
    common.add_decoding_command_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-batch", type=int, default=8, help="rows decoded together at most (default 8)")
    p.add_argument("--max-queue", type=int, default=64,
                   help="requests waiting for a row at most; more are answered 429 at once (default 64)")
    p.add_argument("--served-model-name", default=None,
                   help="the model name clients send (default: the --model value)")
# fmt: on


def run(args) -> None:
    import uvicorn

    from ..api import configure
    from ..model import load_model
    from ..server.app import create_app
    from ..server.engine import Engine
    from ..server.metrics import Metrics

    if args.max_batch < 1 or args.max_queue < 1:
        raise PardecError("--max-batch and --max-queue must be >= 1")
    if not 0 < args.port < 65536:
        raise PardecError(f"--port must lie in [1, 65535], got {args.port}")
    config = common.decode_config(args)
    lm = load_model(args.model, common.dtype(args), args.adapter, common.quant(args), args.compile)
    config, extras = configure(lm, config, args.block_size is not None, {"drafter": args.drafter})
    if hint := common.quant_hint(args):  # after the checks: a bad input gives one line, the error
        print(f"pardec serve: {hint}", file=sys.stderr)
    if args.compile:  # compile every step shape before the first request, not during it
        from ..core.cost import warm_up

        seconds = warm_up(lm.decoder, lm.mask_id, block_size=config.model_block_slots)
        print(f"pardec serve: steps compiled in {seconds:.0f} s", file=sys.stderr)
    name = args.served_model_name or args.model
    engine = Engine(lm, extras, args.max_batch, args.max_queue, Metrics())
    app = create_app(engine, name, config)
    print(f"pardec serve: {name} ({config.method}, adapter {lm.adapter or 'none'}) on http://{args.host}:{args.port}",
          file=sys.stderr)  # fmt: skip
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the handler it
    # found: a quiet one, so that a clean shutdown exits 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=30)
    print("pardec serve: stopped", file=sys.stderr)
