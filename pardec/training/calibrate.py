"""`pardec calibrate`: what an adapter's confidences mean, measured on held-out prompts.

1. Acceptance: `spec` decodes the prompts with its fixed shape (every draft fed and verified); each
   draft whose predecessors were accepted gives a (confidence, accepted) pair, and an isotonic fit over
   confidence bins maps confidence to acceptance probability (model/calibration.py). Adaptive `spec`
   plans with it.
2. The lossy methods' settings: `threshold` (tau) and `eb` (gamma) decode the same prompts at each
   candidate value. Quality is the rate of severe deviations: generated tokens the model itself finds
   at least e times less likely than its own greedy choice given the text before them (regret >
   SEVERE_NATS, one teacher-forced forward per answer). A lossy method's errors are of that kind (a
   skipped token in code costs several nats), while bf16's near-ties, which lossless spec's answers
   show too, cost a fraction of a nat and would otherwise hide them. Among the values whose severe
   rate stays within `target` of spec's (the floor), the one with the most tokens per second by the
   machine's step cost is kept (tokens per forward without a cost). `threshold` runs spec's adaptive
   schedule, with the acceptance just fitted: its candidates decode one prompt at a time, as a lone
   request does (a batch's schedule differs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ..core.cost import StepCost
from ..core.scoring import text_logits
from ..decoding import METHODS, DecodeConfig, decode
from ..decoding.engine import GenerationResult
from ..decoding.schedule import Memory
from ..decoding.spec import lookup_extras
from ..model import LoadedModel
from ..model import calibration as cal


@dataclass(frozen=True)
class CalibrateConfig:
    # Most severe deviations per token above the lossless floor: 1 in 20,000 tokens is about one
    # answer in 100 of 200 tokens, where one such token often breaks code (benchmarks/calibrate-severe.md).
    target: float = 0.00005
    # Tried from the safest down. On the bundled adapter 0.995 already made a severe error in 3,222 tokens.
    thresholds: tuple[float, ...] = (0.999, 0.995, 0.99, 0.98, 0.95, 0.9, 0.8, 0.7)
    gammas: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)  # tried from the safest up
    methods: tuple[str, ...] = ("threshold", "eb")
    max_new_tokens: int = 256
    batch_size: int = 4


SEVERE_NATS = 1.0  # regret above which a deviation is an error, not a near-tie


@torch.no_grad()
def regret(lm: LoadedModel, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[len(tokens)] nats by which each of `tokens` (generated after `prompt`) falls short of the
    model's greedy choice given the text before it (0 where it is that choice): one causal forward of
    the base model (gated adapters stay off without [MASK] inputs)."""
    if not tokens:
        return torch.zeros(0)
    logp = text_logits(lm.model, prompt + tokens, len(prompt), lm.mask_id).log_softmax(-1)  # [n, V]
    chosen = logp.gather(1, torch.tensor(tokens, device=logp.device)[:, None])[:, 0]  # [n]
    return (logp.max(-1).values - chosen).clamp_min(0.0).cpu()  # only [n] leaves the device


def _seconds(results: list[GenerationResult], prompts: list[list[int]], cost: StepCost) -> float:
    """What the decodes would take on this machine by its step cost (every step's pending tokens and
    block slots at its context: an adaptive decode's plain AR steps feed none), free of the noise of
    timing a loaded machine."""
    total = 0.0
    for r, p in zip(results, prompts):
        context = len(p)
        for fed, slots, committed in zip(r.fed_per_step, r.slots_per_step, r.accepted_per_step):
            block = min(slots, cost.block_size)  # more blocks, and branches, cost as tokens fed
            total += cost.seconds(max(1, fed - block), context, block=block)
            context += committed
    return total


def within(row: dict, floor: dict, target: float) -> bool:
    """Whether a candidate's severe deviations per token stay within `target` of the floor's
    (rows as _Scorer.score makes them); deviations that are near-ties do not count."""
    return row["severe"] / max(row["tokens"], 1) <= floor["severe"] / max(floor["tokens"], 1) + target


class _Scorer:
    """Decodes the prompts with a config and measures tokens per forward, deviations and cost."""

    def __init__(self, lm: LoadedModel, prompts: list[list[int]], cfg: CalibrateConfig, cost):
        self.lm, self.prompts, self.cfg, self.cost = lm, prompts, cfg, cost

    def decode(self, config: DecodeConfig, extras=None) -> list[GenerationResult]:
        # An adaptive schedule prices a batch's steps as a batch (plain AR steps where one row's drafts
        # would pay): one prompt at a time, as a request decodes alone.
        adaptive = config.adaptive and METHODS[config.method].policy.batch_priced
        size = 1 if adaptive else self.cfg.batch_size
        out = []
        for i in range(0, len(self.prompts), size):
            batch = self.prompts[i : i + size]
            out += decode(self.lm.decoder, batch, config, self.lm.mask_id, self.lm.stop_ids, extras=extras)
        return out

    def score(self, config: DecodeConfig, results=None, extras=None) -> dict:
        results = results or self.decode(config, extras)
        tokens = sum(len(r.tokens) for r in results)
        forwards = sum(r.forwards for r in results)
        regrets = [regret(self.lm, p, r.tokens) for p, r in zip(self.prompts, results)]
        off = sum(int((x > 0).sum()) for x in regrets)
        severe = sum(int((x > SEVERE_NATS).sum()) for x in regrets)
        row = {"tokens": tokens, "forwards": forwards, "tpf": round(tokens / max(forwards, 1), 4),
               "deviation": round(off / max(tokens, 1), 5), "severe": severe}  # fmt: skip
        if self.cost is not None:
            seconds = _seconds(results, self.prompts, self.cost)
            ar = sum(
                self.cost.seconds(1, len(p) + j)
                for p, r in zip(self.prompts, results)
                for j in range(len(r.tokens))
            )
            row["predicted_speedup"] = round(ar / seconds, 4) if seconds else None  # fmt: skip
        return row


