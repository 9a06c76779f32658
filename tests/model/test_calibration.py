"""The acceptance calibration: isotonic fit, reach, observations from verified steps, saving."""

import json

import pytest
import torch

from pardec.model import calibration as cal


def test_isotonic_pools_violators_into_weighted_means():
    assert cal.isotonic([0.1, 0.3, 0.2, 0.5], [1, 1, 1, 1]) == pytest.approx([0.1, 0.25, 0.25, 0.5])
    assert cal.isotonic([0.4, 0.1], [3, 1]) == pytest.approx([0.325, 0.325])
    fit = cal.isotonic([0.9, 0.1, 0.5, 0.2, 0.8], [1, 2, 1, 1, 1])
    assert all(a <= b + 1e-12 for a, b in zip(fit, fit[1:]))


def test_fit_recovers_an_acceptance_that_differs_from_the_confidence():
    g = torch.Generator().manual_seed(0)
    conf = torch.rand(20000, generator=g)
    accepted = torch.rand(20000, generator=g) < conf**2  # confidences overstate acceptance
    fitted = cal.fit(conf, accepted, "sha")
    for c in (0.3, 0.5, 0.8, 0.97):
        assert float(fitted.accept(torch.tensor([c]))) == pytest.approx(c**2, abs=0.06)
    assert list(fitted.acceptance) == sorted(fitted.acceptance)
    assert sum(fitted.counts) == 20000
    # Reach: the product of the calibrated per-draft probabilities, from the raw confidence products.
    raw = torch.tensor([0.9, 0.9 * 0.5, 0.9 * 0.5 * 0.8])
    want = fitted.accept(torch.tensor([0.9, 0.5, 0.8])).cumprod(0)
    torch.testing.assert_close(fitted.reach(raw), want)


def test_observations_keep_the_drafts_up_to_the_first_rejection():
    steps = [((0.9, 0.45, 0.09), 1), ((0.8, 0.4), 2), ((0.5,), 0)]
    conf, acc = cal.observations(steps)
    assert conf.tolist() == pytest.approx([0.9, 0.5, 0.8, 0.5, 0.5])
    assert acc.tolist() == [True, False, True, True, False]


def test_reliability_compares_predicted_reach_with_acceptance():
    steps = [((0.95, 0.15), 1)] * 10 + [((0.95, 0.15), 2)] * 2
    rows = {r["bin"][0]: r for r in cal.reliability(steps, bins=10)}
    assert rows[0.9]["predicted"] == pytest.approx(0.95) and rows[0.9]["observed"] == 1.0
    assert rows[0.1]["observed"] == pytest.approx(2 / 12, abs=1e-4) and rows[0.1]["drafts"] == 12


def test_saved_calibration_loads_only_for_the_weights_it_was_fitted_for(tmp_path):
    (tmp_path / "adapter.safetensors").write_bytes(b"weights")
    fitted = cal.fit(torch.tensor([0.2, 0.9]), torch.tensor([False, True]), cal.weights_sha256(tmp_path))
    cal.save(tmp_path, fitted)
    assert cal.load(tmp_path) == fitted
    (tmp_path / "datastore.safetensors").write_bytes(b"answers")  # a store beside them changes nothing
    assert cal.load(tmp_path) == fitted
    assert json.loads((tmp_path / cal.FILE).read_text())["format"] == cal.FORMAT
    (tmp_path / "adapter.safetensors").write_bytes(b"retrained")
    with pytest.warns(UserWarning, match="other adapter weights"):
        assert cal.load(tmp_path) is None
    (tmp_path / cal.FILE).write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        assert cal.load(tmp_path) is None
    assert cal.load(None) is None


def test_a_calibration_without_a_markov_fit_loads_from_older_files(tmp_path):
    (tmp_path / "adapter.safetensors").write_bytes(b"weights")
    fitted = cal.fit(torch.tensor([0.2, 0.9]), torch.tensor([False, True]), cal.weights_sha256(tmp_path))
    old = {k: v for k, v in fitted.to_json().items() if not k.startswith("markov")}
    (tmp_path / cal.FILE).write_text(json.dumps(old))
    got = cal.load(tmp_path)
    assert got == fitted and got.for_markov("any head") == got
