"""Retrofit training on tiny models: gated adapters keep NTP exact, training teaches blocks, resume
is exact."""

import pytest
import torch
from tiny import counting_model, randomize_lora, tiny_model

from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step
from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model import LoadedModel, adapters, checkpoint
from pardec.training.config import TrainConfig
from pardec.training.data import Example, split_heldout
from pardec.training.loop import retrofit

VOCAB = 32


def counting_examples(n=24, length=40):  # for loss-only tests
    """Sequences that continue an arithmetic progression mod VOCAB: block prediction is learnable."""
    out = []
    for i in range(n):
        a, d = (3 * i) % VOCAB, 1 + i % 3
        ids = [(a + d * t) % VOCAB for t in range(length)]
        out.append(Example(ids, 6))
    return out


def test_gated_lora_keeps_ntp_logits_exactly_the_base_models():
    base, mask_id = tiny_model("qwen2", vocab=VOCAB)
    adapted, _ = tiny_model("qwen2", vocab=VOCAB)
    adapters.attach(adapted, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(adapted)
    prompt = [[1, 2, 3, 4, 5, 6, 7]]
    outs = {}
    for name, model in (("base", base), ("adapted", adapted)):
        cache = BlockCache.empty(1, model.config, "cpu")
        outs[name] = block_step(model, cache, prompt, [[Block(0, [mask_id] * 4)]], n_ntp=7, mask_id=mask_id)
    torch.testing.assert_close(outs["adapted"].ntp_logits, outs["base"].ntp_logits, rtol=0, atol=1e-5)
    diff = outs["adapted"].block_logits[..., :mask_id] - outs["base"].block_logits[..., :mask_id]
    assert diff.abs().max() > 1e-2  # blocks do change
    # ...so spec decoding with the adapter is lossless with respect to the ORIGINAL model.
    ar = decode(base, prompt, DecodeConfig(method="ar", max_new_tokens=30), mask_id)[0]
    spec = decode(adapted, prompt, DecodeConfig(method="spec", max_new_tokens=30), mask_id)[0]
    assert spec.tokens == ar.tokens


def test_gated_finds_the_gates_of_adapters_attached_later_too():
    model, mask_id = tiny_model("llama", vocab=VOCAB)
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8, targets=("q_proj",)))
    on = torch.tensor([[False, True]])
    with adapters.gated(model, on):
        assert len(adapters.gates(model)) == 1 and adapters.gates(model)[0].on is on
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8, targets=("v_proj",)))
    with adapters.gated(model, on):  # a second attach makes a second gate: both switch
        assert len(adapters.gates(model)) == 2 and all(g.on is on for g in adapters.gates(model))
    assert all(g.on is None for g in adapters.gates(model))  # off again outside


def test_plain_lora_changes_ntp_logits():
    base, mask_id = tiny_model("llama", vocab=VOCAB)
    adapted, _ = tiny_model("llama", vocab=VOCAB)
    adapters.attach(adapted, adapters.LoRAConfig("lora", rank=4, alpha=8))
    randomize_lora(adapted)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert (adapted(ids).logits - base(ids).logits).abs().max() > 1e-2


def train(model, data, cfg, out, heldout=(), name="tiny", **kw):
    """retrofit() on a tiny model, loaded as `name`."""
    return retrofit(LoadedModel(model, None, name), data, list(heldout), cfg, out, progress=False, **kw)


def train_cfg(**kw):
    base = dict(objective="nsp", adapter="gated-lora", block_size=4, blocks_per_sequence=8,
                lora_rank=8, lora_alpha=16, lr=3e-3, warmup_steps=2, steps=60, grad_accum=2,
                bf16=False, eval_every=30, eval_max_new_tokens=24)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


def test_training_on_self_distilled_data_raises_spec_tpf(tmp_path):
    model, mask_id, prompts = counting_model()
    outs = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=40), mask_id)
    data = [Example(p + o.tokens, len(p)) for p, o in zip(prompts[:32], outs[:32])]  # self-distilled
    heldout = prompts[32:]
    before = decode(model, heldout, DecodeConfig(method="spec", max_new_tokens=24), mask_id)
    tpf_before = sum(len(r.tokens) for r in before) / sum(r.forwards for r in before)
    cfg = train_cfg(steps=100, lr=1e-2, blocks_per_sequence=16, eval_every=50)
    hist = train(model, data, cfg, tmp_path / "ck", heldout=heldout)
    assert hist[-1]["loss"] < 0.2 * hist[0]["loss"]
    assert min(hist[-1]["slot_acc"]) > 0.8  # every block position is now mostly right
    assert tpf_before < 1.3 and hist[-1]["heldout_tpf"] > 2.0
    # Still lossless: the gated adapter leaves the NTP logits the base model's.
    ar = decode(model, heldout, DecodeConfig(method="ar", max_new_tokens=24), mask_id)
    spec = decode(model, heldout, DecodeConfig(method="spec", max_new_tokens=24), mask_id)
    assert [r.tokens for r in spec] == [r.tokens for r in ar]


