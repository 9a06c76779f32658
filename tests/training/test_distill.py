"""Self-distillation: sources, the contamination filter, resumable batched generation; the retrofit CLI."""

import json
import random
import re

import pytest
import torch

from pardec import load_model
from pardec.cli import main
from pardec.decoding import DecodeConfig
from pardec.training import sources, synthetic
from pardec.training.distill import distill
from pardec.training.sources import BUILTIN, ContaminationFilter, code_prompts, read_prompt_source

BENCH = [
    "def has_close_elements(numbers, threshold): Check if in given list of numbers, are any two numbers "
    "closer to each other than given threshold.",
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins.",
    "What is up?",
]


def test_contamination_filter_catches_overlaps_and_passes_clean_prompts():
    f = ContaminationFilter(BENCH)
    assert f(
        "Please solve: Check if in given list of numbers, are any two numbers closer to each other "
        "than given threshold!"
    )
    assert f("JANET'S ducks lay 16 eggs per day; she eats three for breakfast every morning")
    assert f("hey, what is up?")  # a short benchmark item inside a prompt
    assert not f("Write a function that reverses a linked list in place.")
    assert not f("What is upper case?")


def test_code_prompts_come_from_the_standard_library():
    prompts = code_prompts()
    assert len(prompts) > 200 and len({p["id"] for p in prompts}) == len(prompts)
    assert all(p["prompt"].startswith("Write a Python function `") for p in prompts)


@pytest.mark.parametrize(
    "source",
    [
        "builtin:chat",
        "builtin:code-methods",
        "builtin:code-tasks",
        "builtin:code-tasks2",
        "builtin:code-complete",
        "builtin:math",
        "builtin:chat-kinds",
        "builtin:chat-kinds2",
    ],
)
def test_generated_prompts_are_distinct_and_clear_of_the_benchmarks(source):
    prompts = read_prompt_source(source)
    texts = [p["prompt"] for p in prompts]
    assert (
        len(texts) >= 400
        and len(set(texts)) == len(texts)
        and len({p["id"] for p in prompts}) == len(prompts)
    )
    f = ContaminationFilter.from_benchmarks()
    assert sum(map(f, texts)) <= len(texts) // 50  # at most a few overlap MT-bench/GSM8K/HumanEval


def test_synthetic_prompts_are_reproducible_and_cover_every_kind():
    math = read_prompt_source("builtin:math")
    assert math == read_prompt_source("builtin:math")  # seeded: the same on every machine
    assert "{" not in "".join(p["prompt"] for p in math)  # every placeholder filled
    kinds = {p["id"].split("/")[0] for p in read_prompt_source("builtin:chat-kinds")}
    assert kinds == {"writing", "roleplay", "reasoning", "stem", "humanities", "advice", "extraction",
                     "summarising"}  # fmt: skip
    kinds2 = read_prompt_source("builtin:chat-kinds2")
    assert {p["id"].split("/")[0] for p in kinds2} == {k + "2" for k in kinds | {"math", "coding"}}
    assert "{" not in "".join(p["prompt"] for p in kinds2)
    old = {p["prompt"] for p in read_prompt_source("builtin:chat-kinds")}
    assert not old & {p["prompt"] for p in kinds2}  # new requests, not the first source's again


def test_ordering_puzzles_have_exactly_one_answer():
    rng = random.Random(0)
    for _ in range(200):
        text = synthetic._puzzle(rng, sources._RAW)
        facts = re.findall(r"(\w+) is (\w+) than (\w+)\.", text)
        more = {r[0] for r in sources._RAW["puzzle_relations"]}
        # a > b for every fact, in the puzzle's own relation
        pairs = [(a, b) if f"{rel} than" in more else (b, a) for a, rel, b in facts]
        names = {x for p in pairs for x in p}
        assert len(pairs) == len(names) - 1  # neighbours of the hidden ranking, each once
        below = dict(pairs)
        assert len(below) == len(pairs)  # nobody is compared downwards twice: a chain, not a tree
        (top,) = names - set(below.values())
        chain = [top]
        while chain[-1] in below:
            chain.append(below[chain[-1]])
        assert sorted(chain) == sorted(names)  # one ranking covers everyone: the answer is unique
        assert text.rstrip().endswith("?")


def test_heldout_prompts_are_in_no_other_source_and_alternate_kinds():
    held = read_prompt_source("builtin:heldout")
    others = {p["prompt"] for s in BUILTIN if s != "builtin:heldout" for p in read_prompt_source(s)}
    assert len(held) > 60 and not {p["prompt"] for p in held} & others
    assert [p["id"].split("/")[0] for p in held[:3]] != ["heldout-code"] * 3  # code, chat, math in turn
    assert "heldout-math" in {p["id"].split("/")[0] for p in held[:3]}


