"""Adaptive eb: the block size and the fall-back to plain AR steps under given step costs, and what
the decode does with them (fp32 tiny models)."""

import torch
from test_decoding import PROMPTS, run, tiny  # noqa: F401  (a fixture)
from test_schedule import FLAT, STEEP, linear_cost, slot_cost

from pardec.decoding import DecodeConfig, decode
from pardec.decoding.eb import EntropyBounded, Reveal, forwards_needed
from pardec.decoding.state import Row

MASK = 99


def test_forwards_needed_runs_the_reveal_loop_on_fixed_entropies():
    assert forwards_needed([0.1, 0.1, 0.1, 0.1], 0.5) == 1
    assert forwards_needed([0.4, 0.4, 0.4], 0.5) == 3  # one slot a forward: two exceed the budget
    assert forwards_needed([0.3, 2.0, 0.1, 0.1], 0.5) == 2  # the three sure ones, then the unsure one
    assert forwards_needed([0.1] * 5, 0.0) == 5  # at least one each forward, never more over budget
    assert forwards_needed([0.0] * 5, 0.0) == 1  # certain slots cost nothing of the budget
    assert forwards_needed([], 0.5) == 0


def policy(cost, D, min_block_size=None, gamma=0.5):
    config = DecodeConfig(method="eb", block_size=D, gamma=gamma, min_block_size=min_block_size)
    return EntropyBounded(config, MASK, None, extras={"cost": cost})


def row(entropy=None, paid=True, context=50):
    return Row(index=0, committed=list(range(context)), n_prompt=10, budget=100,
               state=Reveal(entropy=entropy, paid=paid))  # fmt: skip


def test_a_flat_curve_feeds_the_block_that_reveals_most_per_forward():
    p, r = policy(FLAT, D=4, min_block_size=2), row([0.1, 0.1, 0.1, 0.2])
    p.before_step([r])
    assert p.width == 4 and not r.state.ar and r.state.expect == 1
    assert p.blocks(r)[0].slots == [MASK] * 4
    # An unsure tail: 2 slots in one forward beat 3 in two (0.1 + 0.3, then 0.6) and 4 in three.
    p, r = policy(FLAT, D=4, min_block_size=2), row([0.1, 0.3, 0.6, 2.0])
    p.before_step([r])
    assert p.width == 2 and r.state.expect == 1
    p, r = policy(FLAT, D=4), row([0.1, 0.3, 0.6, 2.0])
    p.before_step([r])
    assert p.width == 4 and r.state.expect == 3  # without a shortest block size, always the full one


def test_a_dear_slot_shortens_the_block_to_the_sure_slots():
    # A step costs 1 + 0.3 a token fed past the first + 0.05 a slot: 3 slots revealed in one forward
    # (1 + 0.3 * 5 + 0.15 = 2.65 AR steps for 3 tokens) beat 2 in one forward (2.0 for 2) and 4 in two.
    p, r = policy(slot_cost(D=8), D=8, min_block_size=2), row([0.0, 0.1, 0.2, 2.0, 2.0, 2.0, 2.0, 2.0])
    p.before_step([r])
    assert p.width == 3 and not r.state.ar and r.state.expect == 1


def test_unsure_blocks_fall_back_to_plain_ar_steps_then_probe_with_longer_runs():
    p = policy(STEEP, D=4)
    unsure = [3.0] * 4  # one slot a forward: forwards of 1.8, 1.5, 1.5 and 1.5 AR steps for 4 tokens
    r = row(unsure, paid=True)
    p.before_step([r])
    assert not r.state.ar  # the last block paid: one poor prediction is not enough
    r.state = Reveal(entropy=unsure, paid=False)
    p.before_step([r])
    assert r.state.ar and r.state.ar_left == 0 and r.state.backoff == 2
    assert p.blocks(r) is None
    assert r.state.entropy is None  # the next step probes for fresh entropies
    p.before_step([r])
    assert not r.state.ar and r.state.expect == 0  # the probe: a block, not judged
    r.state.entropy, r.state.paid = unsure, False  # the probe showed the same
    p.before_step([r])
    assert r.state.ar and r.state.ar_left == 1 and r.state.backoff == 4  # two AR steps this time
    p.before_step([r])
    assert r.state.ar and r.state.ar_left == 0 and r.state.entropy is None
    p.before_step([r])
    assert not r.state.ar


def test_eb_on_a_flat_curve_decodes_as_fixed_eb(tiny):  # noqa: F811
    model, mask_id = tiny
    for gamma in (1e9, 1.0):
        fixed = run(model, mask_id, [PROMPTS[0]], method="eb", gamma=gamma, block_size=4)[0]
        config = DecodeConfig(method="eb", gamma=gamma, block_size=4, max_new_tokens=24)
        flat = decode(model, [PROMPTS[0]], config, mask_id, extras={"cost": FLAT})[0]
        if gamma > 1e6:  # every block revealed in one forward: the full block is the fastest
            assert flat.tokens == fixed.tokens and flat.accepted_per_step == fixed.accepted_per_step
        assert all(s == 4 for s in flat.slots_per_step)  # a flat curve never falls back to AR


def test_eb_where_blocks_are_dear_decodes_plain_ar_steps_of_the_models_own_tokens(tiny):  # noqa: F811
    model, mask_id = tiny
    dear = linear_cost(block=10.0)  # a block step costs 11 AR steps
    config = DecodeConfig(method="eb", gamma=0.0, block_size=4, max_new_tokens=60)
    out = decode(model, [PROMPTS[0]], config, mask_id, extras={"cost": dear})[0]
    assert len(out.tokens) == 60
    plain = [i for i, s in enumerate(out.slots_per_step) if s == 0]
    assert len(plain) >= 30  # after the first block (a probe) and its poor verdict, mostly AR runs
    # Back-off doubles: the plain runs between blocks grow.
    runs, n = [], 0
    for s in out.slots_per_step:
        if s == 0:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    assert runs == sorted(runs) and runs[-1] > runs[0]
    # Each plain step commits the model's own greedy token given the text before it.
    text = PROMPTS[0] + out.tokens
    with torch.no_grad():
        logits = model(torch.tensor([text])).logits[0]  # [len(text), V]
    logits[:, mask_id] = float("-inf")
    greedy = logits.argmax(-1).tolist()
    at = len(PROMPTS[0])  # where the step's first committed token sits in text
    for step, k in enumerate(out.accepted_per_step):
        if out.slots_per_step[step] == 0:
            assert k == 1 and text[at] == greedy[at - 1], step
        at += k


def test_adaptive_eb_in_a_batch_feeds_one_block_size(tiny):  # noqa: F811
    model, mask_id = tiny
    config = DecodeConfig(method="eb", gamma=1.0, block_size=8, min_block_size=2, max_new_tokens=30)
    outs = decode(model, PROMPTS, config, mask_id, extras={"cost": slot_cost(D=8)})
    assert [len(o.tokens) for o in outs] == [30] * len(PROMPTS)
    # The steps all rows took together fed one block size (AR rows a filler of it).
    assert any(0 < s < 8 for o in outs for s in o.slots_per_step)
