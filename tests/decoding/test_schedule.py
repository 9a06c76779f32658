"""Adaptive spec: the schedule's choices under given step costs, and that whatever it chooses, the
output stays exactly AR's (greedy, fp32) and in distribution (sampling)."""

import dataclasses

import pytest
import torch
from test_decoding import PROMPTS, OracleSpec, run, use_policy
from test_sampling import PROMPT, T, chi2_pvalue, exact_joint, small_vocab_model  # noqa: F401  (a fixture)
from tiny import tiny_model

from pardec.core.cost import StepCost, measure
from pardec.decoding import DecodeConfig, decode
from pardec.decoding.schedule import Memory, Plan, choose_slots, plan_step, record


def linear_cost(ar=1.0, per_token=0.0, block=0.0, D=4):
    """A StepCost whose AR step takes `ar`, each more token `per_token`, and a block `block` more."""
    plain = (ar, ar + 31 * per_token)
    return StepCost((1, 32), (100,), D, (plain,), (tuple(t + block for t in plain),), {})


def slot_cost(per_token=0.3, per_slot=0.05, D=8):
    """A StepCost measured with short blocks too (2 and 4 slots, at up to 8 pending tokens): a step
    costs 1 + per_token for each token fed past the first (block slots included) + per_slot a slot."""
    pending = (1, 2, 4, 8, 16, 32)

    def curve(slots, n=6):
        return tuple(1.0 + per_token * (p - 1 + slots) + per_slot * slots for p in pending[:n])

    short = ((curve(2, 4),), (curve(4, 4),))
    return StepCost(pending, (100,), D, (curve(0),), (curve(D),), {}, (2, 4), short)


FLAT = linear_cost()  # a GPU-like curve: every shape costs an AR step
STEEP = linear_cost(per_token=0.1, block=0.5)  # a block step with 4 drafts costs 1.9 AR steps


def test_a_flat_curve_feeds_every_draft():
    plan = Plan()
    plan_step(plan, torch.tensor([0.9, 0.5, 0.2, 0.05]), 4, 50, FLAT, 32)
    assert plan.block and plan.fed == 4


def test_a_steep_curve_feeds_only_likely_drafts_and_falls_back_to_ar_when_none_pay():
    plan = Plan()
    plan_step(plan, torch.tensor([0.99, 0.98, 0.15, 0.05]), 4, 50, STEEP, 32)
    assert plan.block and plan.fed == 2 and plan.low == 0  # 2.97 tokens for 1.7 AR steps
    poor = torch.tensor([0.2, 0.1, 0.05, 0.01])
    plan_step(plan, poor, 4, 50, STEEP, 32)
    assert plan.block and plan.low == 1  # one slow step is tolerated
    plan_step(plan, poor, 4, 50, STEEP, 32)
    # A probe costs 1.5 AR steps here: 10 AR steps (this one and 9 more) keep its extra 0.5 within 5%.
    assert not plan.block and plan.fed == 0 and plan.ar_left == 9 and plan.backoff == 20
    for _ in range(9):
        plan_step(plan, None, 0, 51, STEEP, 32)
        assert not plan.block
    plan_step(plan, None, 0, 51, STEEP, 32)  # the probe: a block step, no drafts yet, not judged
    assert plan.block and plan.fed == 0
    plan_step(plan, poor, 4, 52, STEEP, 32)  # still poor: one verdict after a probe falls back
    assert not plan.block and plan.ar_left == 19 and plan.backoff == 32
    for _ in range(19):
        plan_step(plan, None, 0, 53, STEEP, 32)
    plan_step(plan, None, 0, 53, STEEP, 32)
    assert plan.block and plan.ar_left == 0  # the next probe
    sure = torch.tensor([0.99, 0.99, 0.99, 0.99])
    plan_step(plan, sure, 4, 55, STEEP, 32)  # the drafts look good again: fed, but the back-off stays
    assert plan.block and plan.fed == 4 and plan.backoff == 32 and plan.low == 0
    record(plan, sure, 4, 4, STEEP.seconds(5, 55, block=True))  # and they pay: 5 tokens for 1.9 AR steps
    plan_step(plan, sure, 4, 60, STEEP, 32)
    assert plan.block and plan.backoff == 1
    plan_step(plan, poor, 4, 61, STEEP, 32)  # once recovered, one slow step is tolerated again
    assert plan.block and plan.low == 1


