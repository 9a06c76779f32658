"""`pardec calibrate` on a tiny trained adapter: the acceptance fit, the lossy settings it chooses,
and how decoding reads them back (adaptive spec's plan, --threshold auto)."""

import dataclasses

import pytest
import torch
from test_training import train, train_cfg
from tiny import counting_model

from pardec.api import configure
from pardec.decoding import DecodeConfig, decode
from pardec.errors import PardecError
from pardec.model import LoadedModel, calibration, checkpoint
from pardec.training.calibrate import SEVERE_NATS, CalibrateConfig, calibrate, regret, within
from pardec.training.data import Example


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A counting model with a gated adapter trained on its own outputs, loaded from its checkpoint."""
    model, mask_id, prompts = counting_model()
    outs = decode(model, prompts, DecodeConfig(method="ar", max_new_tokens=40), mask_id)
    data = [Example(p + o.tokens, len(p)) for p, o in zip(prompts[:32], outs[:32])]
    out = tmp_path_factory.mktemp("cal") / "ck"
    train(model, data, train_cfg(steps=60, lr=1e-2, blocks_per_sequence=16, eval_every=60), out)
    settings = checkpoint.read_settings(out)
    return LoadedModel(model, None, "tiny", out, settings), prompts[32:]


def test_regret_is_how_far_each_token_falls_short_of_the_models_greedy_choice(trained):
    lm, prompts = trained
    ar = decode(lm.model, prompts[:2], DecodeConfig(method="ar", max_new_tokens=12), lm.mask_id)
    assert all(regret(lm, p, r.tokens).abs().max() < 1e-4 for p, r in zip(prompts, ar))  # fp32 greedy
    wrong = list(ar[0].tokens)
    wrong[3] = (wrong[3] + 1) % 32
    got = regret(lm, prompts[0], wrong)  # [12]
    logp = lm.model(torch.tensor([prompts[0] + wrong[:3]])).logits[0, -1].float().log_softmax(-1)
    assert got.shape == (12,) and got[:3].abs().max() < 1e-4
    assert got[3] == pytest.approx(float(logp.max() - logp[wrong[3]]), abs=1e-4) and got[3] > 0


def test_only_severe_deviations_count_against_the_target():
    """bf16 near-ties make lossless answers deviate too, by a fraction of a nat: a candidate is judged
    by the deviations above SEVERE_NATS, against the floor's, per token."""
    floor = {"tokens": 1000, "deviation": 0.004, "severe": 0}
    near_ties = {"tokens": 1000, "deviation": 0.3, "severe": 0}
    assert SEVERE_NATS >= 1.0 and within(near_ties, floor, 0.0)
    one = {"tokens": 1000, "deviation": 0.001, "severe": 1}
    assert not within(one, floor, 0.0005) and within(one, floor, 0.001)
    assert within(one, {**floor, "severe": 1}, 0.0)  # no worse than lossless spec's own


def test_calibrate_fits_acceptance_and_chooses_settings_within_the_target(trained, tmp_path):
    lm, prompts = trained
    cfg = CalibrateConfig(target=0.05, thresholds=(0.95, 0.5, 0.0), gammas=(0.1, 5.0), max_new_tokens=24)
    base = DecodeConfig(method="spec", block_size=4)
    result = calibrate(lm, prompts, cfg, base, cost=None, progress=False)
    rep = result.report
    assert rep["drafts_observed"] > 20 and list(result.acceptance) == sorted(result.acceptance)
    floor = rep["candidates"][0]
    assert floor["method"] == "spec" and floor["deviation"] == 0.0 and floor["severe"] == 0  # lossless, fp32
    for method, chosen, values in (
        ("threshold", result.threshold, cfg.thresholds),
        ("eb", result.gamma, cfg.gammas),
    ):
        tried = [c for c in rep["candidates"] if c["method"] == method]
        assert [c["value"] for c in tried] == list(values[: len(tried)])  # safest first
        # Tried until the first miss (the values after it are riskier still); the fastest within wins.
        assert all(c["within_target"] for c in tried[:-1])
        ok = [c for c in tried if c["within_target"]]
        assert chosen == (max(ok, key=lambda c: c["tpf"])["value"] if ok else None)
    assert rep["reliability_raw"] and rep["reliability_calibrated"]
    assert result.adapter_sha256 == calibration.weights_sha256(lm.adapter)


