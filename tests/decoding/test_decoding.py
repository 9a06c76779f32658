"""Exactness of every decoding policy on tiny random models, fp32."""

import dataclasses

import pytest
import torch
from tiny import tiny_model

from pardec.decoding import METHODS, DecodeConfig, decode
from pardec.decoding import engine as engine_mod
from pardec.decoding.spec import SpecDrafts, Speculative
from pardec.decoding.state import Row

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]
N = 24


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


def hf_greedy(model, mask_id, prompt, n=N):
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        suppress_tokens=[mask_id],
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def run(model, mask_id, prompts, **kw):
    """Decode with the fixed shapes the settings name (test_schedule.py tests adaptive spec)."""
    kw.setdefault("max_new_tokens", N)
    kw.setdefault("adaptive", False)
    return decode(model, prompts, DecodeConfig(**kw), mask_id)


def test_ar_greedy_equals_transformers_generate(tiny):
    model, mask_id = tiny
    for prompt in PROMPTS:
        got = run(model, mask_id, [prompt], method="ar")[0]
        assert got.tokens == hf_greedy(model, mask_id, prompt)
        assert got.forwards == N and got.accepted_per_step == [1] * N


@pytest.mark.parametrize(
    "block_size,draft_blocks,block_at",
    [
        (2, 1, None),
        (4, 1, None),
        (7, 1, None),
        (2, 2, None),
        (4, 3, None),
        (7, 7, None),
        (4, 1, 0),
        (7, 1, 2),
        (7, 3, 1),
    ],
)
def test_spec_greedy_equals_ar(tiny, block_size, draft_blocks, block_at):
    model, mask_id = tiny
    for prompt in PROMPTS:
        ar = run(model, mask_id, [prompt], method="ar")[0]
        spec = run(
            model,
            mask_id,
            [prompt],
            method="spec",
            block_size=block_size,
            draft_blocks=draft_blocks,
            block_at=block_at,
            block_reach=0.0,
        )[0]  # block_at None: after all drafts
        assert spec.tokens == ar.tokens
        assert sum(spec.accepted_per_step) == N and spec.forwards == len(spec.accepted_per_step)
        assert max(spec.accepted_per_step) <= block_size


class OracleSpec(Speculative):
    """A drafter that is right at some positions and wrong at others, fixed per position (about 80%
    right): exercises full acceptance, partial acceptance and rejection, the same way whichever
    forward proposes a given position."""

    truth: list[int] | dict[int, list[int]] = []  # AR's tokens; in a batch, per row index

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        if row.state.tokens:
            truth = self.truth[row.index] if isinstance(self.truth, dict) else self.truth
            start = len(row.committed) + len(upd.commit) - row.n_prompt  # first new-token index drafted
            drafts = []
            for i in range(start, start + len(row.state.tokens)):
                t = truth[i]
                drafts.append((t + 1) % (self.mask_id - 1) if (i * 2654435761) % 97 % 10 < 2 else t)
            row.state.tokens = drafts
        return upd


def use_oracle(policy, model, mask_id, prompt, monkeypatch):
    """Make `policy` (an OracleSpec) the spec policy, its truth AR's 40 tokens; returns AR's result."""
    ar = run(model, mask_id, [prompt], method="ar", max_new_tokens=40)[0]
    policy.truth = ar.tokens + [0] * 8
    use_policy(policy, monkeypatch)
    return ar


def use_policy(policy, monkeypatch, method="spec"):
    """Decode `method` with `policy` (a subclass of its policy) for the rest of the test."""
    monkeypatch.setitem(METHODS, method, dataclasses.replace(METHODS[method], policy=policy))


