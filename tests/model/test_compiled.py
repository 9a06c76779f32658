"""Decoding steps through torch.compile: the same model, so AR is the eager AR and spec stays lossless
(greedy, fp32); prompts run eagerly."""

import copy
import dataclasses

import torch
from tiny import random_head, randomize_lora, tiny_model
from transformers import DynamicCache

from pardec.core.cache import BlockCache
from pardec.core.cost import warm_up
from pardec.core.step import Block, block_step
from pardec.decoding import DecodeConfig, decode
from pardec.model import adapters, load_model
from pardec.model.compiled import STEP_TOKENS, CompiledSteps
from pardec.model.quant import quantize


def test_compiled_steps_decode_the_same_tokens_as_eager_ar():
    model, mask_id = tiny_model("qwen2")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(model)
    quantize(model, "int4", tuned=False)
    compiled = CompiledSteps(model)
    assert compiled.config is model.config and compiled.dtype == model.dtype  # the model's own
    prompts = [[1, 2, 3, 4, 5]]
    plain = DecodeConfig(method="ar", max_new_tokens=20)
    ar = decode(model, prompts, plain, mask_id)
    assert [r.tokens for r in decode(compiled, prompts, plain, mask_id)] == [r.tokens for r in ar]
    spec = DecodeConfig(method="spec", block_size=4, adaptive=False, max_new_tokens=20)
    assert [r.tokens for r in decode(compiled, prompts, spec, mask_id)] == [r.tokens for r in ar]


def test_prompts_run_eagerly_and_plain_and_block_steps_compiled():
    model, _ = tiny_model("llama")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8), freeze=False)
    compiled = CompiledSteps(model)
    calls = []

    class Recorder(torch.nn.Module):  # stands in for the compiled model: records what reaches it
        def forward(self, **kw):
            calls.append(kw["input_ids"].shape[1])
            return model(**kw)

    compiled.compiled = Recorder()
    cache = DynamicCache(config=model.config)

    def feed(n: int, on: bool = False):
        ids = torch.zeros(1, n, dtype=torch.long)
        with torch.no_grad(), adapters.gated(model, torch.full((1, n), on)):
            compiled(input_ids=ids, cache=cache, use_cache=True)

    feed(3)  # a prompt: into an empty cache
    layer = cache.layers[0]
    # What a prompt leaves in a real model's cache (Qwen2.5 at bf16): a view of the projection.
    layer.values = layer.values.transpose(1, 2).contiguous().transpose(1, 2)
    assert calls == [] and not layer.values.is_contiguous()
    feed(2)
    assert calls == [2] and layer.keys.is_contiguous() and layer.values.is_contiguous()  # for the graphs
    feed(4, on=True)  # a block step: the gated adapter's graphs
    assert calls == [2, 4]
    feed(STEP_TOKENS + 1)
    assert calls == [2, 4]
    feed(1)
    assert calls == [2, 4, 1]


def test_compiled_block_steps_match_eager_ones_wherever_the_block_starts():
    """The gated update under compile is masked, not sliced at the block's start: the block logits are
    the eager ones, and blocks placed after 2, 3 or 5 pending tokens share one graph."""
    from torch._dynamo.utils import counters

    model, mask_id = tiny_model("qwen2")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8), freeze=False)
    randomize_lora(model)
    compiled = CompiledSteps(model)
    bare = copy.deepcopy(model)  # every adapter's update zeroed: what the block logits are without it
    for m in adapters.lora_modules(bare).values():
        m.lora_b.data.zero_()
    torch._dynamo.reset()
    graphs = []
    for n in (2, 3, 5, 3):
        eager, fast = (block_after_prompt(m, n, mask_id) for m in (model, compiled))
        torch.testing.assert_close(fast.block_logits, eager.block_logits, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fast.ntp_logits, eager.ntp_logits, rtol=1e-4, atol=1e-4)
        assert not torch.equal(eager.block_logits, block_after_prompt(bare, n, mask_id).block_logits)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1:] == graphs[:1] * 3  # the later placements compiled nothing new


def test_spec_with_a_markov_head_under_compile_drafts_as_eager_and_equals_ar():
    """The head reads the output head's input through a hook: under compile it sees the same hidden
    states, so its re-ranked drafts (and the acceptances) are the eager ones, and the output is AR's."""
    model, mask_id = tiny_model("qwen2")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8), freeze=False)
    randomize_lora(model)
    head = random_head(model, block_size=4)
    compiled = CompiledSteps(model)
    prompts = [[1, 2, 3, 4, 5]]
    ar = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=24), mask_id)[0]
    spec = DecodeConfig(method="spec", block_size=4, adaptive=False, block_reach=0.0, lookup=0,
                        max_new_tokens=24)  # fmt: skip
    with_head = {"markov": head, "trained_block": True}
    eager = decode(model, prompts, spec, mask_id, extras=with_head)[0]
    fast = decode(compiled, prompts, spec, mask_id, extras=with_head)[0]
    without = decode(model, prompts, spec, mask_id, extras={"trained_block": True})[0]
    assert fast.tokens == eager.tokens == ar.tokens
    assert fast.accepted_per_step == eager.accepted_per_step
    assert without.accepted_per_step != eager.accepted_per_step  # the head changed the drafts


@torch.no_grad()
def block_after_prompt(model, n: int, mask_id: int):
    """A 4-token prompt (eager, into an empty cache), then one step of `n` pending tokens and a block
    of 4 [MASK] slots: its StepOutput."""
    cache = BlockCache.empty(1, model.config, model.device)
    first = block_step(model, cache, [[1, 2, 3, 4]], None, 1, mask_id)
    cache.commit(first.fed_pos, torch.ones_like(first.pending_valid), 0)
    return block_step(model, cache, [[5] * n], [[Block(0, [mask_id] * 4)]], n, mask_id)


def test_warm_up_feeds_every_step_size_to_the_compiled_path():
    model, mask_id = tiny_model("llama")
    compiled = CompiledSteps(model)
    sizes = []

    class Recorder(torch.nn.Module):
        def forward(self, **kw):
            sizes.append(kw["input_ids"].shape[1])
            return model(**kw)

    compiled.compiled = Recorder()
    assert warm_up(compiled, mask_id, pending=(1, 3, 8)) > 0
    assert sizes == [1, 3, 8]  # the prompt before them ran eagerly
    sizes.clear()
    warm_up(compiled, mask_id, pending=(1, 3, STEP_TOKENS - 2), block_size=4)
    # then each with a block of 4 slots, where that still fits a compiled step
    assert sizes == [1, 3, STEP_TOKENS - 2, 5, 7]


def test_load_model_compiles_only_when_asked(tiny_dir):
    lm = load_model(tiny_dir, torch.float32, "none")
    assert lm.decoder is lm.model
    fast = dataclasses.replace(lm, compile=True)
    assert isinstance(fast.decoder, CompiledSteps) and fast.decoder.model is lm.model
    assert fast.decoder is fast.decoder  # compiled once
