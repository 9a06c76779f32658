"""Decoding policies over the block step: what each row feeds, and what it commits afterwards.

Each policy answers three questions per row: which tokens to feed after its uncached committed text
(`drafts`), which blocks to feed (`blocks`: (back, slot tokens) pairs, None for none), and, given the
forward's logits, which tokens to commit (`update`). Sampling uses the caller's generator so runs are reproducible.
"""

from __future__ import annotations

import torch

from ..dflash.model import ContextCache, DraftHead
from ..errors import PardecError
from . import sampling
from .config import DecodeConfig
from .state import Row, Update


class Policy:
    feature_layers: tuple[int, ...] | None = None  # target layers whose outputs the policy needs

    def __init__(self, config: DecodeConfig, mask_id: int, generator: torch.Generator | None):
        self.cfg, self.mask_id, self.gen = config, mask_id, generator

    def drafts(self, row: Row) -> list[int]:
        return []

    def n_ntp(self, drafts: list[list[int]]) -> int:
        """NTP logits needed per row this step, counted from the end of the pending tokens."""
        return 1

    def blocks(self, row: Row) -> list[tuple[int, list[int]]] | None:
        """One fully masked block after all pending tokens."""
        return [(0, [self.mask_id] * self.cfg.block_size)]

    def update(self, row: Row, ntp: torch.Tensor, block: torch.Tensor) -> Update:
        """ntp: [n, V] NTP logits of this row's last n pending tokens (n may be 0);
        block: [NB * D, V] block logits, block after block."""
        raise NotImplementedError

    def after_step(self, rows: list[Row], out, keep: torch.Tensor, alive: list[int]) -> None:
        """Batch-level work after every row committed (DFlash drafts here). rows: the rows still
        decoding; alive: their indices in this step's batch; keep [B, P]: pending slots now committed."""

    def _choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return sampling.choose(logits, self.cfg.temperature, self.cfg.top_p, self.gen)


class AR(Policy):
    """Plain autoregressive decoding: one token per forward from the last NTP logit."""

    def blocks(self, row):
        return None

    def update(self, row, ntp, block):
        tokens, _ = self._choose(ntp[-1:])
        return Update(commit=tokens.tolist())


class Threshold(Policy):
    """SDLM next-sequence prediction: the first token comes from the NTP logit (exactly the model's
    next token), the following slots from the block; keep the longest prefix whose confidence
    reaches the threshold.

    The block's slots 1.. are predicted without knowing slot 0's token. When the block's own most
    likely slot 0 differs from the NTP token, its later slots continue a different text (a skipped
    or doubled token), so then only the NTP token is kept."""

    def update(self, row, ntp, block):
        logits = torch.cat([ntp[-1:], block[1:]])  # [D, V]: slot 0 is the NTP token
        tokens, _ = self._choose(logits)
        conf = sampling.confidence(logits[1:], self.cfg.confidence)  # [D - 1]
        n = 1
        if int(block[0].argmax()) != int(tokens[0]):
            return Update(commit=tokens[:1].tolist())
        while n < len(tokens) and conf[n - 1] >= self.cfg.threshold:
            n += 1
        return Update(commit=tokens[:n].tolist())


class EntropyBounded(Policy):
    """SBD entropy-bounded sampler: reveal the lowest-entropy masked slots while their summed entropy
    stays within gamma (at least one per forward), refine the rest next forward, commit the block once
    every slot is revealed. In a block's first forward slot 0 uses the NTP logit."""

    def blocks(self, row):
        if row.block is None:
            row.block = [self.mask_id] * self.cfg.block_size
        return [(0, list(row.block))]

    def update(self, row, ntp, block):
        logits = block.clone()  # [D, V]
        if len(ntp) and row.block[0] == self.mask_id:
            logits[0] = ntp[-1]
        hidden = [j for j, t in enumerate(row.block) if t == self.mask_id]
        tokens, _ = self._choose(logits[hidden])
        ent = sampling.entropy(logits[hidden])
        order = ent.argsort().tolist()
        budget, reveal = 0.0, []
        for i in order:
            if reveal and budget + ent[i].item() > self.cfg.gamma:
                break
            budget += ent[i].item()
            reveal.append(i)
        for i in reveal:
            row.block[hidden[i]] = int(tokens[i])
        if self.mask_id in row.block:
            return Update(commit=[])
        done, row.block = row.block, None
        return Update(commit=done)


class Verifier(Policy):
    """A policy whose drafts (proposed by the previous step) the target verifies: spec, dflash."""

    def n_ntp(self, drafts):
        # One per draft plus the token before them; the output head costs as much per position as
        # a few layers do on a 0.5B model, so positions no row needs are not computed.
        return 1 + max(len(d) for d in drafts)

    def drafts(self, row):
        return list(row.drafts)

    def _set_drafts(self, row: Row, logits: torch.Tensor, ids=None, full=None) -> None:
        """Draw the next drafts from logits [k, V] and keep the longest prefix whose product of
        confidences stays >= draft_cutoff: drafts unlikely to be accepted cost a fed token and an
        NTP logit each. The cut depends only on the drafts, so verification stays lossless.
        ids / full map a reduced draft vocabulary back to the target's (DFlash)."""
        tokens, probs = self._choose(logits)
        keep = len(tokens)
        reach = None
        if (self.cfg.draft_cutoff > 0 or self._places_block_by_reach()) and keep:
            reach = sampling.confidence(logits, "prob").cumprod(0)  # [k]
            keep = int((reach >= self.cfg.draft_cutoff).sum())
        tokens = tokens[:keep] if ids is None else ids(tokens[:keep])
        row.drafts = tokens.tolist()
        row.draft_reach = None if reach is None else reach[:keep]
        if self.cfg.temperature == 0:
            row.draft_probs = None
        else:
            row.draft_probs = probs[:keep] if full is None else full(probs[:keep])

    def _places_block_by_reach(self) -> bool:
        return False

    def verify(self, row: Row, ntp: torch.Tensor) -> tuple[int, list[int]]:
        """Accept a prefix of the row's drafts against the NTP logits: (accepted count, tokens to commit)."""
        m = len(row.drafts)
        n, bonus = sampling.accept_drafts(
            row.drafts, None if self.cfg.temperature == 0 else row.draft_probs, ntp[-(m + 1) :],
            self.cfg.temperature, self.cfg.top_p, self.gen,
        )
        return n, row.drafts[:n] + [bonus]


