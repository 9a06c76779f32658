"""Load test of `pardec serve` on the loopback address: requests/s, tokens/s and latency percentiles
for several numbers of concurrent clients, one server per method, in one run.

Bounded: each level sends a fixed number of requests (--requests) and stops at --timeout seconds.
The server binds to 127.0.0.1 only. Writes load.json and load.md to --out.

    python scripts/serve_load.py --methods ar,spec --clients 1,4,16 --requests 16 --max-tokens 128 \
        --out benchmarks/serve-load
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash table is in three sentences.",
    "Give me five tips for keeping houseplants alive.",
    "A shop sells pens at $3 each. How much do 14 pens cost? Reason step by step.",
    "Write a Python function to reverse the words of a sentence.",
    "Summarise the causes of the French Revolution in a short paragraph.",
    "Write a haiku about autumn rain.",
    "What is the difference between a list and a tuple in Python?",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(lm, method: str, max_batch: int):
    import uvicorn

    from pardec.api import configure
    from pardec.decoding import DecodeConfig
    from pardec.server.app import create_app
    from pardec.server.engine import Engine
    from pardec.server.metrics import Metrics

    config, extras = configure(lm, DecodeConfig(method=method))
    engine = Engine(lm, extras, max_batch, 1024, Metrics())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine, lm.name, config), host="127.0.0.1", port=port,
                                           log_level="error"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}/v1"


def level(url: str, model: str, clients: int, requests: int, max_tokens: int, timeout: float) -> dict:
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=timeout)
    deadline = time.perf_counter() + timeout

    def one(i: int):
        if time.perf_counter() > deadline:
            return None
        t = time.perf_counter()
        messages = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
        r = client.chat.completions.create(
            model=model, temperature=0, max_tokens=max_tokens, messages=messages
        )
        return time.perf_counter() - t, r.usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = [x for x in pool.map(one, range(requests)) if x is not None]
    wall = time.perf_counter() - t0
    lat = sorted(x for x, _ in done)
    tokens = sum(n for _, n in done)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
    return dict(clients=clients, requests=len(done), seconds=round(wall, 2),
                requests_per_s=round(len(done) / wall, 3), tokens_per_s=round(tokens / wall, 2),
                p50_s=round(q[49], 2), p99_s=round(q[98], 2))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--methods", default="ar,spec")
    p.add_argument("--clients", default="1,4,16")
    p.add_argument("--requests", type=int, default=16, help="requests per level")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--timeout", type=float, default=600, help="seconds per level at most")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    from pardec.core.cost import machine
    from pardec.model import load_model

    lm = load_model(args.model)
    rows = []
    for method in args.methods.split(","):
        server, thread, url = serve(lm, method, args.max_batch)
        try:
            for c in (int(x) for x in args.clients.split(",")):
                row = dict(
                    method=method, **level(url, lm.name, c, args.requests, args.max_tokens, args.timeout)
                )
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
        finally:
            server.should_exit = True
            thread.join(60)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(command="python " + " ".join(sys.argv), machine=machine(), model=lm.name,
                adapter=str(lm.adapter), max_tokens=args.max_tokens)  # fmt: skip
    (out / "load.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    cpu = meta["machine"].get("cpu")
    lines = [f"`{meta['command']}`", "", f"{cpu}, {args.max_tokens} tokens per request",
             "", "| method | clients | requests | requests/s | tokens/s | p50 s | p99 s |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['method']} | {r['clients']} | {r['requests']} | {r['requests_per_s']} | "
                     f"{r['tokens_per_s']} | {r['p50_s']} | {r['p99_s']} |")  # fmt: skip
    (out / "load.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
