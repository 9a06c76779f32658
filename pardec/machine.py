"""What machine this is, as far as timings depend on it: the CPU model and its matrix features, threads,
torch and the GPU. Measured costs (step costs, kernel crossovers) are cached under this key."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


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


def default_dtype(compute_bound: bool = False) -> torch.dtype:
    """The dtype "auto" means: bf16 (half the bytes a one-token forward reads), but float32 for
    compute-bound jobs (training, batched distillation) where bf16 matmuls are emulated, which there
    run several times faster in float32 (from EMULATED_BF16_LOSES_FROM rows per matmul)."""
    return torch.float32 if compute_bound and not native_bf16() else torch.bfloat16
