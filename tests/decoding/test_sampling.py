"""Speculative sampling leaves the target distribution unchanged (statistical test, fixed seeds)."""

import itertools

import pytest
import torch
from scipy.stats import chisquare
from tiny import tiny_model

from pardec.core import sampling
from pardec.decoding import DecodeConfig, decode, verifier
from pardec.methods.dflash import Drafter, DrafterConfig

VOCAB = 4
PROMPT = [1, 2, 3]
T = 3  # tokens per sample: the joint distribution of 3 tokens has 64 cells
CUTOFF = 0.2  # with 4 tokens, confidences of about 0.3-0.6: rows keep different numbers of drafts


def exact_joint(model, temperature, top_p, t=T):
    """P(x1, ..., xt | prompt) under plain AR sampling, by enumeration."""
    probs = {}
    with torch.no_grad():
        for seq in itertools.product(range(VOCAB), repeat=t):
            ids = torch.tensor([PROMPT + list(seq)])
            logits = model(ids).logits[0, len(PROMPT) - 1 : -1, :VOCAB]  # mask id excluded
            dist = sampling.distribution(logits, temperature, top_p)
            probs[seq] = float(torch.prod(dist[torch.arange(t), torch.tensor(seq)]))
    return probs


def sample_counts(model, mask_id, n, drafter=None, t=T, extras=None, **kw):
    extras = {"drafter": drafter, **(extras or {})}
    outs = decode(model, [PROMPT] * n, DecodeConfig(max_new_tokens=t, **kw), mask_id, extras=extras)
    counts = {}
    for o in outs:
        counts[tuple(o.tokens)] = counts.get(tuple(o.tokens), 0) + 1
    return counts, outs


def chi2_pvalue(counts, probs, n):
    assert all(counts.get(c, 0) == 0 for c in probs if probs[c] == 0)  # top-p cut them
    cells = sorted(c for c in probs if probs[c] > 0)
    obs = [counts.get(c, 0) for c in cells]
    exp = [probs[c] * n for c in cells]
    return chisquare(obs, [e * n / sum(exp) for e in exp]).pvalue


@pytest.fixture(scope="module")
def small_vocab_model():
    # A gentler init than tiny_model's default, so that no token is near-certain and drafts are
    # accepted sometimes and rejected sometimes.
    model, mask_id = tiny_model("qwen2", seed=3, vocab=VOCAB)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(0.4)
    return model, mask_id


@pytest.mark.parametrize(
    "temperature,top_p,block_at,reach,t,cutoff",
    [
        (1.0, 1.0, None, 0.0, 3, 0.0),
        (0.7, 0.9, None, 0.0, 3, 0.0),
        (1.0, 1.0, 0, 0.0, 4, 0.0),
        (1.0, 1.0, 0, 0.0, 4, CUTOFF),
        (1.0, 1.0, None, 0.3, 4, 0.0),
    ],
)
def test_spec_sampling_matches_the_target_distribution(
    small_vocab_model, temperature, top_p, block_at, reach, t, cutoff
):
    """block_at None with reach 0: the block after all drafts. block_at 0: after a partial acceptance
    the next drafts are a block's later slots (verified only from the 4th token on, hence t = 4).
    reach: the block after as many drafts as their confidences suggest. cutoff: fewer drafts when
    they are unsure."""
    model, mask_id = small_vocab_model
    n = 3000 if t == 3 else 6000
    probs = exact_joint(model, temperature, top_p, t)
    counts, outs = sample_counts(
        model,
        mask_id,
        n,
        t=t,
        method="spec",
        block_size=3,
        block_at=block_at,
        block_reach=reach,
        draft_cutoff=cutoff,
        adaptive=False,  # the fixed shapes; test_schedule.py samples adaptive spec
        temperature=temperature,
        top_p=top_p,
        seed=1,
    )
    steps = [s for o in outs for s in o.accepted_per_step]
    assert any(s > 1 for s in steps) and any(s == 1 for s in steps[1::2])  # accepts and rejects happen
    assert chi2_pvalue(counts, probs, n) > 1e-3
    ar_counts, _ = sample_counts(
        model, mask_id, n, t=t, method="ar", temperature=temperature, top_p=top_p, seed=2
    )
    assert chi2_pvalue(ar_counts, probs, n) > 1e-3


@pytest.mark.parametrize("temperature,top_p,draft_vocab", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.0, 1.0, 2)])
def test_dflash_sampling_matches_the_target_distribution(small_vocab_model, temperature, top_p, draft_vocab):
    """draft_vocab 2: the drafts can only be tokens 1 and 3, so the draft distribution is 0 where the
    target's is not, and the residual distribution after a rejection must make up for it."""
    model, mask_id = small_vocab_model
    torch.manual_seed(0)
    drafter = Drafter(
        DrafterConfig.for_target(
            model.config, mask_id, n_layers=1, block_size=3, draft_vocab_size=draft_vocab
        )
    ).eval()
    if draft_vocab:
        drafter.draft_vocab.copy_(torch.tensor([1, 3]))
    n = 3000
    counts, outs = sample_counts(
        model,
        mask_id,
        n,
        drafter,
        method="dflash",
        block_size=3,
        temperature=temperature,
        top_p=top_p,
        seed=5,
    )
    steps = [s for o in outs for s in o.accepted_per_step]
    assert any(s > 1 for s in steps) and any(s == 1 for s in steps[1::2])  # accepts and rejects happen
    assert chi2_pvalue(counts, exact_joint(model, temperature, top_p), n) > 1e-3


def test_the_statistical_test_detects_a_biased_sampler(small_vocab_model, monkeypatch):
    """Accepting every draft (no rejection step) is a plausible bug; the test above must catch it."""
    model, mask_id = small_vocab_model

    def accept_all(drafts, draft_probs, target_logits, temperature, top_p, generator):
        p = sampling.distribution(target_logits, temperature, top_p)
        return len(drafts), int(sampling.draw(p[len(drafts) : len(drafts) + 1], generator)[0])

    monkeypatch.setattr(verifier, "accept_drafts", accept_all)  # the name the verifier policies call
    n = 3000
    counts, _ = sample_counts(
        model, mask_id, n, method="spec", block_size=3, temperature=1.0, seed=1, adaptive=False
    )
    assert chi2_pvalue(counts, exact_joint(model, 1.0, 1.0), n) < 1e-3


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = sampling.distribution(logits, 1.0, 0.8)
    assert torch.allclose(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert torch.equal(sampling.distribution(logits, 0.0, 1.0), torch.tensor([[1.0, 0, 0, 0]]))


def test_entropy_confidence_ignores_suppressed_tokens():
    logits = torch.tensor([[0.0, 0.0, float("-inf")]])
    assert torch.allclose(sampling.entropy(logits), torch.log(torch.tensor([2.0])))
    assert 0 < sampling.confidence(logits, "entropy").item() < 1
