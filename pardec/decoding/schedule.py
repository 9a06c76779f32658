"""How much a verified step feeds, chosen by what the machine charges and how likely the drafts are.

Each step, with drafts whose acceptance probabilities are p_1 >= p_2 >= ... (their reach: the product
of the draft confidences up to each, through the adapter's fitted calibration when it has one, then
scaled by an online calibration of predicted against observed acceptance),
feeding the first k drafts and a block commits 1 + p_1 + ... + p_k tokens in expectation and costs
StepCost.seconds(1 + k, context, block=True). The schedule feeds the k with the most tokens per
second. When even the best k is slower than a plain AR step (1 token for StepCost.seconds(1, context))
twice in a row, and the block steps' realized rate (a moving average of tokens committed over their
cost, over every block step: probes and steps without drafts are part of what blocks cost) is slower
too, the row decodes plain AR steps for a while (1, 2, 4, ... up to `max_backoff` steps, doubling
until block steps have paid again: drafts that only look good do not reset it), then
probes with one block step to get fresh drafts, after which one poor verdict falls back again (two
judged block steps after every probe would double what probing costs). A probe is a
block step for one token, so the AR run before it is at least long enough that the probe's extra
cost stays within PROBE_OVERHEAD of the run's time (on a flat curve 1 step; where a block step costs
4 AR steps, 60). Where the back-off stands carries over to later requests (`Memory`). A step without
drafts (a probe, or after a rejection the block did not cover) is a block step that is not judged;
a step with drafts feeds at least one, so that the calibration keeps seeing verified drafts.

In a batch, a row's choice is priced at its marginal cost: the step's time with the tokens the
other rows fed last step, plus this row's, less the time without this row's. On a CPU a batch of
rows that feed a dozen tokens each is compute-bound, and every extra token costs about as much as a
row's AR token; a lone row pays mostly for reading the weights, which its drafts share.

With a shortest block size (an adapter trained on sampled block sizes), the block's size m is
chosen too. A block of m slots gives the next step at most m - 1 drafts (its first slot sits at the
bonus token's position), so m is the one whose steady state is fastest: m pending tokens (the bonus
and m - 1 drafts) and m slots per step, committing 1 + q_1 + ... + q_{m-1}, where q is the reach of
these drafts, carried on past the last one at their mean ratio from one draft to the next. Where
each token fed is dear (a quantized kernel on a CPU) short blocks win; on a flat curve, the longest.

Which drafts are fed depends only on the drafts themselves, never on the target's verdict, so the
output stays exactly the model's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.cost import StepCost

PRIOR = 2.0  # pseudo-drafts of the calibration's prior (predicted = observed)
EMA = 0.3  # weight of the latest block step in the realized rate
PROBE_OVERHEAD = 0.05  # most share of an AR run's time its closing probe's extra cost may add
MAX_BACKOFF = 128  # most plain AR steps between two probes (where blocks keep failing to pay)


@dataclass
class Plan:
    """A row's schedule state."""

    ar_left: int = 0  # plain AR steps still to decode before the next probe
    backoff: int = 1  # AR steps after the next fall-back
    low: int = 0  # consecutive steps whose best expected rate fell below AR's
    predicted: float = 0.0  # sum over verified steps of the expected accepted drafts (uncalibrated)
    observed: float = 0.0  # sum of the drafts actually accepted in those steps
    fed: int = 0  # drafts fed by the planned step
    slots: int = 0  # block slots of the planned step (when it feeds a block)
    others: int = 0  # tokens the batch's other rows fed last step (the planned step's company)
    block: bool = True  # whether the planned step feeds a block
    block_drafts: float | None = None  # moving average of the drafts accepted where the block's were fed
    tokens: float | None = None  # moving averages over block steps: tokens committed,
    seconds: float | None = None  # and the step's cost

    @property
    def scale(self) -> float:
        """Observed / predicted acceptance so far, shrunk towards 1."""
        return (self.observed + PRIOR) / (self.predicted + PRIOR)


@dataclass
class Memory:
    """What earlier rows learned, for the rows after them: the back-off the last one to fall back or
    recover ended with. Kept with a method's extras (one per `configure`: a bench method, a server),
    so a new request where blocks keep failing does not climb the back-off from 1 again; a row whose
    block steps pay resets it to 1 as before."""

    backoff: int = 1


def step_seconds(cost: StepCost, pending: int, context: int, block: bool | int, others: int = 0) -> float:
    """What a row's step feeding `pending` tokens and a block (False: none, True: the full block, or
    a number of slots) adds to a batch step in which the other rows feed `others` tokens (0: the row
    alone, the whole step's time)."""
    if others <= 0:
        return cost.seconds(pending, context, block)
    mine = pending + (cost.block_size if block is True else int(block))
    return max(cost.seconds(others + mine, context) - cost.seconds(others, context), 1e-6)


def batch_tokens(out) -> int:
    """Tokens a step (its StepOutput) fed over the whole batch; 0 for one row, whose step is priced
    whole rather than at the margin."""
    B = out.pending_valid.shape[0]
    return int(out.pending_valid.sum()) + out.block_logits.shape[1] * B if B > 1 else 0


