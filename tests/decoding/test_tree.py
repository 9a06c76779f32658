"""Tree verification: branches that replace an uncertain draft by its alternatives. Greedy output is
AR's token for token (fp32), sampling stays in distribution, and a branch commits what the chain
alone would have lost."""

import pytest
import torch
from scipy.stats import chisquare
from test_decoding import PROMPTS, run, use_policy
from test_sampling import chi2_pvalue, exact_joint, sample_counts, small_vocab_model  # noqa: F401  (a fixture)
from test_schedule import FLAT, STEEP
from tiny import tiny_model

from pardec.core.verify import accept_with_branches
from pardec.decoding import DecodeConfig, decode
from pardec.decoding import spec as spec_module
from pardec.decoding.spec import Speculative

V = 12


def one_hot(tokens, v=V):
    return torch.nn.functional.one_hot(torch.tensor(tokens), v).float() * 10


def test_greedy_tree_takes_the_branch_whose_alternative_the_target_chose():
    drafts = [1, 2, 3, 4]
    target = one_hot([1, 5, 3, 4, 0])  # the target rejects draft 2 (index 1) for 5
    branches = [[6, 3, 4], [5, 3, 4]]  # alternatives to drafts[1], then the drafts after it
    after_5 = one_hot([3, 4, 9])  # the target's tokens after 5, 3, 4 on the branch
    n, commit, taken = accept_with_branches(drafts, None, target, [1, 1], branches,
                                            [one_hot([0, 0, 0]), after_5], 0.0, 1.0, None)  # fmt: skip
    assert (n, commit, taken) == (1, [1, 5, 3, 4, 9], 1)
    # No alternative matches: the chain's bonus.
    n, commit, taken = accept_with_branches(drafts, None, target, [1], [[6, 3, 4]], [after_5], 0.0, 1.0, None)
    assert (n, commit, taken) == (1, [1, 5], -1)
    # A rejection before the fork, or none at it: the chain alone decides.
    n, commit, taken = accept_with_branches(drafts, None, target, [2, 2], branches, [after_5] * 2, 0.0, 1.0,
                                            None)  # fmt: skip
    assert (n, commit, taken) == (1, [1, 5], -1)
    ok = one_hot([1, 2, 3, 4, 7])
    assert accept_with_branches(drafts, None, ok, [1, 1], branches, [after_5] * 2, 0.0, 1.0, None) == (
        4, [1, 2, 3, 4, 7], -1)  # fmt: skip


def test_greedy_branches_at_several_forks_count_only_at_the_chains_first_rejection_or_end():
    drafts = [1, 2, 3]
    branches = [[5, 6], [7, 8], [9]]
    forks = [0, 2, 3]  # an alternative to drafts[0], to drafts[2], and one after the last draft
    target = one_hot([1, 2, 7, 8])  # the target rejects drafts[2] for 7
    after = [one_hot([0, 0]), one_hot([8, 4]), one_hot([6])]  # the target's tokens after each branch token
    assert accept_with_branches(drafts, None, target, forks, branches, after, 0.0, 1.0, None) == (
        2, [1, 2, 7, 8, 4], 1)  # fmt: skip
    # Every draft accepted, the bonus 9: the branch after the last draft carries on.
    target = one_hot([1, 2, 3, 9])
    assert accept_with_branches(drafts, None, target, forks, branches, after, 0.0, 1.0, None) == (
        3, [1, 2, 3, 9, 6], 2)  # fmt: skip
    # A rejection where no branch forks: the chain's bonus alone.
    target = one_hot([1, 4, 3, 9])
    assert accept_with_branches(drafts, None, target, forks, branches, after, 0.0, 1.0, None) == (
        1, [1, 4], -1)  # fmt: skip


def test_sampled_branches_after_the_last_draft_commit_the_targets_distribution():
    """One draft, two point-mass alternatives after it (fork m = 1): the token after the draft follows
    p1 whether or not a branch is taken, and the token after a taken branch its own logits."""
    g = torch.Generator().manual_seed(2)
    v = 5
    p_logits = torch.randn(2, v, generator=g)  # [m + 1, V]
    q = torch.softmax(torch.randn(1, v, generator=g), -1)
    branch_logits = [torch.randn(2, v, generator=g) for _ in range(2)]  # after each alternative
    gen = torch.Generator().manual_seed(3)
    second, after, taken = torch.zeros(v), {}, 0
    for _ in range(20000):
        d = int(torch.multinomial(q[0], 1, generator=gen))
        branches = [[1, 3], [2, 4]]  # each: an alternative after the draft, then a looked-up draft
        probs = [torch.nn.functional.one_hot(torch.tensor(b[1:]), v).float() for b in branches]
        _, commit, k = accept_with_branches([d], q, p_logits, [1, 1], branches, branch_logits, 1.0, 1.0, gen,
                                            probs)  # fmt: skip
        if commit[0] != d:
            continue  # the draft was rejected: its residual's token, as the chain test checks
        second[commit[1]] += 1
        taken += k >= 0
        if k >= 0:
            after.setdefault(k, torch.zeros(v))[commit[2]] += 1
    assert chisquare(second, torch.softmax(p_logits[1], -1) * second.sum()).pvalue > 1e-3
    assert taken > 1000
    # A taken branch's looked-up draft is verified as a chain's: the token after the alternative
    # follows the branch's logits there, accepted or drawn from the residual.
    for k, counts in after.items():
        assert chisquare(counts, torch.softmax(branch_logits[k][0], -1) * counts.sum()).pvalue > 1e-3, k


