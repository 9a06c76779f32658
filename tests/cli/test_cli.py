"""The command line: real runs on a tiny model folder, and one-line errors for bad input."""

import json
import subprocess
import sys

import pytest
import torch
from tiny import retrofit_tiny_adapter

from pardec.cli import main
from pardec.core import cost as step_cost


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_json_reports_text_and_statistics(tiny_dir, capsys, tmp_path):
    f = tmp_path / "prompts.jsonl"
    f.write_text(
        json.dumps({"prompt": "hello world"}) + "\n\n" + json.dumps({"prompt": "the cat sat"}) + "\n"
    )
    code, out, err = run_cli(
        capsys,
        *f"generate --model {tiny_dir} --prompt-file {f} --json --dtype float32 --method spec "
        f"--max-new-tokens 12 --batch-size 2".split(),
    )
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 2
    for rec in lines:
        assert {"text", "new_tokens", "forwards", "tokens_per_forward", "seconds", "method"} <= set(rec)
        assert rec["method"] == "spec" and 1 <= rec["new_tokens"] <= 12
        assert rec["tokens_per_forward"] == pytest.approx(rec["new_tokens"] / rec["forwards"], abs=1e-3)


def test_generate_streams_the_same_text_as_json(tiny_dir, tiny_adapter, capsys):
    flags = f"--model {tiny_dir} --dtype float32 --method threshold --threshold 0.0 --max-new-tokens 10"
    common = ["generate", "--prompt", "one two three", "--adapter", tiny_adapter, *flags.split()]
    code, out, err = run_cli(capsys, *common)
    assert code == 0, err
    assert "tokens/forward" in err
    code, js, _ = run_cli(capsys, *common, "--json")
    assert out.rstrip("\n") == json.loads(js)["text"]


def test_generate_notes_w8a8_where_bf16_is_emulated_unless_quant_is_given(tiny_dir, capsys, monkeypatch):
    import pardec.machine

    args = [
        "generate",
        "--prompt",
        "one two",
        "--model",
        str(tiny_dir),
        "--max-new-tokens",
        "3",
        "--method",
        "ar",
    ]
    for native, extra, noted in [(False, [], True), (False, ["--quant", "none"], False), (True, [], False)]:
        monkeypatch.setattr(pardec.machine, "native_bf16", lambda native=native: native)
        code, _, err = run_cli(capsys, *args, *extra)
        assert code == 0, err
        assert ("--quant w8a8" in err) == noted, (native, extra)
        assert "quant" not in err.splitlines()[-1]  # the unquantized model decoded
    code, _, err = run_cli(capsys, *args, "--quant", "int8")
    assert code == 0 and "--quant w8a8" not in err and err.splitlines()[-1].endswith("; quant int8]")
    monkeypatch.setattr(pardec.machine, "native_bf16", lambda: False)
    code, _, err = run_cli(capsys, *args, "--dtype", "float32")  # no bf16 here to be emulated
    assert code == 0 and "--quant w8a8" in err and "float32" in err and "emulated" not in err