def others(batch_fed: int, row) -> int:
    """Tokens the other rows fed last step (0 when the row decodes alone)."""
    return max(0, batch_fed - (row.fed[-1] if row.fed else 0)) if batch_fed else 0


def choose_slots(reach: list[float], min_slots: int, context: int, cost: StepCost, others: int = 0) -> int:
    """The block size in [min_slots, block_size] whose steady state commits the most tokens per
    second, for drafts reaching as far as `reach` (at least one) says and on at its mean ratio."""
    D = cost.block_size
    ratio = reach[-1] ** (1.0 / len(reach))  # mean ratio of one draft's reach to the one before
    q = [reach[i] if i < len(reach) else reach[-1] * ratio ** (i + 1 - len(reach)) for i in range(D - 1)]
    lo = max(2, min(min_slots, D))  # a block of one slot gives the next step no draft
    best, best_rate, expected = D, -1.0, 1.0 + sum(q[: lo - 2])  # tokens committed with m - 1 drafts
    for m in range(lo, D + 1):
        expected += q[m - 2]
        rate = expected / step_seconds(cost, m, context, m, others)
        if rate > best_rate:
            best, best_rate = m, rate
    return best


def plan_step(plan: Plan, reach: torch.Tensor | None, n_drafts: int, context: int, cost: StepCost,
              max_backoff: int, others: int = 0, min_slots: int | None = None) -> None:  # fmt: skip
    """Decide the next step: plan.block, plan.fed and plan.slots. reach: [n_drafts] predicted reach of
    the drafts (None with no drafts); others: tokens the batch's other rows feed (0: alone);
    min_slots: the shortest block allowed (None: always the full block)."""
    plan.slots = cost.block_size
    if plan.ar_left > 0:
        plan.ar_left -= 1
        plan.block, plan.fed = False, 0
        return
    # Plain floats: this runs every step for every row, where small tensor ops would cost more.
    ar_rate = 1.0 / step_seconds(cost, 1, context, False, others)
    scale = plan.scale
    p = [] if reach is None else [min(1.0, x * scale) for x in reach[:n_drafts].tolist()]
    if min_slots is not None and p and p[-1] > 0:
        plan.slots = choose_slots(p, min_slots, context, cost, others)
    expected, rates = 1.0, []  # expected tokens committed, and per second, for k = 0 .. n_drafts
    for k in range(len(p) + 1):
        expected += p[k - 1] if k else 0.0
        rates.append(expected / step_seconds(cost, 1 + k, context, plan.slots, others))
    best = max(range(len(rates)), key=rates.__getitem__)
    # At least one draft whenever there are some: it costs little, and without verified drafts the
    # calibration could never learn that pessimistic confidences undersell them.
    plan.block, plan.fed = True, max(best, min(1, n_drafts))
    if n_drafts == 0:
        return  # a block step to get drafts (a probe, or after a rejection): not judged
    realized = None if plan.tokens is None else plan.tokens / plan.seconds
    if realized is not None and realized >= ar_rate:
        plan.backoff = 1  # block steps have paid: the next fall-back is short again
    if rates[best] >= ar_rate:
        plan.low = 0  # these drafts look worth it
        return
    plan.low += 1
    if plan.low >= 2 and (realized is None or realized < ar_rate):  # fall back to AR steps, from this one on
        # The probe that ends the AR run costs a block step for one token; the run is long enough
        # that probes add at most PROBE_OVERHEAD to the time it takes.
        probe = step_seconds(cost, 1, context, True, others) * ar_rate - 1  # in AR steps
        run = max(plan.backoff, math.ceil(probe / PROBE_OVERHEAD))
        # After the probe one poor verdict is enough to fall back again: a judged block step costs
        # what a probe does, and two of them each cycle would double what probing adds.
        plan.low, plan.block, plan.fed = 1, False, 0
        plan.ar_left = run - 1
        plan.backoff = min(2 * run, max(max_backoff, run))
        plan.tokens = plan.seconds = None  # after the probe, fresh evidence decides


def record(plan: Plan, reach: torch.Tensor | None, fed: int, accepted: int, seconds: float | None,
           committed: int | None = None) -> None:  # fmt: skip
    """After a verified step: what was predicted for the fed drafts against how many of them were
    accepted, and for a block step (`seconds`: its cost) the tokens it committed (`committed`, when a
    tree's branch committed more than the accepted drafts and the bonus)."""
    tokens = 1.0 + accepted if committed is None else float(committed)
    if fed and reach is not None:
        plan.predicted += float(reach[:fed].float().sum())
        plan.observed += accepted
    if seconds is not None:  # every block step, probes too: what decoding with blocks pays
        if plan.tokens is None:
            plan.tokens, plan.seconds = tokens, seconds
        else:
            plan.tokens += EMA * (tokens - plan.tokens)
            plan.seconds += EMA * (seconds - plan.seconds)
