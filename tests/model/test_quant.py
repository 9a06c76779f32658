"""Weight-only int8 and int4 linears: both paths compute the quantized model, and spec stays lossless with
respect to it (greedy, fp32 activations)."""

import copy
import json

import pytest
import torch
from tiny import randomize_lora, tiny_model
from torch import nn

from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model import adapters, load_model
from pardec.model.quant import (
    TUNE_TOKENS,
    Int4Linear,
    Int8Linear,
    W8A8Linear,
    W8A8Part,
    crossover,
    crossovers,
    parse,
    quantize,
    weight_bytes,
)


def test_int8_linear_is_the_quantized_matmul_for_few_and_many_tokens():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=True)
    q = Int8Linear(linear, max_kernel_tokens=4)
    assert q.weight_int8.dtype == torch.int8 and q.scale.shape == (96,)
    deq = q.weight_int8.float() * q.scale[:, None]
    assert (deq - linear.weight).abs().max() <= q.scale.max() / 2 + 1e-6  # rounding to the nearest step
    for tokens in (1, 3, 4, 5, 16):  # the int8 kernel up to 4 tokens, the dense matmul above
        x = torch.randn(1, tokens, 64)
        want = x @ deq.T + linear.bias
        torch.testing.assert_close(q(x), want, rtol=1e-5, atol=1e-5)
        assert (q(x) - linear(x)).abs().max() < 0.05 * linear(x).abs().max()