def test_the_second_code_task_set_repeats_no_prompt_of_the_first():
    first = {p["prompt"] for p in read_prompt_source("builtin:code-tasks")}
    second = {p["prompt"] for p in read_prompt_source("builtin:code-tasks2")}
    assert len(second) > 1000 and not first & second


def test_completion_prompts_are_valid_python_headers_in_the_humaneval_format():
    import ast

    from pardec.tasks.humaneval import INSTRUCTION

    head, tail = INSTRUCTION.split("{prompt}")
    prompts = read_prompt_source("builtin:code-complete")
    assert len(prompts) > 500 and any(p["id"] == "complete/shlex.quote" for p in prompts)
    assert not any(p["id"].endswith("hook") for p in prompts)  # state a host may replace: not stable text
    for p in prompts:
        assert p["prompt"].startswith(head) and p["prompt"].endswith(tail)
        stub = p["prompt"][len(head) : -len(tail)]
        tree = ast.parse(stub + "    pass\n")  # a header and a docstring: a function once it has a body
        fn = tree.body[0]
        assert (
            isinstance(fn, ast.FunctionDef) and fn.name == p["id"].rsplit(".", 1)[1] and ast.get_docstring(fn)
        )


def test_method_prompts_do_not_repeat_the_function_prompts():
    """Each source adds text of its own: no docstring summary is asked for twice."""

    def summaries(prompts):
        return {p["prompt"].split("What it should do: ", 1)[1].split("\n", 1)[0] for p in prompts}

    methods = read_prompt_source("builtin:code-methods")
    assert any(p["id"] == "method/builtins.str.title" for p in methods)
    assert not summaries(methods) & summaries(code_prompts())


def test_the_packaged_sharegpt_file_is_identity_questions_only():
    """Documents why builtin:chat exists: the packaged 'conversations' hold 52 distinct prompts."""
    prompts = read_prompt_source("builtin:sharegpt")
    assert len(prompts) == 500 and len({p["prompt"] for p in prompts}) < 60


def test_distill_is_batched_resumable_and_filters(tiny_dir, tmp_path):
    lm = load_model(tiny_dir, torch.float32)
    prompts = [
        {"id": f"p{i}", "prompt": text}
        for i, text in enumerate(
            ["hello world", "the cat sat", "one two three", "what is up", "big red dog", "the cat sat"]
        )
    ]
    out = tmp_path / "d.jsonl"
    cfg = DecodeConfig(method="ar", max_new_tokens=8)
    filt = ContaminationFilter(["what is up"])
    first = distill(lm, prompts[:2], out, cfg, filt, batch_size=2, progress=False)
    assert first["written"] == 2
    stats = distill(lm, prompts, out, cfg, filt, batch_size=2, progress=False)
    assert stats == dict(written=2, skipped_done=2, contaminated=1, duplicates=1, tokens=stats["tokens"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == ["p0", "p1", "p2", "p4"]
    alone = distill(lm, [prompts[4]], tmp_path / "e.jsonl", cfg, None, progress=False)
    assert alone["written"] == 1
    again = json.loads((tmp_path / "e.jsonl").read_text())
    assert (
        again["response"] == next(r for r in rows if r["id"] == "p4")["response"]
    )  # batching changes nothing


def test_retrofit_cli_trains_saves_and_the_adapter_loads(tiny_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": p, "response": r}) + "\n"
            for p, r in [
                ("hello", "one two three four five six seven eight nine ten"),
                ("the cat", "sat on the mat and the dog ran far to home"),
                ("count", "one two three four five six seven"),
                ("colours", "red blue green red blue green red blue green"),
            ]
        )
    )
    ck = tmp_path / "ck"
    code = main(
        f"retrofit --model {tiny_dir} --dtype float32 --data {data} --out {ck} --steps 4 --eval-every 2 "
        f"--heldout 1 --grad-accum 1".split()
    )
    err = capsys.readouterr().err
    assert code == 0, err
    settings = json.loads((ck / "pardec.json").read_text())
    assert settings["base_model"] == tiny_dir and settings["adapter"] == "gated-lora"
    assert settings["training"]["step"] == 4
    assert len((ck / "history.jsonl").read_text().splitlines()) == 4
    code = main(
        f"generate --model {tiny_dir} --dtype float32 --adapter {ck} --prompt hello --json --max-new-tokens "
        f"6".split()
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    code = main(
        f"retrofit --model {tiny_dir} --dtype float32 --data {data} --out {tmp_path / 'c2'} --steps 6 "
        f"--eval-every 2 --heldout 1 --grad-accum 1 --resume {ck}".split()
    )
    assert code == 0 and json.loads((tmp_path / "c2" / "pardec.json").read_text())["training"]["step"] == 6
    code = main(
        f"retrofit --model {tiny_dir} --data {data} --out {tmp_path / 'c3'} --kind gated-lora --ntp-weight "
        f"0.5".split()
    )
    assert code == 2 and "gated-lora" in capsys.readouterr().err
