"""What an adapter's confidences mean: acceptance probabilities fitted on held-out text, and the lossy
methods' settings chosen there (`pardec calibrate`), saved beside the adapter as `calibration.json`.

A draft's confidence is the probability its block slot gave it. Its acceptance probability, given that
the drafts before it were accepted, is a monotone function of that confidence, fitted by isotonic
regression over confidence bins (pool-adjacent-violators on the bins' hit rates, weighted by counts).
A draft sequence's reach (the probability that the first i drafts are all accepted) is then the
product of the calibrated probabilities up to draft i.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import checkpoint

FILE = "calibration.json"
FORMAT = 1
EDGES = tuple(round(0.05 * i, 2) for i in range(1, 21))  # upper edges of 20 confidence bins


@dataclass(frozen=True)
class Calibration:
    adapter_sha256: str  # of the adapter weights it was fitted for
    edges: tuple[float, ...] = EDGES  # upper edges of the confidence bins
    acceptance: tuple[float, ...] = ()  # [bins] P(accepted | confidence in bin, earlier drafts accepted)
    counts: tuple[int, ...] = ()  # [bins] drafts observed per bin
    threshold: float | None = None  # `threshold`'s tau chosen by `pardec calibrate`
    gamma: float | None = None  # `eb`'s entropy budget chosen by `pardec calibrate`
    report: dict = field(default_factory=dict)  # what was measured: prompts, tokens, each candidate
    # The same for drafts re-ranked by the adapter's Markov head (model/markov.py), where it has one:
    # the sha256 of the head's weights they were fitted with, and their acceptance and counts per bin
    markov_sha256: str = ""
    markov_acceptance: tuple[float, ...] = ()
    markov_counts: tuple[int, ...] = ()

    def accept(self, confidence: torch.Tensor) -> torch.Tensor:
        """confidence [m] -> calibrated acceptance probability [m] of each draft given the earlier ones."""
        edges = torch.tensor(self.edges[:-1], dtype=confidence.dtype)
        table = torch.tensor(self.acceptance, dtype=confidence.dtype)
        return table[torch.bucketize(confidence, edges, right=True)]

    def reach(self, raw_reach: torch.Tensor) -> torch.Tensor:
        """Raw reach [m] (the product of the draft confidences up to each draft) -> calibrated reach [m]."""
        prev = torch.cat([raw_reach.new_ones(1), raw_reach[:-1]])
        confidence = (raw_reach / prev.clamp_min(1e-12)).clamp(0.0, 1.0)
        return self.accept(confidence).cumprod(0)

    def for_markov(self, head_sha256: str) -> Calibration:
        """This calibration for drafts the Markov head with these weights re-ranked: its own fit where
        one was made with that head, else the block's (the schedule's online calibration corrects)."""
        if self.markov_sha256 != head_sha256 or not self.markov_acceptance:
            return self
        return dataclasses.replace(self, acceptance=self.markov_acceptance, counts=self.markov_counts)

    def to_json(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, d: dict) -> Calibration:
        d = {k: v for k, v in d.items() if k != "format"}
        d["edges"], d["acceptance"] = tuple(d["edges"]), tuple(d["acceptance"])
        d["counts"] = tuple(d["counts"])
        d["markov_acceptance"] = tuple(d.get("markov_acceptance", ()))
        d["markov_counts"] = tuple(d.get("markov_counts", ()))
        return cls(**d)


def isotonic(rates: list[float], weights: list[float]) -> list[float]:
    """Non-decreasing least-squares fit of `rates` with `weights` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, size]
    for r, w in zip(rates, weights):
        blocks.append([r, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            w = w1 + w2
            blocks.append([(m1 * w1 + m2 * w2) / w if w > 0 else (m1 + m2) / 2, w, n1 + n2])
    return [m for m, _, n in blocks for _ in range(n)]


def fit(
    confidence: torch.Tensor, accepted: torch.Tensor, adapter_sha256: str, prior: float = 1.0
) -> Calibration:
    """confidence [N] of drafts whose predecessors were accepted, accepted [N] (bool) -> Calibration.
    Each bin's rate is shrunk towards its confidence by `prior` pseudo-drafts, so sparse bins stay sane."""
    edges = torch.tensor(EDGES[:-1])
    idx = torch.bucketize(confidence.float(), edges, right=True)  # [N]
    n_bins = len(EDGES)
    counts = torch.zeros(n_bins).index_add(0, idx, torch.ones(len(idx)))
    hits = torch.zeros(n_bins).index_add(0, idx, accepted.float())
    mids = torch.tensor([e - 0.025 for e in EDGES])
    rates = ((hits + prior * mids) / (counts + prior)).tolist()
    fitted = isotonic(rates, (counts + prior).tolist())
    return Calibration(
        adapter_sha256, EDGES, tuple(round(x, 4) for x in fitted), tuple(int(c) for c in counts.tolist())
    )


def observations(steps: list[tuple[tuple[float, ...], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Verified steps [(raw reach of each fed draft, drafts accepted)] -> (confidence [N], accepted [N])
    of each draft whose predecessors were all accepted (the ones after the first rejection say nothing)."""
    conf, hit = [], []
    for reach, n in steps:
        prev = 1.0
        for i, r in enumerate(reach[: n + 1]):
            conf.append(min(1.0, r / max(prev, 1e-12)))
            hit.append(i < n)
            prev = r
    return torch.tensor(conf), torch.tensor(hit, dtype=torch.bool)


def reliability(steps: list[tuple[tuple[float, ...], int]], bins: int = 10) -> list[dict]:
    """Predicted against observed reach: for every fed draft i of every verified step, the predicted
    probability that drafts 1..i are all accepted, and whether they were; grouped in equal-width bins."""
    pred = torch.tensor([p for reach, _ in steps for p in reach])
    obs = torch.tensor([float(i < n) for reach, n in steps for i in range(len(reach))])
    out = []
    if not len(pred):
        return out
    idx = (pred * bins).long().clamp(0, bins - 1)
    for b in range(bins):
        sel = idx == b
        if sel.any():
            out.append(
                {
                    "bin": [b / bins, (b + 1) / bins],
                    "predicted": round(float(pred[sel].mean()), 4),
                    "observed": round(float(obs[sel].mean()), 4),
                    "drafts": int(sel.sum()),
                }
            )
    return out


def weights_sha256(adapter: Path) -> str:
    """Of the adapter's weights file only: what else its folder holds (a datastore) changes no
    confidence."""
    h = hashlib.sha256()
    weights = checkpoint.weights_file(adapter, "adapter")
    if weights.is_file():
        h.update(weights.read_bytes())
    return h.hexdigest()


def load(adapter: Path | None) -> Calibration | None:
    """The calibration saved beside `adapter`, if any and if it was fitted for these weights."""
    if adapter is None or not (adapter / FILE).is_file():
        return None
    path = adapter / FILE
    try:
        cal = Calibration.from_json(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        warnings.warn(f"ignoring unreadable calibration '{path}': {e}", stacklevel=2)
        return None
    if cal.adapter_sha256 != weights_sha256(adapter):
        warnings.warn(f"ignoring '{path}': it was fitted for other adapter weights", stacklevel=2)
        return None
    return cal


def save(adapter: Path, cal: Calibration) -> Path:
    path = Path(adapter) / FILE
    path.write_text(json.dumps(cal.to_json(), indent=1) + "\n")
    return path