def test_the_ar_run_before_a_probe_grows_with_what_a_probe_costs():
    poor = torch.tensor([0.2, 0.1, 0.05, 0.01])
    free_probe = linear_cost(per_token=0.5, block=0.02)  # a near-free block, each draft half a step
    for cost, steps in ((free_probe, 1), (STEEP, 10), (linear_cost(block=3.0), 60)):
        plan = Plan()
        for _ in range(2):
            plan_step(plan, poor, 4, 50, cost, 128)
        assert not plan.block and plan.ar_left == steps - 1


def test_a_good_realized_rate_rides_out_a_few_poor_drafts():
    plan = Plan()
    for _ in range(5):
        record(plan, torch.tensor([0.9, 0.9, 0.8, 0.8]), 4, 4, STEEP.seconds(5, 50, block=True))  # 5 tokens
    poor = torch.tensor([0.2, 0.1, 0.05, 0.01])
    for _ in range(3):
        plan_step(plan, poor, 4, 50, STEEP, 32)
        assert plan.block  # the block steps have paid well: poor drafts for a while do not stop them
        record(plan, poor, plan.fed, 0, STEEP.seconds(1 + plan.fed, 50, block=True))
    for _ in range(6):  # the realized rate decays towards what the poor steps give, then AR takes over
        plan_step(plan, poor, 4, 50, STEEP, 32)
        if not plan.block:
            break
        record(plan, poor, plan.fed, 0, STEEP.seconds(1 + plan.fed, 50, block=True))
    assert not plan.block


def test_a_block_of_any_size_is_priced_from_the_measured_sizes_around_it():
    cost = slot_cost()
    assert cost.seconds(4, 100, 2) == pytest.approx(1 + 0.3 * 5 + 0.1)  # measured
    assert cost.seconds(4, 100, 3) == pytest.approx((cost.seconds(4, 100, 2) + cost.seconds(4, 100, 4)) / 2)
    assert cost.seconds(2, 100, 6) == pytest.approx((cost.seconds(2, 100, 4) + cost.seconds(2, 100, 8)) / 2)
    assert cost.seconds(2, 100, 1) == pytest.approx((cost.seconds(2, 100) + cost.seconds(2, 100, 2)) / 2)
    assert cost.seconds(16, 100, True) == cost.seconds(16, 100, 8) == cost.seconds(16, 100, 12)
    assert cost.seconds(16, 100, False) == cost.seconds(16, 100, 0) == pytest.approx(1 + 0.3 * 15)
    assert StepCost.from_json(cost.to_json()) == cost
    old = {k: v for k, v in cost.to_json().items() if k not in ("short", "short_slots")}
    with pytest.raises(KeyError):  # a curve cached before short blocks were measured is measured again
        StepCost.from_json(old)


def test_the_block_size_is_the_fastest_steady_state_for_the_drafts_reach():
    reach = [0.9, 0.8, 0.7]
    # Each token fed costs 0.3 AR steps: 4 slots (the bonus and 3 drafts a step) are fastest.
    assert choose_slots(reach, 2, 100, slot_cost()) == 4
    assert choose_slots(reach, 2, 100, slot_cost(per_token=0.0, per_slot=0.0)) == 8  # flat: the longest
    assert choose_slots([0.3], 2, 100, slot_cost()) == 2  # a poor draft: the shortest allowed
    assert choose_slots([0.3], 3, 100, slot_cost()) == 3
    assert choose_slots([1.0], 2, 100, slot_cost()) == 8  # sure drafts: every slot pays
    plan = Plan()
    plan_step(plan, torch.tensor(reach), 3, 100, slot_cost(), 32, min_slots=2)
    assert plan.block and plan.slots == 4
    plan_step(plan, torch.tensor(reach), 3, 100, slot_cost(), 32)  # no shortest block: always D
    assert plan.slots == 8
    plan_step(plan, None, 0, 100, slot_cost(), 32, min_slots=2)  # a step to get drafts: the full block
    assert plan.slots == 8


def test_the_calibration_follows_observed_acceptance():
    plan = Plan()
    reach = torch.tensor([0.9, 0.8, 0.7, 0.6])
    for _ in range(20):
        record(plan, reach, 4, 0, None)  # confident drafts that are never accepted
    assert plan.scale < 0.1
    plan_step(plan, reach, 4, 50, STEEP, 32)
    assert plan.fed == 1 and plan.low == 1  # only the one draft that keeps the calibration informed


