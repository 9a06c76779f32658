"""DFlash decoding on tiny random models, fp32: exact against AR, and the drafter's context cache
stays exactly what a from-scratch pass over the committed text gives."""

import dataclasses

import pytest
import torch
from tiny import tiny_model

from pardec.decoding import METHODS, DecodeConfig, decode
from pardec.errors import PardecError
from pardec.methods.dflash import ContextCache, DFlash, Drafter, DrafterConfig, target_features
from pardec.methods.dflash.context import DraftHead
from pardec.methods.dflash.model import choose_draft_vocab, embedding_scale, init_from_target

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]
N = 24


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    model, mask_id = tiny_model(request.param)
    torch.manual_seed(1)
    drafter = Drafter(DrafterConfig.for_target(model.config, mask_id, n_layers=2, block_size=8)).eval()
    return model, mask_id, drafter


def run(model, mask_id, prompts, drafter=None, **kw):
    kw.setdefault("max_new_tokens", N)
    return decode(model, prompts, DecodeConfig(**kw), mask_id, extras={"drafter": drafter})


def use_policy(policy, monkeypatch):
    """Decode dflash with `policy` (a subclass of DFlash) for the rest of the test."""
    monkeypatch.setitem(METHODS, "dflash", dataclasses.replace(METHODS["dflash"], policy=policy))


@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_dflash_greedy_equals_ar_with_an_untrained_drafter(tiny, block_size):
    model, mask_id, drafter = tiny
    ar = run(model, mask_id, PROMPTS, method="ar")
    got = run(model, mask_id, PROMPTS, drafter, method="dflash", block_size=block_size)
    for a, d in zip(ar, got):
        assert d.tokens == a.tokens
        assert sum(d.accepted_per_step) == N and max(d.accepted_per_step) <= block_size


class OracleDFlash(DFlash):
    """Replaces the drafter's proposals with the true continuation, wrong at fixed positions (about
    30%), so steps accept all, some or none of the drafts; after every step checks the context cache
    against a from-scratch pass."""

    truth: dict[int, list[int]] = {}
    checks = 0

    def after_step(self, rows, out, keep, alive):
        super().after_step(rows, out, keep, alive)
        check_context(self, rows)
        for r in rows:
            start = len(r.committed) - r.n_prompt
            truth = self.truth[r.index] + [0] * 16
            r.state.tokens = [
                truth[i] if (i * 2654435761) % 97 % 10 >= 3 else (truth[i] + 1) % 40
                for i in range(start, start + len(r.state.tokens))
            ]
        OracleDFlash.checks += 1


@torch.no_grad()
def check_context(policy, rows):
    """Each row's valid context slots hold exactly positions 0 .. len(committed) - 2, with the keys
    and values of a fresh target pass over that text; drafts from the cache equal drafts from a
    cache built in one go."""
    ctx, drafter, target = policy.context, policy.drafter, policy.target
    for b, r in enumerate(rows):
        text = r.committed[:-1]
        assert ctx.pos[b][ctx.valid[b]].tolist() == list(range(len(text)))
        hs = target(torch.tensor([text]), output_hidden_states=True).hidden_states
        fresh = drafter.context_kv(
            target_features(hs, drafter.cfg.target_layers), torch.arange(len(text))[None]
        )
        for (k, v), (fk, fv) in zip(ctx.kv, fresh):
            torch.testing.assert_close(k[b][:, ctx.valid[b]], fk[0], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(v[b][:, ctx.valid[b]], fv[0], atol=1e-4, rtol=1e-4)
        one = ContextCache(drafter, 1, "cpu")
        one.append(
            target_features(hs, drafter.cfg.target_layers),
            torch.arange(len(text))[None],
            torch.ones(1, len(text), dtype=torch.bool),
        )
        D = policy.cfg.block_size
        emb, head = target.get_input_embeddings(), policy.head
        anchor, apos = torch.tensor([r.committed[-1]]), torch.tensor([len(text)])
        batched = ctx.draft_logits(
            emb,
            head,
            torch.tensor([x.committed[-1] for x in rows]),
            torch.tensor([len(x.committed) - 1 for x in rows]),
            D,
        )[b]
        torch.testing.assert_close(
            batched, one.draft_logits(emb, head, anchor, apos, D)[0], atol=1e-4, rtol=1e-4
        )


def test_context_cache_stays_exact_after_partial_acceptance(tiny, monkeypatch):
    model, mask_id, drafter = tiny
    ar = run(model, mask_id, PROMPTS, method="ar", max_new_tokens=30)
    OracleDFlash.truth = {i: a.tokens for i, a in enumerate(ar)}
    OracleDFlash.checks = 0
    use_policy(OracleDFlash, monkeypatch)
    got = run(model, mask_id, PROMPTS, drafter, method="dflash", block_size=4, max_new_tokens=30)
    steps = [s for g in got for s in g.accepted_per_step[1:]]
    assert {1, 4} <= set(steps) and any(1 < s < 4 for s in steps)  # none, all and some accepted
    assert [g.tokens for g in got] == [a.tokens for a in ar]
    assert OracleDFlash.checks > 5
    assert sum(len(g.tokens) for g in got) / sum(g.forwards for g in got) > 1.8


def test_dflash_errors(tiny):
    model, mask_id, drafter = tiny
    with pytest.raises(PardecError, match="needs a drafter"):
        run(model, mask_id, PROMPTS[:1], method="dflash")
    with pytest.raises(PardecError, match="exceeds the drafter"):
        run(model, mask_id, PROMPTS[:1], drafter, method="dflash", block_size=9)
    with pytest.raises(PardecError, match="block size >= 2"):
        DecodeConfig(method="dflash", block_size=1)


def test_init_from_target_copies_the_last_layers(tiny):
    model, mask_id, _ = tiny
    d = Drafter(DrafterConfig.for_target(model.config, mask_id, n_layers=1, block_size=4))
    assert init_from_target(d, model) >= 7
    last = model.get_decoder().layers[-1]
    assert torch.equal(d.layers[0].mlp.down_proj.weight, last.mlp.down_proj.weight)
    assert d.cfg.target_layers == (0, 1) or d.cfg.target_layers == (1,)


def test_embedding_scale_brings_block_embeddings_to_rms_one(tiny):
    model, mask_id, _ = tiny
    scaled = model.get_input_embeddings().weight * embedding_scale(model)
    assert scaled.pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=1e-4)
    d = Drafter(DrafterConfig.for_target(model.config, mask_id, n_layers=1, block_size=4))
    assert init_from_target(d, model, layers=False) == 1
    assert torch.equal(d.norm.weight, model.get_decoder().norm.weight)


