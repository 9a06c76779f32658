"""Drafts looked up in the text itself: what is proposed, what is learned of it, and that spec with
looked-up drafts (as its chain or as a branch beside the block's) stays exactly the model's: greedy
token for token in fp32, sampling in distribution."""

import pytest
import torch
from test_decoding import PROMPTS, run, use_policy
from test_sampling import chi2_pvalue, exact_joint, sample_counts, small_vocab_model  # noqa: F401  (a fixture)
from test_schedule import FLAT, STEEP, Right, linear_cost
from test_tree import count_branches
from tiny import counting_model, tiny_model

from pardec.decoding import DecodeConfig, decode
from pardec.decoding import lookup as lookup_module
from pardec.decoding import spec as spec_module
from pardec.decoding.lookup import ALONE, PRIOR_RATE, LookupStats, propose
from pardec.model import datastore


@pytest.mark.parametrize(
    "tokens,drafts,match",
    [
        ([1, 2, 3, 9, 9, 1, 2, 3], [9, 9, 1, 2], 3),  # the suffix 1 2 3 occurred at the start
        ([5, 7, 5, 8, 5], [8, 5], 1),  # two matches of one token: the latest
        ([4, 1, 2, 9, 5, 2, 6, 1, 2], [9, 5, 2, 6], 2),  # a longer match wins over a later, shorter one
        ([1, 2, 3, 4], [], 0),  # the last token never occurred before
        ([7], [], 0),
    ],
)
def test_propose_follows_the_longest_latest_match(tokens, drafts, match):
    assert propose(tokens, 4) == (drafts, match)


def test_propose_caps_the_match_length_and_the_drafts():
    tokens = list(range(10)) * 3
    drafts, match = propose(tokens, 5, max_ngram=6)
    assert match == 6 and drafts == [0, 1, 2, 3, 4]
    assert propose(tokens, 0) == ([], 0)


def test_stats_count_the_run_of_right_drafts_and_the_failure_that_ends_it():
    stats = LookupStats()
    assert stats.rate(1) == pytest.approx(PRIOR_RATE[ALONE][0])
    assert stats.rate(20) == pytest.approx(PRIOR_RATE[ALONE][-1])
    stats.record(3, [1, 2, 3], [1, 2, 5])  # two right, then a failure
    stats.record(3, [1, 2, 3], [1])  # one right; what came after is not known yet
    stats.record(3, [1, 2, 3], [1, 2, 3, 4])  # all right
    b, alone = lookup_module.bucket(3), ALONE
    assert (stats.accepted[b][alone], stats.rejected[b][alone]) == (6, 1)
    assert stats.rate(3) > PRIOR_RATE[ALONE][b]  # mostly right: the rate rises from the prior
    for _ in range(20):
        stats.record(3, [1, 2], [7])
    rels = [alone] * 3
    assert stats.rate(3) < PRIOR_RATE[ALONE][b] and stats.reach(3, rels) == pytest.approx(
        [stats.rate(3) ** k for k in (1, 2, 3)]
    )
    assert stats.rate(1) == pytest.approx(PRIOR_RATE[ALONE][0])  # other match lengths keep their own


def test_relations_to_the_block_hold_until_the_first_difference():
    A, D, N = lookup_module.AGREE, lookup_module.DISAGREE, lookup_module.ALONE
    # After 9 the block drafted a continuation of other text.
    assert lookup_module.relations([1, 2, 3, 4], [1, 2, 9, 4]) == [A, A, D, N]
    assert lookup_module.relations([1, 2, 3], [1]) == [A, N, N]  # the block drafted one token
    assert lookup_module.relations([5, 6], []) == [N, N]  # no block drafts (an AR step)
    assert lookup_module.relations([5, 6], [7, 6]) == [D, N]


