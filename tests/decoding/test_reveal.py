"""Revealed blocks: beside the block after L drafts, blocks after the same drafts whose slot 0 holds
one of the likeliest tokens at draft position L + 1. Where the committed token there is one of them,
that block drafts next, its drafts having seen the token they follow. Greedy output stays AR's token
for token (fp32), sampling stays in distribution."""

import pytest
from test_decoding import PROMPTS, run, use_policy
from test_sampling import chi2_pvalue, exact_joint, sample_counts, small_vocab_model  # noqa: F401  (a fixture)
from test_schedule import FLAT, STEEP
from tiny import tiny_model

from pardec.decoding import DecodeConfig, decode
from pardec.decoding.spec import Speculative
from pardec.errors import PardecError


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


def count_revealed(monkeypatch) -> list[bool]:
    """Record, for every step that drafts next, whether a revealed block did."""
    used, original = [], Speculative.drafting_block

    def counted(self, row, n, commit):
        L, k = original(self, row, n, commit)
        used.append(k is not None and k >= len(self.block_lengths(row)))
        return L, k

    monkeypatch.setattr(Speculative, "drafting_block", counted)
    return used


@pytest.mark.parametrize("more", [{}, {"tree": 2}, {"lookup_forks": 2}, {"draft_blocks": 2}])
def test_spec_with_revealed_blocks_equals_ar_batched_whatever_the_cost(tiny, monkeypatch, more):
    model, mask_id = tiny
    used = count_revealed(monkeypatch)
    prompts = PROMPTS + [[3, 4, 5, 3, 4, 5, 3, 4]]
    ar = run(model, mask_id, prompts, method="ar", max_new_tokens=30)
    # threshold at 1 commits nothing unverified: spec's output, revealed blocks and all
    for method, adaptive, cost in (("spec", False, None), ("spec", True, FLAT), ("spec", True, STEEP),
                                   ("threshold", True, FLAT)):  # fmt: skip
        config = DecodeConfig(method=method, threshold=1.0, block_size=4, adaptive=adaptive, reveal=3,
                              max_new_tokens=30, **more)  # fmt: skip
        got = decode(model, prompts, config, mask_id, extras={"cost": cost} if cost else {})
        assert [g.tokens for g in got] == [a.tokens for a in ar], (method, adaptive, cost)
    assert any(used)  # random tiny models' blocks still put the committed token among their likeliest


class RevealOracle(Speculative):
    """A block whose slot 0 is hidden drafts the first position after the bonus wrong, one that saw
    the bonus drafts right; the likeliest tokens at each position are the wrong draft, then the
    truth (so a revealed block holds the truth where the chain's draft is wrong)."""

    truth: list[int] = []

    saw_bonus = False

    def drafting_block(self, row, n, commit):
        L, k = super().drafting_block(row, n, commit)
        self.saw_bonus = k is not None and k >= len(self.block_lengths(row))
        return L, k

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        st = row.state
        if st.tokens:
            start = len(row.committed) + len(upd.commit) - row.n_prompt  # first new-token index drafted
            truth = self.truth[start : start + len(st.tokens) + 1]
            other = lambda t: (t + 1) % (self.mask_id - 1)  # noqa: E731
            st.tokens = truth[: len(st.tokens)]
            if not self.saw_bonus:
                st.tokens[0] = other(st.tokens[0])
            sure = lambda i: self.saw_bonus or i > 0  # noqa: E731
            st.tops = [[t, other(t)] if sure(i) else [other(t), t] for i, t in enumerate(truth)]
        return upd


def test_a_revealed_block_that_saw_the_bonus_drafts_next(tiny, monkeypatch):
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS[:1], method="ar", max_new_tokens=40)[0]
    RevealOracle.truth = ar.tokens + [0] * 16
    use_policy(RevealOracle, monkeypatch)
    forwards = {}
    for reveal in (0, 1, 2):
        # The oracle's drafts only (lookup=0), the block before the drafts (block_at=0)
        got = run(model, mask_id, PROMPTS[:1], method="spec", block_size=4, max_new_tokens=40, lookup=0,
                  block_at=0, reveal=reveal)[0]  # fmt: skip
        assert got.tokens == ar.tokens, reveal
        forwards[reveal] = got.forwards
    # Without the truth among them (reveal=1 holds the wrong draft), no revealed block drafts: every
    # step's first draft is wrong. With it, the step after a wrong draft drafts from the revealed block
    # that holds its bonus, and its drafts are all accepted.
    assert forwards[1] == forwards[0] and forwards[2] <= 0.6 * forwards[0], forwards


def test_spec_with_revealed_blocks_samples_the_target_distribution(small_vocab_model, monkeypatch):  # noqa: F811
    model, mask_id = small_vocab_model
    used = count_revealed(monkeypatch)
    n = 3000
    counts, _ = sample_counts(model, mask_id, n, method="spec", block_size=3, adaptive=False, reveal=3,
                              temperature=1.0, seed=7)  # fmt: skip
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0), n) > 1e-3
    assert sum(used) > 0.2 * len(used)  # revealed blocks drafted, not only fed


@pytest.mark.parametrize("bad", [-1, 9, 1.5])
def test_reveal_outside_0_to_8_is_refused(bad):
    with pytest.raises(PardecError, match="reveal must be an integer in"):
        DecodeConfig(reveal=bad)
