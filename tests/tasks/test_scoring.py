"""The sandbox and the scorers."""

import socket
import threading
import time

import pytest

from pardec.tasks.gsm8k import answer as gsm8k_answer
from pardec.tasks.gsm8k import correct as gsm8k_correct
from pardec.tasks.humaneval import extract_code
from pardec.tasks.humaneval import passed as humaneval_passed
from pardec.tasks.sandbox import _netns_prefix, run_program

TASK = {
    "prompt": 'from typing import List\n\ndef add(a: int, b: int) -> int:\n    """Add."""\n',
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
}


def test_sandbox_kills_an_infinite_loop():
    t = time.time()
    r = run_program("while True:\n    pass\n", timeout=2)
    assert not r.passed and r.reason == "timeout" and time.time() - t < 10


def test_sandbox_stops_a_memory_hog():
    r = run_program("x = bytearray(4 << 30)\n", timeout=10, memory_mb=256)
    assert not r.passed and r.reason == "memory"


def test_sandbox_blocks_network_even_to_a_listening_local_server():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    probe = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
    assert not run_program(probe, timeout=5).passed
    if not _netns_prefix():
        server.close()
        pytest.skip("no network namespace here (unshare -n refused): only the Python-level guard applies")
    raw = f"import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n"
    assert not run_program(raw, timeout=5).passed  # below the Python guard: the namespace blocks it
    server.close()


def test_sandbox_passes_good_code():
    assert run_program("print(sum(range(10)))\n").passed


def test_humaneval_scorer_on_good_and_bad_answers():
    good = "Here you go:\n```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```\n"
    bad = "```python\ndef add(a, b):\n    return a - b\n```"
    completion_only = "    return a + b\n"
    assert humaneval_passed(good, TASK)
    assert not humaneval_passed(bad, TASK)
    assert humaneval_passed(completion_only, TASK)
    assert not humaneval_passed("I cannot do that.", TASK)
    assert "from typing import List" in extract_code(good, TASK["prompt"], "add")


def test_gsm8k_scorer_on_good_and_bad_answers():
    ref = "She has 3 + 4 = 7 apples.\n#### 7"
    assert gsm8k_correct("3 + 4 = 7, so the answer is 7.", ref)
    assert gsm8k_correct("Reasoning... #### 7", ref)
    assert not gsm8k_correct("The answer is 8.", ref)
    assert not gsm8k_correct("no idea", ref)
    assert gsm8k_answer("It costs $1,234.50 in total.") == 1234.5
    assert gsm8k_correct("#### 1,000", "#### 1000")