def calibrate(
    lm: LoadedModel,
    prompts: list[list[int]],
    cfg: CalibrateConfig,
    base: DecodeConfig,
    cost: StepCost | None,
    progress: bool = True,
) -> cal.Calibration:
    """Fit the acceptance calibration and choose threshold / eb settings on `prompts` (token ids)."""
    if lm.adapter is None:
        raise ValueError("calibrate needs an adapter: the plain model's block slots are untrained")
    scorer = _Scorer(lm, prompts, cfg, cost)
    steps = (
        1
        + (base.markov and lm.markov is not None)
        + len(cfg.thresholds) * ("threshold" in cfg.methods)
        + len(cfg.gammas) * ("eb" in cfg.methods)
    )
    bar = tqdm(total=steps, desc="calibrate", unit="setting", disable=not progress)
    common = dataclasses.replace(base, temperature=0.0, max_new_tokens=cfg.max_new_tokens)

    # 1. Acceptance, from spec's fixed shape with the raw confidences.
    # Block drafts only: the acceptance fitted is the block's (looked-up drafts learn their own online)
    spec = dataclasses.replace(common, method="spec", adaptive=False, block_reach=0.7, lookup=0)
    results = scorer.decode(spec, extras={"calibration": None})
    verified = [s for r in results for s in r.verified_per_step]
    confidence, accepted = cal.observations(verified)
    fitted = cal.fit(confidence, accepted, cal.weights_sha256(lm.adapter))
    floor = scorer.score(spec, results)
    bar.update()
    candidates = [{"method": "spec", "value": None, **floor}]
    head = lm.markov if base.markov else None
    decode_as = fitted  # what the lossy candidates decode with: as a decode with the adapter would
    if head is not None:
        # The drafts the adapter's Markov head re-ranks have confidences of their own: fitted apart.
        results = scorer.decode(spec, extras={"calibration": None, "markov": head})
        m_verified = [s for r in results for s in r.verified_per_step]
        m_fit = cal.fit(*cal.observations(m_verified), fitted.adapter_sha256)
        sha = head.sha256
        fitted = dataclasses.replace(
            fitted, markov_sha256=sha, markov_acceptance=m_fit.acceptance, markov_counts=m_fit.counts
        )
        decode_as = fitted.for_markov(sha)
        candidates.append({"method": "spec", "value": None, "markov": True, **scorer.score(spec, results)})

    def choose(method: str, field: str, values: tuple[float, ...]) -> float | None:
        best, best_rate = None, None
        for v in values:
            # What a decode with the adapter would read: the acceptance just fitted, the machine's cost
            extras = {
                "calibration": decode_as,
                "markov": head,
                "memory": Memory(),
                **lookup_extras(lm, common),
            }
            extras |= {} if cost is None else {"cost": cost}
            row = scorer.score(dataclasses.replace(common, method=method, **{field: v}), extras=extras)
            ok = within(row, floor, cfg.target)
            candidates.append({"method": method, "value": v, **row, "within_target": ok})
            bar.update()
            bar.set_postfix_str(f"{method} {v}: TPF {row['tpf']:.2f}, {row['severe']} severe")
            if not ok:
                break  # the values after this one are riskier still
            rate = row.get("predicted_speedup") or row["tpf"]
            if best_rate is None or rate > best_rate:
                best, best_rate = v, rate
        return best

    def earlier(method: str, field: str) -> float | None:
        """What an earlier calibration of these weights chose for a method this run leaves alone, and
        its candidates (measured with that run's acceptance fit), so that calibrating one method does
        not discard the other's setting."""
        kept = lm.calibration
        if kept is None:
            return None
        candidates.extend(
            {**c, "earlier": True} for c in kept.report.get("candidates", ()) if c["method"] == method
        )
        return getattr(kept, field)

    if "threshold" in cfg.methods:
        threshold = choose("threshold", "threshold", cfg.thresholds)
    else:
        threshold = earlier("threshold", "threshold")
    gamma = choose("eb", "gamma", cfg.gammas) if "eb" in cfg.methods else earlier("eb", "gamma")
    bar.close()
    predicted = [tuple(fitted.reach(torch.tensor(r)).tolist()) for r, _ in verified]
    report = {
        "prompts": len(prompts),
        "max_new_tokens": cfg.max_new_tokens,
        "target": cfg.target,
        "severe_nats": SEVERE_NATS,
        "block_size": spec.block_size,
        "dtype": str(lm.model.dtype).removeprefix("torch."),
        "drafts_observed": len(confidence),
        "candidates": candidates,
        "reliability_raw": cal.reliability(verified),
        "reliability_calibrated": cal.reliability(list(zip(predicted, (n for _, n in verified)))),
    }
    return dataclasses.replace(fitted, threshold=threshold, gamma=gamma, report=report)
