"""Float32 linears with MKL-packed weights (`--quant packed`)."""

import pytest
import torch
from tiny import randomize_lora, tiny_model
from torch import nn

from pardec.bench.methods import parse_methods
from pardec.core.cache import BlockCache
from pardec.core.step import Block, block_step
from pardec.decoding import DecodeConfig
from pardec.errors import PardecError
from pardec.model import adapters, load_model
from pardec.model.packed import PLAIN_ROWS, PackedLinear, available
from pardec.model.quant import quantize, weight_bytes

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no MKL packed GEMM: {available()}")


@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_computes_the_linear_for_every_row_count(bias):
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=bias)
    packed = PackedLinear(linear, rows=8)
    with torch.no_grad():
        for rows in range(1, 13):  # plain (1-3), packed and padded (4-8), plain again (9-12)
            x = torch.randn(rows, 64)
            torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
        x = torch.randn(2, 3, 64)  # [B, T, K]: the packed path for 6 rows, back in the input's shape
        assert packed(x).shape == (2, 3, 48)
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


def test_the_packed_layout_is_what_few_row_forwards_read(monkeypatch):
    linear = nn.Linear(32, 16)
    packed = PackedLinear(linear, rows=8)
    calls = []
    real = torch.ops.mkl._mkl_linear

    def spy(x, *args):
        calls.append(x.shape[0])
        return real(x, *args)

    monkeypatch.setattr(torch.ops.mkl, "_mkl_linear", spy)
    with torch.no_grad():
        for rows in (1, PLAIN_ROWS, PLAIN_ROWS + 1, 8, 9):
            packed(torch.randn(rows, 32))
    assert calls == [8, 8]  # 4 rows padded to the packed 8, and 8; none for 1, 3 or 9 rows


def test_packing_needs_float32_weights_on_the_cpu():
    with pytest.raises(ValueError, match="float32"):
        PackedLinear(nn.Linear(8, 8).to(torch.bfloat16))


def test_quantize_packs_every_linear_and_the_copies_count_as_dense_bytes_not_saved_ones():
    model, _ = tiny_model("llama")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    before = weight_bytes(model)
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert quantize(model, "packed") == {"int4": 0, "int8": 0, "packed": n_linear}
    assert all(type(m.base) is PackedLinear for m in adapters.lora_modules(model).values())
    after = weight_bytes(model)
    assert after["kernel"] == before["kernel"] and after["dense"] > 0  # the weights are shared, not copied
    assert not any("packed" in k for k in model.state_dict())


def test_a_block_step_on_packed_weights_equals_the_plain_models():
    torch.manual_seed(0)
    model, mask_id = tiny_model("qwen2")
    adapters.attach(model, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(model)
    plain, _ = tiny_model("qwen2")
    adapters.attach(plain, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    plain.load_state_dict(model.state_dict())
    quantize(model, "packed")
    outs = []
    for m in (model, plain):
        cache = BlockCache.empty(1, m.config, m.device)
        # 3 pending tokens and a block of 4 slots: 7 rows, the packed path
        outs.append(block_step(m, cache, [[1, 2, 3]], [[Block(0, [mask_id] * 4)]], 3, mask_id))
    torch.testing.assert_close(outs[0].ntp_logits, outs[1].ntp_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[0].block_logits, outs[1].block_logits, rtol=1e-4, atol=1e-4)


def test_load_model_packs_in_float32_whatever_dtype_is_asked_and_refuses_without_mkl(tiny_dir, monkeypatch):
    lm = load_model(tiny_dir, torch.bfloat16, "none", quant="packed")
    assert isinstance(lm.model.lm_head, PackedLinear) and lm.model.dtype == torch.float32
    with pytest.raises(PardecError, match="--compile does not take --quant packed"):
        load_model(tiny_dir, torch.float32, "none", quant="packed", compile=True)
    with pytest.raises(PardecError, match="--compile does not take --quant packed"):
        parse_methods("ar,spec@quant=packed@compile=true", DecodeConfig())
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: False)
    with pytest.raises(PardecError, match="--quant packed cannot run here: this PyTorch build has no MKL"):
        load_model(tiny_dir, torch.float32, "none", quant="packed")