@pytest.mark.parametrize("method", ["threshold --threshold 0.5", "eb --gamma 0.5"])
def test_a_method_that_commits_unverified_drafts_needs_an_adapter(tiny_dir, method, capsys):
    flags = f"--model {tiny_dir} --dtype float32 --adapter none --max-new-tokens 4 --method {method}"
    code, _, err = run_cli(capsys, "generate", "--prompt", "one two", *flags.split())
    assert code == 2 and "has no adapter" in err and "use spec" in err
    code, _, err = run_cli(capsys, "generate", "--prompt", "one two", *flags.split()[:-4], "--method", "spec")
    assert code == 0, err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--method", "beam"], "unknown method"),
        (["--block-size", "0"], "block size"),
        (["--threshold", "1.5"], "threshold must lie in [0, 1]"),
        (["--threshold", "-0.1"], "threshold must lie in [0, 1]"),
        (["--temperature", "-1"], "temperature"),
        (["--top-p", "0"], "top-p"),
        (["--max-new-tokens", "0"], "max new tokens"),
        (["--block-at", "-1"], "block_at must be an integer >= 0"),
        (["--block-reach", "1.5"], "block reach must lie in [0, 1]"),
        (["--min-block-size", "1"], "min block size must be an integer >= 2"),
        (["--reveal", "9"], "reveal must be an integer in [0, 8]"),
    ],
)
def test_bad_parameters_give_one_line_errors(tiny_dir, capsys, args, message):
    code, out, err = run_cli(capsys, "generate", "--model", tiny_dir, "--prompt", "hello", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == ""


def test_bad_inputs_give_one_line_errors(tiny_dir, capsys, tmp_path):
    code, _, err = run_cli(capsys, *"generate --model no-such-model --prompt hello".split())
    assert code == 2 and "unknown model 'no-such-model'" in err
    code, _, err = run_cli(capsys, *f"generate --model {tmp_path / 'x.gguf'} --prompt hello".split())
    assert code == 2 and "GGUF file not found" in err
    code, _, err = run_cli(capsys, *f"generate --model {tiny_dir} --prompt".split(), "   ")
    assert code == 2 and "empty prompt" in err
    long_prompt = " ".join(["hello"] * 80)  # the tiny model's context is 64
    code, _, err = run_cli(capsys, *f"generate --model {tiny_dir} --prompt".split(), long_prompt)
    assert code == 2 and "context" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hello"}\n{"text": 1}\n')
    code, _, err = run_cli(capsys, *f"generate --model {tiny_dir} --prompt-file {bad}".split())
    assert code == 2 and "bad.jsonl:2" in err
    code, _, err = run_cli(capsys, *f"generate --model {tiny_dir} --prompt hi --adapter {tmp_path}".split())
    assert code == 2 and "not a pardec checkpoint" in err


def test_errors_exit_non_zero_without_a_traceback(tiny_dir):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pardec.cli",
            "generate",
            "--model",
            tiny_dir,
            "--prompt",
            "hello",
            "--block-size",
            "-3",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: block size must be an integer >= 1, got -3"


def test_help_explains_every_method():
    proc = subprocess.run(
        [sys.executable, "-m", "pardec.cli", "generate", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    for word in ("ar", "threshold", "eb", "spec", "--no-chat", "--stop", "--json"):
        assert word in proc.stdout


def test_train_drafter_then_generate_and_bench_with_dflash(tiny_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PARDEC_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "distilled.jsonl"
    words = "the cat sat on the mat and the dog ran far to home".split()
    data.write_text(
        "".join(
            json.dumps({"prompt": " ".join(words[i : i + 3]), "response": " ".join(words[i:] * 2)}) + "\n"
            for i in range(6)
        )
    )
    ck = tmp_path / "drafter"
    code, _, err = run_cli(
        capsys,
        *f"train-drafter --model {tiny_dir} --data {data} --out {ck} --dtype float32 --steps 3 --eval-every "
        f"3 --heldout 1 --layers 1 --block-size 4 --draft-vocab 14".split(),
    )
    assert code == 0, err
    assert "held-out dflash TPF" in err and (ck / "pardec.json").is_file() and (ck / "curves.png").is_file()
    from safetensors.torch import load_file

    from pardec.model import load_model

    vocab = load_file(str(ck / "drafter.safetensors"))["draft_vocab"].tolist()
    lm = load_model(tiny_dir, torch.float32, "none")
    ids = {i for w in words for i in lm.tokenizer(w, add_special_tokens=False)["input_ids"]}
    assert json.loads((ck / "pardec.json").read_text())["drafter"]["draft_vocab_size"] == 14 == len(vocab)
    assert ids | lm.stop_ids <= set(vocab) and lm.mask_id not in vocab  # 11 words + 2 stops + 1
    assert any((tmp_path / "cache" / "features").glob("*/shard-*.safetensors"))
    common = ["generate", "--prompt", "one two three", *f"--model {tiny_dir} --dtype float32 --json".split(),
              "--max-new-tokens", "10"]  # fmt: skip
    code, out, err = run_cli(capsys, *common, "--method", "dflash", "--drafter", str(ck))
    assert code == 0, err
    rec = json.loads(out)
    code, out, _ = run_cli(capsys, *common, "--method", "ar")
    assert rec["method"] == "dflash" and rec["text"] == json.loads(out)["text"]  # lossless
    code, _, err = run_cli(capsys, *common, "--method", "dflash", "--drafter", "none")
    assert code == 2 and "needs a drafter" in err
    code, _, err = run_cli(capsys, *common, "--method", "dflash", "--drafter", str(ck), "--block-size", "6")
    assert code == 2 and "exceeds the drafter" in err
    code, _, err = run_cli(capsys, *f"export {ck} {tmp_path / 'hf'} --format dflash".split())
    assert (
        code == 0
        and json.loads((tmp_path / "hf" / "config.json").read_text())["dflash_config"]["block_size"] == 4
    )
    assert "draft_vocab" not in load_file(
        str(tmp_path / "hf" / "model.safetensors")
    )  # not part of their layout
    code, _, err = run_cli(capsys, "export", str(ck), str(tmp_path / "shipped"))
    assert (
        code == 0
        and load_file(str(tmp_path / "shipped" / "drafter.safetensors"))["draft_vocab"].tolist() == vocab
    )
    code, _, err = run_cli(
        capsys,
        *f"train-drafter --model {tiny_dir} --data {data} --out {ck} --target-layers 0,x".split(),
    )
    assert code == 2 and "--target-layers" in err


def test_retrofit_from_two_files_warm_started_sets_the_default_block_size(tiny_dir, capsys, tmp_path):
    files = []
    for name, words in (
        ("code", "def add ( a , b ) : return a + b".split()),
        ("chat", "the cat sat on the mat".split()),
    ):
        f = tmp_path / f"{name}.jsonl"
        f.write_text(
            "".join(
                json.dumps({"prompt": " ".join(words[i : i + 2]), "response": " ".join(words * 2)}) + "\n"
                for i in range(4)
            )
        )
        files.append(str(f))
    common = [
        "retrofit",
        "--model",
        tiny_dir,
        "--data",
        *files,
        "--dtype",
        "float32",
        "--heldout",
        "2",
        "--steps",
        "1",
        "--eval-every",
        "1",
        "--rank",
        "4",
        "--alpha",
        "8",
    ]
    code, _, err = run_cli(capsys, *common, "--out", str(tmp_path / "d3"), "--block-size", "3")
    assert code == 0, err
    code, _, err = run_cli(
        capsys,
        *common,
        "--out",
        str(tmp_path / "d5"),
        "--block-size",
        "5",
        "--init-from",
        str(tmp_path / "d3"),
    )
    assert code == 0, err
    code, _, err = run_cli(
        capsys, *common, "--out", str(tmp_path / "r2"), "--rank", "2", "--init-from", str(tmp_path / "d3")
    )
    assert code == 2 and "cannot start from" in err and "of rank 2 (not less)" in err
    code, _, err = run_cli(
        capsys,
        *common,
        "--out",
        str(tmp_path / "r8"),
        "--rank",
        "8",
        "--alpha",
        "16",
        "--init-from",
        str(tmp_path / "d3"),
    )
    assert code == 0, err
    assert json.loads((tmp_path / "r8" / "pardec.json").read_text())["lora"]["rank"] == 8
    code, _, err = run_cli(
        capsys,
        *common,
        "--out",
        str(tmp_path / "att"),
        "--targets",
        "attention",
        "--init-from",
        str(tmp_path / "d3"),
    )
    assert code == 0, err
    assert json.loads((tmp_path / "att" / "pardec.json").read_text())["lora"]["targets"] == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
    ]
    code, _, err = run_cli(capsys, *common, "--out", str(tmp_path / "bad"), "--targets", "q_proj,q_proj")
    assert code == 2 and "targets" in err
    code, _, err = run_cli(capsys, *common, "--out", str(tmp_path / "bad"), "--targets", "atention")
    assert code == 2 and "no linear layer named atention" in err
    # bench and generate decode with the adapter's trained D unless told otherwise.
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "one two"}) + "\n")
    bench = [
        "bench",
        "--model",
        tiny_dir,
        "--adapter",
        str(tmp_path / "d5"),
        "--task",
        f"jsonl:{prompts}",
        "--methods",
        "ar,spec",
        "--max-new-tokens",
        "4",
        "--dtype",
        "float32",
    ]
    code, _, err = run_cli(capsys, *bench, "--out", str(tmp_path / "b1"))
    assert code == 0, err
    recs = {r["method"]: r for r in json.loads((tmp_path / "b1" / "results.json").read_text())["records"]}
    assert recs["spec"]["config"]["block_size"] == 5
    code, _, err = run_cli(capsys, *bench, "--block-size", "2", "--out", str(tmp_path / "b2"))
    recs = {r["method"]: r for r in json.loads((tmp_path / "b2" / "results.json").read_text())["records"]}
    assert code == 0 and recs["spec"]["config"]["block_size"] == 2
    # Two adapters against the same ar in one run; each decodes with its own trained D, both lossless.
    other = f"spec@adapter={tmp_path / 'd3'}"
    code, _, err = run_cli(
        capsys, *bench[:-5], "ar,spec," + other, *bench[-4:], "--out", str(tmp_path / "b3")
    )
    assert code == 0, err
    res = json.loads((tmp_path / "b3" / "results.json").read_text())
    recs = {r["method"]: r for r in res["records"]}
    assert res["meta"]["adapter"] == str(tmp_path / "d5") and recs["spec"]["adapter"] is None
    assert recs[other]["adapter"] == str(tmp_path / "d3") and recs[other]["config"]["block_size"] == 3
    assert recs["spec"]["config"]["block_size"] == 5
    assert recs[other]["identical_to_ar"] == 1.0 and recs["spec"]["identical_to_ar"] == 1.0
    code, _, err = run_cli(
        capsys,
        *bench[:-5],
        "ar,spec@adapter=" + str(tmp_path / "nothing"),
        *bench[-4:],
        "--out",
        str(tmp_path / "b4"),
    )
    assert code == 2 and "not a pardec checkpoint" in err


