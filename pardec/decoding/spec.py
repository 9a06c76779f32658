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

With `tree` > 0, the step also feeds a tree's branches: at the fed draft most worth an alternative
(the likeliest to be reached, times the probability its block put on its next choices), the next
`tree` choices each followed by up to `tree_depth` drafts after it, as causal blocks. Where the chain's
draft there is rejected, a branch may continue (core/verify.py: still exactly the model's output).
The block that drafts next must sit before the fork for a taken branch to keep its drafts.

With `lookup` > 0, drafts are also looked up in the text itself (lookup.py: the tokens that followed
an earlier occurrence of the last few committed tokens) and, with `datastore`, in the model's own
answers to other prompts (model/datastore.py); the looked-up candidate worth more stands for both.
The candidate with more tokens expected per second (the block's by their calibrated reach, a looked-up
one's by what drafts of that source, level (match length; support) and relation to the block's most
likely tokens achieved so far; without `adaptive`, more tokens expected) is the chain the block sits
on; the other, from where the two part, is fed as a branch where its expected tokens pay for its place.
With `lookup_forks`, drafts are looked up again after each of the chain's first drafts, as if they
were accepted (the text then ends with them): where such a lookup parts from the chain it is a branch
at that fork, which continues the chain's accepted drafts where the chain's own draft fails. Each
branch is priced like the other candidate, and the ones that pay are fed, likeliest first.
Either way the target verifies every token.

With `reveal`, more blocks sit after the same drafts as the first block, each with its slot 0 holding
one of the previous block's likeliest tokens there instead of [MASK]: the first block cannot know the
bonus (this forward computes it), so its first draft after it guesses two tokens ahead. Where the
token committed there is one of the revealed ones, that block, whose drafts saw it, drafts next.

With `adaptive`, how many drafts each step feeds, and whether it is a plain AR step instead (which
may still verify looked-up drafts, at no adapter's cost: also chosen where a looked-up chain commits
more per second fed alone than with a block, as where a quantized kernel makes each token fed dear;
where no row of the batch feeds a block, its looked-up branches too, priced on the plain curve), follows
the measured cost of a step on this machine and the drafts' calibrated acceptance (schedule.py; the
adapter's `calibration.json` maps confidences to acceptance probabilities where it has one); with
`min_block_size` too, so does the block's size. A batch feeds one block size, its rows' longest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core import cost as step_cost
from ..core.step import Block
from ..core.verify import accept_with_branches
from . import lookup, schedule
from .policy import Method, register
from .state import Row, Update
from .verifier import Drafts, Verifier

PRIOR_TOKENS = 2.0  # tokens a row's block step is taken to commit before it has done one
PRIOR_BLOCK_DRAFTS = 1.0  # drafts of a block's taken to be accepted before any was verified
MARKOV_CONTEXT = 4  # committed tokens kept before a block for its Markov head (it uses its `context`)


@dataclass
class Branch:
    """A candidate branch of looked-up (or block) drafts for the step's tree."""

    fork: int  # the chain draft it replaces (len(chain): it carries on after the last)
    tokens: list[int]
    gain: float  # expected extra tokens it commits
    # [len(tokens) - 1, V] the proposals of its tokens after the first (sampling); None: point masses
    probs: torch.Tensor | None = None


@dataclass
class SpecDrafts(Drafts):
    plan: schedule.Plan = field(default_factory=schedule.Plan)  # with `adaptive`
    looked: list[lookup.Looked] = field(default_factory=list)  # every source's drafts for this step
    look: list[int] = field(default_factory=list)  # the looked-up candidate's drafts (the best source's)
    from_lookup: bool = False  # the chain is the looked-up drafts (else the block's)
    # The other candidate from where it parts from the chain: the fork (a chain draft's index), its
    # tokens there on, the proposals of those after the first (sampling), its expected extra tokens
    other_at: int = 0
    other: list[int] | None = None
    other_probs: torch.Tensor | None = None
    other_gain: float = 0.0
    # With `lookup_forks`: (k, looked-up candidate after the chain's first k drafts) per fork and source
    relooked: list[tuple[int, lookup.Looked]] = field(default_factory=list)
    fed_branches: list[Branch] = field(default_factory=list)  # the looked-up branches this step feeds
    # With `reveal`: the block's likeliest tokens at each draft position (index i: draft i + 1)
    tops: list[list[int]] | None = None
    # With `fallback`: this step also feeds a block after no drafts (schedule's choice)
    fallback: bool = False

    def clear(self) -> None:
        super().clear()
        self.from_lookup, self.other, self.other_probs = False, None, None
        self.relooked, self.fed_branches = [], []
        self.tops = None
        self.fallback = False


def _shared(a: list[int], b: list[int]) -> int:
    """How many tokens a and b share from their first."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _after(reach: list[float], start: int, end: int) -> float:
    """Expected drafts accepted among reach's [start, end) once every one before start was."""
    if start >= min(end, len(reach)):
        return 0.0
    before = reach[start - 1] if start else 1.0
    return sum(reach[start:end]) / max(before, 1e-9)


def _branch_gain(chain: list[float], other: list[float], fork: int) -> float:
    """Expected extra tokens from the other candidate's branch at `fork`: reached if the chain's
    drafts before it are accepted, taken where the chain's draft there is rejected and the other's
    accepted (its reach's conditional probabilities), then carrying on with its own drafts."""

    def cond(reach, i):  # P(draft i accepted | the ones before it were)
        return reach[i] / (reach[i - 1] if i else 1.0) if i < len(reach) else 0.0

    before = chain[fork - 1] if fork else 1.0
    carry = 1.0 + _after(other, fork + 1, len(other))
    return before * (1.0 - cond(chain, fork)) * cond(other, fork) * carry


def _fork_gain(chain: list[float], branch: list[float], fork: int) -> float:
    """Expected extra tokens from a branch at `fork` (the chain's draft there, or after its last):
    reached if the chain's drafts before it are accepted, taken where the chain fails there, then
    committing as many of its drafts as its reach (their stats' cumulative acceptance) says."""
    before = chain[fork - 1] if fork else 1.0
    fails = 1.0 - chain[fork] / max(before, 1e-9) if fork < len(chain) else 1.0
    return before * fails * sum(branch)


def _one_hot(tokens: list[int], like: torch.Tensor) -> torch.Tensor:
    """[n, V] point-mass proposals (V and device as like's last dim): a looked-up draft was not drawn
    from any distribution."""
    out = torch.zeros(len(tokens), like.shape[-1], device=like.device)
    out[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long, device=like.device)] = 1.0
    return out