def test_w8a8_linear_is_the_integer_matmul_of_per_channel_weights_and_per_token_activations():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=True)
    q = W8A8Linear(linear)
    w = linear.weight.detach()
    scale = w.abs().amax(1) / 127  # [N]
    deq = torch.round(w / scale[:, None]).clamp(-127, 127) * scale[:, None]  # [N, K]
    x = torch.randn(5, 64) * torch.tensor([0.01, 1, 3, 100, 1e4])[:, None]  # tokens of any magnitude
    top = x.abs().amax(1, keepdim=True)
    # 7 bits over [-1, 1], zero at code 64: steps of 2/127, a token's max-abs 63 steps
    step = 2 / 127
    x_deq = (x / top * 63 / 63.5 / step).round() * step  # [T, K] in units of the token's max-abs
    want = (x_deq * top * 63.5 / 63) @ deq.T + linear.bias
    got = q(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    assert ((got - linear(x)).abs().amax(1) < 0.05 * linear(x).abs().amax(1)).all()
    assert torch.equal(q(torch.zeros(2, 64)), linear.bias.expand(2, -1).detach())  # no division by zero
    assert weight_bytes(q)["kernel"] >= 64 * 96 and weight_bytes(q)["dense"] == 0


def test_w8a8_gives_each_token_the_same_output_however_many_are_fed_beside_it():
    torch.manual_seed(1)
    q = W8A8Linear(nn.Linear(128, 80))
    x = torch.randn(40, 128) * torch.rand(40, 1) * 50  # [T, K]: rows whose ranges differ widely
    x[7] *= 1000  # one token far larger than the rest: it must not coarsen the others' steps
    full = q(x)
    for start, stop in ((0, 1), (7, 8), (3, 12), (20, 40), (39, 40)):
        assert torch.equal(q(x[start:stop]), full[start:stop])


class Siblings(nn.Module):  # three linears that a caller may feed the same input, and one that it may not
    def __init__(self):
        super().__init__()
        self.q_proj, self.v_proj = nn.Linear(64, 48), nn.Linear(64, 16)
        self.k_proj = nn.Linear(64, 16, bias=False)
        self.o_proj = nn.Linear(48, 64)


def test_w8a8_siblings_run_as_one_gemm_whose_columns_are_each_linears_own_output():
    torch.manual_seed(2)
    parent = Siblings()
    own = {n: W8A8Linear(getattr(parent, n)) for n in ("q_proj", "k_proj", "v_proj")}
    apart = copy.deepcopy(parent)
    assert quantize(parent, "w8a8") == {"int4": 0, "int8": 0, "w8a8": 4}
    quantize(apart, "w8a8", siblings=False)
    parts = {n: getattr(parent, n) for n in own}
    assert all(type(p) is W8A8Part for p in parts.values()) and type(parent.o_proj) is W8A8Linear
    fused = parts["q_proj"].siblings
    assert all(p.siblings is fused for p in parts.values()) and fused.out_features == 80
    # The shared GEMM's weights are counted once: two anchor rows fewer, k_proj's zero bias more.
    assert weight_bytes(parent)["kernel"] == weight_bytes(apart)["kernel"] - 2 * 64 * 4 + 16 * 4
    x, other = torch.randn(3, 64), torch.randn(3, 64)
    for n in ("q_proj", "k_proj", "v_proj"):  # the usual order: one GEMM serves all three
        assert torch.equal(parts[n](x), own[n](x))
    assert fused._memo is None  # every part served: no tensor is held past the forward
    # Any other order or input computes again rather than serving stale or foreign columns.
    assert torch.equal(parts["k_proj"](x), own["k_proj"](x))
    assert torch.equal(parts["k_proj"](x), own["k_proj"](x))  # the same part twice: computed twice
    assert torch.equal(parts["q_proj"](other), own["q_proj"](other))
    x.mul_(2)  # changed in place after k_proj saw it
    assert torch.equal(parts["v_proj"](x), own["v_proj"](x))


def test_w8a8_fuses_the_bases_of_lora_wrappers_and_a_block_step_equals_the_unfused_model():
    model, _ = tiny_model("qwen2")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(model)
    apart = copy.deepcopy(model)
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert quantize(model, "w8a8", tuned=False) == {"int4": 0, "int8": 0, "w8a8": n_linear}
    quantize(apart, "w8a8", tuned=False, siblings=False)
    attention = model.model.layers[0].self_attn
    assert type(attention.q_proj.base) is W8A8Part and type(attention.o_proj.base) is W8A8Linear
    assert type(model.model.layers[0].mlp.up_proj.base) is W8A8Part
    ids = torch.randint(0, 40, (1, 7))
    on = torch.zeros(1, 7, dtype=torch.bool)
    on[:, 4:] = True  # the last three positions are block slots: the gated adapters run there
    with torch.no_grad(), adapters.gated(model, on), adapters.gated(apart, on):
        torch.testing.assert_close(model(ids).logits, apart(ids).logits, rtol=1e-5, atol=1e-5)


def test_quantize_replaces_every_linear_also_inside_lora_and_optionally_the_head():
    model, _ = tiny_model("llama")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert quantize(model, "int8", head=False) == {"int4": 0, "int8": n_linear - 1}
    assert type(model.lm_head) is nn.Linear
    assert all(type(m.base) is Int8Linear for m in adapters.lora_modules(model).values())
    assert quantize(model, "none") == {"int4": 0, "int8": 0}
    with pytest.raises(ValueError):
        quantize(model, "int3")


def test_load_model_refuses_an_unknown_quantization(tiny_dir):
    with pytest.raises(PardecError, match="unknown quantization"):
        load_model(tiny_dir, torch.float32, "none", quant="int3")
    with pytest.raises(PardecError, match="needs a model loaded from a GGUF"):
        load_model(tiny_dir, torch.float32, "none", quant="gguf")
    lm = load_model(tiny_dir, torch.float32, "none", quant="int8")
    assert lm.quant == "int8" and isinstance(lm.model.lm_head, Int8Linear)
    with pytest.raises(PardecError, match="--compile does not take --quant w8a8"):
        load_model(tiny_dir, torch.float32, "none", quant="w8a8", compile=True)


def test_w8a8_runs_its_activations_in_float32_whatever_dtype_is_asked(tiny_dir):
    lm = load_model(tiny_dir, torch.bfloat16, "none", quant="w8a8")
    assert isinstance(lm.model.lm_head, W8A8Linear)
    assert lm.model.dtype == torch.float32 and lm.model.get_input_embeddings().weight.dtype == torch.float32
    assert load_model(tiny_dir, torch.bfloat16, "none", quant="int8").model.dtype == torch.bfloat16


def test_int4_linear_is_the_group_affine_matmul_for_few_and_many_tokens():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32, bias=True)
    q = Int4Linear.from_linear(linear)
    assert q.group == 32 and q.packed.dtype == torch.uint8 and q.packed.shape == (32, 32)
    w = linear.weight.reshape(32, 2, 32)
    step = (w.amax(-1) - w.amin(-1)) / 15  # [N, groups]
    assert ((q.dense.reshape(32, 2, 32) - w).abs() <= step[..., None] / 2 + 1e-6).all()
    for tokens in (1, 4, 5, 16):  # the int4 kernel up to 4 tokens, the dense matmul above
        x = torch.randn(2, tokens, 64)
        torch.testing.assert_close(q(x), x @ q.dense.T + linear.bias, rtol=1e-5, atol=1e-5)