def test_spec_greedy_equals_ar_with_oracle_and_wrong_drafts(tiny, monkeypatch):
    model, mask_id = tiny
    prompt = PROMPTS[0]
    ar = use_oracle(OracleSpec, model, mask_id, prompt, monkeypatch)
    forwards = {}
    for draft_blocks in (1, 2, 4):
        # Block drafts only (lookup=0): what this oracle makes right or wrong
        settings = dict(block_size=4, draft_blocks=draft_blocks, block_at=None, block_reach=0.0, lookup=0)
        spec = run(model, mask_id, [prompt], method="spec", max_new_tokens=40, **settings)[0]
        assert spec.tokens == ar.tokens
        steps = spec.accepted_per_step
        assert max(steps) == 4 and any(1 < s < 4 for s in steps), steps  # full and partial acceptance
        forwards[draft_blocks] = spec.forwards
    # Blocks for more acceptance lengths: no step without drafts after a rejection, so fewer forwards.
    assert max(forwards[2], forwards[4]) < forwards[1] < ar.forwards
    for block_at in (0, 1):
        spec = run(
            model, mask_id, [prompt], method="spec", block_size=4, block_at=block_at, max_new_tokens=40,
            lookup=0,
        )[0]  # fmt: skip
        assert spec.tokens == ar.tokens
        assert spec.forwards <= forwards[1]


def one_hot_logits(ids, V=16):
    out = torch.full((len(ids), V), -10.0)
    out[torch.arange(len(ids)), torch.tensor(ids)] = 10.0
    return out


@pytest.mark.parametrize(
    "block_at,accepted,drafts",
    [
        (None, 3, [21, 22, 23]),  # block after all 3 drafts, all accepted: its slots 1..3
        (None, 1, []),  # a rejection: that block saw a wrong draft, so no drafts
        (0, 1, [22, 23]),  # block after 0 drafts: slots 0-1 are now committed text, 2-3 draft
        (1, 1, [21, 22, 23]),
        (1, 0, []),  # fewer accepted than the block assumed
    ],
)
def test_spec_takes_next_drafts_from_the_block_started_at_or_before_the_accepted_end(
    block_at, accepted, drafts
):
    V, mask_id = 32, 31
    policy = Speculative(
        DecodeConfig(
            method="spec", block_size=4, block_at=block_at, block_reach=0.0, adaptive=False, lookup=0
        ),  # fmt: skip
        mask_id,
        None,
    )
    row = Row(index=0, committed=[5], n_prompt=1, budget=100, state=SpecDrafts([1, 2, 3]))
    [(back, _, _)] = policy.blocks(row)
    assert back == 3 - (3 if block_at is None else block_at)
    target = [1, 2, 3, 9][:accepted] + [7]  # the target's tokens after 5, 1, 2, 3: reject at `accepted`
    ntp = one_hot_logits(target + [0] * (4 - len(target)), V)  # [4, V] at 5, d1, d2, d3
    block = one_hot_logits([20, 21, 22, 23], V)  # [D, V]: slot j of the fed block predicts 20 + j
    upd = policy.update(row, ntp, block)
    assert upd.commit == target[: accepted + 1] and upd.keep_drafts == accepted
    assert row.state.tokens == drafts


def logits_with_confidence(tokens, conf, V=16):
    """[k, V] logits whose softmax gives token i probability conf[i], the rest spread evenly."""
    p = torch.tensor([[(1 - c) / (V - 1)] * V for c in conf])
    p[torch.arange(len(tokens)), torch.tensor(tokens)] = torch.tensor(conf)
    return p.log()


@pytest.mark.parametrize("cutoff,kept", [(0.0, 4), (0.3, 4), (0.34, 3), (0.4, 2), (0.8, 1), (0.95, 0)])
def test_draft_cutoff_keeps_the_prefix_whose_confidence_product_reaches_it(cutoff, kept):
    policy = Speculative(
        DecodeConfig(method="spec", block_size=5, draft_cutoff=cutoff, adaptive=False), 15, None
    )
    row = Row(index=0, committed=[5], n_prompt=1, budget=100, state=SpecDrafts())
    policy.set_drafts(
        row, logits_with_confidence([3, 4, 5, 6], [0.9, 0.8, 0.5, 0.9])
    )  # products .9 .72 .36 .32
    assert row.state.tokens == [3, 4, 5, 6][:kept] and row.state.probs is None