def test_profile_prints_the_step_cost_and_caches_it(tiny_dir, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PARDEC_CACHE", str(tmp_path / "cache"))
    args = f"profile --model {tiny_dir} --dtype float32 --block-size 4".split()
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "p"))
    assert code == 0, err
    assert "| pending |" in out and (tmp_path / "p" / "step_cost.png").stat().st_size > 0
    assert "two fastest times" in out  # the measurement's own noise, beside the curve
    assert "+ 2 slots, x AR" in out  # a shorter block than D, measured too
    saved = json.loads((tmp_path / "p" / "step_cost.json").read_text())
    assert saved["block_size"] == 4 and saved["key"]["model"] == tiny_dir
    assert len(saved["plain"][0]) == len(saved["block"][0]) == len(saved["pending"])
    [cached] = (tmp_path / "cache" / "costs").glob("*.json")
    stamp = cached.stat().st_mtime_ns
    assert run_cli(capsys, *args)[0] == 0 and cached.stat().st_mtime_ns == stamp  # read back, not remeasured
    assert run_cli(capsys, *args, "--refresh")[0] == 0 and cached.stat().st_mtime_ns != stamp
    monkeypatch.setattr(step_cost, "code_digest", lambda: "changed")  # the forward path's code changed
    assert run_cli(capsys, *args)[0] == 0 and len(list((tmp_path / "cache" / "costs").glob("*.json"))) == 2
    code, _, err = run_cli(capsys, *args[:-1], "0")
    assert code == 2 and "block size" in err


