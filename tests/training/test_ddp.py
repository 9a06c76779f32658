"""Retrofit under accelerate as 2 CPU processes (gloo) computes the same adapter as 1 process."""

import socket
import subprocess
import sys
from pathlib import Path

import torch
from ddp_worker import VOCAB, config, data
from safetensors.torch import load_file
from tiny import tiny_model

from pardec.model import LoadedModel
from pardec.training.loop import retrofit


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_match_one_process(tmp_path):
    worker = Path(__file__).with_name("ddp_worker.py")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            str(worker),
            str(tmp_path / "ddp"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    model, mask_id = tiny_model("llama", vocab=VOCAB)
    hist = retrofit(
        LoadedModel(model, None, "tiny"), data(), [], config(), tmp_path / "single", progress=False
    )
    ddp = load_file(str(tmp_path / "ddp" / "adapter.safetensors"))
    single = load_file(str(tmp_path / "single" / "adapter.safetensors"))
    weights = [k for k in single if not k.startswith("optimizer.")]
    assert weights and set(weights) <= set(ddp)
    moved = max(single[k].abs().max() for k in weights if k.endswith("lora_b"))
    assert moved > 1e-3  # lora_b starts at zero: training moved it, so agreement means something
    for k in weights:
        torch.testing.assert_close(ddp[k], single[k], rtol=1e-4, atol=1e-5)
    ddp_hist = (tmp_path / "ddp" / "history.jsonl").read_text().splitlines()
    assert len(ddp_hist) == len(hist) == 4