@pytest.mark.parametrize(
    "draft_blocks,accepted,drafts",
    [
        (1, 4, [23, 24]),  # block after the 2 confident drafts; 4 accepted: slot 2 is the bonus, 3.. draft
        (1, 2, [21, 22, 23, 24]),  # exactly the 2 it assumed: slots 1..
        (1, 1, []),  # fewer accepted than the block assumed: no drafts
        (2, 1, [32, 33, 34]),  # the fallback block after 0 drafts: slots 2..
    ],
)
def test_block_reach_feeds_the_block_after_the_likely_accepted_drafts(draft_blocks, accepted, drafts):
    V, mask_id = 48, 47
    policy = Speculative(
        DecodeConfig(
            method="spec", block_size=5, block_reach=0.5, draft_blocks=draft_blocks, adaptive=False, lookup=0
        ),
        mask_id,
        None,
    )
    row = Row(index=0, committed=[5], n_prompt=1, budget=100, state=SpecDrafts())
    policy.set_drafts(row, logits_with_confidence([1, 2, 3, 4], [0.9, 0.8, 0.5, 0.9], V))  # .9 .72 .36 .32
    assert row.state.tokens == [1, 2, 3, 4]  # block_reach only places the block; every draft is fed
    assert [b.back for b in policy.blocks(row)] == [2, 4][:draft_blocks]
    target = [1, 2, 3, 4][:accepted] + [9]
    ntp = one_hot_logits(target + [0] * (5 - len(target)), V)  # [5, V] at 5, d1..d4
    block = one_hot_logits([20, 21, 22, 23, 24, 30, 31, 32, 33, 34][: 5 * draft_blocks], V)  # [NB * D, V]
    upd = policy.update(row, ntp, block)
    assert upd.commit == target[: accepted + 1] and upd.keep_drafts == accepted
    assert row.state.tokens == drafts


class ReachSpec(OracleSpec):
    """Oracle drafts whose stated confidences fall along the block, so block_reach moves the block."""

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        if row.state.tokens:
            row.state.reach = torch.linspace(0.95, 0.05, len(row.state.tokens))
        return upd


def test_spec_with_block_reach_equals_ar(tiny, monkeypatch):
    model, mask_id = tiny
    prompt = PROMPTS[1]
    ar = use_oracle(ReachSpec, model, mask_id, prompt, monkeypatch)
    backs = set()
    real_blocks = ReachSpec.blocks

    def spy(self, row):
        out = real_blocks(self, row)
        backs.add((len(row.state.tokens), out[0].back))
        return out

    monkeypatch.setattr(ReachSpec, "blocks", spy)
    for reach, draft_blocks in ((0.4, 1), (0.4, 2), (0.9, 1)):
        backs.clear()
        settings = dict(block_size=5, block_reach=reach, draft_blocks=draft_blocks)
        spec = run(model, mask_id, [prompt], method="spec", max_new_tokens=40, **settings)[0]
        assert spec.tokens == ar.tokens
        assert spec.forwards < ar.forwards
        # The block sits after some but not all drafts somewhere: neither before nor after all of them.
        assert any(0 < back < m for m, back in backs), backs


def test_spec_with_draft_cutoff_equals_ar_and_feeds_only_kept_drafts(tiny, monkeypatch):
    model, mask_id = tiny
    fed = []
    real_step = engine_mod.block_step

    def spy(model_, cache, pending, block, n_ntp, *rest, **kw):
        fed.append((n_ntp, max(len(p) for p in pending)))
        return real_step(model_, cache, pending, block, n_ntp, *rest, **kw)

    monkeypatch.setattr(engine_mod, "block_step", spy)
    ar = run(model, mask_id, [PROMPTS[2]], method="ar")[0]
    drafts_fed = {}
    for cutoff in (0.0, 0.05, 1.0):
        fed.clear()
        spec = run(model, mask_id, [PROMPTS[2]], method="spec", block_size=5, draft_cutoff=cutoff)[0]
        assert spec.tokens == ar.tokens
        # After the prompt's forward, each step feeds the last committed token plus the drafts, and
        # asks for exactly one NTP logit per fed token.
        assert all(n_ntp == pending for n_ntp, pending in fed[1:]), fed
        drafts_fed[cutoff] = sum(pending - 1 for _, pending in fed[1:])
    assert drafts_fed[1.0] == 0 < drafts_fed[0.0]
    assert drafts_fed[0.05] <= drafts_fed[0.0]