class Right(OracleSpec):
    """Every draft right (the truth AR will decode), stated with full confidence."""

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        start = len(row.committed) + len(upd.commit) - row.n_prompt
        row.state.tokens = self.truth[start : start + len(row.state.tokens)]
        if row.state.tokens:
            row.state.reach = row.state.predicted = torch.ones(len(row.state.tokens))
        return upd


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


@pytest.mark.parametrize("cost", [FLAT, STEEP, linear_cost(per_token=0.02, block=0.1), None],
                         ids=["flat", "steep", "mild", "measured"])  # fmt: skip
def test_adaptive_spec_greedy_equals_ar_whatever_the_cost(tiny, cost, monkeypatch):
    model, mask_id = tiny
    # None: the policy measures this machine's curve itself, once per decode call.
    extras = {} if cost is None else {"cost": cost}
    ar = run(model, mask_id, PROMPTS, method="ar", max_new_tokens=40)
    OracleSpec.truth = ar[0].tokens + [0] * 8  # about 80% right drafts for prompt 0
    use_policy(OracleSpec, monkeypatch)
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, max_new_tokens=40)
    alone = decode(model, PROMPTS[:1], config, mask_id, extras=extras)[0]
    assert alone.tokens == ar[0].tokens
    monkeypatch.undo()
    batch = decode(model, PROMPTS, config, mask_id, extras=extras)  # untrained drafts: rows fall back
    assert [b.tokens for b in batch] == [a.tokens for a in ar]
    if cost is FLAT:  # no token costs anything extra: the rest of the batch changes no row's schedule
        singles = [decode(model, [p], config, mask_id, extras=extras)[0] for p in PROMPTS]
        assert [b.accepted_per_step for b in batch] == [s.accepted_per_step for s in singles]
    if cost is STEEP:  # untrained drafts never pay on a steep curve: mostly plain AR steps
        assert sum(1 for b in batch for n in b.accepted_per_step if n == 1) > 0.8 * sum(
            b.forwards for b in batch
        )


def test_adaptive_spec_with_good_drafts_feeds_them_on_a_flat_curve_and_sparingly_on_a_steep_one(
    tiny, monkeypatch
):
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS[:1], method="ar", max_new_tokens=40)[0]

    Right.truth = ar.tokens + [0] * 8
    use_policy(Right, monkeypatch)
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, max_new_tokens=40)
    for cost in (FLAT, STEEP):  # on the steep curve 4 sure tokens for 1.8 AR steps still pay
        got = decode(model, [PROMPTS[0]], config, mask_id, extras={"cost": cost})[0]
        assert got.tokens == ar.tokens and max(got.accepted_per_step) == 4 and got.forwards < 15


class Unsure(Right):
    """Every draft right, stated with modest confidence (reach 0.6, 0.36, ...); records the block
    size of each step."""

    widths: list[int] = []

    def before_step(self, rows):
        super().before_step(rows)
        Unsure.widths.append(self.width)

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        if row.state.tokens:
            row.state.reach = row.state.predicted = 0.6 ** torch.arange(1.0, len(row.state.tokens) + 1)
        return upd


def test_adaptive_spec_shortens_blocks_on_a_steep_curve_and_stays_exactly_ar(tiny, monkeypatch):
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS, method="ar", max_new_tokens=40)
    Unsure.truth = ar[0].tokens + [0] * 8
    use_policy(Unsure, monkeypatch)
    config = DecodeConfig(method="spec", block_size=8, min_block_size=2, adaptive=True, max_new_tokens=40)
    Unsure.widths = []
    got = decode(model, PROMPTS[:1], config, mask_id, extras={"cost": slot_cost()})[0]
    assert got.tokens == ar[0].tokens
    assert 8 in Unsure.widths and min(Unsure.widths) < 4  # full blocks to get drafts, short ones after
    flat = decode(model, PROMPTS[:1], config, mask_id, extras={"cost": slot_cost(0.0, 0.0)})[0]
    assert flat.tokens == ar[0].tokens
    monkeypatch.undo()  # untrained drafts in a batch: rows of different block sizes feed the longest
    batch = decode(model, PROMPTS, config, mask_id, extras={"cost": slot_cost(0.05, 0.01)})
    assert [b.tokens for b in batch] == [a.tokens for a in ar]


