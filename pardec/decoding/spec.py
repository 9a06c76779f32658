"""Lossless self-speculation: the block predicted in one forward is the next forward's draft,
verified by that forward's NTP logits, which at the same time predict the next block.

Which block drafts next depends on how many drafts get accepted, unknown until the forward is done.
A block fed after L of the m drafts serves every acceptance length n >= L: its slots up to the bonus
position are now committed text, and the slots after it are the next drafts. Before all drafts
(L = 0) every forward yields drafts, but far slots that saw the least text; after all of them, the
most and nearest drafts if all are accepted, none after any rejection. By default (`block_reach`)
the block sits after the drafts likely to be accepted: those whose confidences' product stays >=
block_reach. `block_at` fixes L instead. More `draft_blocks` also sit after 0, 1, ... drafts, as
fallbacks for shorter acceptances. Greedy: token for token the model's; sampling: rejection sampling.

With `adaptive`, how many drafts each step feeds, and whether it is a plain AR step instead, follows
the measured cost of a step on this machine and the drafts' calibrated acceptance (schedule.py; the
adapter's `calibration.json` maps confidences to acceptance probabilities where it has one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import cost as step_cost
from ..core.step import Block
from . import schedule
from .policy import Method, register
from .state import Row, Update
from .verifier import Drafts, Verifier

MAX_BACKOFF = 32  # most plain AR steps between two probes


@dataclass
class ScheduledDrafts(Drafts):
    plan: schedule.Plan = field(default_factory=schedule.Plan)


class Speculative(Verifier):
    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator)
        self.cost = None  # a StepCost when adaptive
        if config.adaptive:
            self.cost = (extras or {}).get("cost") or step_cost.measured(model, mask_id, config.block_size)
        self.calibration = (extras or {}).get("calibration")  # a model.calibration.Calibration or None

    def new_state(self):
        return Drafts() if self.cost is None else ScheduledDrafts()

    def wants_reach(self):
        return self.cost is not None or (self.cfg.block_at is None and self.cfg.block_reach > 0)

    def set_drafts(self, row, logits, ids=None, full=None):
        super().set_drafts(row, logits, ids, full)
        st: Drafts = row.state
        # The predicted reach: the schedule plans with it, the bench holds it against acceptance.
        st.predicted = st.reach
        if self.calibration is not None and st.reach is not None:
            st.predicted = self.calibration.reach(st.reach)

    def drafts(self, row):
        if self.cost is not None:
            st: ScheduledDrafts = row.state
            schedule.plan_step(
                st.plan, st.predicted, len(st.tokens), len(row.committed), self.cost, MAX_BACKOFF
            )
            st.keep(st.plan.fed)  # the rest are unlikely enough not to pay for their place
        return super().drafts(row)

    def block_lengths(self, row: Row) -> list[int]:
        """Numbers of drafts to feed a block after: the first block's, then 0, 1, ...; repeated to the
        fixed count so every row feeds the same number of blocks."""
        st = row.state
        m = len(st.tokens)
        if self.cfg.block_at is not None:
            first = min(m, self.cfg.block_at)
        elif self.wants_reach():
            first = 0 if st.reach is None else int((st.reach >= self.cfg.block_reach).sum())
        else:
            first = m
        ns = [first] + [n for n in range(m) if n != first][: self.cfg.draft_blocks - 1]
        return ns + [first] * (self.cfg.draft_blocks - len(ns))

    def blocks(self, row):
        if self.cost is not None and not row.state.plan.block:
            return None  # a plain AR step
        m = len(row.state.tokens)
        masks = [self.mask_id] * self.cfg.block_size
        return [Block(m - n, masks) for n in self.block_lengths(row)]

    def update(self, row, ntp, block):
        predicted, fed = row.state.predicted, len(row.state.tokens)
        n, commit = self.verify(row, ntp)
        shown = None if predicted is None or not fed else tuple(predicted[:fed].tolist())
        if self.cost is not None:
            plan = row.state.plan
            # The step's context: committed text before it (row.committed is not extended yet).
            seconds = self.cost.seconds(1 + fed, len(row.committed), block=True) if plan.block else None
            schedule.record(plan, predicted, fed, n, seconds)
            if not plan.block:  # an AR step: no block, so no drafts for the next one
                row.state.clear()
                return Update(commit=commit, keep_drafts=n, predicted=shown)
        lengths = self.block_lengths(row)
        L = max((x for x in lengths if x <= n), default=None)
        D = self.cfg.block_size
        # Slot j of the block after L drafts sits where draft L + 1 + j did; the bonus sits at draft
        # position n + 1, so the slots after n - L are the next drafts.
        first = 1 + n - L if L is not None else D
        if first < D:
            k = lengths.index(L)
            self.set_drafts(row, block[k * D + first : (k + 1) * D])
        else:
            # No block was fed early enough: the next forward drafts afresh.
            row.state.clear()
        return Update(commit=commit, keep_drafts=n, predicted=shown)


def prepare(lm, config, sets_block_size: bool, options: dict):
    """The adapter's calibration, and with `adaptive` this machine's step cost for the model (measured
    once and cached)."""
    extras = {"calibration": lm.calibration}
    if config.adaptive:
        extras["cost"] = step_cost.for_model(lm, config.block_size)
    return config, extras


register(
    Method(
        "spec",
        Speculative,
        "self-speculation: one forward drafts and verifies",
        lossless=True,
        min_block_size=2,
        prepare=prepare,
    )
)
