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
    # Steps that verified drafts with a predicted reach: (predicted reach of each fed draft, accepted)
    verified_per_step: list[tuple[tuple[float, ...], int]]
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
    limit = context_limit(model)
    for i, p in enumerate(prompts):
        if not p:
            raise PardecError(f"prompt {i} is empty")
        if limit is not None and len(p) + 2 * config.slots + 2 > limit:
            raise PardecError(
                f"prompt {i} has {len(p)} tokens, more than the model's context of {limit} allows"
            )
    gen = None
    if config.temperature > 0:
        gen = torch.Generator(device=model.device)
        gen.manual_seed(config.seed if config.seed is not None else torch.seed())
    policy = METHODS[config.method].policy(config, mask_id, gen, model, extras or {})
    device = model.device

    # Room for the block slots and drafts fed beyond the committed text must stay inside the context.
    reserve = 2 * config.slots + 1
    rows = [
        Row(
            index=i,
            committed=list(p),
            n_prompt=len(p),
            budget=min(config.max_new_tokens, limit - len(p) - reserve) if limit else config.max_new_tokens,
            state=policy.new_state(),
        )
        for i, p in enumerate(prompts)
    ]
    cache = BlockCache.empty(len(rows), model.config, device)
    results: dict[int, GenerationResult] = {}
    t0 = time.perf_counter()
    while rows:
        drafts = [policy.drafts(r) for r in rows]
        pending = [r.committed[n:] + d for r, n, d in zip(rows, cache.n_cached, drafts)]
        wanted = [policy.blocks(r) for r in rows]
        blocks = _same_shape(wanted, mask_id)
        out = block_step(model, cache, pending, blocks, policy.n_ntp(drafts), mask_id,
                         hidden_states=policy.hidden_states)  # fmt: skip
        keep = torch.zeros_like(out.pending_valid)  # [B, P]
        P = keep.shape[1]
        finished = []
        for b, r in enumerate(rows):
            n_real = min(len(pending[b]), out.ntp_logits.shape[1])
            upd = policy.update(r, out.ntp_logits[b, out.ntp_logits.shape[1] - n_real :], out.block_logits[b])
            # Pending slots now holding committed text: the uncached committed ones + accepted drafts.
            n_keep = len(pending[b]) - len(drafts[b]) + upd.keep_drafts
            keep[b, P - len(pending[b]) : P - len(pending[b]) + n_keep] = True
            r.forwards += 1
            new = _truncate(r, upd.commit, stop_ids, on_commit)
            r.committed.extend(new)
            r.accepted.append(len(new))
            r.fed.append(len(pending[b]) + sum(len(blk.slots) for blk in wanted[b] or ()))
            if upd.predicted:
                r.verified.append((upd.predicted, upd.keep_drafts))
            if r.finish is not None:
                r.seconds = time.perf_counter() - t0
                results[r.index] = GenerationResult(
                    tokens=r.new_tokens,
                    forwards=r.forwards,
                    accepted_per_step=r.accepted,
                    fed_per_step=r.fed,
                    verified_per_step=r.verified,
                    seconds=r.seconds,
                    finish=r.finish,
                )
                finished.append(b)
        cache.commit(out.fed_pos, keep, out.block_logits.shape[1])
        alive = [b for b in range(len(rows)) if b not in finished]
        if finished:
            rows = [rows[b] for b in alive]
            if rows:
                cache.select(alive)
        if rows:
            policy.after_step(rows, out, keep, alive)
    return [results[i] for i in range(len(prompts))]


def _same_shape(blocks: list[list[Block] | None], mask_id: int, pad_id: int = 0) -> list[list[Block]] | None:
    """Every row feeds the same blocks' shape, the longest any row wants (rows want the same kinds in
    the same order, some fewer of them): a row that wants fewer (a plain AR step, or no branch while
    others feed one) gets filler blocks of that shape, whose logits its policy never reads."""
    shape = max((b for b in blocks if b is not None), key=len, default=None)
    if shape is None:
        return None
    filler = [Block(0, [pad_id if b.causal else mask_id] * len(b.slots), b.causal) for b in shape]
    return [filler if b is None else b + filler[len(b) :] for b in blocks]


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