def test_adaptive_spec_samples_the_target_distribution(small_vocab_model):  # noqa: F811
    model, mask_id = small_vocab_model
    n = 3000
    config = DecodeConfig(
        method="spec", block_size=3, adaptive=True, temperature=1.0, seed=3, max_new_tokens=T
    )
    outs = decode(
        model, [PROMPT] * n, config, mask_id, extras={"cost": linear_cost(per_token=0.01, block=0.05)}
    )
    counts = {}
    for o in outs:
        counts[tuple(o.tokens)] = counts.get(tuple(o.tokens), 0) + 1
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0), n) > 1e-3


def test_the_measured_cost_is_a_positive_rising_curve(tiny):
    model, mask_id = tiny
    cost = measure(model, mask_id, 4, rounds=1)
    assert all(cost.seconds(n, 50) > 0 for n in (1, 3, 40))
    assert cost.short_slots == (2,)  # the block sizes below D measured too
    for n in (1, 2, 4, 8):  # never cheaper with more slots
        assert (
            cost.seconds(n, 50) <= cost.seconds(n, 50, 2) <= cost.seconds(n, 50, 3) <= cost.seconds(n, 50, 4)
        )
    assert cost.relative(1, 50) == pytest.approx(1.0)
    assert dataclasses.replace(cost) == StepCost.from_json(cost.to_json())


def test_in_a_compute_bound_batch_rows_price_drafts_at_their_marginal_cost(tiny, monkeypatch):
    """Each token costs 0.3 AR steps on top of a fixed 0.7: alone, 4 sure drafts pay (3.85 tokens for
    2.1 AR steps); in a batch of 8 the fixed part is shared, a block step for all (8 rows x 8 tokens)
    costs 19.9 against 3.1 for 8 AR tokens, and the batch decodes plain AR steps. Either way the
    output is AR's."""
    model, mask_id = tiny
    curve = linear_cost(ar=1.0, per_token=0.3, block=0.2)
    assert curve.seconds(4, 50, block=True) == pytest.approx(2.1)
    ar = run(model, mask_id, PROMPTS[:1], method="ar", max_new_tokens=30)[0]

    Right.truth = ar.tokens + [0] * 8
    use_policy(Right, monkeypatch)
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, max_new_tokens=30)
    alone = decode(model, [PROMPTS[0]], config, mask_id, extras={"cost": curve})[0]
    batch = decode(model, [PROMPTS[0]] * 8, config, mask_id, extras={"cost": curve})
    assert alone.tokens == ar.tokens and all(b.tokens == ar.tokens for b in batch)
    assert alone.forwards < 12  # blocks of sure drafts, alone
    single = [n for b in batch for n in b.accepted_per_step[1:]]  # after each row's prompt step
    assert sum(n == 1 for n in single) > 0.9 * len(single)  # plain AR steps in the batch
    assert sum(n == 1 for n in alone.accepted_per_step[1:]) <= 1  # only the step that drafts first


def decode_with_plan(cost, reach, accepted, tokens=1000, max_backoff=128):
    """Simulate a row's schedule: drafts with the given predicted reach of which `accepted` (at most
    the fed ones) are right, after every block step; returns tokens per second against AR's 1 / ar."""
    plan, done, seconds, n_drafts = Plan(), 0, 0.0, 0
    while done < tokens:
        plan_step(plan, reach if n_drafts else None, n_drafts, 100, cost, max_backoff)
        if plan.block:
            step = cost.seconds(1 + plan.fed, 100, block=True)
            right = min(accepted, plan.fed)
            record(plan, reach if plan.fed else None, plan.fed, right, step)
            done, seconds, n_drafts = done + 1 + right, seconds + step, len(reach)
        else:
            record(plan, None, 0, 0, None)
            done, seconds, n_drafts = done + 1, seconds + cost.seconds(1, 100), 0
    return done / seconds * cost.seconds(1, 100)


def test_where_blocks_never_pay_probes_count_and_the_row_decodes_nearly_at_ar_speed():
    costly = linear_cost(block=3.0)  # a block step costs 4 AR steps (a steep curve, int4 weights)
    sure = torch.tensor([0.99, 0.99, 0.99, 0.99])  # drafts that look sure, of which one is right
    poor = torch.tensor([0.2, 0.1, 0.05, 0.01])
    assert decode_with_plan(costly, sure, 1) > 0.96
    # A CPU without a bf16 ISA: a block step costs 6.3 AR steps, so only long AR runs between probes,
    # each probe followed by at most one more block step, keep the loss within the probes' 5%.
    no_bf16 = linear_cost(per_token=1.0, block=4.3)
    assert min(decode_with_plan(no_bf16, sure, 1), decode_with_plan(no_bf16, poor, 0)) > 0.95
    assert decode_with_plan(FLAT, sure, 1) > 1.9  # where blocks cost nothing, the same drafts pay
    plan = Plan()
    record(plan, None, 0, 0, 4.0)  # a probe: a block step that verified no draft counts in the rate
    assert plan.tokens == 1.0 and plan.seconds == 4.0


