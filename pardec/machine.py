"""What machine this is, as far as timings depend on it: the CPU model and its matrix features, threads,
torch and the GPU. Measured costs (step costs, kernel crossovers) are cached under this key."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import torch


def cache_dir() -> Path:
    """Where converted models and what was measured on this machine live; PARDEC_CACHE overrides."""
    root = os.environ.get("PARDEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "pardec"
    )
    return Path(root)


def machine() -> dict:
    """The CPU model, its matrix-multiply features (AMX, AVX-512 bf16), threads, torch and device."""
    flags, model = set(), platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "model name":
                model = value.strip()
    except OSError:
        pass
    return dict(cpu=model, amx="amx_tile" in flags, avx512_bf16="avx512_bf16" in flags,
                threads=torch.get_num_threads(), torch=torch.__version__,
                cuda=torch.cuda.get_device_name() if torch.cuda.is_available() else None)  # fmt: skip


# Rows per matmul from which emulated bf16 is slower than float32 (benchmarks/avx2-epyc.md).
EMULATED_BF16_LOSES_FROM = 16


def native_bf16() -> bool:
    """Whether bf16 matmuls run on matrix instructions here (a GPU, AMX or AVX-512 bf16). Elsewhere
    torch emulates them: from about 16 tokens several times slower than float32 (benchmarks/avx2-epyc.md)."""
    m = machine()
    return m["cuda"] is not None or m["amx"] or m["avx512_bf16"]


# Where bf16 is emulated, decoding takes float32 when its one-token matmul is at most this much slower
# than bf16's: its multi-token steps, what spec's speedup rides on, are then far cheaper.
FLOAT32_AR_MARGIN = 1.15


def fastest_pass(f, x: torch.Tensor, layers: list, rounds: int = 3) -> float:
    """Least time of one pass of `f(layer, x)` over `layers`, of `rounds` after a warm-up: other work
    on the machine only ever adds time."""
    best = float("inf")
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        for layer in layers:
            f(layer, x)
        if r:
            best = min(best, time.perf_counter() - t0)
    return best


@functools.lru_cache(maxsize=1)
def one_token_seconds(out_features: int = 4864, in_features: int = 896, layers: int = 8) -> dict:
    """The least time of one-token matmuls over `layers` distinct weights of a model-like shape (so
    that they come from memory, as in a forward), in float32 and in bf16: {"float32": s, "bfloat16": s}.
    A few hundred milliseconds, once per machine: kept in the cache folder and read back, so that
    `--dtype auto` makes the same choice on every run here rather than one timing's."""
    key = dict(machine(), shape=[out_features, in_features, layers])
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / "dtype" / f"{digest}.json"
    try:
        times = json.loads(path.read_text())["seconds"]
        if set(times) == {"float32", "bfloat16"} and all(float(t) > 0 for t in times.values()):
            return {k: float(t) for k, t in times.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # none yet, or unreadable: timed again
    times = _time_one_token(out_features, in_features, layers)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(key=key, seconds=times), indent=1) + "\n")
    except OSError:
        pass  # a read-only cache: timed once per process instead
    return times


def _time_one_token(out_features: int, in_features: int, layers: int) -> dict:
    g = torch.Generator().manual_seed(0)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        weights = [torch.randn(out_features, in_features, generator=g).to(dtype) for _ in range(layers)]
        x = torch.randn(1, in_features, generator=g).to(dtype)
        out[str(dtype).removeprefix("torch.")] = fastest_pass(
            lambda w, x: torch.nn.functional.linear(x, w), x, weights
        )
    return out


def float32_decodes_as_fast() -> bool:
    """Whether a one-token float32 matmul is about as fast as an emulated bf16 one here (an AVX-512
    CPU without bf16 instructions: benchmarks/packed-icelake.md), though it reads twice the bytes."""
    t = one_token_seconds()
    return t["float32"] <= FLOAT32_AR_MARGIN * t["bfloat16"]


def default_dtype(compute_bound: bool = False) -> torch.dtype:
    """The dtype "auto" means: bf16 where bf16 matmuls run on matrix instructions. Where they are
    emulated, float32 for compute-bound jobs (training, batched distillation), which there run several
    times faster in float32 (from EMULATED_BF16_LOSES_FROM rows per matmul), and for decoding too
    where a one-token float32 matmul is about as fast as a bf16 one; else bf16 (half the bytes a
    one-token forward reads)."""
    if native_bf16():
        return torch.bfloat16
    if compute_bound or float32_decodes_as_fast():
        return torch.float32
    return torch.bfloat16