class Speculative(Verifier):
    batch_priced = True

    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator)
        self.cost = None  # a StepCost when adaptive
        if config.adaptive:
            self.cost = step_cost.given_or_measured(extras, model, mask_id, config.block_size)
        self.calibration = (extras or {}).get("calibration")  # a model.calibration.Calibration or None
        self.memory = (extras or {}).get("memory") or schedule.Memory()  # shared across calls if given
        self.batch_fed = 0  # tokens the last step fed over the whole batch (0: one row)
        self.batch_ar = False  # this step is a plain AR step for the whole batch
        self.batch_rows = 1  # rows this step decodes
        self.batch_fallback = False  # a row of this step feeds a fallback block (so every row has its slots)
        self.all_plain = False  # no row of this step feeds a block (its rows may still feed branches)
        self.width = config.block_size  # slots of each block this step feeds
        self.lookup_stats = (extras or {}).get("lookup") or lookup.LookupStats()  # shared if given
        self.store = (extras or {}).get("datastore") if config.datastore else None
        self.store_stats = (extras or {}).get("store_lookup") or lookup.LookupStats.for_store()
        # Whether the block's slots were trained (an adapter): a plain model's [MASK] predicts noise, so
        # adaptive spec then feeds looked-up drafts only, in plain steps, and never pays for a block.
        self.trained_block = (extras or {}).get("trained_block", True)
        # The adapter's Markov head (model/markov.py): each block draft re-ranked given the one before
        self.markov = (extras or {}).get("markov") if config.markov else None
        self.block_hidden = self.markov is not None
        # Every branch is fed at one width, so that rows of a batch feed blocks of one shape.
        self.branch_width = 1 + config.tree_depth
        if config.lookup:
            self.branch_width = max(self.branch_width, config.block_size)

    def new_state(self):
        if self.cost is None:
            return SpecDrafts()
        # A request after one whose blocks failed starts as a row after a probe: one poor verdict
        # falls back.
        backoff = self.memory.backoff
        return SpecDrafts(plan=schedule.Plan(backoff=backoff, low=1 if backoff > 1 else 0))

    def wants_reach(self):
        return (
            self.cost is not None
            or self.cfg.lookup > 0
            or (self.cfg.block_at is None and self.cfg.block_reach > 0)
        )

    def candidates(self, row) -> list[lookup.Looked]:
        """Drafts looked up for the row's next tokens: in its own text, and in the datastore of the
        model's own answers."""
        return self.candidates_after(row.committed)

    def candidates_after(self, text: list[int]) -> list[lookup.Looked]:
        out = []
        drafts, match = lookup.propose(text, self.cfg.lookup)
        if drafts:
            out.append(lookup.Looked(drafts, [match] * len(drafts), self.lookup_stats))
        if self.store is not None:
            drafts, support, _ = self.store.propose(text, self.cfg.lookup)
            if drafts:
                out.append(lookup.Looked(drafts, lookup.support_levels(support), self.store_stats))
        return out

    def look_up(self, row) -> None:
        """Look drafts up, and make the looked-up candidate worth most the chain where it is worth more
        than the block's drafts; the candidate not chosen is kept, from where the two part, as the
        step's possible branch."""
        st: SpecDrafts = row.state
        st.other, st.other_probs, st.from_lookup = None, None, False
        st.looked, st.look = self.candidates(row), []
        # Relations to the block's most likely tokens (its drafts when greedy), not to the drafts it
        # drew when sampling: a chain chosen by the draws would bias what verification accepts.
        modes = list(st.tokens) if st.probs is None else st.probs.argmax(-1).tolist()
        self.choose_chain(row, modes)
        self.relook(row, modes)

    def choose_chain(self, row, modes: list[int]) -> None:
        st: SpecDrafts = row.state
        if not st.looked:
            return
        block = list(st.tokens)
        best, look_reach, best_worth = None, [], -1.0
        for cand in st.looked:
            reach = cand.relate(modes)
            if self.cfg.draft_cutoff > 0:  # the cutoff holds for looked-up drafts as for the block's
                reach = reach[: sum(r >= self.cfg.draft_cutoff for r in reach)]
            worth = self._worth(row, reach)
            if reach and worth > best_worth:
                best, look_reach, best_worth = cand, reach, worth
        if best is None:
            return
        st.look = best.drafts[: len(look_reach)]
        scale = st.plan.scale if self.cost is not None else 1.0
        block_reach = [] if st.predicted is None else [min(1.0, x * scale) for x in st.predicted.tolist()]
        c = st.other_at = _shared(block, st.look)
        if best_worth > self._worth(row, block_reach):
            if c < len(block) and c < len(st.look):
                st.other, st.other_probs = block[c:], None if st.probs is None else st.probs[c + 1 :]
                st.other_gain = _branch_gain(look_reach, block_reach, c)
            st.tokens, st.probs, st.alts, st.alt_mass = list(st.look), None, None, None
            st.reach = st.predicted = torch.tensor(look_reach)
            st.from_lookup = True
        elif c < len(st.look) and c < len(block):
            st.other = st.look[c:]
            st.other_gain = _branch_gain(block_reach, look_reach, c)

    def relook(self, row, modes: list[int]) -> None:
        """With `lookup_forks`: look drafts up again after each of the chain's first k drafts, as if
        they were accepted; each candidate is related to the block's most likely tokens from there."""
        st: SpecDrafts = row.state
        st.relooked = []
        for k in range(1, min(self.cfg.lookup_forks, len(st.tokens)) + 1):
            text = row.committed + st.tokens[:k]
            for cand in self.candidates_after(text):
                cand.relate(modes[k:])
                st.relooked.append((k, cand))

    def _worth(self, row, reach: list[float]) -> float:
        """What a chain of drafts with this reach is worth: with `adaptive`, the most tokens per second
        any prefix of it commits fed with a block, or in a plain step where no block is trained (a long
        chain of unlikely drafts costs its place);
        else the tokens it is expected to commit."""
        if self.cost is None:
            return sum(reach)
        return self._best_prefix(row, reach, block=self.trained_block)[1]

    def _best_prefix(self, row, reach: list[float], block: bool) -> tuple[int, float]:
        """The number of drafts (with this reach) whose step, fed with a block or as a plain AR step,
        commits the most tokens per second on this machine's curve, and that rate."""
        context, others = len(row.committed), self.others(row)
        best, best_rate, expected = 0, 0.0, 1.0
        for k in range(len(reach) + 1):
            expected += reach[k - 1] if k else 0.0
            rate = expected / schedule.step_seconds(self.cost, 1 + k, context, block, others)
            if rate > best_rate:
                best, best_rate = k, rate
        return best, best_rate

    def set_drafts(self, row, logits, ids=None, full=None, chosen=None):
        super().set_drafts(row, logits, ids, full, chosen)
        st: SpecDrafts = row.state
        # The predicted reach: the schedule plans with it, the bench holds it against acceptance.
        st.predicted = st.reach
        if self.calibration is not None and st.reach is not None:
            st.predicted = self.calibration.reach(st.reach)
        if self.cfg.reveal:
            st.tops = logits.topk(min(self.cfg.reveal, logits.shape[-1]), -1).indices.tolist()
        if self.cfg.tree and st.tokens:
            # Each draft's next choices: the block's most likely tokens other than the draft itself.
            probs = logits[: len(st.tokens)].float().softmax(-1)  # [m, V]
            top = probs.topk(self.cfg.tree + 1, -1)
            st.alts, st.alt_mass = [], []
            for d, toks, ps in zip(st.tokens, top.indices.tolist(), top.values.tolist()):
                alts = [(t, p) for t, p in zip(toks, ps) if t != d][: self.cfg.tree]
                st.alts.append([t for t, _ in alts])
                st.alt_mass.append(sum(p for _, p in alts))

    def after_step(self, rows, out, keep, alive):
        self.batch_fed = schedule.batch_tokens(out)  # what a row's choice shares the next step with

    def others(self, row) -> int:
        return schedule.others(self.batch_fed, row)

    def before_step(self, rows):
        """Plan every row's step, then the batch's block size. In a batch every row pays for the
        block slots once any row feeds a block (rows feed one shape). So the batch feeds blocks only
        if the tokens they are expected to commit (each row's recent tokens per block step) come
        faster than plain AR steps for every row would."""
        self.batch_ar, self.width = False, self.cfg.block_size
        self.batch_rows, self.batch_fallback = len(rows), False
        if self.cfg.lookup:
            for row in rows:
                self.look_up(row)
        if self.cost is None:
            return
        if not self.trained_block:
            self.batch_ar = self.all_plain = True
            for row in rows:
                row.state.plan.block, row.state.plan.fed = False, 0
            return
        if len(rows) >= 2:
            context = max(len(r.committed) for r in rows)
            expected = sum(PRIOR_TOKENS if r.state.plan.tokens is None else r.state.plan.tokens for r in rows)
            # The block curve holds one row's block; the other rows' slots count as more tokens fed.
            fed = sum(1 + len(r.state.tokens) for r in rows) + (len(rows) - 1) * self.cfg.block_size
            block_rate = expected / self.cost.seconds(fed, context, block=True)
            self.batch_ar = block_rate < len(rows) / self.cost.seconds(len(rows), context)
        for row in rows:
            st: SpecDrafts = row.state
            if self.batch_ar:  # the batch decodes a plain AR step
                st.plan.block, st.plan.fed = False, 0
                continue
            st.plan.others = self.others(row)
            schedule.plan_step(
                st.plan,
                st.predicted,
                len(st.tokens),
                len(row.committed),
                self.cost,
                schedule.MAX_BACKOFF,
                st.plan.others,
                self.cfg.min_block_size,
            )
            self.memory.backoff = st.plan.backoff
            if st.from_lookup and st.plan.block and self._plain_pays_more(row):
                st.plan.block, st.plan.fed = False, 0  # drafts() feeds the looked-up ones it pays for
        widths = [r.state.plan.slots for r in rows if r.state.plan.block]
        self.width = max(widths, default=self.cfg.block_size)
        # Rows feed one shape: branches in plain steps only where no row feeds a block.
        self.all_plain = not widths

    def drafts(self, row):
        st: SpecDrafts = row.state
        if self.cost is not None:
            fed = st.plan.fed
            if not st.plan.block and st.from_lookup:
                fed = self.lookup_in_ar_step(row)
            st.keep(fed)  # the rest are unlikely enough not to pay for their place
        st.fallback = False  # planned afresh, against the one block block_lengths then gives
        st.fallback = self.plan_fallback(row)
        st.fork = self.plan_fork(row)
        return super().drafts(row)

    def _plain_pays_more(self, row) -> bool:
        """Whether the looked-up chain commits more tokens per second fed alone in a plain step (no
        block: where each token fed is dear, a few drafts without the block's slots and adapter) than
        the planned block step would."""
        plan, reach = row.state.plan, row.state.predicted.tolist()
        expected = 1.0 + sum(reach[: plan.fed])
        if self.cfg.plan_ahead:
            # The block step also drafts the next step (where the drafts before its block are accepted);
            # the plain one leaves it the lookups alone.
            R = min(self.block_lengths(row)[0], plan.fed)
            usable = reach[R - 1] if R else 1.0
            expected += usable * (PRIOR_BLOCK_DRAFTS if plan.block_drafts is None else plan.block_drafts)
        seconds = schedule.step_seconds(self.cost, 1 + plan.fed, len(row.committed), plan.slots, plan.others)
        return self._best_prefix(row, reach, block=False)[1] > expected / seconds

    def lookup_in_ar_step(self, row) -> int:
        """Looked-up drafts to feed in a plain AR step (no block, so no adapter's cost): the number
        with the most expected tokens per second on this machine's curve, often none."""
        return self._best_prefix(row, row.state.predicted.tolist(), block=False)[0]

    def branch_tokens(self, row) -> int:
        """Tokens a row's branches feed this step: the other candidate's one branch, or `tree`
        branches of an alternative and the drafts after it, each `branch_width` wide."""
        st: SpecDrafts = row.state
        return self.branch_width * (len(st.fed_branches) if st.fed_branches else self.cfg.tree)

    def plain(self, row) -> bool:
        """Whether the row's step is a plain one: no block, so no adapter's cost."""
        return self.cost is not None and not row.state.plan.block

    def plan_fallback(self, row) -> bool:
        """With `adaptive` and `fallback`: whether the step also feeds a block after no drafts, beside
        the one after the R > 0 drafts likely to be accepted. Where fewer than R are, the next step then
        has that block's drafts instead of none: worth P(fewer than R accepted) times what a step with
        drafts commits beyond its bonus (the row's recent block steps), against its slots' cost here.
        Rows of a batch feed one shape, so the first row's fallback block gives every row its slots:
        it pays for all of them, and rows planned after it feed theirs at no further cost."""
        st: SpecDrafts = row.state
        if not self.cfg.fallback or self.cost is None or self.cfg.draft_blocks > 1 or self.plain(row):
            return False
        R = self.block_lengths(row)[0]
        if R == 0 or st.predicted is None:
            return False
        miss = 1.0 - min(1.0, float(st.predicted[R - 1]) * st.plan.scale)  # P(fewer than R accepted)
        gain = miss * max((PRIOR_TOKENS if st.plan.tokens is None else st.plan.tokens) - 1.0, 0.0)
        if self.batch_fallback:
            return gain > 0.0
        self.batch_fallback = self._pays(row, gain, self.width * self.batch_rows)
        return self.batch_fallback

    def plan_fork(self, row) -> int | None:
        """The fed draft the branches replace, or None for no branches. The other candidate (lookup or
        block) where it parts from the fed chain, if it pays; else, with `tree`, the draft with the most
        expected tokens from its alternatives (reach before it times their probability, times one plus
        the drafts they carry on with); with `adaptive`, only where those tokens pay for the branch
        tokens. A plain step (a looked-up chain verified without a block) may feed looked-up branches
        too, priced on the plain curve, where no row of the batch feeds a block."""
        st: SpecDrafts = row.state
        m = len(st.tokens)
        st.fed_branches = []
        plain = self.plain(row)
        if not m or (plain and not self.all_plain):
            return None
        if self.plan_looked_branches(row):
            return st.fed_branches[0].fork
        if plain or not self.cfg.tree or st.alts is None:
            return None
        reach = [1.0] * m if st.predicted is None else st.predicted[:m].tolist()
        depth = self.cfg.tree_depth
        gains = []
        for i in range(m):
            before = reach[i - 1] if i else 1.0
            # The drafts after the fork, accepted in turn with their chain's conditional probabilities.
            carry, chain = 0.0, 1.0
            for j in range(i + 1, min(m, i + 1 + depth)):
                chain *= reach[j] / max(reach[j - 1], 1e-9)
                carry += chain
            gains.append(before * st.alt_mass[i] * (1.0 + carry))
        fork = max(range(m), key=gains.__getitem__)
        if self.cost is not None and not self._pays(row, gains[fork], self.branch_width * self.cfg.tree):
            return None
        return fork

    def _pays(self, row, gain: float, tokens: int, have_gain: float = 0.0, have_tokens: int = 0) -> bool:
        """Whether `tokens` more fed, expected to commit `gain` more, raise the step's tokens per second
        (over a step that already feeds `have_tokens` branch tokens expected to commit `have_gain`)."""
        st: SpecDrafts = row.state
        m = len(st.tokens)
        reach = [1.0] * m if st.predicted is None else st.predicted[:m].tolist()
        expected = 1.0 + sum(reach) + have_gain
        context, slots = len(row.committed), 0 if self.plain(row) else self.width
        seconds = lambda n: schedule.step_seconds(self.cost, n, context, slots, st.plan.others)  # noqa: E731
        base = 1 + m + have_tokens + self.extra_slots(row)
        return (expected + gain) / seconds(base + tokens) > expected / seconds(base)

    def looked_branches(self, row) -> list[Branch]:
        """The step's candidate branches of the other candidate and, with `lookup_forks`, of every
        source's lookups before the chain and after its first drafts (`relooked`), each from where it
        parts from the (kept) chain, one per fork and first token (the likeliest), likeliest first."""
        st: SpecDrafts = row.state
        m = len(st.tokens)
        out = []
        if st.other is not None and st.other_at < m:
            probs = st.other_probs if st.from_lookup else None  # the block's drafts, else looked up
            out.append(Branch(st.other_at, st.other, st.other_gain, probs))
        if self.cfg.lookup_forks:
            chain = [1.0] * m if st.predicted is None else st.predicted[:m].tolist()
            # Every source's lookup before the chain too, not only the one that competed with it
            for k, cand in [(0, c) for c in st.looked] + st.relooked:
                if k > m:
                    continue
                j = _shared(cand.drafts, st.tokens[k:])  # the looked-up drafts that agree with the chain's
                if j == len(cand.drafts):
                    continue
                fork = k + j
                reach = cand.stats.reach(cand.levels[j:], cand.rels[j:])
                out.append(Branch(fork, cand.drafts[j:], _fork_gain(chain, reach, fork)))
        best: dict[tuple[int, int], Branch] = {}
        for b in out:
            key = (b.fork, b.tokens[0])
            if key not in best or b.gain > best[key].gain:
                best[key] = b
        return sorted(best.values(), key=lambda b: -b.gain)

    def plan_looked_branches(self, row) -> bool:
        """Choose the looked-up branches the step feeds (`fed_branches`): without `adaptive`, the other
        candidate and up to `lookup_forks` more; with it, likeliest first while each pays for its place."""
        st: SpecDrafts = row.state
        gain, tokens = 0.0, 0
        for b in self.looked_branches(row):
            if self.cost is None:
                if len(st.fed_branches) > self.cfg.lookup_forks:
                    break
            elif not self._pays(row, b.gain, self.branch_width, gain, tokens):
                break
            st.fed_branches.append(b)
            gain, tokens = gain + b.gain, tokens + self.branch_width
        return bool(st.fed_branches)

    def branches(self, row) -> list[list[int]]:
        """The branches' tokens (without padding): the other candidate's, or each alternative, then
        the drafts after the fork."""
        st: SpecDrafts = row.state
        f = st.fork
        if st.fed_branches:
            return [b.tokens[: self.branch_width] for b in st.fed_branches]
        after = st.tokens[f + 1 : f + 1 + self.cfg.tree_depth]
        return [[a] + after for a in st.alts[f]]

    def forks(self, row) -> list[int]:
        """Each branch's fork (the chain draft it replaces)."""
        st: SpecDrafts = row.state
        if st.fed_branches:
            return [b.fork for b in st.fed_branches]
        return [st.fork] * len(st.alts[st.fork])

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
        count = 2 if st.fallback else self.cfg.draft_blocks
        ns = [first] + [n for n in range(m) if n != first][: count - 1]
        return ns + [first] * (count - len(ns))

    def blocks(self, row):
        st: SpecDrafts = row.state
        m = len(st.tokens)
        masks = [self.mask_id] * self.width
        out = []
        if not self.plain(row):
            lengths = self.block_lengths(row)
            out = [Block(m - n, masks) for n in lengths]
            out += [Block(m - lengths[0], [c] + masks[1:]) for c in self.reveal_tokens(row, lengths[0])]
        if st.fork is not None:  # branches start where their fork's draft sits, padded to one length
            width = self.branch_width
            out += [
                Block(m - f, b + [0] * (width - len(b)), causal=True)
                for f, b in zip(self.forks(row), self.branches(row))
            ]
        return out or None  # None: a plain AR step

    def reveal_tokens(self, row, L: int) -> list[int]:
        """The `reveal` tokens the revealed blocks after L drafts hold in slot 0: the block's likeliest
        at draft position L + 1, [MASK] (never committed) where it had fewer."""
        st: SpecDrafts = row.state
        tops = st.tops[L] if st.tops is not None and L < len(st.tops) else []
        return tops[: self.cfg.reveal] + [self.mask_id] * (self.cfg.reveal - len(tops))

    def n_blocks(self, row) -> int:
        """[MASK] blocks (the ones after 0, 1, ... drafts, then the revealed ones) a row's step feeds."""
        return 0 if self.plain(row) else len(self.block_lengths(row)) + self.cfg.reveal

    def extra_slots(self, row) -> int:
        """Slots the row's blocks beyond the first feed this step (more draft blocks, revealed ones)."""
        return 0 if self.plain(row) else (self.n_blocks(row) - 1) * self.width

    def _verify_tree(self, row, ntp, block) -> tuple[int, list[int], int]:
        """(chain drafts accepted, tokens to commit, drafts the committed path accepted)."""
        st: SpecDrafts = row.state
        m = len(st.tokens)
        sampling = self.cfg.temperature > 0
        if sampling and st.from_lookup:
            st.probs = _one_hot(st.tokens, ntp)
        if st.fork is None:
            n, commit = self.verify(row, ntp)
            return n, commit, n
        start = self.n_blocks(row) * self.width
        width = self.branch_width
        branches = self.branches(row)
        logits = [block[start + k * width : start + k * width + len(b)] for k, b in enumerate(branches)]
        probs = None
        if sampling and st.fed_branches:  # each branch's own proposals after its first token
            probs = [
                _one_hot(b[1:], ntp) if fb.probs is None else fb.probs[: len(b) - 1]
                for b, fb in zip(branches, st.fed_branches)
            ]
        n, commit, taken = accept_with_branches(
            st.tokens, st.probs if sampling else None, ntp[-(m + 1) :], self.forks(row), branches,
            logits, self.cfg.temperature, self.cfg.top_p, self.gen, probs,
        )  # fmt: skip
        return n, commit, len(commit) - 1

    def update(self, row, ntp, block, hidden=None):
        st: SpecDrafts = row.state
        predicted, fed, fork = st.predicted, len(st.tokens), st.fork
        extra = (0 if fork is None else self.branch_tokens(row)) + self.extra_slots(row)
        n, commit, path = self._verify_tree(row, ntp, block)
        for cand in st.looked:
            cand.record(commit)
        for k, cand in st.relooked:  # known where the committed text starts with the chain's first k
            if k <= n:
                cand.record(commit[k:])
        st.relooked = []
        if self.cost is not None and fed and not st.from_lookup:
            got = st.plan.block_drafts
            st.plan.block_drafts = n if got is None else got + schedule.EMA * (n - got)
        if st.from_lookup:  # the block's calibration and its reliability hold block drafts only
            predicted = None
        shown = None if predicted is None or not fed else tuple(predicted[:fed].tolist())
        if self.cost is not None and not st.plan.block:  # an AR step: no block, so no drafts after it
            schedule.record(st.plan, predicted, fed, n, None, committed=len(commit))
            st.clear()
            return Update(commit=commit, keep_drafts=n, predicted=shown)
        L, k = self.drafting_block(row, n, commit)
        D = self.width
        # Slot j of the block after L drafts sits where draft L + 1 + j did; the bonus sits at draft
        # position path + 1, so the slots after path - L are the next drafts.
        first = 1 + path - L if L is not None else D
        if first < D:
            slots_hidden = None if hidden is None else hidden[k * D : (k + 1) * D]  # [D, H]
            # The text before slot 0, for a Markov head conditioning on the tokens before a draft.
            past = row.committed[-MARKOV_CONTEXT:] + commit[:L]
            commit = commit + self.next_drafts(
                row, block[k * D : (k + 1) * D], first, commit[L:], slots_hidden, past
            )
        else:
            # No block was fed early enough: the next forward drafts afresh.
            st.clear()
        if self.cost is not None:
            # The step's context: committed text before it (row.committed is not extended yet).
            seconds = schedule.step_seconds(
                self.cost, 1 + fed + extra, len(row.committed), self.width, st.plan.others
            )
            schedule.record(st.plan, predicted, fed, n, seconds, committed=len(commit))
        return Update(commit=commit, keep_drafts=n, predicted=shown)

    def drafting_block(self, row, n: int, commit: list[int]) -> tuple[int | None, int | None]:
        """(L, k): the fed block that drafts next, the k-th, after L drafts; (None, None) if none can.
        A block's drafts hold if it saw only committed text: after a taken branch, only the drafts before
        its fork were (n, the chain drafts accepted). Of those, the block after the most drafts, or a
        revealed block after as many whose slot 0 holds the token committed there (it saw one more)."""
        lengths = self.block_lengths(row)
        L = max((x for x in lengths if x <= n), default=None)
        k = None if L is None else lengths.index(L)
        R = lengths[0]
        if R <= n and (L is None or L <= R):
            hit = [j for j, c in enumerate(self.reveal_tokens(row, R)) if c == commit[R]]
            if hit:
                return R, len(lengths) + hit[0]
        return L, k

    def next_drafts(
        self, row, slots: torch.Tensor, first: int, text: list[int], hidden=None, past: list[int] = ()
    ) -> list[int]:
        """The next drafts from a block's slots [D, V], of which `first` on follow the committed text;
        `text` holds the committed tokens at slots 0 .. first - 1, `past` the committed ones before slot
        0 (the last few); `hidden` [D, H] the slots' final hidden states (with a Markov head). Returns
        tokens to commit at once: none here, where every draft waits for the target's verdict (a lossy
        method commits some)."""
        self.draft_from(row, slots, first, list(past) + text, hidden)
        return []

    def draft_from(self, row, slots: torch.Tensor, first: int, before: list[int], hidden=None) -> None:
        """The next drafts: the block's slots [D, V] from `first` on, `before` the committed text before
        them (its last few tokens). With a Markov head each draft is re-ranked given the ones before it."""
        if self.markov is None or hidden is None:
            self.set_drafts(row, slots[first:])
            return
        greedy = self.cfg.temperature == 0
        chain = self.markov.chain(
            slots[first:], hidden[first:], first, before, None if greedy else self._choose
        )
        logits, tokens, probs = chain
        self.set_drafts(row, logits, chosen=(tokens, probs))


def lookup_extras(lm, config) -> dict:
    """What looked-up drafts need: the stats learned of them, and the model's datastore if it has one."""
    extras = {"lookup": lookup.LookupStats()}
    if config.lookup and config.datastore and lm.datastore is not None:
        extras |= {"datastore": lm.datastore, "store_lookup": lookup.LookupStats.for_store()}
    return extras


def prepare(lm, config, sets_block_size: bool, options: dict):
    """The adapter's calibration, and with `adaptive` this machine's step cost for the model (measured
    once and cached) and the schedule's memory across the requests decoded with these extras."""
    head = lm.markov if config.markov else None
    cal = lm.calibration
    if head is not None and cal is not None:
        cal = cal.for_markov(head.sha256)
    extras = {
        "calibration": cal,
        "trained_block": lm.adapter is not None,
        "markov": head,
        **lookup_extras(lm, config),
    }
    if config.adaptive:
        extras["cost"] = step_cost.for_model(lm, config.block_size)
        extras["memory"] = schedule.Memory()
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