def test_stats_learn_each_relation_apart():
    """Agreement with the block raises a draft's prior, a contradiction lowers it; what is seen of
    contradicted drafts (copies that fail) leaves the others' rates alone, and a reach multiplies each
    draft's own rate."""
    A, D, N = lookup_module.AGREE, lookup_module.DISAGREE, lookup_module.ALONE
    stats = LookupStats()
    assert stats.rate(2, A) > stats.rate(2, N) > stats.rate(2, D)
    agree_before = stats.rate(2, A)
    for _ in range(30):  # the block's two drafts were right, the looked-up third that contradicts it not
        stats.record(2, [1, 2, 3], [1, 2, 4], [A, A, D])
    assert stats.rate(2, D) < 0.1 and stats.rate(2, A) > agree_before
    assert stats.rate(2, N) == pytest.approx(PRIOR_RATE[N][lookup_module.bucket(2)])
    a, d, n = stats.rate(2, A), stats.rate(2, D), stats.rate(2, N)
    assert stats.reach(2, [A, D, N]) == pytest.approx([a, a * d, a * d * n])
    table = stats.to_json()
    assert table["match>=2"]["disagree"]["rejected"] == 30 and table["match>=2"]["agree"]["accepted"] == 60


@pytest.fixture(scope="module")
def counting():
    model, mask_id, _ = counting_model()
    return model, mask_id


def test_looked_up_drafts_commit_copies_in_fewer_forwards_and_stay_exactly_ar(counting):
    """A model that counts, a prompt that has counted before: the lookup finds the continuation in the
    prompt, the untrained block cannot."""
    model, mask_id = counting
    prompt = list(range(4, 28)) + [4, 5, 6]
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=20)[0]
    assert ar.tokens[:5] == [7, 8, 9, 10, 11]  # the model counts on
    forwards = {}
    for lookup in (0, 16):
        for name, cost in (("fixed", None), ("flat", FLAT), ("steep", STEEP)):
            config = DecodeConfig(method="spec", block_size=4, lookup=lookup, adaptive=cost is not None,
                                  max_new_tokens=20)  # fmt: skip
            got = decode(model, [prompt], config, mask_id, extras={"cost": cost} if cost else {})[0]
            assert got.tokens == ar.tokens, (lookup, name)
            forwards[lookup, name] = got.forwards
    # Looked-up drafts pay, also where each token fed costs. The untrained block contradicts the copy,
    # so the first looked-up drafts are taken as unlikely until they prove right: where each token fed
    # costs most, the first steps feed few.
    for name, most in (("fixed", 4), ("flat", 4), ("steep", 6)):
        assert forwards[16, name] <= most < forwards[0, name], str(forwards)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


def test_spec_with_lookup_equals_ar_batched_whatever_the_cost(tiny):
    model, mask_id = tiny
    prompts = PROMPTS + [[3, 4, 5, 3, 4, 5, 3, 4]]  # one that repeats itself: the lookup finds matches
    ar = run(model, mask_id, prompts, method="ar", max_new_tokens=30)
    for adaptive, cost in ((False, None), (True, FLAT), (True, STEEP)):
        config = DecodeConfig(method="spec", block_size=4, adaptive=adaptive, max_new_tokens=30)
        got = decode(model, prompts, config, mask_id, extras={"cost": cost} if cost else {})
        assert [g.tokens for g in got] == [a.tokens for a in ar], (adaptive, cost)


class WrongAtEvery3rd(Right):
    """Block drafts the target's own tokens but every third, stated with full confidence: the block is
    the chain, and where its draft is wrong the looked-up one (right, for a model that counts) is the
    branch to take."""

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        st = row.state
        start = len(row.committed) + len(upd.commit) - row.n_prompt
        st.tokens = [t if (start + i) % 3 else (t + 1) % (self.mask_id - 1) for i, t in enumerate(st.tokens)]
        return upd


def test_a_looked_up_branch_recovers_a_wrong_block_draft(counting, monkeypatch):
    model, mask_id = counting
    prompt = list(range(4, 28)) + [4, 5, 6]
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=24)[0]
    WrongAtEvery3rd.truth = ar.tokens + [0] * 8
    use_policy(WrongAtEvery3rd, monkeypatch)
    # Lookups assumed poor: fewer expected than the block's sure drafts, so they only branch.
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.1)
    taken = count_branches(monkeypatch)
    # The block after no draft: its slots draft the next step whichever path was taken; short lookups,
    # so that a taken branch leaves some of them.
    config = DecodeConfig(
        method="spec", block_size=4, block_at=0, lookup=2, adaptive=False, max_new_tokens=24
    )
    got = decode(model, [prompt], config, mask_id)[0]
    assert got.tokens == ar.tokens
    assert sum(taken) >= 2  # the looked-up branch committed what the block's chain lost