def test_spec_with_all_wrong_drafts_still_equals_ar(tiny, monkeypatch):
    model, mask_id = tiny

    class Wrong(Speculative):
        def update(self, row, ntp, block):
            upd = super().update(row, ntp, block)
            row.state.tokens = [(t + 1) % (mask_id - 1) for t in row.state.tokens]
            return upd

    ar = run(model, mask_id, [PROMPTS[1]], method="ar")[0]
    use_policy(Wrong, monkeypatch)
    spec = run(model, mask_id, [PROMPTS[1]], method="spec", block_size=4)[0]
    assert spec.tokens == ar.tokens


@pytest.mark.parametrize("adaptive", [False, True])
def test_threshold_at_one_decodes_as_spec_and_equals_ar(tiny, adaptive):
    model, mask_id = tiny
    for prompt in PROMPTS:
        ar = run(model, mask_id, [prompt], method="ar")[0]
        kw = dict(block_size=4, adaptive=adaptive)
        spec = run(model, mask_id, [prompt], method="spec", **kw)[0]
        th = run(model, mask_id, [prompt], method="threshold", threshold=1.0, **kw)[0]
        assert th.tokens == ar.tokens  # nothing is that confident: every draft was verified
        assert th.accepted_per_step == spec.accepted_per_step and th.fed_per_step == spec.fed_per_step


def test_threshold_commits_unverified_tokens_and_verifies_the_rest(tiny, monkeypatch):
    """Where the block agrees with the text (forced here) and the threshold is 0, every block's drafts
    are committed unverified; every other token is still the model's greedy choice given the text before
    it, so the unverified ones were fed at their positions and the cache held exactly the text."""
    from pardec.core.scoring import text_logits
    from pardec.decoding.threshold import Threshold

    model, mask_id = tiny
    prompt = PROMPTS[2]
    unverified: set[int] = set()  # positions in the generated text

    class Agreeing(Threshold):
        def next_drafts(self, row, slots, first, text, hidden=None, past=()):
            agreed = slots[:first].argmax(-1).tolist()
            self.extra = super().next_drafts(row, slots, first, agreed, hidden, past)
            return self.extra

        def update(self, row, ntp, block):
            self.extra = []
            upd = super().update(row, ntp, block)
            end = len(row.committed) - row.n_prompt + len(upd.commit)
            unverified.update(range(end - len(self.extra), end))
            return upd

    use_policy(Agreeing, monkeypatch, method="threshold")
    th = run(model, mask_id, [prompt], method="threshold", threshold=0.0, block_size=4, lookup=0)[0]
    unverified = {i for i in unverified if i < len(th.tokens)}
    assert len(unverified) >= len(th.tokens) // 3  # most block steps committed 2 unverified drafts
    greedy = text_logits(model, prompt + th.tokens, len(prompt), mask_id).argmax(-1).tolist()
    checked = [i for i in range(len(th.tokens)) if i not in unverified]
    assert checked and all(th.tokens[i] == greedy[i] for i in checked)
    assert any(th.tokens[i] != greedy[i] for i in unverified)  # lossy: random drafts commit anyway


