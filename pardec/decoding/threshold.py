"""SDLM's confidence threshold (arXiv 2509.24007), inside self-speculation. Lossy.

SDLM commits, after the next token, the longest prefix of the block's predictions whose confidence
(max probability, or 1 - H / log V) reaches the threshold, and discards the rest. Here the rest is not
discarded: it is the next forward's drafts, verified there as `spec` verifies them (spec.py: drafts
looked up in the text, the adaptive schedule, the block's place). Only the confident prefix skips
verification, so a threshold of 1 decodes as `spec` does and a lower one trades the model's own
output for tokens per forward; `pardec calibrate` chooses it against a quality target.

A block's slots after the bonus continue the text its earlier slots predicted. Where one of those
earlier predictions is not the committed token there, the later slots continue another text (a
skipped or doubled token), so then nothing is committed unverified.
"""

from __future__ import annotations

import dataclasses

import torch

from ..core import sampling
from ..errors import PardecError
from .policy import Method, register
from .spec import Speculative
from .spec import prepare as spec_prepare


def require_adapter(lm, method: str) -> None:
    """Refuse a method that commits block slots' predictions unverified on a model without an
    adapter: there the [MASK] slots are untrained, and what they predict is noise."""
    if lm.adapter is None:
        raise PardecError(
            f"{method} commits the block's predictions without verifying them, and '{lm.name}' has no "
            f"adapter (--adapter none, or none bundled for it), so they are an untrained [MASK]'s "
            f"guesses: give --adapter a trained checkpoint (pardec retrofit), or use spec, which "
            f"stays lossless without one"
        )


def calibrated(lm, config, field: str, method: str):
    """`config` with `field` = None ("auto") replaced by the value the adapter's calibration holds."""
    if getattr(config, field) is not None:
        return config
    value = None if lm.calibration is None else getattr(lm.calibration, field)
    if value is None and lm.calibration is not None:
        raise PardecError(
            f"`pardec calibrate` found no {field} for {method} within its quality target on "
            f"'{lm.adapter}' (its calibration.json reports each candidate): give a {field}"
        )
    if value is None:
        raise PardecError(
            f"{method} with {field} 'auto' needs a calibrated adapter: run `pardec calibrate` on "
            f"'{lm.adapter or 'no adapter'}' first, or give a {field}"
        )
    return dataclasses.replace(config, **{field: value})


class Threshold(Speculative):
    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator, model, extras)
        if config.threshold is None:
            raise PardecError("threshold 'auto' is resolved by api.configure from the adapter's calibration")

    def next_drafts(
        self, row, slots: torch.Tensor, first: int, text: list[int], hidden=None, past: list[int] = ()
    ) -> list[int]:
        """Commit the confident prefix of the slots after `first` ([D, V] slots; `text`: the committed
        tokens at slots 0 .. first - 1, `past` the last few before slot 0; `hidden` [D, H] with a Markov
        head) and make the rest the next drafts."""
        keep: list[int] = []
        if slots[:first].argmax(-1).tolist() == text:  # spec calls this with first < D only
            tokens, _ = self._choose(slots[first:])  # [D - first]
            conf = sampling.confidence(slots[first:], self.cfg.confidence).tolist()  # [D - first]
            while len(keep) < len(conf) and conf[len(keep)] >= self.cfg.threshold:
                keep.append(int(tokens[len(keep)]))
        rest = first + len(keep)
        if rest < len(slots):
            self.draft_from(row, slots, rest, list(past) + text + keep, hidden)
        else:
            row.state.clear()  # the whole block committed: the next forward drafts afresh
        return keep


def _prepare(lm, config, sets_block_size, options):
    require_adapter(lm, "threshold")
    return spec_prepare(lm, calibrated(lm, config, "threshold", "threshold"), sets_block_size, options)


register(
    Method(
        "threshold",
        Threshold,
        "spec that commits confident drafts unverified (SDLM's threshold)",
        lossless=False,
        min_block_size=2,
        prepare=_prepare,
    )
)