class RightBlock(Right):
    """Block drafts always right, but with low stated confidence, so the lookup is the chain."""

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        if row.state.tokens:
            row.state.reach = row.state.predicted = torch.full((len(row.state.tokens),), 0.01)
        return upd


def test_a_block_branch_recovers_a_wrong_looked_up_draft(tiny, monkeypatch):
    model, mask_id = tiny
    prompt = [3, 4, 5, 3, 4, 5, 3, 4]  # looked up: 5 3 4 5 ..., which a random model will not say
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=24)[0]
    RightBlock.truth = ar.tokens + [0] * 8
    use_policy(RightBlock, monkeypatch)
    # Lookups assumed good: the chain.
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.9)
    taken = count_branches(monkeypatch)
    config = DecodeConfig(method="spec", block_size=4, block_at=0, adaptive=False, max_new_tokens=24)
    got = decode(model, [prompt], config, mask_id)[0]
    assert got.tokens == ar.tokens
    assert sum(taken) >= 2


@pytest.mark.parametrize("rate", [0.95, 0.05], ids=["lookup-chain", "lookup-branch"])
def test_spec_with_lookup_samples_the_target_distribution(small_vocab_model, monkeypatch, rate):  # noqa: F811
    """Looked-up drafts are point-mass proposals: as the chain, and as a branch beside the block's
    sampled drafts, the committed tokens still follow the target's distribution."""
    model, mask_id = small_vocab_model
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: rate)
    chains, original = [], spec_module.Speculative.look_up

    def look_up(self, row):
        original(self, row)
        chains.append(row.state.from_lookup)

    monkeypatch.setattr(spec_module.Speculative, "look_up", look_up)
    taken = count_branches(monkeypatch)
    n, t = 6000, 4
    counts, _ = sample_counts(model, mask_id, n, t=t, method="spec", block_size=3, adaptive=False,
                              temperature=1.0, seed=7)  # fmt: skip
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0, t), n) > 1e-3
    if rate > 0.5:
        assert sum(chains) > 0.3 * len(chains)  # looked-up chains were verified, not only proposed
    else:
        assert sum(taken) > 0.02 * len(taken) and len(taken) > 500  # looked-up branches were taken


def test_sampling_stays_exact_when_the_chain_follows_agreement(small_vocab_model, monkeypatch):  # noqa: F811
    """The lookup is the chain where the block agrees with it and a branch where it does not: a choice
    made on the drafts drawn would bias the committed tokens (measured here before the fix: p < 1e-30);
    made on the block's most likely tokens, which do not depend on the draw, it does not."""
    model, mask_id = small_vocab_model
    rates = {lookup_module.AGREE: 0.99, lookup_module.DISAGREE: 0.01, ALONE: 0.5}
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: rates[rel])
    chains, original = [], spec_module.Speculative.look_up

    def look_up(self, row):
        original(self, row)
        if row.state.look and row.state.looked[0].rels[0] != ALONE:  # the block drafted too
            chains.append(row.state.from_lookup)

    monkeypatch.setattr(spec_module.Speculative, "look_up", look_up)
    n, t = 3000, 3
    counts, _ = sample_counts(model, mask_id, n, t=t, method="spec", block_size=3, adaptive=False,
                              temperature=1.0, seed=5)  # fmt: skip
    assert 0.05 * len(chains) < sum(chains) < 0.95 * len(chains)  # both kinds of chain, by agreement
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0, t), n) > 1e-3


