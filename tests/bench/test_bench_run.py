"""A bench run on a tiny model writes every file, with consistent numbers."""

import json
from pathlib import Path

import pytest
import torch

from pardec.bench import parse_methods
from pardec.cli import main
from pardec.decoding import DecodeConfig
from pardec.errors import PardecError

# Fixed shapes: an adaptive schedule may price a tiny model's block steps out, leaving no drafts
SPEC, TH = "spec@block_size=3@adaptive=0", "threshold@0.0@adaptive=0"


def test_bench_on_a_tiny_model_writes_all_files(tiny_dir, tiny_adapter, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ["hello world", "the cat sat", "one two"])
    )
    out = tmp_path / "out"
    code = main(
        f"bench --model {tiny_dir} --dtype float32 --task jsonl:{prompts} --max-new-tokens 10 --out {out} "
        f"--adapter {tiny_adapter} --methods hf,ar,{TH},eb@gamma=0.5,{SPEC}".split()
    )
    stdout, err = capsys.readouterr()
    assert code == 0, err
    for f in ("results.json", "results.md", "samples.jsonl", "speed_quality.png", "accepted_hist.png",
              "reliability.png"):  # fmt: skip
        assert (out / f).stat().st_size > 0, f
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["dtype"] == "float32"  # the run's dtype is recorded with its results
    recs = {r["method"]: r for r in res["records"]}
    assert list(recs) == ["hf", "ar", TH, "eb@gamma=0.5", SPEC]
    for r in recs.values():
        for key in (
            "method",
            "tokens_per_forward",
            "tokens_per_second",
            "speedup_vs_ar",
            "identical_to_ar",
            "score",
            "nll",
        ):
            assert key in r
    assert recs["ar"]["speedup_vs_ar"] == 1.0 and recs["ar"]["tokens_per_forward"] == 1.0
    assert recs[SPEC]["identical_to_ar"] == 1.0 and recs["hf"]["identical_to_ar"] == 1.0
    # threshold verifies the drafts it does not commit at once: the bench counts them as spec's
    assert recs[TH]["tokens_per_forward"] >= 1.0 and "drafts_fed" in recs[TH]
    assert recs["ar"]["nll"] > 0
    assert f"| {SPEC} |" in stdout and res["meta"]["command"].startswith("pardec bench")
    # spec's drafts: fed, accepted and how well their predicted reach held, bin by bin
    spec = recs[SPEC]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    verified = [v for s in samples if s["method"] == SPEC for v in s["verified"]]
    assert spec["drafts_fed"] == sum(len(p) for p, _ in verified) > 0
    assert spec["drafts_accepted"] == sum(n for _, n in verified) <= spec["drafts_fed"]
    assert sum(b["drafts"] for b in spec["reliability"]) == spec["drafts_fed"]
    assert "drafts_fed" not in recs["ar"] and "fed drafts accepted" in stdout
    # What spec learned of its looked-up drafts, beside the results: counts that add up, rates in [0, 1]
    learned = res["meta"]["lookup"]
    assert list(learned) == [TH, SPEC]  # the methods that look drafts up
    for rels in learned[SPEC].values():
        assert list(rels) == ["agree", "disagree", "alone"]
        assert all(r["accepted"] >= 0 and r["rejected"] >= 0 and 0 < r["rate"] < 1 for r in rels.values())
    assert "looked-up drafts accepted" in (out / "results.md").read_text()


