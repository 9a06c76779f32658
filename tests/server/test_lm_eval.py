"""lm-evaluation-harness against `pardec serve` (local-completions): a generation task and a
log-likelihood task from the local GSM8K task files, on 3 items of a tiny model."""

import math

import pytest
import torch
from test_server import Served

from pardec.api import configure
from pardec.decoding import DecodeConfig
from pardec.model import load_model
from pardec.tasks import lmeval

lm_eval = pytest.importorskip("lm_eval")  # the test extra installs it


def test_the_harness_runs_a_generation_and_a_loglikelihood_task(tiny_dir, tmp_path):
    from lm_eval.tasks import TaskManager

    lm = load_model(tiny_dir, torch.float32, "none")
    config, extras = configure(lm, DecodeConfig(method="ar"), True)
    served = Served(lm, config, extras)
    try:
        lmeval.write(tmp_path, limit=3, max_gen_toks=6)
        # The tiny model has 64 positions: the harness truncates contexts to fit.
        args = (f"model=tiny,base_url={served.url}/v1/completions,tokenizer_backend=huggingface,"
                f"tokenizer={tiny_dir},num_concurrent=1,max_retries=1,max_length=54")  # fmt: skip
        res = lm_eval.simple_evaluate(model="local-completions", model_args=args, limit=3, log_samples=True,
                                      tasks=["pardec_gsm8k", "pardec_gsm8k_choice"],
                                      task_manager=TaskManager(include_path=str(tmp_path)))  # fmt: skip
    finally:
        served.close()
    assert res["results"]["pardec_gsm8k"]["sample_len"] == 3
    assert 0.0 <= res["results"]["pardec_gsm8k"]["exact_match,final-number"] <= 1.0
    choice = res["samples"]["pardec_gsm8k_choice"]
    assert len(choice) == 3
    for sample in choice:
        lls = [r[0][0] for r in sample["resps"]]
        assert len(lls) == 4 and all(math.isfinite(x) and x < 0 for x in lls)
        assert sample["acc"] == float(max(range(4), key=lls.__getitem__) == sample["target"])
    generated = res["samples"]["pardec_gsm8k"]
    assert all(isinstance(s["resps"][0][0], str) for s in generated)