def test_threshold_commits_the_confident_prefix_when_the_block_agrees_with_the_text():
    from pardec.decoding.threshold import Threshold

    V, D = 10, 5
    cfg = DecodeConfig(method="threshold", threshold=0.8, block_size=D, adaptive=False)
    policy = Threshold(cfg, mask_id=9, generator=None)

    def peaked(token, p):  # logits whose softmax puts p on `token`, the rest spread evenly
        row = torch.full((V,), float(torch.log(torch.tensor((1 - p) / (V - 1)))))
        row[token] = float(torch.log(torch.tensor(p)))
        return row

    def row():
        return Row(index=0, committed=[1, 2], n_prompt=2, budget=16, state=policy.new_state())

    # Slots 0-1 sit at committed tokens 3 and 4 (the last accepted draft and the bonus); 2.. follow
    slots = torch.stack([peaked(3, 0.7), peaked(4, 0.6), peaked(5, 0.95), peaked(6, 0.9), peaked(7, 0.5)])
    r = row()
    assert policy.next_drafts(r, slots, 2, [3, 4]) == [5, 6]  # slot 4 is below the threshold
    assert r.state.tokens == [7]  # the rest waits for the target's verdict
    r = row()
    assert policy.next_drafts(r, slots, 2, [3, 8]) == []  # the block predicted another bonus: its later
    assert r.state.tokens == [5, 6, 7]  # slots continue another text, so every one is a draft
    slots[4] = peaked(7, 0.99)
    r = row()
    assert policy.next_drafts(r, slots, 2, [3, 4]) == [5, 6, 7] and r.state.tokens == []


def test_eb_with_gamma_zero_reveals_one_slot_per_forward(tiny):
    model, mask_id = tiny
    D = 4
    eb = run(model, mask_id, [PROMPTS[0]], method="eb", gamma=0.0, block_size=D, max_new_tokens=12)[0]
    assert eb.accepted_per_step == [0, 0, 0, D] * 3  # one slot per forward, block committed when full
    big = run(model, mask_id, [PROMPTS[0]], method="eb", gamma=1e9, block_size=D, max_new_tokens=12)[0]
    assert big.accepted_per_step == [D] * 3  # an unbounded budget reveals the whole block at once


def test_batch_of_different_lengths_equals_each_alone(tiny):
    model, mask_id = tiny
    for kw in [
        dict(method="ar"),
        dict(method="spec", block_size=3),
        dict(method="threshold", threshold=0.05),
        dict(method="eb", gamma=0.5),
    ]:
        alone = [run(model, mask_id, [p], **kw)[0] for p in PROMPTS]
        batch = run(model, mask_id, PROMPTS, **kw)
        assert [b.tokens for b in batch] == [a.tokens for a in alone], kw
        assert [b.accepted_per_step for b in batch] == [a.accepted_per_step for a in alone], kw


def test_rows_finish_at_stop_tokens_and_leave_the_batch(tiny):
    model, mask_id = tiny
    ar = [run(model, mask_id, [p], method="ar")[0].tokens for p in PROMPTS]
    stop = ar[1][5]  # the sixth token of prompt 1 ends it
    for method in ("ar", "spec"):
        outs = decode(model, PROMPTS, DecodeConfig(method=method, max_new_tokens=N), mask_id, {stop})
        for o, ref in zip(outs, ar):
            cut = ref.index(stop) + 1 if stop in ref else N
            assert o.tokens == ref[:cut]
            assert o.finish == ("stop" if stop in ref else "length")


def test_cache_holds_only_committed_tokens_after_every_step(tiny, monkeypatch):
    model, mask_id = tiny
    seen = []
    real_step = engine_mod.block_step

    def spy(
        model_, cache, pending, block, n_ntp, mask_id_, pad_id=0, hidden_states=False, block_hidden=False
    ):
        # Before each step (batch 1): the cache holds exactly the committed tokens that are not pending.
        seen.append((cache.length, cache.n_cached[0], int(cache.k_valid.sum())))
        return real_step(model_, cache, pending, block, n_ntp, mask_id_, pad_id, hidden_states, block_hidden)

    monkeypatch.setattr(engine_mod, "block_step", spy)
    for method in ("threshold", "spec", "eb"):
        seen.clear()
        run(model, mask_id, [PROMPTS[0]], method=method, block_size=4, threshold=0.05)
        assert all(length == n == valid for length, n, valid in seen), (method, seen)
        assert seen[-1][0] > len(PROMPTS[0])