def test_method_specs_parse_and_reject_nonsense():
    quant = parse_methods("ar@quant=int8,spec@quant=int8@adapter=x,ar@quant=int4-lowmem", DecodeConfig())
    assert [(s.quant, s.adapter) for s in quant] == [
        ("none", None),
        ("int8", None),
        ("int8", "x"),
        ("int4-lowmem", None),
    ]
    compiled = parse_methods("ar@compile=true,spec@quant=int4@compile=1,spec@compile=false", DecodeConfig())
    assert [(s.compile, s.quant) for s in compiled] == [
        (False, "none"),
        (True, "none"),
        (True, "int4"),
        (False, "none"),
    ]
    auto = parse_methods("threshold@auto,eb@gamma=auto", DecodeConfig())
    assert auto[1].config.threshold is None and auto[2].config.gamma is None  # the calibrated values
    specs = parse_methods("threshold@0.7,eb@gamma=0.25,spec@8@temperature=0", DecodeConfig())
    assert [s.label for s in specs][0] == "ar"  # added: every speedup is relative to it
    assert (
        specs[1].config.threshold == 0.7 and specs[2].config.gamma == 0.25 and specs[3].config.block_size == 8
    )
    for bad in (
        "beam",
        "spec@colour=3",
        "spec@block_size=auto",
        "spec@quant=int3",
        "ar@quant=none-lowmem",
        "hf@quant=int8",
        "threshold@high",
        "ar,ar",
        "threshold@1.5",
        "spec@adapter=",
        "dflash@adapter=x",
        "hf@adapter=x",
        "spec@compile=yes",
        "llamacpp@compile=true",
        "spec@quant=w8a8@compile=true",
        "spec@dtype=float16",
        "llamacpp@dtype=float32",
        "dflash@dtype=float32",
    ):
        with pytest.raises(PardecError):
            parse_methods(bad, DecodeConfig())
    assert parse_methods("spec@min_block_size=2", DecodeConfig())[1].config.min_block_size == 2
    with pytest.raises(PardecError, match="min block size"):
        parse_methods("spec@min_block_size=1", DecodeConfig())
    own = parse_methods("spec@adapter=runs/a=b@6,spec@adapter=runs/c", DecodeConfig())
    assert [s.adapter for s in own] == [None, "runs/a=b", "runs/c"] and own[1].config.block_size == 6
    # --quant: every method of pardec's loop without its own @quant=, the added ar too; not llamacpp's
    default = parse_methods("spec,spec@quant=int4,llamacpp,hf", DecodeConfig(), "w8a8")
    assert [(s.label, s.quant) for s in default] == [
        ("ar", "w8a8"),
        ("spec", "w8a8"),
        ("spec@quant=int4", "int4"),
        ("llamacpp", "none"),
        ("hf", "none"),
    ]
    with pytest.raises(PardecError, match="unknown quantization"):
        parse_methods("spec", DecodeConfig(), "int3")
    typed = parse_methods("ar,spec@dtype=float32@compile=true,hf@dtype=bfloat16", DecodeConfig())
    assert [(s.dtype, s.compile) for s in typed] == [(None, False), ("float32", True), ("bfloat16", False)]


