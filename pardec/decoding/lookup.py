"""Drafts looked up in the text itself (prompt lookup): where the committed text's last few tokens
occurred before, in the prompt or in what was generated, the tokens that followed them there are
proposed as drafts. Answers restate their prompts (a signature and docstring, a passage to extract
from, the numbers of a word problem) and repeat themselves (code), and such drafts cost no forward.

How likely a looked-up draft is accepted depends mostly on how long the match is: one shared token is
a weak hint, a dozen a copy in progress. `LookupStats` learns, per match length, the probability that
a draft is accepted given that the ones before it were (a geometric model: a run of successes ended
by the first failure), from every step's committed text, fed or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_NGRAM = 16  # the longest suffix matched (a longer match tells no more)
BUCKETS = (1, 2, 3, 4, 8)  # match lengths are pooled from each of these up to the next
# Each bucket's prior acceptance per draft, worth PRIOR_WEIGHT observed outcomes.
PRIOR_RATE = (0.2, 0.35, 0.5, 0.6, 0.75)
PRIOR_WEIGHT = 4.0


def propose(tokens: list[int], max_drafts: int, max_ngram: int = MAX_NGRAM) -> tuple[list[int], int]:
    """The tokens that followed the latest earlier occurrence of the longest suffix of `tokens` (up to
    `max_ngram` long), at most `max_drafts` of them -> (drafts, match length); ([], 0) when the last
    token never occurred before."""
    L = len(tokens)
    if L < 2 or max_drafts < 1:
        return [], 0
    last = tokens[-1]
    best, best_at = 0, -1
    for s in range(L - 2, -1, -1):  # the latest occurrence first; a longer match later replaces it
        if tokens[s] != last:
            continue
        n = 1
        while n < max_ngram and s - n >= 0 and tokens[s - n] == tokens[L - 1 - n]:
            n += 1
        if n > best:
            best, best_at = n, s
            if n == max_ngram:
                break
    if best_at < 0:
        return [], 0
    return tokens[best_at + 1 : best_at + 1 + max_drafts], best


def bucket(match: int) -> int:
    return max(i for i, b in enumerate(BUCKETS) if match >= b)


@dataclass
class LookupStats:
    """Accepted and rejected looked-up drafts per match-length bucket. Shared by the rows decoded with
    one method's extras (a bench method, a server), as the schedule's Memory is."""

    accepted: list[float] = field(default_factory=lambda: [0.0] * len(BUCKETS))
    rejected: list[float] = field(default_factory=lambda: [0.0] * len(BUCKETS))

    def rate(self, match: int) -> float:
        """P(a draft is accepted | the drafts before it were), for a match of this length."""
        b = bucket(match)
        prior = PRIOR_RATE[b] * PRIOR_WEIGHT
        return (self.accepted[b] + prior) / (self.accepted[b] + self.rejected[b] + PRIOR_WEIGHT)

    def reach(self, match: int, n: int) -> list[float]:
        """[n] P(drafts 1..i all accepted)."""
        a = self.rate(match)
        return [a ** (i + 1) for i in range(n)]

    def record(self, match: int, drafts: list[int], committed: list[int]) -> None:
        """The drafts looked up at a step, against the tokens the step committed (the target's own, so
        they say how far the drafts were right whether or not they were fed)."""
        n = 0
        while n < len(drafts) and n < len(committed) and drafts[n] == committed[n]:
            n += 1
        b = bucket(match)
        self.accepted[b] += n
        # A failure is seen only where a committed token follows the accepted ones.
        if n < len(drafts) and n < len(committed):
            self.rejected[b] += 1