def test_plain_ar_steps_still_verify_looked_up_drafts_where_blocks_never_pay(counting, monkeypatch):
    """A block costs 50 AR steps here, so the schedule decodes plain AR steps; those steps still feed
    the looked-up drafts, which cost a little each and are right."""
    model, mask_id = counting
    prompt = list(range(4, 28)) + [4, 5, 6]
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=40)[0]
    fed_in_ar_steps, original = [], spec_module.Speculative.lookup_in_ar_step

    def counted(self, row):
        fed_in_ar_steps.append(original(self, row))
        return fed_in_ar_steps[-1]

    monkeypatch.setattr(spec_module.Speculative, "lookup_in_ar_step", counted)
    config = DecodeConfig(method="spec", block_size=4, lookup=4, max_new_tokens=40)  # 4: more steps
    got = decode(model, [prompt], config, mask_id, extras={"cost": linear_cost(per_token=0.01, block=50.0)})[
        0
    ]
    assert got.tokens == ar.tokens
    assert fed_in_ar_steps and max(fed_in_ar_steps) > 1
    assert got.forwards < 25  # AR alone: 40


@pytest.mark.parametrize("cost,lookup_chain", [(None, True), (FLAT, True), (STEEP, False)],
                         ids=["fixed", "flat", "steep"])  # fmt: skip
def test_the_chain_is_the_candidate_with_the_most_tokens_per_second(monkeypatch, cost, lookup_chain):
    """16 looked-up drafts each accepted with probability 0.5 (1.0 token expected) against 3 block
    drafts reaching 0.7, 0.2, 0.05 (0.95): more tokens from the lookup, but on a steep curve the
    block's commit more per second for the few tokens they feed."""
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.5)
    config = DecodeConfig(method="spec", block_size=4, adaptive=cost is not None)
    policy = spec_module.Speculative(config, 47, None, extras={"cost": cost} if cost else {})
    state = policy.new_state()
    state.tokens, state.predicted = [30, 31, 32], torch.tensor([0.7, 0.2, 0.05])
    state.reach = state.predicted
    row = spec_module.Row(index=0, committed=list(range(1, 21)) + [5], n_prompt=3, budget=100, state=state)
    policy.look_up(row)
    assert state.look == list(range(6, 21)) + [5] and state.from_lookup is lookup_chain
    assert state.tokens == (state.look if lookup_chain else [30, 31, 32])
    assert state.other == ([30, 31, 32] if lookup_chain else state.look)  # the other, from the fork (0)


@pytest.mark.parametrize("block,plain", [(3.0, True), (0.0, False)], ids=["dear-block", "flat"])
def test_a_looked_up_chain_is_fed_without_the_block_where_the_block_costs_more_than_it_adds(
    monkeypatch, block, plain
):
    """Looked-up drafts accepted 9 times in 10: a block step pays for them (4.6 tokens for 3.4 AR
    steps where the block costs 3), but the same drafts fed alone pay more (at 0.1 an extra token);
    where the block costs nothing more, the step keeps it (its slots give the next step drafts)."""
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.9)
    cost = linear_cost(per_token=0.1, block=block)
    config = DecodeConfig(method="spec", block_size=4, adaptive=True, lookup=8)
    policy = spec_module.Speculative(config, 47, None, extras={"cost": cost})
    state = policy.new_state()
    state.tokens, state.predicted = [30, 31, 32], torch.tensor([0.7, 0.2, 0.05])
    state.reach = state.predicted
    row = spec_module.Row(index=0, committed=list(range(1, 21)) + [5], n_prompt=3, budget=100, state=state)
    policy.before_step([row])
    assert state.from_lookup and state.plan.block is not plain
    assert len(policy.drafts(row)) >= 4
    assert (policy.blocks(row) is None) is plain


def test_copies_decode_exactly_ar_in_plain_steps_where_blocks_are_dear(counting):
    model, mask_id = counting
    prompt = list(range(4, 28)) + [4, 5, 6]
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=20)[0]
    config = DecodeConfig(method="spec", block_size=4, lookup=16, adaptive=True, max_new_tokens=20)
    got = decode(model, [prompt], config, mask_id, extras={"cost": linear_cost(per_token=0.05, block=3.0)})[0]
    assert got.tokens == ar.tokens and got.forwards <= 6


