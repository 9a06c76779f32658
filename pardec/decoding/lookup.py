"""Drafts looked up in the text itself (prompt lookup): where the committed text's last few tokens
occurred before, in the prompt or in what was generated, the tokens that followed them there are
proposed as drafts. Answers restate their prompts (a signature and docstring, a passage to extract
from, the numbers of a word problem) and repeat themselves (code), and such drafts cost no forward.

How likely a looked-up draft is accepted depends on how long the match is (one shared token is a weak
hint, a dozen a copy in progress) and on whether the block, which drafted the same positions, agrees:
a looked-up draft the block also drafted has two sources behind it; one where the block drafted
another token is a copy the model's own guess contradicts. `LookupStats`
learns, per match length and relation to the block's drafts, the probability that a draft is accepted
given that the ones before it were (a geometric model: a run of successes ended by the first failure),
from every step's committed text, fed or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_NGRAM = 16  # the longest suffix matched (a longer match tells no more)
BUCKETS = (1, 2, 3, 4, 8)  # match lengths are pooled from each of these up to the next
# Per relation (below) and bucket, the prior acceptance of a draft once the ones before it were, worth
# PRIOR_WEIGHT observed outcomes: roughly what MT-bench and GSM8K taught (benchmarks/lookup.md).
PRIOR_RATE = (
    (0.85, 0.9, 0.9, 0.9, 0.9),  # agree: the block drafted the same token
    (0.15, 0.25, 0.35, 0.4, 0.4),  # disagree: the block drafted another token
    (0.4, 0.6, 0.7, 0.75, 0.8),  # alone: the block drafted nothing there (or only other text)
)
PRIOR_WEIGHT = 4.0
# A looked-up draft's relation to the block's draft at the same position. The block's drafts after
# the first one that differs continued other text, so they say nothing: ALONE.
AGREE, DISAGREE, ALONE = 0, 1, 2
RELATIONS = ("agree", "disagree", "alone")


def relations(look: list[int], block: list[int]) -> list[int]:
    """[len(look)] each looked-up draft's relation to the block's drafts."""
    out = []
    for i, t in enumerate(look):
        if i >= len(block) or (out and out[-1] != AGREE):
            out.append(ALONE)
        else:
            out.append(AGREE if block[i] == t else DISAGREE)
    return out


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


def bucket(match: int, buckets: tuple[int, ...] = BUCKETS) -> int:
    return max(i for i, b in enumerate(buckets) if match >= b)


# Drafts looked up in the datastore of the model's own answers (model/datastore.py) are pooled by
# their support: the percentage of the store's continuations of the match that went the same way. Its
# priors, as above, from replaying greedy MT-bench and GSM8K answers against the bundled store
# (a support of 90% or more is right about 60% of the time: one occurrence supports its draft fully).
STORE_BUCKETS = (0, 30, 60, 90)
STORE_PRIOR_RATE = (
    (0.6, 0.75, 0.85, 0.9),  # agree
    (0.03, 0.06, 0.1, 0.2),  # disagree
    (0.1, 0.25, 0.4, 0.6),  # alone
)


def support_levels(support: list[float]) -> list[int]:
    """A store's supports (fractions) -> the levels its stats pool drafts by (percent)."""
    return [int(100 * s) for s in support]


@dataclass
class LookupStats:
    """Accepted and rejected looked-up drafts per level bucket and relation ([bucket][relation]); a
    draft's level is its match length (in-context lookup) or its support (the datastore). Shared by the
    rows decoded with one method's extras (a bench method, a server), as the schedule's Memory is."""

    buckets: tuple[int, ...] = BUCKETS
    prior: tuple[tuple[float, ...], ...] = PRIOR_RATE
    level: str = "match"  # what a draft's level is, for the report
    accepted: list[list[float]] = field(default_factory=list)
    rejected: list[list[float]] = field(default_factory=list)

    def __post_init__(self):
        self.accepted = self.accepted or [[0.0] * len(RELATIONS) for _ in self.buckets]
        self.rejected = self.rejected or [[0.0] * len(RELATIONS) for _ in self.buckets]

    @classmethod
    def for_store(cls) -> LookupStats:
        return cls(STORE_BUCKETS, STORE_PRIOR_RATE, "support%")

    def rate(self, level: int, rel: int = ALONE) -> float:
        """P(a draft is accepted | the drafts before it were), for a draft of this level and with this
        relation to the block's."""
        b = bucket(level, self.buckets)
        a, r = self.accepted[b][rel], self.rejected[b][rel]
        return (a + self.prior[rel][b] * PRIOR_WEIGHT) / (a + r + PRIOR_WEIGHT)

    def reach(self, levels: int | list[int], rels: list[int]) -> list[float]:
        """[len(rels)] P(drafts 1..i all accepted); `levels`: one for all (a match) or one each."""
        levels = [levels] * len(rels) if isinstance(levels, int) else levels
        out, p = [], 1.0
        for level, rel in zip(levels, rels):
            p *= self.rate(level, rel)
            out.append(p)
        return out

    def record(
        self, levels: int | list[int], drafts: list[int], committed: list[int], rels: list[int] | None = None
    ) -> None:
        """The drafts looked up at a step (with their levels and relations to the block's drafts),
        against the tokens the step committed (the target's own, so they say how far the drafts were
        right whether or not they were fed)."""
        rels = rels or [ALONE] * len(drafts)
        levels = [levels] * len(drafts) if isinstance(levels, int) else levels
        n = 0
        while n < len(drafts) and n < len(committed) and drafts[n] == committed[n]:
            n += 1
        for level, rel in zip(levels[:n], rels[:n]):
            self.accepted[bucket(level, self.buckets)][rel] += 1
        # A failure is seen only where a committed token follows the accepted ones.
        if n < len(drafts) and n < len(committed):
            self.rejected[bucket(levels[n], self.buckets)][rels[n]] += 1

    def to_json(self) -> dict:
        """What was learned, per bucket (its lowest level) and relation: drafts seen and the rate."""
        return {
            f"{self.level}>={m}": {
                name: dict(
                    accepted=self.accepted[b][r], rejected=self.rejected[b][r], rate=round(self.rate(m, r), 3)
                )
                for r, name in enumerate(RELATIONS)
            }
            for b, m in enumerate(self.buckets)
        }


@dataclass
class Looked:
    """Drafts one source looked up for a step, with what its stats need."""

    drafts: list[int]
    levels: list[int]  # each draft's level (its source's stats pool drafts by it)
    stats: LookupStats
    rels: list[int] = field(default_factory=list)  # each one's relation to the block's draft there

    def relate(self, block: list[int]) -> list[float]:
        """Set the relations to the block's drafts -> the drafts' reach."""
        self.rels = relations(self.drafts, block)
        return self.stats.reach(self.levels, self.rels)

    def record(self, committed: list[int]) -> None:
        self.stats.record(self.levels, self.drafts, committed, self.rels)