def test_draft_vocabulary_ranks_by_frequency_and_keeps_stops():
    seqs = [[5, 5, 5, 2, 2, 9], [2, 5, 7]]
    assert choose_draft_vocab(seqs, 3, 12).tolist() == [2, 5, 7]  # 5 (x4), 2 (x3), then 7 before 9 (x1 each)
    assert choose_draft_vocab(seqs, 5, 12).tolist() == [0, 2, 5, 7, 9]  # then unseen tokens, lowest id first
    assert choose_draft_vocab(seqs, 3, 12, always=[11], exclude=[5]).tolist() == [2, 7, 11]
    with pytest.raises(PardecError, match="larger than"):
        choose_draft_vocab(seqs, 12, 12, exclude=[5])


def test_draft_head_matches_the_full_head_on_its_vocabulary(tiny):
    model, mask_id, _ = tiny
    head = model.get_output_embeddings()
    vocab = torch.tensor([1, 4, 9, 20])
    h = torch.randn(2, 3, model.config.hidden_size)
    full, sub = DraftHead(head, None, mask_id), DraftHead(head, vocab, mask_id)
    lf, ls = full(h), sub(h)  # [2, 3, V], [2, 3, 4]
    assert ls.shape[-1] == 4 and torch.isinf(lf[..., mask_id]).all()  # [MASK] is never drafted
    torch.testing.assert_close(ls, lf[..., vocab])
    assert sub.token_ids(torch.tensor([0, 3])).tolist() == [1, 20] and full.token_ids(
        torch.tensor([5])
    ).tolist() == [5]
    p = torch.softmax(ls, -1)
    spread = sub.full(p)  # [2, 3, V]
    assert torch.equal(spread[..., vocab], p) and spread.sum(-1).allclose(torch.ones(2, 3))


def test_dflash_with_a_small_draft_vocabulary_still_equals_ar(tiny, monkeypatch):
    """Tokens outside the draft vocabulary can never be drafted, only committed as bonus tokens;
    the output stays the target's, and every draft lies in the vocabulary."""
    model, mask_id, drafter = tiny
    V = model.get_output_embeddings().weight.shape[0]
    cfg = DrafterConfig.for_target(model.config, mask_id, n_layers=2, block_size=4, draft_vocab_size=8)
    small = Drafter(cfg).eval()
    small.load_state_dict(
        {**drafter.state_dict(), "draft_vocab": choose_draft_vocab(PROMPTS, 8, V, exclude=[mask_id])}
    )
    drafted = []

    class Spy(DFlash):
        def after_step(self, rows, out, keep, alive):
            super().after_step(rows, out, keep, alive)
            drafted.extend(t for r in rows for t in r.state.tokens)

    use_policy(Spy, monkeypatch)
    ar = run(model, mask_id, PROMPTS, method="ar")
    got = run(model, mask_id, PROMPTS, small, method="dflash", block_size=4)
    assert [g.tokens for g in got] == [a.tokens for a in ar]
    assert drafted and set(drafted) <= set(small.draft_vocab.tolist())
