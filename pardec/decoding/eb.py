"""SBD's entropy-bounded sampler (arXiv 2509.04185).

Reveal the lowest-entropy masked slots of the block, in any order, while their summed entropy stays
within gamma (at least one per forward); refine the rest in the next forward, with the revealed
tokens in place; commit the block once every slot is revealed. In a block's first forward slot 0
uses the NTP logit. Lossy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import sampling
from ..core.step import Block
from ..errors import PardecError
from .policy import Method, Policy, register
from .state import Update
from .threshold import calibrated


@dataclass
class Reveal:
    block: list[int] | None = None  # the block being filled ([MASK] where not yet revealed)


class EntropyBounded(Policy):
    def __init__(self, config, mask_id, generator, model=None, extras=None):
        super().__init__(config, mask_id, generator, model, extras)
        if config.gamma is None:
            raise PardecError("eb's gamma 'auto' is resolved by api.configure from the adapter's calibration")

    def new_state(self):
        return Reveal()

    def blocks(self, row):
        st: Reveal = row.state
        if st.block is None:
            st.block = [self.mask_id] * self.cfg.block_size
        return [Block(0, list(st.block))]

    def update(self, row, ntp, block):
        st: Reveal = row.state
        logits = block.clone()  # [D, V]
        if len(ntp) and st.block[0] == self.mask_id:
            logits[0] = ntp[-1]
        hidden = [j for j, t in enumerate(st.block) if t == self.mask_id]
        tokens, _ = self._choose(logits[hidden])
        ent = sampling.entropy(logits[hidden])  # [n hidden]
        budget, reveal = 0.0, []
        for i in ent.argsort().tolist():
            if reveal and budget + ent[i].item() > self.cfg.gamma:
                break
            budget += ent[i].item()
            reveal.append(i)
        for i in reveal:
            st.block[hidden[i]] = int(tokens[i])
        if self.mask_id in st.block:
            return Update(commit=[])
        done, st.block = st.block, None
        return Update(commit=done)


register(
    Method(
        "eb",
        EntropyBounded,
        "entropy-bounded reveal of any slots (SBD)",
        lossless=False,
        prepare=lambda lm, config, sets_block_size, options: (calibrated(lm, config, "gamma", "eb"), {}),
    )
)