@pytest.mark.parametrize("batch", [1, 2])
def test_without_a_trained_block_spec_feeds_only_looked_up_drafts_in_plain_steps(counting, batch):
    """A plain model's block slots predict noise: even where blocks cost nothing (FLAT), spec without a
    trained block feeds no slot, and its looked-up drafts still commit copies in fewer forwards."""
    model, mask_id = counting
    prompts = [list(range(4, 28)) + [4, 5, 6], list(range(10, 30)) + [10, 11]][:batch]
    ar = run(model, mask_id, prompts, method="ar", max_new_tokens=24)
    config = DecodeConfig(method="spec", block_size=4, lookup=16, adaptive=True, max_new_tokens=24)
    trained = decode(model, prompts, config, mask_id, extras={"cost": FLAT})
    got = decode(model, prompts, config, mask_id, extras={"cost": FLAT, "trained_block": False})
    assert [g.tokens for g in got] == [a.tokens for a in ar]
    assert all(sum(g.slots_per_step) == 0 for g in got)
    assert all(sum(t.slots_per_step) > 0 for t in trained)  # the same cost with a trained block feeds it
    assert all(g.forwards < 12 for g in got)  # AR alone: 24


def test_spec_knows_the_block_is_trained_only_with_an_adapter(tmp_path):
    from types import SimpleNamespace

    config = DecodeConfig(method="spec", block_size=4, adaptive=False)
    for adapter, trained in ((None, False), (tmp_path, True)):
        lm = SimpleNamespace(adapter=adapter, calibration=None, datastore=None, markov=None)
        assert spec_module.prepare(lm, config, False, {})[1]["trained_block"] is trained


def test_store_stats_pool_each_draft_by_its_own_support():
    stats = LookupStats.for_store()
    levels = lookup_module.support_levels([0.95, 0.4, 0.1])  # -> 95, 40, 10 percent
    assert levels == [95, 40, 10]
    rates = [stats.rate(level) for level in levels]
    assert rates == pytest.approx([lookup_module.STORE_PRIOR_RATE[ALONE][b] for b in (3, 1, 0)])
    assert stats.reach(levels, [ALONE] * 3) == pytest.approx(
        [rates[0], rates[0] * rates[1], rates[0] * rates[1] * rates[2]]
    )
    for _ in range(20):  # the sure draft right, the one after it wrong
        stats.record(levels, [5, 6, 7], [5, 9, 7])
    assert stats.rate(95) > rates[0] and stats.rate(40) < rates[1]
    assert stats.rate(10) == pytest.approx(rates[2])  # never decided: a failure ends the run before it
    assert list(stats.to_json()) == ["support%>=0", "support%>=30", "support%>=60", "support%>=90"]


# ---------------------------------------------------------------- drafts from the datastore


def store_chains(monkeypatch) -> list[bool]:
    """Per step with looked-up drafts: whether the chain is the datastore's."""
    chains, original = [], spec_module.Speculative.look_up

    def look_up(self, row):
        original(self, row)
        st = row.state
        if st.looked:
            store = [c.drafts for c in st.looked if c.stats is self.store_stats]
            chains.append(st.from_lookup and bool(store) and store[0][: len(st.look)] == st.look)

    monkeypatch.setattr(spec_module.Speculative, "look_up", look_up)
    return chains


def test_drafts_from_the_datastore_commit_in_fewer_forwards_and_stay_exactly_ar(counting, monkeypatch):
    """The counting model's own kind of text in the store, a prompt that never repeats itself: the
    in-context lookup finds nothing, the store finds the count."""
    model, mask_id = counting
    store = datastore.build([[(s + i) % 32 for i in range(40)] for s in range(0, 32, 3)])
    prompt = [4, 5, 6]
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=20)[0]
    assert ar.tokens[:5] == [7, 8, 9, 10, 11]
    chains = store_chains(monkeypatch)
    for name, cost in (("fixed", None), ("flat", FLAT), ("steep", STEEP)):
        forwards = {}
        for key, use, extras in (("store", True, {"datastore": store}), ("none", True, {}),
                                 ("off", False, {"datastore": store})):  # fmt: skip
            config = DecodeConfig(method="spec", block_size=4, adaptive=cost is not None, datastore=use,
                                  max_new_tokens=20)  # fmt: skip
            extras = {**extras, "cost": cost} if cost else extras
            got = decode(model, [prompt], config, mask_id, extras=extras)[0]
            assert got.tokens == ar.tokens, (name, key)
            forwards[key] = got.forwards
        assert forwards["store"] < forwards["none"] == forwards["off"], (name, forwards)
    assert any(chains)


