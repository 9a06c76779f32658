"""A bench run on a tiny model writes every file, with consistent numbers."""

import json

import pytest

from pardec.bench.runner import parse_methods
from pardec.cli import main
from pardec.decoding import DecodeConfig
from pardec.errors import PardecError


def test_bench_on_a_tiny_model_writes_all_files(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["hello world", "the cat sat", "one two"]))
    out = tmp_path / "out"
    code = main(["bench", "--model", tiny_dir, "--dtype", "float32", "--task", f"jsonl:{prompts}",
                 "--methods", "hf,ar,threshold@0.0,eb@gamma=0.5,spec@block_size=3", "--max-new-tokens", "10",
                 "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    for f in ("results.json", "results.md", "samples.jsonl", "speed_quality.png", "accepted_hist.png"):
        assert (out / f).stat().st_size > 0, f
    res = json.loads((out / "results.json").read_text())
    recs = {r["method"]: r for r in res["records"]}
    assert list(recs) == ["hf", "ar", "threshold@0.0", "eb@gamma=0.5", "spec@block_size=3"]
    for r in recs.values():
        for key in ("method", "tokens_per_forward", "tokens_per_second", "speedup_vs_ar", "identical_to_ar", "score", "nll"):
            assert key in r
    assert recs["ar"]["speedup_vs_ar"] == 1.0 and recs["ar"]["tokens_per_forward"] == 1.0
    assert recs["spec@block_size=3"]["identical_to_ar"] == 1.0 and recs["hf"]["identical_to_ar"] == 1.0
    assert recs["threshold@0.0"]["tokens_per_forward"] > 1.5  # threshold 0 keeps whole blocks
    assert recs["ar"]["nll"] > 0
    assert "| spec@block_size=3 |" in stdout and res["meta"]["command"].startswith("pardec bench")


def test_method_specs_parse_and_reject_nonsense():
    specs = parse_methods("threshold@0.7,eb@gamma=0.25,spec@8@temperature=0", DecodeConfig())
    assert [s.label for s in specs][0] == "ar"  # added: every speedup is relative to it
    assert specs[1].config.threshold == 0.7 and specs[2].config.gamma == 0.25 and specs[3].config.block_size == 8
    for bad in ("beam", "spec@colour=3", "threshold@high", "ar,ar", "threshold@1.5"):
        with pytest.raises(PardecError):
            parse_methods(bad, DecodeConfig())