def test_checkpoint_of_an_adapter_loads_and_decodes_the_same(tmp_path):
    model, mask_id = tiny_model("llama", vocab=VOCAB)
    data = [Example([t % VOCAB for t in range(i, i + 30)], 5) for i in range(0, 8)]
    train(model, data, train_cfg(steps=4, eval_every=4), tmp_path / "ck")
    fresh, _ = tiny_model("llama", vocab=VOCAB)
    settings = checkpoint.apply(fresh, tmp_path / "ck", "tiny", mask_id)
    assert settings.adapter == "gated-lora" and settings.training["objective"] == "nsp"
    assert settings.lora == {"kind": "gated-lora", "rank": 8, "alpha": 16, "targets": list(adapters.TARGETS)}
    cfg = DecodeConfig(method="spec", adaptive=False, max_new_tokens=16)  # not this machine's timings
    a = decode(model.eval(), [[1, 2, 3]], cfg, mask_id)[0]
    b = decode(fresh, [[1, 2, 3]], cfg, mask_id)[0]
    assert a.tokens == b.tokens and a.accepted_per_step == b.accepted_per_step
    # The exported copy (no optimizer state, bf16) is smaller and loads too.
    checkpoint.export(tmp_path / "ck", tmp_path / "small")
    size = lambda d: (d / "adapter.safetensors").stat().st_size  # noqa: E731
    assert size(tmp_path / "small") < size(tmp_path / "ck") / 4
    assert (tmp_path / "small" / "curves.png").stat().st_size > 0
    other, _ = tiny_model("llama", vocab=VOCAB)
    assert checkpoint.apply(other, tmp_path / "small", "tiny", mask_id).adapter == "gated-lora"


def test_resume_matches_an_uninterrupted_run(tmp_path):
    data = counting_examples(8)
    cfg = train_cfg(steps=6, eval_every=3)
    straight, mask_id = tiny_model("llama", vocab=VOCAB)
    train(straight, data, cfg, tmp_path / "a")
    first, _ = tiny_model("llama", vocab=VOCAB)
    train(first, data, train_cfg(steps=3, eval_every=3), tmp_path / "b")
    resumed, _ = tiny_model("llama", vocab=VOCAB)
    train(resumed, data, cfg, tmp_path / "c", resume=tmp_path / "b")
    sa, sc = adapters.adapter_state(straight), adapters.adapter_state(resumed)
    for k in sa:
        torch.testing.assert_close(sc[k], sa[k], rtol=1e-4, atol=1e-6)


def test_joint_layout_with_sbd_and_ntp_loss_trains(tmp_path):
    model, mask_id = tiny_model("qwen2", vocab=VOCAB)
    cfg = train_cfg(objective="sbd", adapter="lora", ntp_weight=0.5, min_block_size=2, decay=2.0, steps=60,
                    lr=1e-2, eval_every=60)  # fmt: skip
    hist = train(model, counting_examples(), cfg, tmp_path / "ck")
    assert hist[-1]["loss"] < 0.6 * hist[0]["loss"]


def test_init_from_warm_starts_with_another_block_size_and_refuses_another_rank(tmp_path):
    data = counting_examples(8)
    first, mask_id = tiny_model("llama", vocab=VOCAB)
    train(first, data, train_cfg(steps=3, eval_every=3), tmp_path / "a")
    # D 4 -> 6 with a learning rate too small to move the weights: they are the first run's.
    cfg = train_cfg(steps=1, eval_every=1, block_size=6, lr=1e-12, init_from=str(tmp_path / "a"))
    second, _ = tiny_model("llama", vocab=VOCAB)
    hist = train(second, data, cfg, tmp_path / "b")
    sa, sb = adapters.adapter_state(first), adapters.adapter_state(second)
    assert any(v.abs().max() > 0 for k, v in sa.items() if k.endswith("lora_b"))  # trained: B starts at 0
    for k in sa:
        torch.testing.assert_close(sb[k], sa[k], rtol=1e-5, atol=1e-7)
    assert len(hist) == 1 and checkpoint.read_settings(tmp_path / "b").training["init_from"] == str(
        tmp_path / "a"
    )
    with pytest.raises(PardecError, match="cannot start from"):  # a smaller rank would lose the update
        train(
            tiny_model("llama", vocab=VOCAB)[0],
            data,
            train_cfg(lora_rank=4, init_from=str(tmp_path / "a")),
            tmp_path / "c",
        )
    with pytest.raises(PardecError, match="base model"):
        train(tiny_model("llama", vocab=VOCAB)[0], data, cfg, tmp_path / "d", name="other")