def test_spec_with_a_datastore_of_other_text_equals_ar_batched_whatever_the_cost(tiny):
    """A store of random text: its drafts are mostly wrong, and the output is still the model's."""
    model, mask_id = tiny
    rng = torch.Generator().manual_seed(0)
    store = datastore.build(torch.randint(0, 6, (40, 30), generator=rng).tolist())
    prompts = PROMPTS + [[3, 4, 5, 3, 4, 5, 3, 4]]
    ar = run(model, mask_id, prompts, method="ar", max_new_tokens=30)
    for adaptive, cost in ((False, None), (True, FLAT), (True, STEEP)):
        config = DecodeConfig(method="spec", block_size=4, adaptive=adaptive, max_new_tokens=30)
        extras = {"datastore": store, **({"cost": cost} if cost else {})}
        got = decode(model, prompts, config, mask_id, extras=extras)
        assert [g.tokens for g in got] == [a.tokens for a in ar], (adaptive, cost)


def test_spec_with_datastore_drafts_samples_the_target_distribution(small_vocab_model, monkeypatch):  # noqa: F811
    """The store's drafts are point-mass proposals like the in-context ones: as the chain, the
    committed tokens still follow the target's distribution."""
    model, mask_id = small_vocab_model
    rng = torch.Generator().manual_seed(1)
    store = datastore.build(torch.randint(0, 4, (30, 12), generator=rng).tolist())
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.95)
    chains = store_chains(monkeypatch)
    n, t = 6000, 4
    counts, _ = sample_counts(model, mask_id, n, t=t, method="spec", block_size=3, adaptive=False,
                              temperature=1.0, seed=11, extras={"datastore": store})  # fmt: skip
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0, t), n) > 1e-3
    assert sum(chains) > 0.2 * len(chains)  # the store's drafts were verified, not only proposed


# ---------------------------------------------------------------- lookups after the chain's first drafts


def forked_branches(monkeypatch) -> list[int]:
    """The fork of every looked-up branch taken."""
    forks, original = [], spec_module.accept_with_branches

    def counted(drafts, probs, ntp, branch_forks, *rest):
        out = original(drafts, probs, ntp, branch_forks, *rest)
        if out[2] >= 0:
            forks.append(branch_forks[out[2]])
        return out

    monkeypatch.setattr(spec_module, "accept_with_branches", counted)
    return forks


class RightThenWrong(Right):
    """The block's first draft right, stated with full confidence, the ones after it wrong, each
    stated as a coin flip."""

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        st = row.state
        st.tokens = st.tokens[:1] + [(t + 1) % (self.mask_id - 1) for t in st.tokens[1:]]
        if st.tokens:
            st.reach = st.predicted = 0.5 ** torch.arange(len(st.tokens), dtype=torch.float32)
        return upd


@pytest.mark.parametrize("cost", [None, FLAT], ids=["fixed", "flat"])
def test_lookups_after_the_chains_first_draft_carry_on_where_its_next_fails(counting, monkeypatch, cost):
    """No lookup before the chain finds anything (patched away); the lookup after its first draft,
    which is right, finds the count in the prompt: as a branch at fork 1 it commits what the chain's
    wrong drafts lose, and the output is still exactly AR's."""
    model, mask_id = counting
    prompt = list(range(4, 28)) + [4, 5, 6]
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=24)[0]
    RightThenWrong.truth = ar.tokens + [0] * 8
    use_policy(RightThenWrong, monkeypatch)
    monkeypatch.setattr(spec_module.Speculative, "candidates", lambda self, row: [])
    forks = forked_branches(monkeypatch)
    forwards = {}
    for n in (0, 2):
        config = DecodeConfig(method="spec", block_size=4, block_at=0, lookup=8, lookup_forks=n,
                              adaptive=cost is not None, max_new_tokens=24)  # fmt: skip
        got = decode(model, [prompt], config, mask_id, extras={"cost": cost} if cost else {})[0]
        assert got.tokens == ar.tokens, n
        forwards[n] = got.forwards
    # The chain alone commits 2 tokens a forward at most; a taken branch up to 6, after which the
    # block's slots are all behind the bonus and the next step drafts afresh.
    assert forwards[2] <= 0.6 * forwards[0], forwards
    assert forks and all(f >= 1 for f in forks)


