"""Training a Markov head: it learns what follows the token before a slot where the block cannot."""

import json
from types import SimpleNamespace

import pytest
from tiny import counting_model

from pardec.training.data import Example
from pardec.training.markov import MarkovConfig, collect, slot_examples, train

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