class Speculative(Verifier):
    """Lossless self-speculation: the block predicted in one forward is the next forward's draft,
    verified by that forward's NTP logits, which at the same time predict the next block.

    Which block drafts next depends on how many drafts get accepted, unknown until the forward is
    done. A block fed after L of the m drafts serves every acceptance length n >= L: its slots up to
    the bonus position are now committed text, and the slots after it are the next drafts. Before
    all drafts (L = 0) every forward yields drafts, but far slots that saw the least text; after all
    of them, the most and nearest drafts if all are accepted, none after any rejection. By default
    (`block_reach`) the block sits after the drafts likely to be accepted: those whose confidences'
    product stays >= block_reach. `block_at` fixes L instead. More `draft_blocks` also sit after
    0, 1, ... drafts, as fallbacks for shorter acceptances.
    """

    def _places_block_by_reach(self):
        return self.cfg.block_at is None and self.cfg.block_reach > 0

    def _block_lengths(self, row: Row) -> list[int]:
        """Numbers of drafts to feed a block after: the first block's, then 0, 1, ...; repeated to the
        fixed count so every row feeds the same number of blocks."""
        m = len(row.drafts)
        if self.cfg.block_at is not None:
            first = min(m, self.cfg.block_at)
        elif self._places_block_by_reach():
            first = 0 if row.draft_reach is None else int((row.draft_reach >= self.cfg.block_reach).sum())
        else:
            first = m
        ns = [first] + [n for n in range(m) if n != first][: self.cfg.draft_blocks - 1]
        return ns + [first] * (self.cfg.draft_blocks - len(ns))

    def blocks(self, row):
        m = len(row.drafts)
        masks = [self.mask_id] * self.cfg.block_size
        return [(m - n, masks) for n in self._block_lengths(row)]

    def update(self, row, ntp, block):
        n, commit = self.verify(row, ntp)
        lengths = self._block_lengths(row)
        L = max((x for x in lengths if x <= n), default=None)
        D = self.cfg.block_size
        # Slot j of the block after L drafts sits where draft L + 1 + j did; the bonus sits at draft
        # position n + 1, so the slots after n - L are the next drafts.
        first = 1 + n - L if L is not None else D
        if first < D:
            k = lengths.index(L)
            self._set_drafts(row, block[k * D + first : (k + 1) * D])
        else:
            # No block was fed early enough: the next forward drafts afresh.
            row.clear_drafts()
        return Update(commit=commit, keep_drafts=n)


class DFlash(Verifier):
    """DFlash: a separate drafter proposes the D - 1 tokens after the bonus in one forward, from the
    target's hidden states at every committed position; the target verifies them in its next
    forward (longest accepted prefix plus the bonus, or rejection sampling), which also yields the
    features of the newly committed tokens for the drafter's cache."""

    def __init__(self, config, mask_id, generator, target, drafter):
        super().__init__(config, mask_id, generator)
        if drafter is None:
            raise PardecError("method dflash needs a drafter (--drafter)")
        if config.block_size > drafter.cfg.block_size:
            raise PardecError(f"block size {config.block_size} exceeds the drafter's trained block size "
                              f"{drafter.cfg.block_size}")
        self.target, self.drafter = target, drafter
        self.head = DraftHead(target.get_output_embeddings(), getattr(drafter, "draft_vocab", None), mask_id)
        self.feature_layers = drafter.cfg.target_layers
        self.context: ContextCache | None = None  # created at the first step, once the batch is known

    def blocks(self, row):
        return None

    def update(self, row, ntp, block):
        n, commit = self.verify(row, ntp)
        row.clear_drafts()  # after_step drafts afresh
        return Update(commit=commit, keep_drafts=n)

    def after_step(self, rows, out, keep, alive):
        if self.context is None:
            self.context = ContextCache(self.drafter, keep.shape[0], keep.device)
        if len(alive) < self.context.valid.shape[0]:
            self.context.select(alive)
        idx = torch.tensor(alive, device=keep.device)
        self.context.append(out.features[idx], out.fed_pos[idx], keep[idx])
        anchors = torch.tensor([r.committed[-1] for r in rows], device=keep.device)  # the bonus tokens
        anchor_pos = torch.tensor([len(r.committed) - 1 for r in rows], device=keep.device)
        D = self.cfg.block_size
        logits = self.context.draft_logits(self.target.get_input_embeddings(), self.head,
                                           anchors, anchor_pos, D)  # [B, D - 1, Vd]
        for b, r in enumerate(rows):
            self._set_drafts(r, logits[b], self.head.token_ids, self.head.full)


POLICIES = {"ar": AR, "threshold": Threshold, "eb": EntropyBounded, "spec": Speculative, "dflash": DFlash}


def make_policy(config: DecodeConfig, mask_id: int, generator, target=None, drafter=None) -> Policy:
    if config.method == "dflash":
        return POLICIES["dflash"](config, mask_id, generator, target, drafter)
    return POLICIES[config.method](config, mask_id, generator)