@pytest.mark.parametrize("forks", [1, 3])
def test_spec_with_lookup_forks_equals_ar_batched_whatever_the_cost(tiny, forks):
    model, mask_id = tiny
    rng = torch.Generator().manual_seed(0)
    store = datastore.build(torch.randint(0, 6, (40, 30), generator=rng).tolist())
    prompts = PROMPTS + [[3, 4, 5, 3, 4, 5, 3, 4]]
    ar = run(model, mask_id, prompts, method="ar", max_new_tokens=30)
    # threshold at 1 commits nothing unverified: spec's output, branches and all
    for method, adaptive, cost in (("spec", False, None), ("spec", True, FLAT), ("spec", True, STEEP),
                                   ("threshold", True, FLAT)):  # fmt: skip
        config = DecodeConfig(method=method, threshold=1.0, block_size=4, adaptive=adaptive,
                              lookup_forks=forks, max_new_tokens=30)  # fmt: skip
        extras = {"datastore": store, **({"cost": cost} if cost else {})}
        got = decode(model, prompts, config, mask_id, extras=extras)
        assert [g.tokens for g in got] == [a.tokens for a in ar], (method, adaptive, cost)


def test_spec_with_lookup_forks_samples_the_target_distribution(small_vocab_model, monkeypatch):  # noqa: F811
    """Branches forked after the chain's first drafts are point-mass proposals at their fork: the
    committed tokens still follow the target's distribution, and such branches were taken."""
    model, mask_id = small_vocab_model
    rng = torch.Generator().manual_seed(1)
    store = datastore.build(torch.randint(0, 4, (30, 12), generator=rng).tolist())
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.3)
    forks = forked_branches(monkeypatch)
    n, t = 6000, 4
    counts, _ = sample_counts(model, mask_id, n, t=t, method="spec", block_size=3, adaptive=False,
                              lookup_forks=2, temperature=1.0, seed=13,
                              extras={"datastore": store})  # fmt: skip
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0, t), n) > 1e-3
    assert sum(f >= 1 for f in forks) > 100  # branches at later forks were taken, not only fed


@pytest.mark.parametrize("forks", [0, 1])
def test_with_lookup_forks_every_sources_lookup_is_a_branch_not_only_the_others(monkeypatch, forks):
    """The text and the store both propose drafts before the chain (the block's sure drafts): without
    lookup forks only the likelier source is the other candidate's branch; with them both are."""
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.3)
    store = datastore.build([[4, 5, 40, 41, 42]])
    config = DecodeConfig(method="spec", block_size=4, adaptive=False, lookup=8, lookup_forks=forks)
    policy = spec_module.Speculative(config, 47, None, extras={"datastore": store})
    state = policy.new_state()
    state.tokens, state.predicted = [30, 31, 32], torch.tensor([0.95, 0.9, 0.85])
    state.reach = state.predicted
    row = spec_module.Row(index=0, committed=list(range(1, 21)) + [4, 5], n_prompt=3, budget=100, state=state)
    policy.look_up(row)
    assert not state.from_lookup  # the block's drafts are the chain
    firsts = {(b.fork, b.tokens[0]) for b in policy.looked_branches(row)}
    if forks:
        # Both sources at fork 0 (the text: 6 after "4 5"; the store: 40); after the chain's first
        # draft (30) neither finds anything.
        assert firsts == {(0, 6), (0, 40)}
    else:
        assert len(firsts) == 1 and firsts <= {(0, 6), (0, 40)}