def test_a_method_may_decode_the_bare_model_beside_the_runs_adapter(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello world"}) + "\n")
    out = tmp_path / "out"
    code = main(f"bench --model {tiny_dir} --dtype float32 --task jsonl:{prompts} --max-new-tokens 6 "
                f"--out {out} --methods ar,spec@adapter=none@adaptive=false".split())  # fmt: skip
    assert code == 0, capsys.readouterr().err
    recs = {r["method"]: r for r in json.loads((out / "results.json").read_text())["records"]}
    assert recs["spec@adapter=none@adaptive=false"]["adapter"] == "none"
    assert recs["spec@adapter=none@adaptive=false"]["identical_to_ar"] == 1.0


def test_a_method_with_an_adapter_of_its_own_decodes_with_that_model(tiny_dir):
    from pardec.bench.methods import make_runners
    from pardec.bench.run import run_bench
    from pardec.model import load_model
    from pardec.tasks import Item

    lm = load_model(tiny_dir, torch.float32, "none")
    other = load_model(tiny_dir, torch.float32, "none")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(torch.randn_like(p))  # a different model: its greedy text differs from ar's
    items = [Item(f"a/{i}", w, {}, "a") for i, w in enumerate(["hello world", "the cat sat", "one two"])]
    specs = parse_methods("ar,ar@adapter=x,spec@3", DecodeConfig(max_new_tokens=6, block_size=3))
    runners = make_runners(lm, specs, {("x", "none", None): other}, True, {})
    res = run_bench(runners, items, "a", lm.model, progress=False)
    recs = {r["method"]: r for r in res.records}
    assert recs["spec@3"]["identical_to_ar"] == 1.0 and recs["ar@adapter=x"]["identical_to_ar"] < 1.0
    assert recs["ar@adapter=x"]["adapter"] == "x" and recs["ar"]["adapter"] is None


def test_several_tasks_load_interleaved_with_inclusive_ranges():
    from pardec.tasks import load_tasks

    items = load_tasks("humaneval:2-4,mtbench:0-1")
    assert [it.task for it in items] == ["humaneval", "mtbench", "humaneval", "mtbench", "humaneval"]
    assert [it.id for it in items if it.task == "humaneval"] == ["HumanEval/2", "HumanEval/3", "HumanEval/4"]
    assert load_tasks("gsm8k", limit=2, offset=5)[0].id == "gsm8k/5"  # no range: --limit/--offset
    # Several ranges of one task: its items in the order given, still interleaved with other tasks
    items = load_tasks("mtbench:0-1,gsm8k:0-0,mtbench:10-10")
    assert [it.id for it in items] == ["mtbench/81", "gsm8k/0", "mtbench/82", "mtbench/91"]
    with pytest.raises(PardecError, match="selects mtbench/82 twice"):
        load_tasks("mtbench:0-1,mtbench:1-3")
    for bad in (
        "humaneval:4-2",
        "humaneval:0-",
        "humaneval:a-b",
        "humaneval,humaneval",
        "mmlu:0-3",
        ",",
        "mtbench:0-999999",
    ):
        with pytest.raises(PardecError):
            load_tasks(bad)


def test_a_jsonl_task_combines_with_other_tasks_even_with_commas_and_colons_in_its_path(tmp_path):
    from pardec.tasks import load_tasks

    folder = tmp_path / "a,b:c"
    folder.mkdir()
    mine = folder / "mine.jsonl"
    mine.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(4)))
    items = load_tasks(f"humaneval:0-1,jsonl:{mine},mtbench:0-0")
    assert [it.task for it in items] == [
        "humaneval",
        "jsonl",
        "mtbench",
        "humaneval",
        "jsonl",
        "jsonl",
        "jsonl",
    ]
    assert [it.prompt for it in items if it.task == "jsonl"] == [f"question {i}" for i in range(4)]
    ranged = load_tasks(f"jsonl:{mine}:1-2,gsm8k:0-0")
    assert [it.prompt for it in ranged if it.task == "jsonl"] == ["question 1", "question 2"]
    assert [it.id for it in load_tasks(f"jsonl:{mine}")] == ["0", "1", "2", "3"]
    for bad in (f"jsonl:{mine},jsonl:{mine}", f"jsonl:{mine}:2-1", f"jsonl:{folder}/none.jsonl"):
        with pytest.raises(PardecError):
            load_tasks(bad)


def test_bench_over_several_tasks_reports_each_task_and_all(tiny_dir, tiny_adapter, tmp_path):
    import dataclasses

    from pardec.bench import markdown_table, run_bench
    from pardec.bench.methods import make_runners
    from pardec.model import load_model
    from pardec.tasks import Item

    lm = load_model(tiny_dir, torch.float32, tiny_adapter)
    words = ["hello world", "the cat sat", "one two", "red blue green"]
    items = [Item(f"{t}/{i}", w, {}, t) for i, (t, w) in enumerate(zip("abab", words))]
    specs = parse_methods("ar,threshold@0.0", DecodeConfig(max_new_tokens=6, block_size=3))
    runners = make_runners(lm, specs, {}, True, {})
    log = tmp_path / "progress.jsonl"
    res = run_bench(runners, items, "a,b", lm.model, progress=False, log=log)
    assert set(res.by_task) == {"a", "b"}
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(logged) == len(items) * len(specs) and {r["task"] for r in logged} == {"a", "b"}
    for task, recs in res.by_task.items():
        thr = {r["method"]: r for r in recs}["threshold@0.0"]
        runs = [r for r in res.samples["threshold@0.0"] if r.task == task]
        assert thr["prompts"] == 2 and thr["new_tokens"] == sum(len(r.tokens) for r in runs)
    total = {r["method"]: r for r in res.records}["threshold@0.0"]
    assert total["new_tokens"] == sum(
        r["new_tokens"] for recs in res.by_task.values() for r in recs if r["method"] == "threshold@0.0"
    )
    table = markdown_table(res)
    assert (
        "### a (2 prompts)" in table and "### b (2 prompts)" in table and "### all tasks (4 prompts" in table
    )
    single = run_bench(
        runners, [dataclasses.replace(items[0], task="jsonl")], "jsonl", lm.model, progress=False
    )
    assert single.by_task == {} and "###" not in markdown_table(single)


