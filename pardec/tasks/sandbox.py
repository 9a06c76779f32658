"""Run untrusted generated code in a subprocess with time, memory and network limits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

# Prepended to every program: no sockets, whatever the namespace situation.
GUARD = """\
import socket as _s
def _blocked(*a, **k):
    raise OSError("network access is disabled in the pardec sandbox")
_s.socket = _blocked
_s.create_connection = _blocked
_s.getaddrinfo = _blocked
del _s
"""


@dataclass(frozen=True)
class RunResult:
    passed: bool
    reason: str  # "ok", "timeout", "error: ...", "memory"


@lru_cache(maxsize=1)
def _netns_prefix() -> tuple[str, ...]:
    """`unshare -n` gives the child an empty network namespace where the kernel allows it (root)."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    try:
        ok = subprocess.run([exe, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (exe, "-n") if ok else ()


def _limits(memory_bytes: int, cpu_seconds: int):
    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
        os.setsid()

    return apply


def run_program(code: str, timeout: float = 10.0, memory_mb: int = 1024) -> RunResult:
    """Execute `code` with Python in a fresh temp dir; passed = exit status 0 within the limits."""
    with tempfile.TemporaryDirectory(prefix="pardec-sandbox-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(GUARD + code)
        cmd = [*_netns_prefix(), sys.executable, "-I", path]
        try:
            proc = subprocess.run(
                cmd,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=timeout,
                preexec_fn=_limits(memory_mb << 20, int(timeout) + 1),
                env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"},
            )
        except subprocess.TimeoutExpired:
            return RunResult(False, "timeout")
        if proc.returncode == 0:
            return RunResult(True, "ok")
        err = proc.stderr.strip().splitlines()
        last = err[-1] if err else f"exit {proc.returncode}"
        return RunResult(False, "memory" if "MemoryError" in last else f"error: {last[:200]}")
