"""The training targets: soft targets from the base model's distribution, and the acceptance-length
weighting, checked against a direct computation slot by slot, and both still teach blocks."""

import pytest
import torch
from test_training import train, train_cfg
from tiny import counting_model, randomize_lora, tiny_model

from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model import adapters
from pardec.training.config import TrainConfig
from pardec.training.data import Example
from pardec.training.layout import IGNORE, sample_blocks
from pardec.training.objective import _chain_weights, sequence_loss

VOCAB = 32


def test_chain_weights_multiply_the_earlier_slots_of_each_block_only():
    p = torch.tensor([0.5, 0.8, 0.9, 0.4, 0.7])
    block = torch.tensor([0, 0, 0, 1, 1])
    got = _chain_weights(p.log(), block)
    torch.testing.assert_close(got, torch.tensor([1.0, 0.5, 0.4, 1.0, 0.4]))
    # An untrained (revealed) slot contributes log 1 = 0: it is given, so always right.
    got = _chain_weights(torch.tensor([0.5, 1.0, 0.8]).log(), torch.tensor([0, 0, 0]))
    torch.testing.assert_close(got, torch.tensor([1.0, 0.5, 0.5]))


def _setup(**kw):
    model, mask_id = tiny_model("qwen2", vocab=VOCAB)
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(model)
    cfg = train_cfg(bf16=False, **kw)
    ids = [(3 + 2 * t) % VOCAB for t in range(30)]
    blocks = sample_blocks(ids, 6, cfg, mask_id, torch.Generator().manual_seed(0))
    return model, mask_id, cfg, ids, blocks


def _expected(model, ids, blocks, out, mask_id, kl_weight=0.0, chain=False):
    """The loss computed directly from the slots' logits: per block, per slot, in plain loops."""
    with torch.no_grad():
        base = model(torch.tensor([ids])).logits[0]  # [T, V] (no [MASK] input: the gate stays off)
    total = weights = 0.0
    for b in blocks.block.unique().tolist():
        right = 1.0  # probability the block got its earlier slots right
        for i in (blocks.block == b).nonzero()[:, 0].tolist():
            q = out.logits[i].log_softmax(-1)
            label = int(blocks.labels[i])
            if label == IGNORE:
                continue
            teacher = base[int(blocks.pos[i]) - 1].clone()
            teacher[mask_id] = float("-inf")
            p = teacher.softmax(-1)
            soft = -(p[:mask_id] * q[:mask_id]).sum() - (p[mask_id + 1 :] * q[mask_id + 1 :]).sum()
            loss = (1 - kl_weight) * -q[label] + kl_weight * soft
            w = right if chain else 1.0
            total, weights = total + w * loss, weights + w
            right *= float(q[label].exp())
    return total / weights


@pytest.mark.parametrize(
    "kl_weight,chain", [(0.0, False), (1.0, False), (0.3, False), (0.0, True), (0.5, True)]
)
def test_the_loss_is_the_mix_of_hard_and_soft_targets_weighted_by_the_chain(kl_weight, chain):
    model, mask_id, cfg, ids, blocks = _setup(kl_weight=kl_weight, chain=chain)
    out = sequence_loss(model, ids, 6, blocks, cfg, mask_id)
    want = _expected(model, ids, blocks, out, mask_id, kl_weight, chain)
    torch.testing.assert_close(
        out.loss.detach(), torch.as_tensor(want, dtype=out.loss.dtype), rtol=1e-4, atol=1e-5
    )


def test_bad_objective_settings_are_refused():
    for kw in ({"kl_weight": 1.5}, {"kl_weight": 0.5, "adapter": "lora"}):
        with pytest.raises(PardecError):
            TrainConfig(**kw)


@pytest.mark.parametrize("kw", [{"kl_weight": 0.5}, {"chain": True}])
def test_both_targets_still_teach_blocks(tmp_path, kw):
    model, mask_id, prompts = counting_model()
    outs = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=40), mask_id)
    data = [Example(p + o.tokens, len(p)) for p, o in zip(prompts[:32], outs[:32])]
    cfg = train_cfg(steps=80, lr=1e-2, blocks_per_sequence=16, eval_every=80, **kw)
    hist = train(model, data, cfg, tmp_path / "ck", heldout=prompts[32:])
    assert hist[-1]["heldout_tpf"] > 2.0


def test_labels_of_revealed_slots_are_ignored_by_both_targets():
    model, mask_id, _, ids, _ = _setup()
    cfg = train_cfg(bf16=False, objective="sbd", kl_weight=0.5, chain=True)
    blocks = sample_blocks(ids, 6, cfg, mask_id, torch.Generator().manual_seed(1))
    assert (blocks.labels == IGNORE).any()
    out = sequence_loss(model, ids, 6, blocks, cfg, mask_id)
    assert torch.isfinite(out.loss) and out.slot_count.sum() == (blocks.labels != IGNORE).sum()
    want = _expected(model, ids, blocks, out, mask_id, 0.5, True)
    torch.testing.assert_close(
        out.loss.detach(), torch.as_tensor(want, dtype=out.loss.dtype), rtol=1e-4, atol=1e-5
    )