def retrofit_one_step(capsys, tiny_dir, tmp_path):
    """A tiny adapter of this test's own (tiny.retrofit_tiny_adapter) -> its folder; its output read off."""
    ck = retrofit_tiny_adapter(tiny_dir, tmp_path)
    capsys.readouterr()
    return ck


def test_calibrate_writes_beside_the_adapter_and_auto_settings_read_it(
    tiny_dir, capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("PARDEC_CACHE", str(tmp_path / "cache"))
    ck = retrofit_one_step(capsys, tiny_dir, tmp_path)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ("hello world", "the dog", "one two"))
    )
    gen = [
        "generate",
        "--model",
        tiny_dir,
        "--dtype",
        "float32",
        "--prompt",
        "hello",
        "--max-new-tokens",
        "6",
    ]
    code, _, err = run_cli(capsys, *gen, "--adapter", str(ck), "--method", "threshold", "--threshold", "auto")
    assert code == 2 and "pardec calibrate" in err and len(err.strip().splitlines()) == 1
    cal = ["calibrate", "--model", tiny_dir, "--dtype", "float32", "--prompts", str(prompts),
           "--max-new-tokens", "8", "--thresholds", "0.9,0.5", "--gammas", "0.2"]  # fmt: skip
    code, _, err = run_cli(capsys, *cal, "--adapter", "none")
    assert code == 2 and "needs an adapter" in err
    code, _, err = run_cli(capsys, *cal, "--adapter", str(ck), "--thresholds", "2")
    assert code == 2 and "threshold must lie in [0, 1]" in err
    code, out, err = run_cli(capsys, *cal, "--adapter", str(ck))
    assert code == 0, err
    assert "| threshold | 0.9 |" in out and "chosen:" in out
    saved = json.loads((ck / "calibration.json").read_text())
    assert saved["report"]["prompts"] == 3 and len(saved["acceptance"]) == len(saved["edges"])
    for method, flag in (("threshold", "--threshold"), ("eb", "--gamma")):
        value = saved["threshold" if method == "threshold" else "gamma"]
        code, _, err = run_cli(capsys, *gen, "--adapter", str(ck), "--method", method, flag, "auto")
        assert (code == 0) if value is not None else (code == 2 and "pardec calibrate" in err), err
    with pytest.raises(SystemExit) as exit_:  # argparse's own usage error
        run_cli(capsys, *gen, "--threshold", "high")
    assert exit_.value.code == 2 and "expected a number or 'auto'" in capsys.readouterr().err


