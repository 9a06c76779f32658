"""Training a Markov head: it learns what follows the token before a slot where the block cannot."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from tiny import counting_model

from pardec.training.data import Example
from pardec.training.markov import MarkovConfig, collect, fit, slot_examples, train

D = 4


@pytest.fixture(scope="module")
def counting():
    model, mask_id, prompts = counting_model()
    vocab = mask_id
    # The model's own greedy answers: it counts on from its prompt.
    examples = [Example([(p[0] + i) % vocab for i in range(30)], len(p)) for p in prompts]
    return SimpleNamespace(model=model, mask_id=mask_id, adapter=None), examples


def test_collected_blocks_hold_the_text_at_their_slots_and_the_block_top_k(counting):
    lm, examples = counting
    cfg = MarkovConfig(blocks_per_text=5, top_k=6)
    blocks = collect(lm, examples[:3], D, cfg, progress=False)
    assert len(blocks) == 15
    assert blocks.hidden.shape == (15, D, lm.model.config.hidden_size) and blocks.top_ids.shape == (15, D, 6)
    for text in blocks.text.tolist():  # the token before the block, then the answer's at each slot
        assert all((b - a) % lm.mask_id == 1 for a, b in zip(text, text[1:]))
    assert (blocks.top_ids != lm.mask_id).all()  # [MASK] is never a candidate
    *_, label = slot_examples(blocks)
    assert label.shape == (15 * (D - 1),)


def test_a_trained_head_drafts_runs_the_untrained_block_cannot(counting):
    """The tiny model's [MASK] slots are untrained, so the block alone drafts noise; the head sees the
    token before each slot and learns that the answer counts on from it."""
    lm, examples = counting
    cfg = MarkovConfig(blocks_per_text=16, rank=32, top_k=lm.mask_id, epochs=30, batch_size=128, lr=1e-2)
    head, history = train(lm, examples, D, cfg, progress=False)
    first, last = history[0], history[-1]
    assert first["heldout_run"] == first["heldout_run_block_alone"]  # an untrained head changes nothing
    assert last["heldout_run_block_alone"] < 0.5
    assert last["heldout_run"] > 2.5  # of at most D - 1 = 3 drafts after the bonus
    assert last["heldout_slot_accuracy"] > 0.9
    json.dumps(head.settings.training)  # the record saved with the head stays JSON
    assert head.settings.training["history"] == history


def test_a_context_2_head_learns_what_needs_the_two_tokens_before_a_slot(counting):
    """Answers that go on as x[t + 1] = x[t] + x[t - 1] (mod V): the token before a slot alone does not
    tell the next one, the two before it do."""
    lm, _ = counting
    V = lm.mask_id
    g = torch.Generator().manual_seed(1)
    examples = []
    for _ in range(40):
        x = torch.randint(0, V, (2,), generator=g).tolist()
        while len(x) < 30:
            x.append((x[-1] + x[-2]) % V)
        examples.append(Example(x, 5))
    cfg = MarkovConfig(blocks_per_text=16, rank=64, top_k=V, epochs=40, batch_size=128, lr=1e-2)
    blocks = collect(lm, examples, D, cfg, progress=False)
    runs = {
        c: fit(lm, blocks, D, replace(cfg, context=c), len(examples), progress=False)[1][-1] for c in (1, 2)
    }
    assert runs[2]["heldout_run"] > 2.0  # of at most 3 drafts after the bonus
    assert runs[1]["heldout_run"] < runs[2]["heldout_run"] - 0.5  # 1.69 against 2.36 when written
    head, _ = fit(lm, blocks, D, replace(cfg, context=2, epochs=1), len(examples), progress=False)
    assert head.settings.context == 2
    with pytest.raises(ValueError, match="context must be 1 or 2"):
        slot_examples(blocks, 3)