def test_sampled_tree_commits_the_targets_distribution_at_the_fork_and_after_it():
    """Fork at the only draft, two alternatives: the first committed token follows p0; after the draft
    the next follows the chain's p1, after an alternative the branch's logits (chi-square each)."""
    g = torch.Generator().manual_seed(0)
    v = 5
    p_logits = torch.randn(2, v, generator=g)  # [m + 1 = 2, V] the target after the prefix, after the draft
    q = torch.softmax(torch.randn(1, v, generator=g), -1)  # the draft's proposal
    branch_logits = [torch.randn(1, v, generator=g) for _ in range(2)]  # the target after each alternative
    gen = torch.Generator().manual_seed(1)
    first, after = torch.zeros(v), {}  # after[(path, token)]: counts of the token committed after it
    taken = 0
    for _ in range(20000):
        d = int(torch.multinomial(q[0], 1, generator=gen))
        alts = [t for t in torch.argsort(q[0], descending=True).tolist() if t != d][:2]
        _, commit, k = accept_with_branches([d], q, p_logits, [0, 0], [[a] for a in alts], branch_logits, 1.0,
                                            1.0, gen)  # fmt: skip
        first[commit[0]] += 1
        taken += k >= 0
        if len(commit) == 2:
            key = ("chain", None) if k < 0 else ("branch", k)
            after.setdefault(key, torch.zeros(v))[commit[1]] += 1
    assert chisquare(first, torch.softmax(p_logits[0], -1) * first.sum()).pvalue > 1e-3
    assert taken > 2000  # the branches were really used
    for (path, k), counts in after.items():
        logits = p_logits[1] if path == "chain" else branch_logits[k][0]
        assert chisquare(counts, torch.softmax(logits, -1) * counts.sum()).pvalue > 1e-3, (path, k)


class TreeOracle(Speculative):
    """Drafts right except at fixed positions (about 1 in 3), where the target's token is offered as the
    draft's first alternative, and those positions are where the fork's gain is highest."""

    truth: list[int] = []

    def update(self, row, ntp, block):
        upd = super().update(row, ntp, block)
        st = row.state
        if st.tokens:
            start = len(row.committed) + len(upd.commit) - row.n_prompt
            wrong = [(i * 2654435761) % 97 % 3 == 0 for i in range(start, start + len(st.tokens))]
            truth = self.truth[start : start + len(st.tokens)]
            other = lambda t: (t + 1) % (self.mask_id - 1)  # noqa: E731
            st.tokens = [other(t) if w else t for t, w in zip(truth, wrong)]
            st.alts = [[t, other(other(t))][: self.cfg.tree] if w else [other(t)] * self.cfg.tree
                       for t, w in zip(truth, wrong)]  # fmt: skip
            st.alt_mass = [0.9 if w else 0.01 for w in wrong]
        return upd


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


@pytest.mark.parametrize("tree,depth", [(1, 3), (2, 2), (3, 0)])
def test_tree_spec_greedy_equals_ar_and_branches_commit_more(tiny, monkeypatch, tree, depth):
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS[:1], method="ar", max_new_tokens=40)[0]
    TreeOracle.truth = ar.tokens + [0] * 16
    use_policy(TreeOracle, monkeypatch)
    # The oracle's drafts only (lookup=0)
    settings = dict(method="spec", block_size=5, max_new_tokens=40, block_reach=0.0, lookup=0)
    chain = run(model, mask_id, PROMPTS[:1], **settings)[0]
    got = run(model, mask_id, PROMPTS[:1], tree=tree, tree_depth=depth, **settings)[0]
    assert chain.tokens == ar.tokens and got.tokens == ar.tokens
    assert got.forwards < chain.forwards  # branches recovered tokens the chain lost at its wrong drafts


def test_tree_spec_greedy_equals_ar_with_real_drafts_batched_and_adaptive(tiny):
    model, mask_id = tiny
    ar = run(model, mask_id, PROMPTS, method="ar")
    for kw in ({"adaptive": False}, {"adaptive": True}):
        for cost in (FLAT, STEEP):
            config = DecodeConfig(method="spec", block_size=4, tree=2, tree_depth=2, max_new_tokens=24, **kw)
            extras = {"cost": cost} if kw["adaptive"] else {}
            got = decode(model, PROMPTS, config, mask_id, extras=extras)
            assert [g.tokens for g in got] == [a.tokens for a in ar], (kw, cost)


def test_a_steep_curve_feeds_no_branch_a_flat_one_does(tiny):
    model, mask_id = tiny
    fed = {}
    for name, cost in (("flat", FLAT), ("steep", STEEP)):
        config = DecodeConfig(method="spec", block_size=4, tree=2, tree_depth=2, max_new_tokens=24)
        r = decode(model, PROMPTS[:1], config, mask_id, extras={"cost": cost})[0]
        fed[name] = max(r.fed_per_step[1:])
    assert fed["flat"] > fed["steep"]


def count_branches(monkeypatch) -> list[bool]:
    """Record, for every verified tree, whether a branch was taken."""
    taken, original = [], spec_module.accept_with_branches

    def counted(*args):
        out = original(*args)
        taken.append(out[2] >= 0)
        return out

    monkeypatch.setattr(spec_module, "accept_with_branches", counted)
    return taken


def test_tree_spec_samples_the_target_distribution(small_vocab_model, monkeypatch):  # noqa: F811
    model, mask_id = small_vocab_model
    taken = count_branches(monkeypatch)
    n = 3000
    counts, _ = sample_counts(model, mask_id, n, method="spec", block_size=3, adaptive=False, tree=2,
                              tree_depth=1, temperature=1.0, seed=5)  # fmt: skip
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0), n) > 1e-3
    assert sum(taken) > 0.05 * len(taken)  # branches were taken, not only fed