def test_int4_takes_what_its_kernel_can_and_int8_the_rest():
    model, _ = tiny_model("qwen2")  # vocab 49 rows: the head's output count is no multiple of 16
    counts = quantize(model, "int4", tuned=False)
    assert counts == {"int4": 2 * 7 + 1, "int8": 0}
    assert isinstance(model.lm_head, Int4Linear) and model.lm_head.packed.shape[0] == 64  # padded rows
    x = torch.randn(1, 3, model.lm_head.in_features)  # the kernel's path
    torch.testing.assert_close(model.lm_head(x), x @ model.lm_head.dense.T, rtol=1e-4, atol=1e-4)
    assert model.lm_head(x).shape == (1, 3, 49)
    odd = nn.Linear(48, 32)  # 48 inputs: no whole groups of 32
    parent = nn.Sequential(odd)
    assert quantize(parent, "int4") == {"int4": 0, "int8": 1} and isinstance(parent[0], Int8Linear)
    with pytest.raises(ValueError, match="needs the GGUF"):
        quantize(tiny_model("qwen2")[0], "gguf")
    bytes_ = weight_bytes(model)
    assert bytes_["dense"] > 0 and bytes_["kernel"] > 0


def test_the_crossover_is_the_most_tokens_before_the_kernel_first_loses():
    tokens = (1, 2, 4, 8, 16)
    dense = [1.0, 1.0, 1.1, 1.2, 1.5]
    assert crossover(tokens, [0.2, 0.4, 0.8, 1.3, 1.4], dense) == 4  # loses at 8: 16's win is noise past it
    assert crossover(tokens, [1.1, 0.4, 0.8, 1.0, 1.4], dense) == 0  # slower even for one token: dense only
    assert crossover(tokens, [0.1] * 5, dense) == 16


def test_tuning_sets_one_crossover_per_shape_from_the_timed_counts():
    model, _ = tiny_model("qwen2")
    quantize(model, "int4")
    layers = [m for m in model.modules() if isinstance(m, Int4Linear)]
    chosen = crossovers(model)
    assert len(chosen) == len({(m.out_features, m.in_features) for m in layers})
    # None: the kernel was never slower, so it runs every forward with no dense copy kept
    assert all(t in (None, 0, *TUNE_TOKENS[:-1]) for t in chosen.values())
    for m in layers:  # every layer of a shape got its shape's choice
        want = chosen[f"int4 [{m.out_features} x {m.in_features}]"]
        assert (m.dense is None) == (want is None)
        assert want is None or m.max_kernel_tokens == want


