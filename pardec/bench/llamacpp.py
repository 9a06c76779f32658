"""`llamacpp` in the bench: llama.cpp (through llama-cpp-python) decoding the very GGUF the model
was loaded from, as the baseline a local user would run.

It is given the same prompt token ids (the same chat template), decodes greedily to the same stop
tokens and the same max tokens, with as many threads as torch uses, and each prompt starts from an
empty KV cache (llama-cpp-python would otherwise reuse a matching prefix from the previous prompt).

Before the bench uses it, a child process loads the GGUF and decodes a few tokens: llama.cpp's AMX
kernels crash some CPUs with AMX on this very GGUF (a segfault, ggml-org/llama.cpp#20824), and a crash
in the bench's own process would take every other method's results with it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import PardecError
from ..model import LoadedModel
from ..model.loading import gguf_file
from .methods import Decoded, MethodSpec

INSTALL = "pip install 'pardec[llamacpp]'  (builds llama.cpp from source: minutes)"
CONTEXT = 4096  # tokens llama.cpp allocates for prompt + answer
# llama.cpp built for this CPU but without its AMX kernels (AVX-512 and VNNI kept)
NO_AMX = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON '
    '-DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON" '
    "pip install --force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36"
)
# Loads the GGUF (argv[1]) with argv[2] threads and decodes 8 tokens greedily.
PROBE = """
import sys, llama_cpp
llama = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=int(sys.argv[2]), verbose=False)
for n, _ in enumerate(llama.generate(llama.tokenize(b"def add(a, b):"), temp=0.0, top_k=1)):
    if n >= 7:
        break
"""


def open_gguf(lm: LoadedModel, n_ctx: int = CONTEXT) -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise PardecError(f"method 'llamacpp' needs llama-cpp-python: {INSTALL}") from None
    path = gguf_file(lm.name, "method 'llamacpp'")  # refuses a model that did not come from a GGUF
    threads = torch.get_num_threads()
    probe(path, threads, llama_cpp.llama_print_system_info().decode())
    return llama_cpp.Llama(
        model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False
    )


def probe(path: Path, threads: int, system: str, script: str = PROBE, timeout: float = 300) -> None:
    """Decode a few tokens with llama.cpp in a child process; a crash there becomes a PardecError here
    (with how to rebuild llama.cpp without its AMX kernels when the build has them)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(path), str(threads)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise PardecError(f"llama.cpp did not decode 8 tokens of {path.name} in {timeout:.0f} s") from None
    if done.returncode == 0:
        return
    how = f"died of signal {-done.returncode}" if done.returncode < 0 else f"failed ({done.returncode})"
    message = f"llama.cpp {how} decoding a few tokens of {path.name} (in a child process)"
    if "AMX_INT8 = 1" in system:
        message += (
            "; this build runs llama.cpp's AMX kernels, which crash on some CPUs "
            f"(ggml-org/llama.cpp#20824); rebuild it without them: {NO_AMX}"
        )
    tail = done.stderr.strip().splitlines()[-3:]
    raise PardecError(message + ("\n" + "\n".join(tail) if tail else ""))


@dataclass(frozen=True)
class LlamaCppRunner:
    spec: MethodSpec
    lm: LoadedModel
    llama: Any  # a llama_cpp.Llama on the model's GGUF

    def held(self) -> dict[str, int]:
        """What it holds: the GGUF's bytes (llama.cpp maps the file and reads its blocks as they are)."""
        return {"kernel": Path(self.llama.model_path).stat().st_size, "dense": 0}

    def close(self) -> None:
        self.llama.close()  # now, not at interpreter exit when llama.cpp's bindings are gone

    def run(self, ids: list[int], max_new_tokens: int | None = None):
        limit = max_new_tokens or self.spec.config.max_new_tokens
        if len(ids) + limit > self.llama.n_ctx():
            raise PardecError(f"prompt of {len(ids)} tokens + {limit} new ones exceeds llama.cpp's {CONTEXT}")
        self.llama.reset()  # an empty cache: no prefix reuse from the previous prompt
        tokens: list[int] = []
        t = time.perf_counter()
        for token in self.llama.generate(ids, temp=0.0, top_k=1, reset=True):
            if token in self.lm.stop_ids:
                break
            tokens.append(token)
            if len(tokens) >= limit:
                break
        seconds = time.perf_counter() - t
        return Decoded(tokens, len(tokens), [1] * len(tokens), seconds)