def test_init_from_a_smaller_rank_starts_from_the_same_update_and_trains_the_extra_rank(tmp_path):
    data = counting_examples(8)
    first, mask_id = tiny_model("llama", vocab=VOCAB)
    train(first, data, train_cfg(steps=3, eval_every=3), tmp_path / "a")
    # Rank 8 (alpha 16, scale 2) -> rank 16 with alpha 8 (scale 0.5): the same update, another scale.
    grown, _ = tiny_model("llama", vocab=VOCAB)
    cfg = train_cfg(
        steps=1, eval_every=1, lr=1e-12, lora_rank=16, lora_alpha=8, init_from=str(tmp_path / "a")
    )
    train(grown, data, cfg, tmp_path / "b")
    old, new = adapters.lora_modules(first), adapters.lora_modules(grown)
    x = torch.randn(3, 5, next(iter(old.values())).lora_a.shape[1])
    for name, m in old.items():
        assert new[name].lora_a.shape[0] == 16 and m.lora_a.shape[0] == 8
        if m.lora_a.shape[1] == x.shape[-1]:
            torch.testing.assert_close(
                new[name]._low_rank(x) * new[name].scale, m._low_rank(x) * m.scale, rtol=1e-4, atol=1e-6
            )
    assert all(m.lora_a[8:].abs().sum() > 0 for m in new.values())  # random: B's new columns get gradients
    # Trained on, the extra rank moves off zero.
    more = train_cfg(steps=2, eval_every=2, lora_rank=16, lora_alpha=8, init_from=str(tmp_path / "a"))
    third, _ = tiny_model("llama", vocab=VOCAB)
    train(third, data, more, tmp_path / "c")
    assert any(m.lora_b[:, 8:].abs().max() > 0 for m in adapters.lora_modules(third).values())


def test_init_from_keeps_a_subset_of_targets_and_the_checkpoint_loads_only_those(tmp_path):
    data = counting_examples(8)
    first, mask_id = tiny_model("qwen2", vocab=VOCAB)
    train(first, data, train_cfg(steps=3, eval_every=3), tmp_path / "a")
    attention = adapters.parse_targets("attention")
    cfg = train_cfg(steps=1, eval_every=1, lr=1e-12, lora_targets=attention, init_from=str(tmp_path / "a"))
    second, _ = tiny_model("qwen2", vocab=VOCAB)
    train(second, data, cfg, tmp_path / "b")
    sa, sb = adapters.adapter_state(first), adapters.adapter_state(second)
    assert sb and set(sb) < set(sa)
    assert {k.split(".")[-2] for k in sb} == set(attention)
    for k in sb:
        torch.testing.assert_close(sb[k], sa[k], rtol=1e-5, atol=1e-7)
    assert checkpoint.read_settings(tmp_path / "b").lora["targets"] == list(attention)
    loaded, _ = tiny_model("qwen2", vocab=VOCAB)
    checkpoint.apply(loaded, tmp_path / "b", "tiny", mask_id)
    assert set(adapters.adapter_state(loaded)) == set(sb)
    # The other way round, the checkpoint lacks the tensors: a clear refusal.
    mlp_cfg = train_cfg(
        steps=1, eval_every=1, lora_targets=adapters.parse_targets("mlp"), init_from=str(tmp_path / "b")
    )
    with pytest.raises(PardecError, match="does not fit this run"):
        train(tiny_model("qwen2", vocab=VOCAB)[0], data, mlp_cfg, tmp_path / "c")


def test_parse_targets():
    assert adapters.parse_targets("all") == adapters.TARGETS
    assert adapters.parse_targets("mlp") == ("gate_proj", "up_proj", "down_proj")
    assert adapters.parse_targets(" q_proj, v_proj ") == ("q_proj", "v_proj")
    for bad in ("", ",", "q_proj,q_proj"):
        with pytest.raises(PardecError, match="targets"):
            adapters.parse_targets(bad)


def test_held_out_prompts_come_from_every_file():
    a = [{"prompt": f"a{i}", "response": "x"} for i in range(5)]
    b = [{"prompt": f"b{i}", "response": "x"} for i in range(3)]
    train, held = split_heldout([a, b], ["a", "b"], 3)
    assert [r["prompt"] for r in held] == ["a3", "a4", "b2"]
    assert [r["prompt"] for r in train] == ["a0", "a1", "a2", "b0", "b1"]
    with pytest.raises(PardecError, match="b: 3 examples"):
        split_heldout([a, b], ["a", "b"], 7)


def test_gated_update_is_the_same_for_a_suffix_gate_a_scattered_gate_and_with_gradients():
    """The suffix fast path (decoding: block slots last), the general masked path and the training
    path (gradients on) compute the same layer output."""
    torch.manual_seed(0)
    gate = adapters.Gate()
    layer = adapters.LoRALinear(torch.nn.Linear(6, 5), rank=2, alpha=4.0, gate=gate, dtype=torch.float32)
    with torch.no_grad():
        layer.lora_b.normal_()
    x = torch.randn(2, 7, 6)
    on = torch.zeros(2, 7, dtype=torch.bool)
    on[:, 4:] = True

    def reference(on):
        return layer.base(x) + on[..., None] * (x @ layer.lora_a.T @ layer.lora_b.T) * layer.scale

    gate.set(on)
    assert gate.start == 4
    with torch.no_grad():
        fast = layer(x)
    torch.testing.assert_close(fast, reference(on))
    torch.testing.assert_close(layer(x), reference(on))  # gradients on: out of place
    scattered = on.clone()
    scattered[0, 1] = True
    gate.set(scattered)
    assert gate.start is None
    with torch.no_grad():
        torch.testing.assert_close(layer(x), reference(scattered))
    gate.set(None)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer.base(x))
