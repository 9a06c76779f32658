"""`llamacpp` in the bench: llama.cpp (through llama-cpp-python) decoding the very GGUF the model
was loaded from, as the baseline a local user would run.

It is given the same prompt token ids (the same chat template), decodes greedily to the same stop
tokens and the same max tokens, with as many threads as torch uses, and each prompt starts from an
empty KV cache (llama-cpp-python would otherwise reuse a matching prefix from the previous prompt).
"""

from __future__ import annotations

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


def open_gguf(lm: LoadedModel, n_ctx: int = CONTEXT) -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise PardecError(f"method 'llamacpp' needs llama-cpp-python: {INSTALL}") from None
    path = gguf_file(lm.name, "method 'llamacpp'")  # refuses a model that did not come from a GGUF
    threads = torch.get_num_threads()
    return llama_cpp.Llama(
        model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False
    )


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