def test_what_rows_learned_about_failing_blocks_carries_to_the_next_request(tiny):
    model, mask_id = tiny
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, max_new_tokens=40)
    extras = {"cost": linear_cost(block=3.0), "memory": Memory()}  # one per configure, as prepare makes
    first = decode(model, PROMPTS[:1], config, mask_id, extras=extras)[0]
    assert extras["memory"].backoff > 30  # untrained drafts: the row fell back for 30 steps, then longer
    second = decode(model, PROMPTS[:1], config, mask_id, extras=extras)[0]
    assert second.tokens == first.tokens

    def block_steps(r):
        return sum(1 for fed in r.fed_per_step[1:] if fed > 1)

    assert block_steps(second) < block_steps(first)
    alone = decode(model, PROMPTS[:1], config, mask_id, extras={"cost": extras["cost"]})[0]
    assert block_steps(alone) == block_steps(first)  # without shared memory each call starts afresh


class Counted(OracleSpec):
    """The oracle's drafts; records per row's step how many blocks were fed and how many drafts, and
    per batch step each row's count of [MASK] blocks and of branches."""

    log: list[tuple[int, int]] = []
    steps: list[list[tuple[int, int]]] = []

    def before_step(self, rows):
        Counted.steps.append([])
        super().before_step(rows)

    def blocks(self, row):
        out = super().blocks(row)
        Counted.log.append((len(out or ()), len(row.state.tokens)))
        branches = sum(b.causal for b in out or ())
        Counted.steps[-1].append((len(out or ()) - branches, branches))
        return out


def test_a_fallback_block_after_no_drafts_is_fed_where_it_pays_and_output_stays_ar(tiny, monkeypatch):
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS[:1], method="ar", max_new_tokens=40)[0]
    Counted.truth = ar.tokens + [0] * 8
    use_policy(Counted, monkeypatch)
    fed = {}
    for name, cost in (("flat", FLAT), ("steep", linear_cost(per_token=0.5, block=0.5))):
        for fallback in (False, True):
            Counted.log = []
            config = DecodeConfig(method="spec", block_size=4, adaptive=True, max_new_tokens=40, lookup=0,
                                  block_reach=0.0, fallback=fallback)  # fmt: skip
            got = decode(model, PROMPTS[:1], config, mask_id, extras={"cost": cost})[0]
            assert got.tokens == ar.tokens
            fed[name, fallback] = sum(n == 2 for n, _ in Counted.log)
            if name == "flat":
                zero = sum(m == 0 for _, m in Counted.log)
                fed["zero", fallback] = zero  # steps without drafts (after a rejection: none to verify)
    assert (
        fed["flat", False] == 0 and fed["flat", True] > 0
    )  # free slots: fed wherever a block follows drafts
    assert fed["zero", True] < fed["zero", False]  # after a rejection the fallback's drafts are there
    assert fed["steep", True] < fed["flat", True]  # dear slots: fed only where it pays, if at all


@pytest.mark.parametrize("tree", [0, 2])
def test_a_batch_feeds_fallback_blocks_beside_rows_with_one_and_stays_ar(tiny, monkeypatch, tree):
    """Rows of a batch feed one shape: where one row feeds a fallback block the others get filler
    slots in its place, before any row's branches, and every row's text stays AR's."""
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS, method="ar", max_new_tokens=24)
    Counted.truth = {i: a.tokens + [0] * 8 for i, a in enumerate(ar)}
    use_policy(Counted, monkeypatch)
    Counted.log, Counted.steps = [], []
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, max_new_tokens=24, lookup=0,
                          block_reach=0.0, fallback=True, tree=tree)  # fmt: skip
    got = decode(model, PROMPTS, config, mask_id, extras={"cost": FLAT})
    assert [g.tokens for g in got] == [a.tokens for a in ar]
    # Steps where one row fed a fallback block while another fed a single block (or none).
    mixed = [s for s in Counted.steps if max(k for k, _ in s) == 2 and min(k for k, _ in s) < 2]
    assert mixed
    if tree:  # ... and some of them with branches after the blocks
        assert any(b for s in mixed for _, b in s)


