"""SBD's entropy-bounded sampler (arXiv 2509.04185).

Reveal the lowest-entropy masked slots of the block, in any order, while their summed entropy stays
within gamma (at least one per forward); refine the rest in the next forward, with the revealed
tokens in place; commit the block once every slot is revealed. In a block's first forward slot 0
uses the NTP logit. Lossy.

With `adaptive`, the shape follows what the machine charges (core/cost.py). At each block's start a
row predicts how many forwards a block of m slots would take: the reveal loop run on the entropies
its last block showed in its first forward (as if they stayed put; revealed slots make the others
surer, so an online ratio of observed to predicted forwards corrects it). The block commits m tokens
for one forward with m pending tokens and m slots, then forwards with m slots alone; the row takes the
m in [min_block_size, block_size] with the most tokens per second. Where no m beats a plain AR step
(1 token for an AR step's cost), and the last block did not either, the row decodes plain AR steps
(1, 2, 4, ... up to 128, doubling until a block pays again), then probes with a block for
fresh entropies. Rows of a batch feed one block size, chosen only when no row is inside a block, so a
row's output may differ from what it decodes alone (eb's output depends on its blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import cost as step_cost
from ..core import sampling
from ..core.step import Block
from ..errors import PardecError
from . import schedule
from .policy import Method, Policy, register
from .state import Update
from .threshold import calibrated, require_adapter

PRIOR = 2.0  # pseudo-forwards of the prior (observed = predicted)


@dataclass
class Reveal:
    block: list[int] | None = None  # the block being filled ([MASK] where not yet revealed)
    # With `adaptive`:
    entropy: list[float] | None = None  # per slot, in the last block's first forward (all masked)
    ar: bool = False  # this step is a plain AR step
    ar_left: int = 0  # plain AR steps still to decode before the probe
    backoff: int = 1  # AR steps after the next fall-back
    expect: int = 0  # forwards predicted for the block being filled, uncorrected (0: a probe)
    forwards: int = 0  # forwards the block being filled has taken
    seconds: float = 0.0  # and what they cost
    predicted: float = 0.0  # over finished predicted blocks: forwards predicted
    observed: float = 0.0  # and taken
    paid: bool = True  # the last block committed faster than plain AR steps would have

    @property
    def scale(self) -> float:
        """Observed / predicted forwards so far, shrunk towards 1."""
        return (self.observed + PRIOR) / (self.predicted + PRIOR)


def forwards_needed(entropy: list[float], gamma: float) -> int:
    """Forwards the reveal loop takes to fill slots of these entropies, were they to stay as they are."""
    left, n = sorted(entropy), 0
    while left:
        spent, k = 0.0, 0
        while k < len(left) and (k == 0 or spent + left[k] <= gamma):
            spent += left[k]
            k += 1
        left, n = left[k:], n + 1
    return n


class EntropyBounded(Policy):
    batch_priced = True

    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator, model, extras)
        if config.gamma is None:
            raise PardecError("eb's gamma 'auto' is resolved by api.configure from the adapter's calibration")
        self.cost = None  # a StepCost when adaptive
        if config.adaptive:
            self.cost = step_cost.given_or_measured(extras, model, mask_id, config.block_size)
        self.width = config.block_size  # slots of every block the batch feeds
        self.batch_fed = 0  # tokens the last step fed over the whole batch (0: one row)

    def new_state(self):
        return Reveal()

    def _predicted(self, st: Reveal, m: int) -> int:
        """Forwards a block of m slots would take on the last block's entropies (the last one carried
        on past the ones seen), before the online correction."""
        return forwards_needed(st.entropy[:m] + st.entropy[-1:] * (m - len(st.entropy)), self.cfg.gamma)

    def _forwards(self, st: Reveal, m: int) -> float:
        """Forwards a block of m slots is expected to take."""
        return max(1.0, self._predicted(st, m) * st.scale)

    def _rate(self, row, m: int) -> float:
        """Tokens per second of a block of m slots, in this row's steady state."""
        context, others = len(row.committed), schedule.others(self.batch_fed, row)
        first = schedule.step_seconds(self.cost, m, context, m, others)
        later = schedule.step_seconds(self.cost, 1, context, m, others)
        return m / (first + (self._forwards(row.state, m) - 1) * later)

    def _ar_rate(self, row) -> float:
        others = schedule.others(self.batch_fed, row)
        return 1.0 / schedule.step_seconds(self.cost, 1, len(row.committed), False, others)

    def before_step(self, rows):
        """Rows at a block's start choose: a block (of the batch's width) or a plain AR step."""
        if self.cost is None:
            return
        starting = [r for r in rows if r.state.block is None]
        if len(starting) == len(rows) and any(r.state.entropy for r in rows):
            lo = min(self.cfg.min_block_size or self.cfg.block_size, self.cfg.block_size)
            judged = [r for r in rows if r.state.entropy]
            rate = lambda m: sum(self._rate(r, m) for r in judged)  # noqa: E731
            self.width = max(range(lo, self.cfg.block_size + 1), key=rate)
        for row in starting:
            st: Reveal = row.state
            st.ar, st.expect = False, 0
            if st.ar_left > 0:  # inside an AR run; the step after it is a probe
                st.ar_left -= 1
                st.ar = True
                st.entropy = None if st.ar_left == 0 else st.entropy
                continue
            if not st.entropy:
                continue  # a probe: a block for fresh entropies, not judged
            if self._rate(row, self.width) >= self._ar_rate(row) or st.paid:
                st.expect = self._predicted(st, self.width)
                continue
            run = st.backoff
            st.ar, st.ar_left, st.backoff = True, run - 1, min(2 * run, schedule.MAX_BACKOFF)
            st.entropy = None if run == 1 else st.entropy

    def blocks(self, row):
        st: Reveal = row.state
        if st.ar:
            return None  # a plain AR step
        if st.block is None:
            st.block = [self.mask_id] * self.width
            st.forwards, st.seconds = 0, 0.0
        return [Block(0, list(st.block))]

    def update(self, row, ntp, block):
        st: Reveal = row.state
        if st.ar:
            return Update(commit=[int(self._choose(ntp[-1:])[0][0])])
        first = all(t == self.mask_id for t in st.block)
        logits = block.clone()  # [D, V]
        if len(ntp) and st.block[0] == self.mask_id:
            logits[0] = ntp[-1]
        hidden = [j for j, t in enumerate(st.block) if t == self.mask_id]
        tokens, _ = self._choose(logits[hidden])
        ent = sampling.entropy(logits[hidden])  # [n hidden]
        if self.cost is not None:
            self._account(row, first, ent.tolist())
        budget, reveal = 0.0, []
        for i in ent.argsort().tolist():
            if reveal and budget + ent[i].item() > self.cfg.gamma:
                break
            budget += ent[i].item()
            reveal.append(i)
        for i in reveal:
            st.block[hidden[i]] = int(tokens[i])
        if self.mask_id in st.block:
            return Update(commit=[])
        done, st.block = st.block, None
        if self.cost is not None:
            self._finish(row, len(done))
        return Update(commit=done)

    def _account(self, row, first: bool, entropy: list[float]) -> None:
        """One forward of the block being filled: its entropies if it is the first, and its cost."""
        st: Reveal = row.state
        if first:
            st.entropy = entropy
        st.forwards += 1
        # A block's first forward feeds what the step before committed (the last block, or an AR
        # step's token); the later ones nothing but the block (priced as one pending token).
        pending = max(1, row.accepted[-1]) if first and row.accepted else 1
        others = schedule.others(self.batch_fed, row)
        st.seconds += schedule.step_seconds(self.cost, pending, len(row.committed), len(st.block), others)

    def _finish(self, row, m: int) -> None:
        """A block is done: its forwards against the prediction, and whether it paid."""
        st: Reveal = row.state
        if st.expect:
            st.predicted += st.expect
            st.observed += st.forwards
        st.paid = m / st.seconds >= self._ar_rate(row)
        if st.paid:
            st.backoff = 1

    def after_step(self, rows, out, keep, alive):
        self.batch_fed = schedule.batch_tokens(out)


def _prepare(lm, config, sets_block_size, options):
    """gamma 'auto' from the adapter's calibration, and with `adaptive` this machine's step cost."""
    require_adapter(lm, "eb")
    extras = {"cost": step_cost.for_model(lm, config.block_size)} if config.adaptive else {}
    return calibrated(lm, config, "gamma", "eb"), extras


register(
    Method(
        "eb",
        EntropyBounded,
        "entropy-bounded reveal of any slots (SBD)",
        lossless=False,
        prepare=_prepare,
    )
)