def test_a_kernel_never_slower_runs_every_forward_and_keeps_no_dense_copy(monkeypatch):
    import pardec.model.quant as quant

    timed = iter(range(10**6))  # every call of _seconds: kernel, dense, kernel, dense, ...
    monkeypatch.setattr(quant, "_seconds", lambda f, x, layers: 1.0 if next(timed) % 2 else 0.5)
    model, _ = tiny_model("qwen2")
    quantize(model, "int8")
    assert weight_bytes(model)["dense"] == 0 and set(crossovers(model).values()) == {None}
    ids = torch.randint(0, 40, (1, 40))  # a prefill longer than any timed count: the kernel still
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


def test_tuning_stops_timing_a_shape_once_its_kernel_loses(monkeypatch):
    import pardec.model.quant as quant

    calls = []  # kernel, dense, kernel, dense, ...: the kernel loses at the third count (4 tokens)
    monkeypatch.setattr(quant, "_seconds", lambda f, x, layers: calls.append(x.shape[0]) or
                        (1.0 if len(calls) % 2 else (2.0 if x.shape[0] < 4 else 0.5)))  # fmt: skip
    model, _ = tiny_model("qwen2")
    shapes = len({(m.out_features, m.in_features) for m in model.modules() if isinstance(m, nn.Linear)})
    quantize(model, "int8")
    assert set(crossovers(model).values()) == {2} and len(calls) == shapes * 2 * 3


@pytest.mark.parametrize("flags,want", [(dict(amx=False, avx512_bf16=False), torch.float32),
                                        (dict(amx=True, avx512_bf16=True), torch.bfloat16),
                                        (dict(amx=False, avx512_bf16=True), torch.bfloat16)])  # fmt: skip
def test_dense_copies_are_float32_where_bf16_matmuls_are_emulated(monkeypatch, flags, want):
    import pardec.machine
    import pardec.model.quant as quant

    monkeypatch.setattr(pardec.machine, "machine", lambda: dict(flags, cuda=None))
    # --dtype auto: float32 for training where bf16 is emulated; to decode, bf16 (half the bytes) unless
    # a one-token float32 matmul is about as fast there
    assert pardec.machine.default_dtype(compute_bound=True) is want
    for float32_s, decoding in ((2.0, torch.bfloat16), (1.05, want)):
        times = {"float32": float32_s, "bfloat16": 1.0}
        monkeypatch.setattr(pardec.machine, "one_token_seconds", lambda times=times: times)
        assert pardec.machine.default_dtype() is decoding
    assert quant.copies_dtype(torch.bfloat16) is want and quant.copies_dtype(torch.float32) is torch.float32
    torch.manual_seed(0)
    linear = nn.Linear(64, 32, bias=True).bfloat16()
    sequential = nn.Sequential(linear)
    quantize(sequential, "int4", tuned=False)
    q = sequential[0]
    assert q.dense.dtype is want and q.activation_dtype is torch.bfloat16
    x = torch.randn(1, 16, 64).bfloat16()  # above the crossover: the dense copy
    y = q(x)
    assert y.dtype is torch.bfloat16
    want_y = (x.float() @ q.dense.float().T).to(torch.bfloat16) + linear.bias
    torch.testing.assert_close(y, want_y, rtol=0.02, atol=0.02)
    # the kernel's path (few tokens) computes the same quantized layer
    torch.testing.assert_close(q(x[:, :2]), y[:, :2], rtol=0.05, atol=0.05)