def test_a_batch_prices_its_first_fallback_block_for_every_row_and_the_rest_free():
    from pardec.decoding.spec import SpecDrafts, Speculative
    from pardec.decoding.state import Row

    cost = linear_cost(per_token=0.1)  # each token fed costs a tenth of an AR step
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, fallback=True, block_reach=0.0)

    def wants(rows: int, given: bool) -> bool:
        policy = Speculative(config, 9, None, extras={"cost": cost})
        st = SpecDrafts(tokens=[1, 2, 3])
        st.reach = st.predicted = torch.tensor([0.6, 0.4, 0.3])  # 70% that not all 3 are accepted
        st.plan.block, st.plan.fed, st.plan.slots, st.plan.tokens = True, 3, 4, 3.0
        policy.batch_rows, policy.batch_fallback = rows, given
        return policy.plan_fallback(Row(0, list(range(20)), 10, 100, st))

    assert wants(1, False)  # 4 slots pay for one row
    assert not wants(3, False)  # 12 (a filler block in every row) do not
    assert wants(3, True)  # once another row feeds one, this row's slots are there anyway


@pytest.mark.parametrize("plan_ahead", [False, True])
def test_plan_ahead_counts_the_next_steps_block_drafts_against_a_plain_lookup_step(plan_ahead):
    """A looked-up chain is cheaper to verify without a block (no slots, no adapter), but then the next
    step has no block drafts: with plan_ahead the block step is credited with the drafts its block
    has recently yielded, once the drafts before it are accepted."""
    from pardec.decoding.spec import SpecDrafts, Speculative
    from pardec.decoding.state import Row

    cost = linear_cost(per_token=0.01, block=0.3)  # a block step costs 1.3 AR steps
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, plan_ahead=plan_ahead)
    policy = Speculative(config, 9, None, extras={"cost": cost})
    st = SpecDrafts(tokens=[1, 2, 3], from_lookup=True)
    st.reach = st.predicted = torch.tensor([0.9, 0.8, 0.7])
    st.plan.fed, st.plan.slots, st.plan.block_drafts = 3, 4, 2.5
    row = Row(0, list(range(20)), 10, 100, st)
    # Plain: 3.4 tokens for 1.03 AR steps; with a block 3.4 for 1.33, or 3.4 + 0.7 x 2.5 = 5.15 for 1.33.
    assert policy._plain_pays_more(row) == (not plan_ahead)
    st.plan.block_drafts = 0.5  # blocks that have yielded little do not pay for their slots
    assert policy._plain_pays_more(row)


def test_plan_ahead_learns_what_the_blocks_drafts_yield_where_they_are_verified():
    """The credit plan_ahead gives a block step: a moving average of the drafts accepted at steps that
    verified the block's drafts; steps verifying looked-up drafts, or none, leave it as it was."""
    from pardec.decoding.spec import SpecDrafts, Speculative
    from pardec.decoding.state import Row

    class Verdict(Speculative):  # the target's verdict, given: `accepted` drafts, then a bonus
        accepted = 2

        def _verify_tree(self, row, ntp, block):
            st = row.state
            return self.accepted, st.tokens[: self.accepted] + [8], self.accepted

    config = DecodeConfig(method="spec", block_size=4, adaptive=True, plan_ahead=True)
    policy = Verdict(config, 9, None, extras={"cost": linear_cost(per_token=0.01, block=0.3)})
    slots = torch.randn(4, 12)  # [D, V] the fed block's logits: the next drafts come from them
    plan = Plan()

    def step(tokens, from_lookup=False, accepted=2):
        st = SpecDrafts(tokens=tokens, from_lookup=from_lookup, plan=plan)
        st.plan.block, st.plan.fed = True, len(tokens)
        policy.accepted = accepted
        policy.update(Row(0, list(range(20)), 10, 100, st), None, slots)

    step([5, 6, 7], from_lookup=True)  # a looked-up chain: nothing learned of the block's drafts
    step([])  # no drafts (a probe): nothing either
    assert plan.block_drafts is None
    step([5, 6, 7])
    assert plan.block_drafts == 2
    step([5, 6, 7], accepted=0)
    assert plan.block_drafts == pytest.approx(2 - 0.3 * 2)
