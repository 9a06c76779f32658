"""Decoding settings, validated once so that every entry point (API, CLI, bench) rejects the same
nonsense with the same message."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PardecError
from .policy import METHODS


@dataclass(frozen=True)
class DecodeConfig:
    method: str = "spec"
    block_size: int = 4  # D: slots predicted per forward
    # None for these two: "auto", the value `pardec calibrate` saved with the adapter (api.configure)
    threshold: float | None = 0.9  # threshold: commit drafts unverified while confidence >= this
    confidence: str = "prob"  # threshold: "prob" (max probability) or "entropy" (1 - H / log V)
    gamma: float | None = 0.5  # eb: entropy budget (nats) per forward
    draft_blocks: int = 1  # spec: blocks fed per forward, for that many possible acceptance lengths
    # spec with adaptive: also feed a block after no drafts, beside the one after the likely drafts,
    # where what it drafts after a rejection there is expected to pay for its slots on this machine
    fallback: bool = False
    # spec with adaptive: where a looked-up chain would be verified in a plain step (no block, cheaper),
    # count what a block step also brings: the next step's drafts from its block (their recent yield)
    plan_ahead: bool = True
    # spec: where the block sits among the drafts. block_at: after at most this many (fixed); None:
    # after those whose confidences' product stays >= block_reach (likely to be accepted; 0: after all)
    block_at: int | None = None
    block_reach: float = 0.7
    draft_cutoff: float = 0.0  # spec, dflash: feed drafts while their confidences' product stays >= this
    # spec: choose per step how many drafts to feed, or a plain AR step, by the measured step cost and
    # the drafts' calibrated acceptance (schedule.py); eb: each block's size, or plain AR steps, by the
    # cost and the entropies its blocks show (eb.py); False: the fixed shapes below, every step
    adaptive: bool = True
    # spec, eb with adaptive: the shortest block a step may feed; the schedule chooses each step's block
    # size between this and block_size. None: the adapter's own (trained with block sizes sampled from
    # it), else always block_size (a shorter block than trained is out of distribution)
    min_block_size: int | None = None
    # spec: a tree's branches per step, the draft's next `tree` choices at one fork, each carrying on
    # with up to `tree_depth` drafts (0: a chain); with `adaptive`, fed only where they pay
    tree: int = 0
    tree_depth: int = 3
    # spec: most drafts looked up in the text itself (prompt lookup, lookup.py) per step; they replace
    # the block's drafts where more of them are expected to be accepted, and the other candidate is
    # fed as a branch where it pays (0: block drafts only)
    lookup: int = 32
    # spec: also look drafts up in the datastore of the model's own answers (model/datastore.py) where
    # the adapter or the packaged model has one; the lookup cap holds for them too
    datastore: bool = True
    # spec: look drafts up again after each of the chain's first `lookup_forks` drafts (as if accepted),
    # and feed those that part from the chain as branches (with `adaptive`, where they pay; without
    # it, up to this many besides the other candidate's); 0: only the lookups before the chain
    lookup_forks: int = 0
    # spec: blocks fed beside the first, after the same drafts, each with its slot 0 revealed as one of
    # the likeliest tokens there (the previous block's): where the token committed there is one of them,
    # the next drafts come from that block, having seen the token they follow (0: off)
    reveal: int = 0
    # spec: re-rank each block draft given the token before it with the adapter's Markov head
    # (model/markov.py), where it has one
    markov: bool = True
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()

    def __post_init__(self):
        if self.method not in METHODS:
            raise PardecError(f"unknown method '{self.method}': choose one of {', '.join(METHODS)}")
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise PardecError(f"block size must be an integer >= 1, got {self.block_size}")
        if self.block_size < METHODS[self.method].min_block_size:
            raise PardecError(
                f"{self.method} needs a block size >= {METHODS[self.method].min_block_size} "
                "(one slot for the bonus token, the rest drafts)"
            )
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise PardecError(f"threshold must lie in [0, 1], got {self.threshold}")
        if not isinstance(self.draft_blocks, int) or not 1 <= self.draft_blocks <= self.block_size:
            raise PardecError(f"draft blocks must lie in [1, block size], got {self.draft_blocks}")
        if self.block_at is not None and (not isinstance(self.block_at, int) or self.block_at < 0):
            raise PardecError(f"block_at must be an integer >= 0 (or unset), got {self.block_at}")
        if not 0.0 <= self.draft_cutoff <= 1.0:
            raise PardecError(f"draft cutoff must lie in [0, 1], got {self.draft_cutoff}")
        if not isinstance(self.tree, int) or not 0 <= self.tree <= 8:
            raise PardecError(f"tree must be an integer in [0, 8], got {self.tree}")
        if not isinstance(self.tree_depth, int) or self.tree_depth < 0:
            raise PardecError(f"tree depth must be an integer >= 0, got {self.tree_depth}")
        if not isinstance(self.lookup, int) or not 0 <= self.lookup <= 64:
            raise PardecError(f"lookup must be an integer in [0, 64], got {self.lookup}")
        if not isinstance(self.lookup_forks, int) or not 0 <= self.lookup_forks <= 8:
            raise PardecError(f"lookup forks must be an integer in [0, 8], got {self.lookup_forks}")
        if not isinstance(self.reveal, int) or not 0 <= self.reveal <= 8:
            raise PardecError(f"reveal must be an integer in [0, 8], got {self.reveal}")
        if not isinstance(self.datastore, bool):
            raise PardecError(f"datastore must be true or false, got {self.datastore!r}")
        if not isinstance(self.plan_ahead, bool):
            raise PardecError(f"plan_ahead must be true or false, got {self.plan_ahead!r}")
        if not isinstance(self.fallback, bool):
            raise PardecError(f"fallback must be true or false, got {self.fallback!r}")
        if not isinstance(self.markov, bool):
            raise PardecError(f"markov must be true or false, got {self.markov!r}")
        if not isinstance(self.adaptive, bool):
            raise PardecError(f"adaptive must be true or false, got {self.adaptive!r}")
        if self.min_block_size is not None and (
            not isinstance(self.min_block_size, int) or self.min_block_size < 2
        ):
            raise PardecError(
                "min block size must be an integer >= 2 (a slot for the bonus, one draft), "
                f"got {self.min_block_size}"
            )
        if not 0.0 <= self.block_reach <= 1.0:
            raise PardecError(f"block reach must lie in [0, 1], got {self.block_reach}")
        if self.confidence not in ("prob", "entropy"):
            raise PardecError(f"confidence must be 'prob' or 'entropy', got '{self.confidence}'")
        if self.gamma is not None and self.gamma < 0:
            raise PardecError(f"gamma must be >= 0, got {self.gamma}")
        if self.temperature < 0:
            raise PardecError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise PardecError(f"top-p must lie in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise PardecError(f"max new tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def slots(self) -> int:
        """Block slots fed per forward (AR feeds none)."""
        return 0 if self.method == "ar" else self.block_size

    @property
    def model_block_slots(self) -> int:
        """Slots of the [MASK] blocks the model itself is fed (spec, threshold, eb), whose compiled
        block steps warm up before timing or serving; 0 where it is fed none (ar; dflash's drafter
        predicts the blocks)."""
        return self.block_size if self.method in ("spec", "threshold", "eb") else 0

    @property
    def room(self) -> int:
        """Positions a step may use past the committed text: drafts, a block after them, and one more."""
        drafts = max(self.slots, self.lookup if self.method in ("spec", "threshold") else 0)
        return self.slots + drafts + 1
