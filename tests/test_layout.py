"""The architecture the layout claims: imports in one direction, and DFlash as a plug-in that can be
removed without breaking anything else."""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pardec

ROOT = Path(pardec.__file__).parent
# What each part may import (besides itself and the leaf helpers `errors`, `datafiles` and `machine`).
ALLOWED = {
    "model": set(),
    "core": {"model"},
    "decoding": {"model", "core"},
    "tasks": set(),
    "training": {"model", "core", "decoding", "tasks"},
    "methods": {"model", "core", "decoding", "training"},
    "api": {"model", "core", "decoding", "methods"},
    "bench": {"model", "core", "decoding", "methods", "api", "tasks"},
    "server": {"model", "core", "decoding", "methods", "api"},
    "hf": {"model", "core", "decoding", "methods"},
    "cli": {"model", "core", "decoding", "methods", "api", "tasks", "training", "bench", "server"},
}
LEAVES = {"errors", "datafiles", "machine"}


def pardec_imports(path: Path, root: Path = ROOT) -> set[str]:
    """The top-level parts of pardec that a module imports (absolute or relative)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(root).parts  # e.g. ("decoding", "spec.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel[:-1])[: len(rel) - node.level]
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [target] if target else [[a.name] for a in node.names]
            elif node.module and node.module.split(".")[0] == "pardec":
                names = [node.module.split(".")[1:] or [a.name for a in node.names]]
            else:
                continue
            if node.level and not names[0]:
                continue
            for n in names:
                if n:
                    found.add(n[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("pardec.")}
    return found


def test_imports_run_in_one_direction():
    bad = []
    for path in ROOT.rglob("*.py"):
        part = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if part in LEAVES or part == "__init__":
            continue
        for imported in pardec_imports(path) - {part} - LEAVES:
            if imported not in ALLOWED[part]:
                bad.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not bad, bad


def test_the_checker_sees_wrong_imports(tmp_path):
    """The rule above is not vacuous: core modules that import decoding, in any spelling, are caught."""
    (tmp_path / "core").mkdir()
    wrong = ["from ..decoding import DecodeConfig", "from ..decoding.spec import Speculative",
             "import pardec.decoding.engine", "from pardec.decoding import decode"]  # fmt: skip
    for i, line in enumerate(wrong):
        fake = tmp_path / "core" / f"probe{i}.py"
        fake.write_text(line + "\n")
        assert pardec_imports(fake, tmp_path) == {"decoding"}, line
    assert "decoding" not in ALLOWED["core"]


def test_removing_the_dflash_folder_removes_the_method_and_nothing_else(tmp_path, tiny_dir):
    copy = tmp_path / "pardec"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("weights", "__pycache__", "dflash"))
    env_code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "from pardec.decoding import METHODS; from pardec.cli import COMMANDS, main;"
        "print(json.dumps([sorted(METHODS), sorted(COMMANDS)]));"
        "sys.exit(main(sys.argv[2:]))"
    )
    args = ["generate", "--model", tiny_dir, "--dtype", "float32", "--prompt", "one two", "--json",
            "--max-new-tokens", "6"]  # fmt: skip

    def run(*extra):
        return subprocess.run([sys.executable, "-c", env_code, str(tmp_path), *args, *extra],
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    spec = run("--method", "spec")
    assert spec.returncode == 0, spec.stderr
    methods, commands = json.loads(spec.stdout.splitlines()[0])
    assert "dflash" not in methods and {"ar", "spec", "threshold", "eb"} <= set(methods)
    assert "train-drafter" not in commands and "generate" in commands
    assert json.loads(spec.stdout.splitlines()[1])["method"] == "spec"
    gone = run("--method", "dflash")
    assert gone.returncode == 2 and "unknown method 'dflash'" in gone.stderr
