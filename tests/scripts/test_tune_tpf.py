"""scripts/tune_tpf.py on the tiny model: per-category TPF equals the TPF of that category run alone."""

import json
import re
from pathlib import Path

import pytest
from scripts_dir import load_script


def _write(path: Path, rows: list[tuple[str, str]]) -> str:
    path.write_text("".join(json.dumps({"id": i, "prompt": p}) + "\n" for i, p in rows))
    return f"jsonl:{path}"


def _run(capsys, tiny_dir, tiny_adapter, task: str, *extra: str) -> str:
    load_script("tune_tpf").main(
        ["--model", tiny_dir, "--adapter", tiny_adapter, "--task", task, "--dtype", "float32",
         "--max-new-tokens", "12", "--batch-size", "2", "--methods", "spec@adaptive=false", *extra]
    )  # fmt: skip
    return capsys.readouterr().out


def test_by_category_gives_each_category_the_tpf_it_has_alone(tiny_dir, tiny_adapter, tmp_path, capsys):
    a = [("1/a", "the cat sat on the mat"), ("2/a", "one two three four")]
    b = [("1/b", "hello world what is it"), ("2/b", "red blue green"), ("3/b", "the dog ran far")]
    mixed = [a[0], b[0], a[1], b[1], b[2]]  # batches of 2 hold both categories
    both = _run(capsys, tiny_dir, tiny_adapter, _write(tmp_path / "ab.jsonl", mixed), "--by-category")
    got = dict(re.findall(r"([ab]) (\d\.\d{3})", both.split(";", 1)[1]))
    tokens, forwards = map(int, re.search(r"\((\d+) tokens, (\d+) forwards\)", both).groups())
    assert tokens >= forwards > 0 and set(got) == {"a", "b"}
    for name, rows in (("a", a), ("b", b)):
        alone = _run(capsys, tiny_dir, tiny_adapter, _write(tmp_path / f"{name}.jsonl", rows))
        assert re.search(r"TPF (\d\.\d{3})", alone).group(1) == got[name]
        assert ";" not in alone  # no categories without --by-category


def test_a_method_with_a_model_of_its_own_is_refused(tiny_dir, tiny_adapter, tmp_path, capsys):
    task = _write(tmp_path / "one.jsonl", [("1/a", "the cat")])
    with pytest.raises(SystemExit, match="one model per run"):
        load_script("tune_tpf").main(["--model", tiny_dir, "--adapter", tiny_adapter, "--task", task,
                          "--methods", "spec@quant=int8"])  # fmt: skip
