"""The decoding loop: a batch of token-id prompts in, committed tokens and statistics out.

Every method runs this same loop; only the policy differs. Each iteration is one target forward
(`block_step`), after which each row commits what its policy decided and the cache is trimmed back to
committed text. Finished rows leave the batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..core.cache import BlockCache
from ..core.step import Block, block_step
from ..errors import PardecError
from .config import DecodeConfig
from .policy import METHODS
from .state import Row


@dataclass(frozen=True)
class GenerationResult:
    tokens: list[int]  # generated token ids (an end-of-turn token that stopped it included)
    forwards: int  # target forward passes that produced them (the prompt's forward included)
    accepted_per_step: list[int]  # tokens committed by each forward
    fed_per_step: list[int]  # tokens each forward fed for this row: pending (the prompt, first) + slots
    slots_per_step: list[int]  # of those, [MASK] block slots (0: a plain step, branches or not)
    # Steps that verified drafts with a predicted reach: (predicted reach of each fed draft, accepted)
    verified_per_step: list[tuple[tuple[float, ...], int]]
    # Every step: (drafts fed, drafts accepted) on the committed path; (0, 0) where none were fed
    drafts_per_step: list[tuple[int, int]]
    seconds: float
    finish: str  # "stop" (end-of-turn token or stop string) or "length"

    @property
    def tokens_per_forward(self) -> float:
        return len(self.tokens) / max(self.forwards, 1)


# on_commit(prompt index, newly committed token ids) -> None, or the number of those tokens to keep
# before stopping (a stop string was found).
CommitHook = Callable[[int, list[int]], int | None]


def context_limit(model) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def check_prompt(prompt: list[int], config: DecodeConfig, limit: int | None, index: int | str = "",
                 max_new_tokens: int = 0) -> None:  # fmt: skip
    """Refuse a prompt the model cannot decode: an empty one, or one whose tokens (with
    `max_new_tokens` more, and room for the block slots and drafts) do not fit the context."""
    name = f"prompt {index}".strip()
    if not prompt:
        raise PardecError(f"{name} is empty")
    if limit is not None and len(prompt) + max_new_tokens + config.room + 1 > limit:
        more = f" and asks for {max_new_tokens} more" if max_new_tokens else ""
        raise PardecError(f"{name} has {len(prompt)} tokens{more}: more than the model's context of "
                          f"{limit} allows")  # fmt: skip


class Session:
    """A running batch that rows join and leave between steps (continuous batching): `add` a prompt,
    `step` until `active` is empty; each step returns the rows that finished. A row that joins sees
    only its own text: its cache slots start empty, and it is decoded exactly as it would be alone
    (greedy; with sampling, the draws depend on the batch)."""

    def __init__(
        self,
        model,
        config: DecodeConfig,
        mask_id: int,
        stop_ids: set[int] | frozenset[int] = frozenset(),
        on_commit: CommitHook | None = None,
        extras: Mapping[str, Any] | None = None,
    ):
        self.model, self.cfg, self.mask_id = model, config, mask_id
        self.stop_ids, self.on_commit = stop_ids, on_commit
        self.limit = context_limit(model)
        gen = None
        if config.temperature > 0:
            gen = torch.Generator(device=model.device)
            gen.manual_seed(config.seed if config.seed is not None else torch.seed())
        self.policy = METHODS[config.method].policy(config, mask_id, gen, model, extras or {})
        self.rows: list[Row] = []
        self.cache = BlockCache.empty(0, model.config, model.device)
        self._next = 0
        self._started: dict[int, float] = {}
        self._stepped = False

    @property
    def active(self) -> list[int]:
        """Indices of the rows still decoding."""
        return [r.index for r in self.rows]

    def add(self, prompt: list[int], max_new_tokens: int | None = None) -> int:
        """A new row, decoded from the next step on; returns its index (0, 1, ... in order of joining)."""
        if self._stepped and not self.policy.joinable:
            raise PardecError(f"{self.cfg.method} decodes a fixed batch: rows cannot join a running one")
        index = self._next
        check_prompt(prompt, self.cfg, self.limit, index)
        self._next += 1
        # Room for the block slots and drafts fed beyond the committed text must stay inside the context.
        budget = max_new_tokens or self.cfg.max_new_tokens
        if self.limit:
            budget = min(budget, self.limit - len(prompt) - self.cfg.room)
        self.rows.append(Row(index=index, committed=list(prompt), n_prompt=len(prompt), budget=budget,
                             state=self.policy.new_state()))  # fmt: skip
        self.cache.add_rows(1)
        self._started[index] = time.perf_counter()
        return index

    def cancel(self, index: int) -> None:
        """Drop a row (its client went away) before the next step."""
        alive = [b for b, r in enumerate(self.rows) if r.index != index]
        if len(alive) < len(self.rows):
            self._select(alive)

    def _select(self, alive: list[int]) -> None:
        self.rows = [self.rows[b] for b in alive]
        if alive:
            self.cache.select(alive)
        else:  # the batch emptied: rows that join later start from a fresh cache
            self.cache = BlockCache.empty(0, self.model.config, self.model.device)

    def step(self) -> list[tuple[int, GenerationResult]]:
        """One forward for every active row; returns (index, result) of the rows it finished."""
        rows, cache, policy = self.rows, self.cache, self.policy
        if not rows:
            return []
        self._stepped = True
        policy.before_step(rows)
        drafts = [policy.drafts(r) for r in rows]
        pending = [r.committed[n:] + d for r, n, d in zip(rows, cache.n_cached, drafts)]
        wanted = [policy.blocks(r) for r in rows]
        blocks = _same_shape(wanted, self.mask_id)
        out = block_step(self.model, cache, pending, blocks, policy.n_ntp(drafts), self.mask_id,
                         hidden_states=policy.hidden_states, block_hidden=policy.block_hidden)  # fmt: skip
        keep = torch.zeros_like(out.pending_valid)  # [B, P]
        P = keep.shape[1]
        finished = []
        for b, r in enumerate(rows):
            n_real = min(len(pending[b]), out.ntp_logits.shape[1])
            ntp = out.ntp_logits[b, out.ntp_logits.shape[1] - n_real :]
            if out.block_hidden is None:
                upd = policy.update(r, ntp, out.block_logits[b])
            else:
                upd = policy.update(r, ntp, out.block_logits[b], out.block_hidden[b])
            # Pending slots now holding committed text: the uncached committed ones + accepted drafts.
            n_keep = len(pending[b]) - len(drafts[b]) + upd.keep_drafts
            keep[b, P - len(pending[b]) : P - len(pending[b]) + n_keep] = True
            r.forwards += 1
            new = _truncate(r, upd.commit, self.stop_ids, self.on_commit)
            r.committed.extend(new)
            r.accepted.append(len(new))
            r.slots.append(sum(len(blk.slots) for blk in wanted[b] or () if not blk.causal))
            r.fed.append(len(pending[b]) + sum(len(blk.slots) for blk in wanted[b] or ()))
            if upd.predicted:
                r.verified.append((upd.predicted, upd.keep_drafts))
            m = len(drafts[b])
            r.drafted.append((m, min(m, max(0, len(upd.commit) - 1))))
            if r.finish is not None:
                r.seconds = time.perf_counter() - self._started.pop(r.index)
                result = GenerationResult(
                    tokens=r.new_tokens,
                    forwards=r.forwards,
                    accepted_per_step=r.accepted,
                    fed_per_step=r.fed,
                    slots_per_step=r.slots,
                    verified_per_step=r.verified,
                    drafts_per_step=r.drafted,
                    seconds=r.seconds,
                    finish=r.finish,
                )
                finished.append((b, result))
        cache.commit(out.fed_pos, keep, out.block_logits.shape[1])
        done = {b for b, _ in finished}
        alive = [b for b in range(len(rows)) if b not in done]
        if done:
            self._select(alive)
        if self.rows:
            policy.after_step(self.rows, out, keep, alive)
        return [(rows[b].index, result) for b, result in finished]


def decode(
    model,
    prompts: list[list[int]],
    config: DecodeConfig,
    mask_id: int,
    stop_ids: set[int] | frozenset[int] = frozenset(),
    on_commit: CommitHook | None = None,
    extras: Mapping[str, Any] | None = None,
) -> list[GenerationResult]:
    """Decode a batch of prompts (lists of token ids, any lengths) with `config.method`. `extras`:
    what the method needs beyond the model (a drafter), as its `prepare` returns it."""
    if not prompts:
        return []
    session = Session(model, config, mask_id, stop_ids, on_commit, extras)
    for p in prompts:  # each is checked as it joins, before any step decodes
        session.add(p)
    results: dict[int, GenerationResult] = {}
    while session.rows:
        results.update(session.step())
    return [results[i] for i in range(len(prompts))]


def _same_shape(blocks: list[list[Block] | None], mask_id: int, pad_id: int = 0) -> list[list[Block]] | None:
    """Every row feeds the same blocks' shape: its [MASK] blocks, then its branches (causal), each
    kind as many as any row wants. A row that wants fewer (a plain AR step, one block where another
    row feeds a fallback block too, no branch where others feed one) gets filler blocks at the end of
    that kind, whose logits its policy never reads (it reads its own blocks by their count)."""
    if all(b is None for b in blocks):
        return None
    # Per row: its [MASK] blocks, then its branches.
    kinds = [[[blk for blk in b or () if blk.causal == causal] for causal in (False, True)] for b in blocks]
    fill = [  # per kind: filler shaped as the longest run of that kind any row wants
        [Block(0, [pad_id if causal else mask_id] * len(blk.slots), causal) for blk in max(runs, key=len)]
        for causal, runs in zip((False, True), zip(*kinds))
    ]
    return [[blk for own, f in zip(k, fill) for blk in own + f[len(own) :]] for k in kinds]


def _truncate(row: Row, tokens: list[int], stop_ids, on_commit) -> list[int]:
    """Cut newly committed tokens at an end-of-turn token, a stop string or the length budget,
    setting row.finish when the row is done."""
    for i, t in enumerate(tokens):
        if t in stop_ids:
            tokens, row.finish = tokens[: i + 1], "stop"
            break
    room = row.budget - len(row.new_tokens)
    if len(tokens) >= room:
        tokens = tokens[:room]
        row.finish = row.finish or "length"
    if on_commit is not None and tokens:
        cut = on_commit(row.index, tokens)
        if cut is not None:
            tokens, row.finish = tokens[:cut], "stop"
    return tokens
