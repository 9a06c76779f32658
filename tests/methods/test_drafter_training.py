"""DFlash drafter training on a tiny model: cached features, training raises TPF, checkpoints load,
resume is exact, the DFlash-format export has the public layout."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny import counting_model

from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.methods.dflash import Drafter, DrafterConfig
from pardec.methods.dflash import checkpoint as dcheckpoint
from pardec.methods.dflash.model import set_feature_scale
from pardec.methods.dflash.training import DrafterJob, DrafterTrainConfig, cache_features, load_features
from pardec.model import LoadedModel, checkpoint
from pardec.training import trainer
from pardec.training.data import Example


def cfg(**kw):
    base = dict(block_size=4, layers=1, anchors_per_sequence=16, lr=3e-3, warmup_steps=2,
                steps=80, grad_accum=2, bf16=False, eval_every=40, eval_max_new_tokens=24,
                decay=2.0)  # fmt: skip
    base.update(kw)
    return DrafterTrainConfig(**base)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model, mask_id, prompts = counting_model()
    outs = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=40), mask_id)
    data = [Example(p + o.tokens, len(p)) for p, o in zip(prompts[:32], outs[:32])]  # self-distilled
    folder = tmp_path_factory.mktemp("features")
    dcfg = DrafterConfig.for_target(model.config, mask_id, n_layers=1, block_size=4)
    cache_features(model, data, dcfg.target_layers, folder, progress=False)
    return model, mask_id, prompts[32:], data, load_features(folder, len(data)), dcfg, folder


def new_drafter(dcfg, seed=0):
    torch.manual_seed(seed)
    return Drafter(dcfg)


def tpf(model, mask_id, prompts, drafter):
    res = decode(
        model,
        prompts,
        DecodeConfig(method="dflash", block_size=4, max_new_tokens=24),
        mask_id,
        extras={"drafter": drafter.eval()},
    )
    return sum(len(r.tokens) for r in res) / sum(r.forwards for r in res), res


def test_feature_cache_holds_the_targets_layers_and_resumes(setup):
    model, mask_id, _, data, features, dcfg, folder = setup
    hs = model(torch.tensor([data[3].ids]), output_hidden_states=True).hidden_states
    want = torch.cat([hs[i + 1][0] for i in dcfg.target_layers], -1)
    torch.testing.assert_close(features[3].float(), want, atol=0.02, rtol=0.02)  # stored in bf16
    shard = sorted(folder.glob("shard-*.safetensors"))[0]
    stamp = shard.stat().st_mtime_ns
    cache_features(model, data, dcfg.target_layers, folder, progress=False)  # nothing to redo
    assert shard.stat().st_mtime_ns == stamp
    with pytest.raises(PardecError, match="lacks example"):
        load_features(folder, len(data) + 1)


def train(setup, drafter, config, out, heldout=(), resume=None):
    """The drafter job for the setup's target and data, run by the training loop."""
    model, _, _, data, features, _, _ = setup
    job = DrafterJob(LoadedModel(model, None, "tiny"), drafter, data, features, list(heldout), config)
    return trainer.train(job, out, resume, progress=False)


def test_training_raises_dflash_tpf_and_stays_lossless(setup, tmp_path):
    model, mask_id, heldout, data, features, dcfg, _ = setup
    drafter = new_drafter(dcfg)
    set_feature_scale(drafter, features)
    before, _ = tpf(model, mask_id, heldout, drafter)
    hist = train(setup, drafter, cfg(), tmp_path / "ck", heldout=heldout)
    assert hist[-1]["loss"] < 0.2 * hist[0]["loss"]
    after, res = tpf(model, mask_id, heldout, drafter)
    assert before < 1.3 and after > 2.5 and hist[-1]["heldout_tpf"] == pytest.approx(after)
    ar = decode(model, heldout, DecodeConfig(method="ar", max_new_tokens=24), mask_id)
    assert [r.tokens for r in res] == [r.tokens for r in ar]
    # The checkpoint loads into a fresh drafter that drafts the same.
    loaded = dcheckpoint.load(tmp_path / "ck", model, "tiny", mask_id)
    assert tpf(model, mask_id, heldout, loaded)[1][0].accepted_per_step == res[0].accepted_per_step
    with pytest.raises(PardecError, match="made for base model"):
        dcheckpoint.load(tmp_path / "ck", model, "other", mask_id)


def test_resume_matches_an_uninterrupted_run(setup, tmp_path):
    model, mask_id, _, data, features, dcfg, _ = setup
    c = cfg(steps=6, eval_every=3)
    straight = new_drafter(dcfg)
    train(setup, straight, c, tmp_path / "a")
    first = new_drafter(dcfg)
    train(setup, first, cfg(steps=3, eval_every=3), tmp_path / "b")
    resumed = new_drafter(dcfg, seed=5)  # weights come from the checkpoint
    train(setup, resumed, c, tmp_path / "c", resume=tmp_path / "b")
    for (n, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=n)
    with pytest.raises(PardecError, match="settings differ"):
        train(setup, new_drafter(dcfg), cfg(steps=6, lr=1.0), tmp_path / "d", resume=tmp_path / "b")
    # A checkpoint that lost a tensor is refused by name, not with a KeyError.
    weights = checkpoint.weights_file(tmp_path / "b", dcheckpoint.KIND)
    tensors = load_file(str(weights))
    del tensors["fc.weight"]
    save_file(tensors, str(weights))
    with pytest.raises(PardecError, match="'fc.weight' is missing"):
        train(setup, new_drafter(dcfg), c, tmp_path / "e", resume=tmp_path / "b")