def test_adaptive_candidates_decode_alone_with_the_fitted_acceptance_and_the_cost(trained, monkeypatch):
    """threshold runs spec's schedule: a batch would plan its steps as a batch, and without the fit
    just made it would plan with raw confidences."""
    from pardec.core.cost import StepCost
    from pardec.training import calibrate as calibrate_mod

    FLAT = StepCost((1, 32), (100,), 4, ((1.0, 1.0),), ((1.0, 1.0),), {})  # every shape costs an AR step

    lm, prompts = trained
    calls = []
    real = calibrate_mod.decode

    def spy(model, batch, config, mask_id, stop_ids=None, extras=None):
        calls.append((config.method, len(batch), extras))
        return real(model, batch, config, mask_id, stop_ids, extras=extras)

    monkeypatch.setattr(calibrate_mod, "decode", spy)
    cfg = CalibrateConfig(thresholds=(0.9,), gammas=(0.1,), max_new_tokens=12, batch_size=3)
    result = calibrate(lm, prompts[:3], cfg, DecodeConfig(method="spec", block_size=4), FLAT, progress=False)
    floor = [c for c in calls if c[0] == "spec"]
    assert [n for _, n, _ in floor] == [3]  # the fixed shapes: one batch
    threshold = [c for c in calls if c[0] == "threshold"]
    assert [n for _, n, _ in threshold] == [1, 1, 1]
    for _, _, extras in threshold:
        assert extras["cost"] is FLAT
        assert extras["calibration"].acceptance == result.acceptance  # the fit this run made
    eb = [c for c in calls if c[0] == "eb"]
    assert [n for _, n, _ in eb] == [1, 1, 1] and all(extras["cost"] is FLAT for _, _, extras in eb)


def test_calibrating_one_method_keeps_the_others_earlier_setting(trained):
    lm, prompts = trained
    fitted = calibration.fit(torch.rand(50), torch.rand(50) < 0.5, calibration.weights_sha256(lm.adapter))
    earlier = {
        "candidates": [{"method": "threshold", "value": 0.77, "tpf": 1.5}, {"method": "eb", "value": 0.2}]
    }
    calibration.save(lm.adapter, dataclasses.replace(fitted, threshold=0.77, gamma=0.2, report=earlier))
    try:
        cfg = CalibrateConfig(gammas=(0.1,), methods=("eb",), max_new_tokens=12)
        base = DecodeConfig(method="spec", block_size=4)
        result = calibrate(dataclasses.replace(lm), prompts[:2], cfg, base, cost=None, progress=False)
    finally:
        (lm.adapter / calibration.FILE).unlink()
    assert result.threshold == 0.77  # left alone, as the earlier run chose it
    kept = [c for c in result.report["candidates"] if c["method"] == "threshold"]
    assert kept == [{"method": "threshold", "value": 0.77, "tpf": 1.5, "earlier": True}]
    tried = [c for c in result.report["candidates"] if c["method"] == "eb"]
    assert [c["value"] for c in tried] == [0.1] and "earlier" not in tried[0]  # calibrated afresh


def test_predicted_seconds_price_plain_steps_without_the_block():
    """An adaptive decode's plain AR steps feed no slots: priced as AR steps, not block steps."""
    from pardec.core.cost import StepCost
    from pardec.decoding.engine import GenerationResult
    from pardec.training.calibrate import _seconds

    cost = StepCost((1, 32), (100,), 4, ((1.0, 1.0),), ((2.0, 2.0),), {})  # a block step: 2 AR steps
    # The prompt with a block, a plain AR step, a block step after 2 drafts, two blocks (8 slots)
    r = GenerationResult([5] * 9, 4, [3, 1, 3, 2], [10, 1, 7, 11], [4, 0, 4, 8], [], [], 0.0, "length")
    assert _seconds([r], [[1] * 6], cost) == pytest.approx(2.0 + 1.0 + 2.0 + 2.0)
    # 1 s a token fed, a block 1 s more; a second block's slots count as pending tokens
    linear = StepCost((1, 3), (100,), 4, ((1.0, 3.0),), ((2.0, 4.0),), {})
    assert _seconds([r], [[1] * 6], linear) == pytest.approx(7.0 + 1.0 + 4.0 + 8.0)


