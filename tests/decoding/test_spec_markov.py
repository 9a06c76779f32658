"""spec and threshold with a Markov head: the drafts change, the output stays the model's own."""

import pytest
import torch
from test_decoding import PROMPTS, run
from test_sampling import (
    chi2_pvalue,
    exact_joint,
    sample_counts,
    small_vocab_model,  # noqa: F401 (a fixture)
)
from tiny import random_head, tiny_model

from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tiny(request):
    return tiny_model(request.param)


class Spy:
    """Counts the drafts a head's chain drew other than the block's own likeliest."""

    def __init__(self, head, monkeypatch):
        self.changed = self.drafts = 0
        self.before = []  # the text before each chain's first draft, as spec passed it
        chain = head.chain

        def spy(logits, hidden, first_slot, prev, choose):
            self.before.append(list(prev))
            out, tokens, probs = chain(logits, hidden, first_slot, prev, choose)
            self.drafts += len(tokens)
            self.changed += int((tokens != logits.argmax(-1)).sum())
            return out, tokens, probs

        monkeypatch.setattr(head, "chain", spy)


def test_block_hidden_is_what_the_output_head_turns_into_the_block_logits(tiny):
    model, mask_id = tiny
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [[1, 2, 3]], [[Block(0, [mask_id] * 4)]], 1, mask_id, block_hidden=True)
    assert out.block_hidden.shape == (1, 4, model.config.hidden_size)
    logits = model.get_output_embeddings()(out.block_hidden).float()
    logits[..., mask_id] = float("-inf")
    assert torch.allclose(logits, out.block_logits, atol=1e-5)
    assert not model.get_output_embeddings()._forward_hooks  # the hook went with the step


@pytest.mark.parametrize(
    "block_size,draft_blocks,adaptive,context",
    [(4, 1, False, 1), (4, 2, False, 1), (3, 1, True, 1), (4, 2, False, 2)],
)
def test_spec_greedy_with_a_markov_head_equals_ar(
    tiny, monkeypatch, block_size, draft_blocks, adaptive, context
):
    model, mask_id = tiny
    head = random_head(model, block_size, context=context)
    spy = Spy(head, monkeypatch)
    for prompt in PROMPTS:
        spy.before = []
        ar = run(model, mask_id, [prompt], method="ar")[0]
        extras = {"markov": head, "trained_block": True}
        got = decode_with(model, mask_id, prompt, extras, block_size=block_size, draft_blocks=draft_blocks,
                          adaptive=adaptive, block_reach=0.0, lookup=0)  # fmt: skip
        assert got.tokens == ar.tokens
        # What the head conditions on is the committed text itself: the tokens before each chain are
        # the text up to where its drafts start, so they occur in order in the output.
        text = list(prompt) + got.tokens
        for before in spy.before:
            assert len(before) >= 2
            assert any(text[i : i + len(before)] == before for i in range(len(text)))
    assert spy.drafts > 0 and spy.changed > 0  # the head did re-rank drafts


def test_markov_false_leaves_the_head_unused(tiny, monkeypatch):
    model, mask_id = tiny
    head = random_head(model)
    spy = Spy(head, monkeypatch)
    decode_with(model, mask_id, PROMPTS[0], {"markov": head}, block_size=4, markov=False, lookup=0)
    assert spy.drafts == 0


@pytest.mark.parametrize("context", [1, 2])
def test_threshold_at_one_with_a_markov_head_equals_ar(tiny, monkeypatch, context):
    model, mask_id = tiny
    head = random_head(model, context=context)
    spy = Spy(head, monkeypatch)
    for prompt in PROMPTS:
        ar = run(model, mask_id, [prompt], method="ar")[0]
        got = decode_with(model, mask_id, prompt, {"markov": head}, method="threshold", threshold=1.0,
                          block_size=4, lookup=0)  # fmt: skip
        assert got.tokens == ar.tokens
    assert spy.drafts > 0


def decode_with(model, mask_id, prompt, extras, **kw):
    from pardec.decoding import DecodeConfig, decode

    kw.setdefault("max_new_tokens", 24)
    kw.setdefault("adaptive", False)
    kw.setdefault("method", "spec")
    return decode(model, [prompt], DecodeConfig(**kw), mask_id, extras=extras)[0]


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_spec_sampling_with_a_markov_head_matches_the_target_distribution(
    small_vocab_model,  # noqa: F811
    monkeypatch,
    temperature,
    top_p,
):
    """The head proposes from re-ranked distributions, each draft drawn after the one before; the
    verifier's acceptance uses those distributions, so the output is still the target's."""
    model, mask_id = small_vocab_model
    head = random_head(model, block_size=3, top_k=3, scale=2.0)  # top 3 of 5: the tail is kept too
    spy = Spy(head, monkeypatch)
    n, t = 3000, 3
    probs = exact_joint(model, temperature, top_p, t)
    counts, outs = sample_counts(model, mask_id, n, t=t, extras={"markov": head}, method="spec",
                                 block_size=3, adaptive=False, lookup=0, temperature=temperature,
                                 top_p=top_p, seed=1)  # fmt: skip
    steps = [s for o in outs for s in o.accepted_per_step]
    assert any(s > 1 for s in steps)
    assert spy.drafts > 0 and spy.changed > 0
    assert chi2_pvalue(counts, probs, n) > 1e-3


def test_under_w8a8_a_markov_head_scores_against_tied_input_embeddings_and_spec_equals_its_ar(monkeypatch):
    """--quant packs the output head for its kernel; where the model ties it to the input embeddings
    (the packaged models do) the head reads its candidates' rows there, and spec stays the quantized
    model's own AR, token for token."""
    from tiny import randomize_lora

    from pardec.model import adapters
    from pardec.model.markov import candidate_rows
    from pardec.model.quant import W8A8Linear, quantize

    model, mask_id = tiny_model("llama")
    model.lm_head.weight = model.get_input_embeddings().weight  # tied
    model.config.tie_word_embeddings = True
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8), freeze=False)
    randomize_lora(model)
    assert candidate_rows(model, quantized=False) is model.lm_head.weight
    head = random_head(model)  # its candidates' rows: the tied tensor, which quantize leaves as it is
    quantize(model, "w8a8", tuned=False)
    assert isinstance(model.lm_head, W8A8Linear)
    assert candidate_rows(model, quantized=True) is model.get_input_embeddings().weight
    model.config.tie_word_embeddings = False
    assert candidate_rows(model, quantized=True) is None  # an untied packed head: no head
    model.config.tie_word_embeddings = True
    spy = Spy(head, monkeypatch)
    for prompt in PROMPTS:
        ar = run(model, mask_id, [prompt], method="ar")[0]
        got = decode_with(model, mask_id, prompt, {"markov": head, "trained_block": True}, block_size=4,
                          lookup=0)  # fmt: skip
        assert got.tokens == ar.tokens
    assert spy.drafts > 0 and spy.changed > 0
