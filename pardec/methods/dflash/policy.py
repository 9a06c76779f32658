"""DFlash decoding (arXiv 2602.06036): a separate drafter proposes the D - 1 tokens after the bonus
in one forward, from the target's hidden states at every committed position; the target verifies
them in its next forward (longest accepted prefix plus the bonus, or rejection sampling), which
also yields the features of the newly committed tokens for the drafter's cache. Lossless."""

from __future__ import annotations

import dataclasses

import torch

from ...decoding import Method, register
from ...decoding.state import Update
from ...decoding.verifier import Verifier
from ...errors import PardecError
from ...model import checkpoint
from . import checkpoint as dcheckpoint
from .context import ContextCache, DraftHead
from .model import target_features


class DFlash(Verifier):
    hidden_states = True  # the drafter is conditioned on target layers' outputs
    joinable = False  # its context cache holds batch-wide drafter state

    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator)
        drafter = (extras or {}).get("drafter")
        if drafter is None:
            raise PardecError("method dflash needs a drafter (--drafter)")
        if config.block_size > drafter.cfg.block_size:
            raise PardecError(
                f"block size {config.block_size} exceeds the drafter's trained block size "
                f"{drafter.cfg.block_size}"
            )
        self.target, self.drafter = model, drafter
        self.head = DraftHead(model.get_output_embeddings(), getattr(drafter, "draft_vocab", None), mask_id)
        self.context: ContextCache | None = None  # created at the first step, once the batch is known

    def blocks(self, row):
        return None

    def update(self, row, ntp, block):
        n, commit = self.verify(row, ntp)
        row.state.clear()  # after_step drafts afresh
        return Update(commit=commit, keep_drafts=n)

    def after_step(self, rows, out, keep, alive):
        if self.context is None:
            self.context = ContextCache(self.drafter, keep.shape[0], keep.device)
        if len(alive) < self.context.valid.shape[0]:
            self.context.select(alive)
        idx = torch.tensor(alive, device=keep.device)
        features = target_features(out.hidden_states, self.drafter.cfg.target_layers)  # [B, P, F]
        self.context.append(features[idx], out.fed_pos[idx], keep[idx])
        anchors = torch.tensor([r.committed[-1] for r in rows], device=keep.device)  # the bonus tokens
        anchor_pos = torch.tensor([len(r.committed) - 1 for r in rows], device=keep.device)
        logits = self.context.draft_logits(
            self.target.get_input_embeddings(), self.head, anchors, anchor_pos, self.cfg.block_size
        )  # [B, D - 1, Vd]
        for b, r in enumerate(rows):
            self.set_drafts(r, logits[b], self.head.token_ids, self.head.full)


def load_drafter(lm, value: str | None = "auto"):
    """The drafter for a LoadedModel: "auto" = the one bundled for this model, if any; "none"; or a
    drafter checkpoint folder. Returns a Drafter or None."""
    path = checkpoint.resolve(lm.name, value, dcheckpoint.KIND)
    return None if path is None else dcheckpoint.load(path, lm.model, lm.name, lm.mask_id)


def prepare(lm, config, sets_block_size: bool, options: dict):
    """Load the drafter (`options["drafter"]`, default "auto"); decode at its trained block size
    unless the block size was set."""
    drafter = load_drafter(lm, options.get("drafter", "auto"))
    if drafter is None:
        raise PardecError(
            f"method dflash needs a drafter: none is bundled for '{lm.name}'; "
            "train one with `pardec train-drafter` and pass --drafter FOLDER"
        )
    if not sets_block_size:
        config = dataclasses.replace(config, block_size=drafter.cfg.block_size)
    return config, {"drafter": drafter}


register(
    Method(
        "dflash",
        DFlash,
        "drafts from a DFlash drafter, verified",
        lossless=True,
        min_block_size=2,
        own_model=True,
        prepare=prepare,
    )
)