def test_auto_settings_come_from_the_saved_calibration(trained):
    lm, prompts = trained
    auto = DecodeConfig(method="threshold", threshold=None, block_size=4, max_new_tokens=16)
    with pytest.raises(PardecError, match="pardec calibrate"):
        configure(lm, auto)
    fitted = calibration.fit(torch.rand(50), torch.rand(50) < 0.5, calibration.weights_sha256(lm.adapter))
    calibration.save(lm.adapter, dataclasses.replace(fitted, threshold=0.6, gamma=0.3))
    try:
        lm2 = dataclasses.replace(lm)  # a fresh LoadedModel: calibration is read once per load
        config, _ = configure(lm2, auto)
        assert config.threshold == 0.6
        assert configure(lm2, dataclasses.replace(auto, method="eb", gamma=None))[0].gamma == 0.3
        calibration.save(lm.adapter, dataclasses.replace(fitted, threshold=0.6, gamma=None))
        with pytest.raises(PardecError, match="found no gamma for eb within its quality target"):
            configure(dataclasses.replace(lm), dataclasses.replace(auto, method="eb", gamma=None))
        # spec predicts with the calibrated reach (what adaptive spec plans with; the fixed shape here,
        # so that every step verifies drafts whatever this machine's step cost), and stays the model's.
        _, extras = configure(lm2, DecodeConfig(method="spec", block_size=4, max_new_tokens=24))
        assert extras["calibration"] == lm2.calibration
        spec, extras = configure(
            lm2, DecodeConfig(method="spec", block_size=4, max_new_tokens=24, adaptive=False)
        )
        assert extras["calibration"] == lm2.calibration
        ar = decode(lm.model, prompts[:2], DecodeConfig(method="ar", max_new_tokens=24), lm.mask_id)
        got = decode(lm.model, prompts[:2], spec, lm.mask_id, extras=extras)
        assert [g.tokens for g in got] == [a.tokens for a in ar]
        predicted = [p for g in got for p, _ in g.verified_per_step]
        assert predicted and all(0.0 <= x <= 1.0 for p in predicted for x in p)
        assert all(list(p) == sorted(p, reverse=True) for p in predicted)  # a reach only falls
        raw = [p for g in decode(lm.model, prompts[:2], spec, lm.mask_id) for p, _ in g.verified_per_step]
        assert raw and raw != predicted  # without the calibration: the raw confidence products
    finally:
        (lm.adapter / calibration.FILE).unlink()


def test_adaptive_spec_shortens_blocks_only_as_far_as_the_adapter_was_trained(trained):
    lm, _ = trained
    config = DecodeConfig(method="spec", block_size=4, adaptive=False)
    assert configure(lm, config)[0].min_block_size is None  # trained at D only: always full blocks
    training = dict(lm.adapter_settings.training, min_block_size=3)
    sampled = dataclasses.replace(
        lm, adapter_settings=dataclasses.replace(lm.adapter_settings, training=training)
    )
    assert sampled.trained_min_block_size == 3
    assert configure(sampled, config)[0].min_block_size == 3
    assert configure(sampled, dataclasses.replace(config, min_block_size=4))[0].min_block_size == 4  # as set


def test_calibrate_fits_the_drafts_a_markov_head_re_ranks_apart_and_spec_reads_that_fit(trained, tmp_path):
    import shutil

    from pardec.decoding.spec import prepare
    from pardec.model import markov
    from pardec.training.markov import MarkovConfig
    from pardec.training.markov import train as train_head

    lm, prompts = trained
    folder = tmp_path / "ck"
    shutil.copytree(lm.adapter, folder)
    own = LoadedModel(lm.model, None, "tiny", folder, lm.adapter_settings)
    outs = decode(lm.model, prompts[:6], DecodeConfig(method="ar", max_new_tokens=30), lm.mask_id)
    data = [Example(p + o.tokens, len(p)) for p, o in zip(prompts[:6], outs)]
    small = MarkovConfig(blocks_per_text=8, rank=16, top_k=8, epochs=2, batch_size=64)
    head, _ = train_head(own, data, 4, small, progress=False)
    markov.save(folder, head)
    cfg = CalibrateConfig(methods=(), max_new_tokens=24)
    result = calibrate(
        own, prompts, cfg, DecodeConfig(method="spec", block_size=4), cost=None, progress=False
    )
    sha = markov.head_sha256(folder)
    assert result.markov_sha256 == sha and sum(result.markov_counts) > 20
    assert [c.get("markov", False) for c in result.report["candidates"]] == [False, True]
    assert result.for_markov(sha).acceptance == result.markov_acceptance
    assert result.for_markov("another head") == result  # the block's fit where none was made with it
    calibration.save(folder, result)
    fresh = LoadedModel(lm.model, None, "tiny", folder, lm.adapter_settings)
    _, extras = prepare(fresh, DecodeConfig(method="spec", block_size=4, adaptive=False), False, {})
    assert extras["markov"] is not None and extras["calibration"].acceptance == result.markov_acceptance
    _, extras = prepare(
        fresh, DecodeConfig(method="spec", block_size=4, adaptive=False, markov=False), False, {}
    )
    assert extras["markov"] is None and extras["calibration"].acceptance == result.acceptance