def test_a_stopped_bench_resumes_without_rerunning_what_it_logged(tiny_dir, tmp_path, capsys, monkeypatch):
    from pardec.bench import methods as runner  # where the runners call decode

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ["hello world", "the cat sat", "one two"])
    )
    out = tmp_path / "out"
    args = (
        f"bench --model {tiny_dir} --dtype float32 --task jsonl:{prompts} --methods ar,spec@block_size=3 "
        f"--max-new-tokens 6 --out {out}"
    ).split()
    real_decode, calls = runner.decode, []

    def stop_after_three_runs(model, prompts, config, *a, **kw):
        if config.max_new_tokens == 6:  # a timed run, not the warm-up
            calls.append(config.method)
            if len(calls) == 4:
                raise KeyboardInterrupt  # the run is stopped in its 4th timed run
        return real_decode(model, prompts, config, *a, **kw)

    monkeypatch.setattr(runner, "decode", stop_after_three_runs)
    assert main(args) == 130  # Ctrl-C
    logged = (out / "progress.jsonl").read_text().splitlines()
    assert len(logged) == 3
    # Drop the first logged run: the resume must then rerun it and still reuse the two logged after it.
    (out / "progress.jsonl").write_text("".join(line + "\n" for line in logged[1:]))
    calls.clear()

    def count_runs(model, prompts, config, *a, **kw):
        if config.max_new_tokens == 6:
            calls.append(config.method)
        return real_decode(model, prompts, config, *a, **kw)

    monkeypatch.setattr(runner, "decode", count_runs)
    assert main(["bench", *args[1:], "--resume"]) == 0, capsys.readouterr().err
    assert len(calls) == 6 - 2  # only the runs not in the log
    res = json.loads((out / "results.json").read_text())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert (
        len(samples) == 6
        and {r["method"]: r for r in res["records"]}["spec@block_size=3"]["identical_to_ar"] == 1.0
    )
    first = json.loads(logged[2])  # logged after a run that the resume had to redo
    kept = next(s for s in samples if s["method"] == first["method"] and s["id"] == first["id"])
    assert kept["seconds"] == first["seconds"]  # reused, not rerun
    # A finished run extends to more prompts: only the new prompt's runs decode, the rest are its samples.
    with open(prompts, "a") as f:
        f.write(json.dumps({"prompt": "red blue green"}) + "\n")
    calls.clear()
    assert main(["bench", *args[1:], "--resume"]) == 0, capsys.readouterr().err
    assert sorted(calls) == ["ar", "spec"]
    extended = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(extended) == 8 and {s["seconds"] for s in samples} <= {s["seconds"] for s in extended}
    assert main(["bench", *args[1:-2], "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def bench_two_prompts(tiny_dir, tmp_path, dtype: str, methods: str):
    """`pardec bench` of `methods` on two prompts, 6 new tokens, the bare tiny model in `dtype`:
    (results.json, each sample's tokens by (method, id), the output folder)."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["hello world", "the cat sat"]))
    out = tmp_path / "out"
    code = main(f"bench --model {tiny_dir} --dtype {dtype} --adapter none --task jsonl:{prompts} "
                f"--max-new-tokens 6 --out {out} --methods {methods}".split())  # fmt: skip
    assert code == 0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by = {(s["method"], s["id"]): s["tokens"] for s in samples}
    return json.loads((out / "results.json").read_text()), by, out


def test_a_quantized_method_runs_beside_the_unquantized_ones(tiny_dir, tmp_path):
    methods = "ar,ar@quant=int8,spec@quant=int8@block_size=3,ar@quant=int4"
    res, by, out = bench_two_prompts(tiny_dir, tmp_path, "float32", methods)
    recs = {r["method"]: r for r in res["records"]}
    assert recs["ar@quant=int8"]["tokens_per_forward"] == 1.0
    # spec on the quantized model decodes that model's text: the same as its own ar.
    assert all(by[("spec@quant=int8@block_size=3", i)] == by[("ar@quant=int8", i)] for _, i in by)
    # The step cost recorded is the curve spec's schedule read: its quantized model's.
    assert res["meta"]["step_cost"]["key"]["quant"] == "int8"
    # What each method's model holds: quantized layers are smaller and keep dense copies beside.
    memory = res["meta"]["memory"]
    held = memory["weights_mb"]
    assert held["ar"]["dense_copies"] == 0 and held["ar@quant=int8"]["dense_copies"] > 0
    assert held["ar@quant=int4"]["weights"] < held["ar@quant=int8"]["weights"] < held["ar"]["weights"]
    assert memory["peak_rss_mb"] > held["ar"]["weights"]
    assert "peak resident set" in (out / "results.md").read_text()


def test_a_method_with_a_dtype_of_its_own_decodes_a_model_in_that_dtype(tiny_dir, tmp_path):
    methods = "ar,ar@dtype=bfloat16,ar@dtype=float32,spec@dtype=float32@block_size=3,hf@dtype=float32"
    res, by, _ = bench_two_prompts(tiny_dir, tmp_path, "bfloat16", methods)
    held = res["meta"]["memory"]["weights_mb"]
    # float32 weights are twice bf16's; @dtype=bfloat16 in a bf16 run is the run's own model
    assert held["ar@dtype=float32"]["weights"] == pytest.approx(2 * held["ar"]["weights"], rel=0.01)
    assert held["ar@dtype=bfloat16"] == held["ar"] and res["meta"]["dtype"] == "bfloat16"
    ids = {i for _, i in by}
    # In float32, spec is token for token its own model's AR, and transformers' greedy generate too.
    for i in ids:
        assert by[("spec@dtype=float32@block_size=3", i)] == by[("ar@dtype=float32", i)] != []
        assert by[("hf@dtype=float32", i)] == by[("ar@dtype=float32", i)]
        assert by[("ar@dtype=bfloat16", i)] == by[("ar", i)]


def test_a_compiled_method_is_warmed_up_and_decodes_what_its_eager_twin_does(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello world"}) + "\n")
    out = tmp_path / "out"
    code = main(f"bench --model {tiny_dir} --dtype float32 --adapter none --task jsonl:{prompts} "
                f"--max-new-tokens 6 --out {out} --methods ar,ar@compile=true".split())  # fmt: skip
    assert code == 0
    assert "ar@compile=true: steps compiled in" in capsys.readouterr().err  # before the timed runs
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by = {s["method"]: s["tokens"] for s in samples}
    assert by["ar@compile=true"] == by["ar"] and by["ar"]


def test_a_compiled_block_method_is_warmed_up_with_its_block_steps(tiny_dir, tmp_path, monkeypatch):
    """Block steps take compiled graphs of their own: the warm-up feeds them too, so that no timed run
    compiles. (torch.compile stands aside here: what is checked is what the warm-up is asked.)"""
    from pardec.core import cost

    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    warmed = []
    monkeypatch.setattr(
        cost, "warm_up", lambda model, mask_id, block_size=0: warmed.append(block_size) or 0.0
    )
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello world"}) + "\n")
    code = main(f"bench --model {tiny_dir} --dtype float32 --adapter none --task jsonl:{prompts} "
                f"--max-new-tokens 4 --out {tmp_path / 'out'} --block-size 3 "
                "--methods ar@compile=true,spec@compile=true,spec".split())  # fmt: skip
    assert code == 0 and warmed == [0, 3]  # ar's plain steps; spec's with blocks of 3 slots; eager spec none


class FakeLlama:
    """llama-cpp-python's Llama as the runner uses it: reset, n_ctx, a greedy token stream."""

    def __init__(self, stream, model_path=__file__):
        self.stream, self.resets, self.fed, self.model_path = stream, 0, [], model_path

    def n_ctx(self):
        return 64

    def reset(self):
        self.resets += 1

    def generate(self, tokens, temp, top_k, reset):
        assert temp == 0.0 and top_k == 1 and reset
        self.fed.append(list(tokens))
        yield from self.stream


def test_the_llamacpp_runner_feeds_the_prompt_ids_from_an_empty_cache_and_stops_like_ar(tiny_dir):
    from pardec.bench.llamacpp import LlamaCppRunner
    from pardec.model import load_model

    lm = load_model(tiny_dir, torch.float32, "none")
    spec = parse_methods("llamacpp", DecodeConfig(max_new_tokens=5))[1]
    assert spec.external == "llamacpp" and spec.config.method == "ar"
    stop = min(lm.stop_ids)
    words = [t for t in range(40) if t not in lm.stop_ids]
    fake = FakeLlama([words[0], words[1], stop, words[2]])
    run = LlamaCppRunner(spec, lm, fake).run([1, 2])
    assert run.tokens == words[:2] and fake.fed == [[1, 2]] and fake.resets == 1
    assert LlamaCppRunner(spec, lm, FakeLlama(words)).run([1]).tokens == words[:5]  # max_new_tokens
    assert LlamaCppRunner(spec, lm, fake).held() == {"kernel": Path(__file__).stat().st_size, "dense": 0}
    with pytest.raises(PardecError, match="exceeds"):
        LlamaCppRunner(spec, lm, fake).run([1] * 62)
    with pytest.raises(PardecError, match="llamacpp takes none"):
        parse_methods("llamacpp@temperature=0.5", DecodeConfig())
    with pytest.raises(PardecError, match="quant= takes"):
        parse_methods("llamacpp@quant=int8", DecodeConfig())


def test_llamacpp_says_how_to_install_it_and_needs_a_gguf(tiny_dir, monkeypatch):
    import sys

    from pardec.bench.llamacpp import open_gguf
    from pardec.model import load_model

    lm = load_model(tiny_dir, torch.float32, "none")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # not installed
    with pytest.raises(PardecError, match=r"pardec\[llamacpp\]"):
        open_gguf(lm)
    monkeypatch.setitem(sys.modules, "llama_cpp", object())
    with pytest.raises(PardecError, match="method 'llamacpp' needs a model loaded from a GGUF"):
        open_gguf(lm)


def test_a_llamacpp_crash_in_the_probe_becomes_an_error_that_says_how_to_rebuild(tmp_path):
    from pardec.bench.llamacpp import probe

    gguf = tmp_path / "m.gguf"
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    with pytest.raises(PardecError, match=r"died of signal 11.*m\.gguf.*AMX kernels.*GGML_NATIVE=OFF"):
        probe(gguf, 2, "CPU : AVX512 = 1 | AMX_INT8 = 1 |", script=crash)
    fails = "import sys; sys.stderr.write('bad magic\\n'); sys.exit(3)"
    with pytest.raises(PardecError, match=r"failed \(3\)(?!.*AMX).*\nbad magic"):
        probe(gguf, 2, "CPU : AVX512 = 1 |", script=fails)
    argv = f"import sys; assert sys.argv[1:] == [{str(gguf)!r}, '2']"
    probe(gguf, 2, "CPU : AMX_INT8 = 1 |", script=argv)


@pytest.mark.parametrize("emulated", [True, False])
def test_nll_is_scored_in_float32_where_bf16_is_emulated_and_the_decoding_model_is_untouched(
    monkeypatch, emulated
):
    from tiny import tiny_model

    import pardec.machine
    from pardec.bench.run import mean_nll
    from pardec.bench.session import scoring_model

    flags = dict(amx=not emulated, avx512_bf16=not emulated, cuda=None)
    monkeypatch.setattr(pardec.machine, "machine", lambda: flags)
    model, _ = tiny_model("qwen2")
    model = model.bfloat16()
    scorer = scoring_model(model)
    assert (scorer is model) is not emulated
    assert model.dtype == torch.bfloat16 and scorer.dtype == (torch.float32 if emulated else torch.bfloat16)
    prompt, tokens = [1, 2, 3], [4, 5, 6, 7]
    assert mean_nll(scorer, prompt, tokens) == pytest.approx(mean_nll(model, prompt, tokens), rel=0.05)
    assert scoring_model(scorer) is scorer  # float32 already
