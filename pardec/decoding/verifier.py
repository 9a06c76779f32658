"""What every verified method shares: drafts proposed by one forward (or a drafter), verified by the
target's NTP logits in the next forward (core/verify.py), so the output is the target's own."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core import sampling
from ..core.verify import accept_drafts
from .policy import Policy
from .state import Row


@dataclass
class Drafts:
    """A row's drafts for the next forward."""

    tokens: list[int] = field(default_factory=list)  # proposed, not yet verified
    probs: torch.Tensor | None = None  # [m, V] the distributions they were drawn from (sampling only)
    reach: torch.Tensor | None = None  # [m] product of the draft confidences up to each draft
    predicted: torch.Tensor | None = None  # [m] predicted reach: P(drafts 1..i all accepted), if known
    # Trees (spec's `tree`): each draft's next most likely tokens, [m] lists, and their summed
    # probability [m]; the draft the next step's branches replace (None: no branches)
    alts: list[list[int]] | None = None
    alt_mass: list[float] | None = None
    fork: int | None = None

    def clear(self) -> None:
        """No drafts for the next forward; their distributions and confidences go with them."""
        self.tokens, self.probs, self.reach, self.predicted = [], None, None, None
        self.alts = self.alt_mass = self.fork = None

    def keep(self, k: int) -> None:
        """Only the first k drafts."""
        self.tokens = self.tokens[:k]
        self.probs = None if self.probs is None else self.probs[:k]
        self.reach = None if self.reach is None else self.reach[:k]
        self.predicted = None if self.predicted is None else self.predicted[:k]
        self.alts = None if self.alts is None else self.alts[:k]
        self.alt_mass = None if self.alt_mass is None else self.alt_mass[:k]


class Verifier(Policy):
    def new_state(self):
        return Drafts()

    def n_ntp(self, drafts):
        # One per draft plus the token before them; the output head costs as much per position as
        # a few layers do on a 0.5B model, so positions no row needs are not computed.
        return 1 + max(len(d) for d in drafts)

    def drafts(self, row):
        return list(row.state.tokens)

    def wants_reach(self) -> bool:
        """Whether the drafts' confidence products are needed beyond the draft cutoff."""
        return False

    def set_drafts(self, row: Row, logits: torch.Tensor, ids=None, full=None, chosen=None) -> None:
        """Draw the next drafts from logits [k, V] and keep the longest prefix whose product of
        confidences stays >= draft_cutoff: drafts unlikely to be accepted cost a fed token and an
        NTP logit each. The cut depends only on the drafts, so verification stays lossless.
        ids / full map a reduced draft vocabulary back to the target's (a drafter's). chosen: (tokens
        [k], probs [k, V] or None when greedy) already drawn from these logits, one at a time (a Markov
        head's chain)."""
        st: Drafts = row.state
        tokens, probs = self._choose(logits) if chosen is None else chosen
        keep = len(tokens)
        reach = None
        if (self.cfg.draft_cutoff > 0 or self.wants_reach()) and keep:
            reach = sampling.confidence(logits, "prob").cumprod(0)  # [k]
            keep = int((reach >= self.cfg.draft_cutoff).sum())
        tokens = tokens[:keep] if ids is None else ids(tokens[:keep])
        st.tokens = tokens.tolist()
        st.reach = None if reach is None else reach[:keep]
        if self.cfg.temperature == 0:
            st.probs = None
        else:
            st.probs = probs[:keep] if full is None else full(probs[:keep])

    def verify(self, row: Row, ntp: torch.Tensor) -> tuple[int, list[int]]:
        """Accept a prefix of the row's drafts against the NTP logits: (accepted count, tokens to commit)."""
        st: Drafts = row.state
        m = len(st.tokens)
        n, bonus = accept_drafts(
            st.tokens,
            None if self.cfg.temperature == 0 else st.probs,
            ntp[-(m + 1) :],
            self.cfg.temperature,
            self.cfg.top_p,
            self.gen,
        )
        return n, st.tokens[:n] + [bonus]