def test_a_plain_step_feeds_the_other_sources_lookup_as_a_branch_where_no_row_feeds_a_block(monkeypatch):
    """No trained block (every step plain): the text's lookup is the chain; with lookup forks the
    store's, which parts from it at its first draft, is a causal branch in the same plain step, with
    no [MASK] slot fed."""
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.5)
    store = datastore.build([[4, 5, 40, 41, 42]])
    config = DecodeConfig(method="spec", block_size=4, lookup=8, lookup_forks=1)
    policy = spec_module.Speculative(config, 47, None, extras={"cost": FLAT, "datastore": store,
                                                                "trained_block": False})  # fmt: skip
    committed = list(range(1, 21)) + [4, 5, 6, 7, 8] + list(range(9, 15)) + [4, 5]
    row = spec_module.Row(index=0, committed=committed, n_prompt=3, budget=100, state=policy.new_state())
    policy.before_step([row])
    assert policy.all_plain and row.state.from_lookup and not row.state.plan.block
    drafts = policy.drafts(row)
    assert drafts[:2] == [6, 7]  # the text's copy after "4 5"
    blocks = policy.blocks(row)
    assert blocks and all(b.causal for b in blocks)  # branches only: no block slots
    # The store's at fork 0 (likeliest first); the text's relookup after the first draft carries on
    # after the chain's last.
    assert blocks[0].slots[:3] == [40, 41, 42] and blocks[0].back == len(drafts)


def test_plain_steps_feed_no_branch_beside_a_row_that_feeds_a_block(monkeypatch):
    """Rows of a batch feed one shape: a plain row feeds no branch while another row feeds a block."""
    monkeypatch.setattr(LookupStats, "rate", lambda self, match, rel=ALONE: 0.5)
    store = datastore.build([[4, 5, 40, 41, 42]])
    config = DecodeConfig(method="spec", block_size=4, lookup=8, lookup_forks=1)
    policy = spec_module.Speculative(config, 47, None, extras={"cost": FLAT, "datastore": store})
    committed = list(range(1, 21)) + [4, 5, 6, 7, 8] + list(range(9, 15)) + [4, 5]
    rows = [spec_module.Row(index=i, committed=list(committed), n_prompt=3, budget=100,
                            state=policy.new_state()) for i in range(2)]  # fmt: skip
    rows[0].state.plan.ar_left = 3  # this row decodes plain steps for a while; the other a block step
    policy.before_step(rows)
    assert not rows[0].state.plan.block and rows[1].state.plan.block and not policy.all_plain
    policy.drafts(rows[0])
    assert rows[0].state.fork is None and policy.blocks(rows[0]) is None


@pytest.mark.parametrize("batch", [1, 3])
def test_plain_steps_with_branches_decode_exactly_ar(tiny, batch, monkeypatch):
    """Spec with no trained block (plain steps only) and both sources, lookup forks too, batched or
    not: token for token AR's output, and some plain steps fed branches."""
    model, mask_id = tiny
    fed, blocks = [], spec_module.Speculative.blocks

    def recorded(self, row):
        fed.append(blocks(self, row))
        return fed[-1]

    monkeypatch.setattr(spec_module.Speculative, "blocks", recorded)
    rng = torch.Generator().manual_seed(0)
    store = datastore.build(torch.randint(0, 6, (40, 30), generator=rng).tolist())
    prompts = (PROMPTS + [[3, 4, 5, 3, 4, 5, 3, 4]])[:batch]
    ar = run(model, mask_id, prompts, method="ar", max_new_tokens=30)
    config = DecodeConfig(method="spec", block_size=4, lookup=8, lookup_forks=2, max_new_tokens=30)
    got = decode(model, prompts, config, mask_id,
                 extras={"cost": FLAT, "datastore": store, "trained_block": False})  # fmt: skip
    assert [g.tokens for g in got] == [a.tokens for a in ar]
    assert all(s == 0 for g in got for s in g.slots_per_step)  # never a block slot
    branched = [b for b in fed if b is not None]
    assert branched and all(blk.causal for b in branched for blk in b)  # branches, and only branches