def test_a_cached_choice_is_read_back_for_the_same_shapes_and_timed_again_otherwise(tmp_path):
    model, _ = tiny_model("qwen2")
    quantize(model, "int4", tune_cache=tmp_path)
    (path,) = tmp_path.glob("*.json")
    record = json.loads(path.read_text())
    record["crossovers"] = [
        [kind, n, k, 3] for kind, n, k, _ in record["crossovers"]
    ]  # a choice timing never gives
    path.write_text(json.dumps(record))
    again, _ = tiny_model("qwen2")
    quantize(again, "int4", tune_cache=tmp_path)
    assert set(crossovers(again).values()) == {3}  # read back, not timed
    path.write_text("{")  # unreadable: timed again and rewritten
    third, _ = tiny_model("qwen2")
    quantize(third, "int4", tune_cache=tmp_path)
    assert all(t in (None, 0, *TUNE_TOKENS[:-1]) for t in crossovers(third).values())
    assert json.loads(path.read_text())["crossovers"]
    other, _ = tiny_model("llama")  # the same shapes in int8: another entry
    quantize(other, "int8", tune_cache=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_low_memory_keeps_no_dense_copies_and_computes_the_same_model(quant, tiny_dir):
    torch.manual_seed(0)
    model, _ = tiny_model("llama")
    lean, _ = tiny_model("llama")
    quantize(model, quant, tuned=False)
    quantize(lean, quant, dense=False)
    assert weight_bytes(lean)["dense"] == 0 < weight_bytes(model)["dense"]
    assert weight_bytes(lean)["kernel"] == weight_bytes(model)["kernel"]
    assert set(crossovers(lean).values()) == {None}
    ids = torch.randint(0, 40, (1, 12))  # 12 tokens: `model`'s dense copies, `lean`'s kernel
    with torch.no_grad():
        torch.testing.assert_close(lean(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4)
    lm = load_model(tiny_dir, torch.float32, "none", quant=f"{quant}-lowmem")
    assert lm.quant == f"{quant}-lowmem" and weight_bytes(lm.model)["dense"] == 0
    with pytest.raises(PardecError, match="unknown quantization"):
        load_model(tiny_dir, torch.float32, "none", quant="none-lowmem")


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("quant", ["int8", "int4", "int4-lowmem", "w8a8", "packed"])
def test_spec_on_the_quantized_model_equals_its_own_ar(kind, quant):
    model, mask_id = tiny_model(kind)
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(model)
    weights, dense = parse(quant)
    quantize(model, weights, dense=dense)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    ar = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=24), mask_id)
    for tree in (0, 1):
        config = DecodeConfig(method="spec", block_size=4, tree=tree, adaptive=False, max_new_tokens=24)
        spec = decode(model, prompts, config, mask_id)
        assert [s.tokens for s in spec] == [a.tokens for a in ar]


def test_weight_bytes_counts_a_tied_weight_once():
    model, _ = tiny_model("llama")
    untied = weight_bytes(model)["kernel"]
    head = model.lm_head.weight
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as SmolLM2's are
    assert weight_bytes(model)["kernel"] == untied - head.numel() * head.element_size()


def test_one_token_matmuls_are_timed_in_both_dtypes_once_per_machine(tmp_path, monkeypatch):
    import pardec.machine

    monkeypatch.setenv("PARDEC_CACHE", str(tmp_path))
    pardec.machine.one_token_seconds.cache_clear()
    times = pardec.machine.one_token_seconds(64, 32, layers=2)
    assert set(times) == {"float32", "bfloat16"} and all(0 < t < 1 for t in times.values())
    assert pardec.machine.one_token_seconds(64, 32, layers=2) is times  # cached in the process
    [kept] = (tmp_path / "dtype").iterdir()
    # A later process reads the machine's timing back instead of timing again (the same choice each run)
    pardec.machine.one_token_seconds.cache_clear()
    monkeypatch.setattr(pardec.machine, "_time_one_token", lambda *a: pytest.fail("timed again"))
    assert pardec.machine.one_token_seconds(64, 32, layers=2) == times
    # An unreadable file is timed again and replaced
    kept.write_text("{not json")
    pardec.machine.one_token_seconds.cache_clear()
    monkeypatch.setattr(pardec.machine, "_time_one_token", lambda *a: {"float32": 2.0, "bfloat16": 1.0})
    assert pardec.machine.one_token_seconds(64, 32, layers=2) == {"float32": 2.0, "bfloat16": 1.0}
    assert json.loads(kept.read_text())["seconds"] == {"float32": 2.0, "bfloat16": 1.0}
    pardec.machine.one_token_seconds.cache_clear()
