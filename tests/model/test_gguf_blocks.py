"""The GGUF's own 4-bit blocks as int4 kernel weights: the codes decode to what gguf's own
dequantization gives, the tensors map to the right layers (Llama's q/k rows restored), and spec on
the result stays lossless."""

import gguf
import numpy as np
import pytest
import torch
from tiny import tiny_model

from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model.gguf_blocks import _llama_rows, decode_int4, int4_tensors
from pardec.model.quant import Int4Linear, Int8Linear, dequantized, quantize

FORMATS = {"Q4_0": (32, 18, 1), "Q4_1": (32, 20, 2), "Q4_K": (256, 144, 2)}  # weights, bytes, fp16 fields


def random_blocks(type_name: str, n: int, k: int, rng) -> np.ndarray:
    per, size, halves = FORMATS[type_name]
    raw = rng.integers(0, 256, (n * k // per, size), dtype=np.uint8)  # any bytes are valid codes
    raw[:, : 2 * halves] = rng.uniform(-0.05, 0.05, (len(raw), halves)).astype(np.float16).view(np.uint8)
    return raw.reshape(n, -1)


@pytest.mark.parametrize("type_name", list(FORMATS))
def test_codes_decode_to_ggufs_own_dequantization(type_name):
    rng = np.random.default_rng(0)
    raw = random_blocks(type_name, 16, 512, rng)
    codes, scale, minimum = decode_int4(raw, type_name, 512)
    assert codes.shape == (16, 512) and int(codes.max()) <= 15 and scale.shape == (16, 16)
    w = dequantized(codes, scale, minimum)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name])
    np.testing.assert_array_equal(w.numpy(), want)


def test_other_formats_are_not_int4():
    assert decode_int4(np.zeros((16, 34), np.uint8), "Q8_0", 32) is None


def q4_0_rows(w: torch.Tensor) -> np.ndarray:
    """[N, K] weights that are Q4_0 values -> the file's bytes [N, K / 32 * 18]."""
    n, k = w.shape
    g = w.reshape(n, k // 32, 32)
    d = g.abs().amax(-1) / 8  # codes 0..15 around 8
    q = torch.round(g / d[..., None] + 8).clamp(0, 15).to(torch.uint8).numpy()
    out = np.empty((n, k // 32, 18), np.uint8)
    out[..., :2] = d.numpy().astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(n, -1)


def tiny_gguf(tmp_path, model, arch="llama"):
    """Write the model's layers as Q4_0 blocks (q/k rows in llama.cpp's order) and set the model's
    weights to what the file holds, as a conversion from that file would."""
    writer = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), arch)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, model.config.num_hidden_layers)
    for name, module in model.named_modules():
        if type(module) is not torch.nn.Linear or name == "lm_head":
            continue
        raw = q4_0_rows(module.weight.detach())
        codes, scale, minimum = decode_int4(raw, "Q4_0", module.in_features)
        with torch.no_grad():
            module.weight.copy_(
                (codes.float().reshape(len(codes), -1, 32) * scale[..., None] + minimum[..., None]).reshape(
                    module.weight.shape
                )
            )
        if name.endswith(("q_proj", "k_proj")):
            heads = (
                model.config.num_attention_heads
                if name.endswith("q_proj")
                else model.config.num_key_value_heads
            )
            raw = raw[_llama_rows(len(raw), heads)]  # the converter's interleaved order
        writer.add_tensor(
            names.get_name(name + ".weight", try_suffixes=(".weight",)),
            raw,
            raw_dtype=gguf.GGMLQuantizationType.Q4_0,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tmp_path / "tiny.gguf"


def test_gguf_tensors_map_to_the_models_layers_and_spec_stays_lossless(tmp_path):
    model, mask_id = tiny_model("llama")
    path = tiny_gguf(tmp_path, model)
    shipped = int4_tensors(path, model)
    assert len(shipped) == 2 * 7  # every layer's linears; the head is not in the file
    dense = {n: m.weight.detach().clone() for n, m in model.named_modules() if type(m) is torch.nn.Linear}
    counts = quantize(model, "gguf", gguf=path)
    assert counts == {"int4": 14, "int8": 1}
    assert isinstance(model.lm_head, Int8Linear)
    for name, module in model.named_modules():
        if isinstance(module, Int4Linear):  # the shipped codes, rows where the model has them
            torch.testing.assert_close(module.dense, dense[name], rtol=0, atol=1e-6)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    ar = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=20), mask_id)
    spec = decode(
        model, prompts, DecodeConfig(method="spec", block_size=4, adaptive=False, max_new_tokens=20), mask_id
    )
    assert [s.tokens for s in spec] == [a.tokens for a in ar]


def test_a_gguf_that_is_not_the_models_is_refused(tmp_path):
    model, _ = tiny_model("llama")
    path = tiny_gguf(tmp_path, model)
    other, _ = tiny_model("llama", seed=1)
    with pytest.raises(PardecError, match="not the model's"):
        int4_tensors(path, other)