def test_a_datastore_of_the_models_own_answers_beside_the_adapter_cuts_forwards(
    tiny_dir, capsys, tmp_path, monkeypatch
):
    from pardec.model import datastore
    from pardec.tasks import mtbench

    monkeypatch.setenv("PARDEC_CACHE", str(tmp_path / "cache"))
    ck = retrofit_one_step(capsys, tiny_dir, tmp_path)
    # Few tokens: the tiny model's context leaves spec (drafts and a block past the text) room for 21.
    gen = ["generate", "--model", tiny_dir, "--adapter", str(ck), "--dtype", "float32", "--max-new-tokens",
           "16", "--json", "--no-adaptive"]  # fmt: skip
    code, out, err = run_cli(capsys, *gen, "--method", "ar", "--prompt", "hello world")
    answer = json.loads(out)["text"]
    data = tmp_path / "answers.jsonl"
    rows = [
        {"prompt": "hello world", "response": answer},
        {"prompt": "a", "response": mtbench.items()[0].prompt},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = run_cli(capsys, "datastore", "--model", tiny_dir, "--data", str(data), "--out", str(ck))
    assert code == 0, err
    assert "1 rows left out as overlapping a benchmark" in err
    assert datastore.meta(ck / datastore.FILE)["answers"] == 1
    runs = {}
    for flag in ("--datastore", "--no-datastore"):
        code, out, err = run_cli(capsys, *gen, "--prompt", "hello world", flag)
        assert code == 0, err
        runs[flag] = json.loads(out)
    assert runs["--datastore"]["text"] == runs["--no-datastore"]["text"] == answer
    assert runs["--datastore"]["forwards"] < runs["--no-datastore"]["forwards"]
    data.write_text(json.dumps(rows[1]) + "\n")
    code, _, err = run_cli(capsys, "datastore", "--model", tiny_dir, "--data", str(data), "--out", str(ck))
    assert code == 2 and "no answers left" in err


def test_dtype_auto_trains_in_float32_only_where_the_machine_emulates_bf16(monkeypatch):
    import argparse

    import pardec.machine
    from pardec.cli import common

    p = argparse.ArgumentParser()
    common.add_model_args(p)
    # a CPU whose one-token float32 matmul is twice an emulated bf16 one: decoding stays bf16
    monkeypatch.setattr(pardec.machine, "one_token_seconds", lambda: {"float32": 2.0, "bfloat16": 1.0})
    for native, want in ((False, torch.float32), (True, torch.bfloat16)):
        flags = dict(amx=native, avx512_bf16=False, cuda=None)
        monkeypatch.setattr(pardec.machine, "machine", lambda f=flags: f)
        args = p.parse_args([])
        assert args.dtype == "auto" and common.dtype(args, compute_bound=True) is want
        assert common.dtype(args) is torch.bfloat16  # decoding: half the bytes a token reads
        run = dict(lr=1e-3, steps=1, grad_accum=1, max_length=8, seed=0, eval_every=1, heldout=1)
        assert common.run_settings(argparse.Namespace(**vars(args), **run))["bf16"] is native
    asked = p.parse_args(["--dtype", "bfloat16"])
    assert common.dtype(asked, compute_bound=True) is torch.bfloat16  # asked for: kept
    assert common.dtype(p.parse_args(["--dtype", "float32"])) is torch.float32


def test_train_markov_writes_a_head_beside_the_adapter_that_generate_uses(
    tiny_dir, capsys, tmp_path, monkeypatch
):
    from pardec.model import load_model, markov

    monkeypatch.setenv("PARDEC_CACHE", str(tmp_path / "cache"))
    ck = retrofit_one_step(capsys, tiny_dir, tmp_path)
    data = tmp_path / "answers.jsonl"
    rows = [{"prompt": "hello", "response": "one two three four five six seven eight nine ten"}] * 6
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = [
        "train-markov",
        "--model",
        tiny_dir,
        "--dtype",
        "float32",
        "--epochs",
        "1",
        "--blocks-per-text",
        "2",
    ]
    code, _, err = run_cli(capsys, *base, "--adapter", "none", "--data", str(data))
    assert code == 2 and "no adapter" in err
    code, _, err = run_cli(capsys, *base, "--adapter", str(ck), "--data", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "no data file" in err
    code, _, err = run_cli(capsys, *base, "--adapter", str(ck), "--data", f"{data}:4", "--rank", "0")
    assert code == 2 and "--rank must be >= 1" in err
    code, _, err = run_cli(capsys, *base, "--adapter", str(ck), "--data", f"{data}:4")
    assert code == 0, err
    assert "4 answers, 8 blocks" in err and (ck / markov.WEIGHTS).is_file()
    settings = json.loads((ck / markov.SETTINGS).read_text())
    assert settings["block_size"] == 3 and settings["training"]["data"] == [f"{data}:4"]
    assert load_model(tiny_dir, torch.float32, adapter=str(ck)).markov is not None
    gen = ["generate", "--model", tiny_dir, "--adapter", str(ck), "--dtype", "float32",
           "--max-new-tokens", "8", "--json", "--no-adaptive", "--prompt", "hello world"]  # fmt: skip
    outs = {}
    for flag in ("--markov", "--no-markov"):  # lossless either way: the same answer
        code, out, err = run_cli(capsys, *gen, flag)
        assert code == 0, err
        outs[flag] = json.loads(out)["text"]
    assert outs["--markov"] == outs["--no-markov"]


def test_models_list_names_what_is_bundled_and_whose_datastore_a_model_shares(capsys):
    code, out, _ = run_cli(capsys, "models", "list")
    assert code == 0
    listed = {block.split()[0]: block for block in out.split("\n") if block and not block.startswith(" ")}
    lines = out.splitlines()
    after = {name: lines[lines.index(block) + 2] for name, block in listed.items()}
    assert "adapter, datastore" in after["qwen2.5-coder-0.5b"]
    assert after["qwen2.5-coder-1.5b"].endswith("datastore (qwen2.5-coder-0.5b's)")
