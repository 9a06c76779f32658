"""Run by tests/test_ddp.py under torchrun: one process of a 2-process (gloo) retrofit."""

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0])  # tests/, for tiny.py
from tiny import tiny_model  # noqa: E402

from pardec.model import LoadedModel  # noqa: E402
from pardec.training.config import TrainConfig  # noqa: E402
from pardec.training.data import Example  # noqa: E402
from pardec.training.loop import retrofit  # noqa: E402

VOCAB = 32


def data():
    return [Example([(i * 5 + 3 * t) % VOCAB for t in range(30)], 4) for i in range(12)]


def config(steps=4):
    return TrainConfig(objective="nsp", adapter="gated-lora", block_size=4,
                       blocks_per_sequence=6, lora_rank=4, lora_alpha=8, lr=1e-2, warmup_steps=1,
                       steps=steps, grad_accum=4, bf16=False, eval_every=steps)  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1)
    model, _ = tiny_model("llama", vocab=VOCAB)
    retrofit(LoadedModel(model, None, "tiny"), data(), [], config(), sys.argv[1], progress=False)
