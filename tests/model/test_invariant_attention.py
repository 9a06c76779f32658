"""The batch-invariant attention: sdpa's result, and each query's bits whatever is fed beside it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny import randomize_lora, tiny_model

from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step
from pardec.model import adapters, load_model
from pardec.model.invariant_attention import NAME, invariant_attention
from pardec.model.quant import quantize

H, HKV, D = 6, 2, 16
CHUNK = 128  # a block of keys BLAS kernels may group sums by


class Module(torch.nn.Module):
    is_causal = True
    num_key_value_groups = H // HKV


def qkv(q: int, k: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, H, q, D, generator=g), torch.randn(1, HKV, k, D, generator=g),
            torch.randn(1, HKV, k, D, generator=g))  # fmt: skip


def sdpa(q, k, v, mask):  # [B, Q, H, d] like the attention interface's kernels
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)


@pytest.mark.parametrize("q,k", [(1, 5), (9, 40), (4, CHUNK + 3), (17, 3 * CHUNK + 1)])
def test_it_computes_what_sdpa_computes_under_bool_float_and_no_masks(q, k):
    query, key, value = qkv(q, k)
    causal = torch.ones(q, k, dtype=torch.bool).tril(k - q)[None, None]  # [1, 1, Q, K]
    want = sdpa(query, key, value, causal)
    additive = torch.zeros(1, 1, q, k).masked_fill(~causal, torch.finfo(torch.float32).min)
    for mask in (causal, additive, None):
        got, _ = invariant_attention(Module(), query, key, value, mask, scaling=D**-0.5)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    tree = causal & (torch.rand(1, 1, q, k, generator=torch.Generator().manual_seed(1)) < 0.7)
    tree[..., 0] = True  # every query sees some key
    got, _ = invariant_attention(Module(), query, key, value, tree, scaling=D**-0.5)
    torch.testing.assert_close(got, sdpa(query, key, value, tree), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="soft-capping"):
        invariant_attention(Module(), query, key, value, causal, softcap=30.0)


@pytest.mark.parametrize("context", [3, CHUNK - 2, CHUNK + 1, 2 * CHUNK + 60])
def test_a_query_gets_the_same_bits_alone_and_among_others(context):
    """A token fed alone (an AR step: the context and itself) against the same token anywhere among Q
    fed together (a verify step: the keys after it hidden, maybe across a chunk boundary). A tree's
    branch sees its ancestors at other slots than AR does: equal in value there, not in bits."""
    query, key, value = qkv(17, context + 17)
    for q in (2, 9, 17):
        seen = torch.ones(q, context + q, dtype=torch.bool).tril(context)[None, None]  # [1, 1, Q, K]
        together, _ = invariant_attention(Module(), query[:, :, :q], key[:, :, : context + q],
                                          value[:, :, : context + q], seen)  # fmt: skip
        for i in range(q):
            n = context + i + 1
            alone, _ = invariant_attention(
                Module(), query[:, :, i : i + 1], key[:, :, :n], value[:, :, :n], None
            )
            assert torch.equal(alone[:, 0], together[:, i])


def test_w8a8_loads_with_it_and_a_block_step_computes_the_pending_token_as_an_ar_step(tiny_dir):
    assert load_model(tiny_dir, torch.float32, "none", quant="w8a8").model.config._attn_implementation == NAME
    assert load_model(tiny_dir, torch.float32, "none").model.config._attn_implementation == "sdpa"
    model, mask_id = tiny_model("qwen2")
    model.set_attn_implementation(NAME)
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(model)
    quantize(model, "w8a8")
    context = torch.randint(0, 40, (CHUNK + 5,), generator=torch.Generator().manual_seed(0)).tolist()
    cache = BlockCache.empty(1, model.config, model.device)
    with torch.no_grad():
        out = block_step(model, cache, [context], None, 1, mask_id)
        cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
        logits = []
        for blocks in (None, [[Block(0, [mask_id] * 8)]], [[Block(0, [mask_id] * 3)]]):
            out = block_step(model, cache, [[7]], blocks, 1, mask_id)
            logits.append(out.ntp_logits[0, -1])
            n_block = 0 if blocks is None else out.block_logits.shape[1]
            cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), n_block)
    assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])