def test_exports(setup, tmp_path):
    model, mask_id, _, data, features, dcfg, _ = setup
    drafter = new_drafter(dcfg)
    set_feature_scale(drafter, features)
    train(setup, drafter, cfg(steps=2, eval_every=2), tmp_path / "ck")
    checkpoint.export(tmp_path / "ck", tmp_path / "small")  # one export for every kind
    small = load_file(str(checkpoint.weights_file(tmp_path / "small", dcheckpoint.KIND)))
    assert not any(k.startswith("optimizer.") for k in small) and all(
        v.dtype == torch.bfloat16 for v in small.values()
    )
    dcheckpoint.export_dflash(tmp_path / "ck", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["dflash_config"] == {
        "block_size": 4,
        "mask_token_id": mask_id,
        "input_embedding_scale": 1.0,
        "target_layer_ids": list(dcfg.target_layers),
    }
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert {
        "fc.weight",
        "hidden_norm.weight",
        "norm.weight",
        "layers.0.self_attn.q_norm.weight",
        "layers.0.mlp.down_proj.weight",
    } <= set(tensors)
    assert tensors["fc.weight"].shape == (dcfg.hidden_size, dcfg.hidden_size * len(dcfg.target_layers))
    # The feature scale is folded into fc: their fc on raw features == ours on scaled features.
    assert "feature_scale" not in tensors and not torch.equal(
        drafter.feature_scale, torch.ones_like(drafter.feature_scale)
    )
    x = features[0][:5].float()
    torch.testing.assert_close(
        x @ tensors["fc.weight"].float().T, drafter.fc(x * drafter.feature_scale), atol=0.05, rtol=0.02
    )  # bf16 export
    # Corrupt weights give a clear error.
    (checkpoint.weights_file(tmp_path / "small", dcheckpoint.KIND)).write_bytes(b"garbage")
    with pytest.raises(PardecError, match="corrupt drafter weights"):
        dcheckpoint.load(tmp_path / "small", model, "tiny", mask_id)


def test_one_checkpoint_format_reads_version_1_folders_and_refuses_the_wrong_kind(setup, tmp_path):
    model, mask_id, _, _, features, dcfg, _ = setup
    drafter = new_drafter(dcfg)
    set_feature_scale(drafter, features)
    train(setup, drafter, cfg(steps=1, eval_every=1), tmp_path / "ck")
    header = json.loads((tmp_path / "ck" / "pardec.json").read_text())
    assert header["format"] == checkpoint.FORMAT and header["kind"] == "drafter"
    # Version 1 drafters: drafter.json (its own format string) beside drafter.safetensors.
    old = tmp_path / "v1"
    old.mkdir()
    v1 = {k: v for k, v in header.items() if k not in ("format", "kind")} | {
        "format": "pardec-dflash-drafter/1"
    }
    (old / "drafter.json").write_text(json.dumps(v1))
    shutil.copyfile(checkpoint.weights_file(tmp_path / "ck", "drafter"), old / "drafter.safetensors")
    loaded = dcheckpoint.load(old, model, "tiny", mask_id)
    assert torch.equal(loaded.fc.weight, drafter.fc.weight.to(loaded.fc.weight.dtype))
    # A version 1 adapter (pardec.json without a format or kind, as the bundled one was): still an adapter.
    v1_adapter = tmp_path / "v1-adapter"
    v1_adapter.mkdir()
    settings = json.loads((checkpoint.BUNDLED / "qwen2.5-coder-0.5b" / "pardec.json").read_text())
    settings = {k: v for k, v in settings.items() if k not in ("format", "kind")}
    (v1_adapter / "pardec.json").write_text(json.dumps(settings))
    v1_header = checkpoint.read_header(v1_adapter)
    assert v1_header["format"] == 1 and v1_header["kind"] == "adapter"
    with pytest.raises(PardecError, match="checkpoint of kind adapter is needed"):
        checkpoint.read_settings(tmp_path / "ck")  # a drafter given as --adapter
    with pytest.raises(PardecError, match="checkpoint of kind drafter is needed"):
        dcheckpoint.load(checkpoint.BUNDLED / "qwen2.5-coder-0.5b", model, "tiny", mask_id)
    (tmp_path / "ck" / "pardec.json").write_text(json.dumps(header | {"format": 99}))
    with pytest.raises(PardecError, match="format 99"):
        checkpoint.read_header(tmp_path / "ck")
