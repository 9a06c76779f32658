"""Continuous batching: rows that join a running batch, or leave it, decode exactly as they would
alone (greedy, fp32), for every method that allows it."""

import pytest
from test_decoding import PROMPTS, tiny  # noqa: F401  (a fixture)
from test_schedule import FLAT

from pardec.decoding import DecodeConfig, decode
from pardec.decoding.engine import Session
from pardec.errors import PardecError

MORE = PROMPTS + [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7]]
CONFIGS = [
    dict(method="ar"),
    dict(method="spec", block_size=4, adaptive=False),
    dict(method="spec", block_size=4, adaptive=True),
    dict(method="spec", block_size=4, adaptive=False, tree=2, tree_depth=2),
    dict(method="threshold", block_size=4, threshold=0.5, adaptive=False),
    dict(method="threshold", block_size=4, threshold=0.5, adaptive=True),
    dict(method="eb", block_size=4, gamma=1.0, adaptive=False),  # adaptive: the batch's block size
]


def alone(model, mask_id, config, extras, prompt, n):
    return decode(model, [prompt], DecodeConfig(**config, max_new_tokens=n), mask_id, extras=extras)[0]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_rows_that_join_a_running_batch_decode_as_they_would_alone(tiny, config):  # noqa: F811
    model, mask_id = tiny
    extras = {"cost": FLAT} if config.get("adaptive") else {}
    budgets = [20, 9, 14, 6, 17]
    session = Session(model, DecodeConfig(**config, max_new_tokens=20), mask_id, extras=extras)
    joins = {0: [0, 1], 2: [2], 3: [3], 7: [4]}  # step -> prompts that join before it
    results, step = {}, 0
    while step in joins or step < max(joins) or session.active:
        for i in joins.get(step, []):
            assert session.add(MORE[i], max_new_tokens=budgets[i]) == i
        results.update(session.step())
        step += 1
    for i, p in enumerate(MORE):
        want = alone(model, mask_id, config, extras, p, budgets[i])
        assert results[i].tokens == want.tokens, (i, config)
        assert results[i].accepted_per_step == want.accepted_per_step


def test_a_cancelled_row_leaves_and_the_others_are_unchanged(tiny):  # noqa: F811
    model, mask_id = tiny
    config = dict(method="spec", block_size=4, adaptive=False)
    session = Session(model, DecodeConfig(**config, max_new_tokens=16), mask_id)
    for p in PROMPTS:
        session.add(p)
    results = dict(session.step())
    session.cancel(1)
    assert session.active == [0, 2]
    while session.active:
        results.update(session.step())
    assert 1 not in results
    for i in (0, 2):
        assert results[i].tokens == alone(model, mask_id, config, {}, PROMPTS[i], 16).tokens
    # The batch emptied: a row that joins now starts from a fresh cache.
    session.add(PROMPTS[1])
    while session.active:
        results.update(session.step())
    assert results[3].tokens == alone(model, mask_id, config, {}, PROMPTS[1], 16).tokens


def test_bad_prompts_are_refused_before_they_join(tiny):  # noqa: F811
    model, mask_id = tiny
    session = Session(model, DecodeConfig(method="ar", max_new_tokens=4), mask_id)
    with pytest.raises(PardecError, match="empty"):
        session.add([])
    with pytest.raises(PardecError, match="context"):
        session.add([1] * 300)
    assert session.active == []


def test_a_method_with_batch_wide_state_refuses_rows_once_running(tiny):  # noqa: F811
    model, mask_id = tiny
    session = Session(model, DecodeConfig(method="ar", max_new_tokens=4), mask_id)
    session.policy.joinable = False  # as dflash's policy declares: its drafter context is batch-wide
    session.add(PROMPTS[0])
    session.add(PROMPTS[1])  # before the first step: still one fixed batch
    session.step()
    with pytest.raises(PardecError, match="cannot join"):
        session.add(PROMPTS[2])
