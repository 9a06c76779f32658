"""A Markov head over a block's drafts (the dependency between block slots that DSpark adds).

A block's slots are predicted together, each not knowing which token the slot before it will hold:
where slot 0 guesses the bonus right, slot 1 is still right far less often than in a block that saw the
bonus (`benchmarks/amx-placement.md`). The head re-ranks each draft slot's K likeliest tokens given the
token before the slot (the bonus, or the draft chosen there), and with `context` 2 the one before that
too, from the slot's final hidden state:

    score(v) = z(v) + W_out[v] . MLP([norm(h); norm(E[prev_c]); ...; norm(E[prev_1])] + slot embedding)

over v in the slot's top K, renormalised so the top K keep the block's total mass. Its second layer
starts at zero, so an untrained head leaves the block's drafts as they were. It costs one small MLP and K
rows of the output embedding per draft; no forward. Verification is untouched: it only proposes.

Trained per adapter (training/markov.py) and saved beside it as `markov.safetensors` and `markov.json`
(its settings and the sha256 of the adapter weights it was trained on).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from ..errors import PardecError
from .calibration import weights_sha256

WEIGHTS, SETTINGS = "markov.safetensors", "markov.json"


@dataclass(frozen=True)
class MarkovSettings:
    hidden_size: int
    vocab_size: int
    block_size: int  # slots it was trained for; slot embeddings beyond it are clamped to the last
    rank: int = 256
    top_k: int = 32
    context: int = 1  # tokens before the slot it conditions on (the nearest last)
    adapter_sha256: str = ""  # the adapter weights whose block it re-ranks
    training: dict = field(default_factory=dict)  # how it was trained, for the record


class MarkovHead(nn.Module):
    """Re-ranks a slot's top-K tokens given the `context` tokens before it. The model's embeddings are
    passed in, not copied: `embed_in` [V, H] for the previous tokens, `embed_out` [V, H] for the
    candidates."""

    def __init__(self, settings: MarkovSettings, embed_in: torch.Tensor, embed_out: torch.Tensor):
        super().__init__()
        H, r = settings.hidden_size, settings.rank
        self.settings = settings
        self.sha256 = ""  # of the weights file it was loaded from (a calibration fitted with it records it)
        self.embed_in, self.embed_out = embed_in.detach(), embed_out.detach()  # the model's, not parameters
        self.norm_h, self.norm_prev = nn.LayerNorm(H), nn.LayerNorm(H)
        self.slot = nn.Embedding(settings.block_size, r)
        self.up = nn.Linear((1 + settings.context) * H, r)
        self.down = nn.Linear(r, H)
        nn.init.zeros_(self.down.weight)
        nn.init.zeros_(self.down.bias)

    def forward(
        self,
        hidden: torch.Tensor,  # [N, H] the slots' final hidden states (the output head's input)
        prev: torch.Tensor,  # [N] the token before each slot, or [N, context] the tokens (nearest last)
        slot: torch.Tensor,  # [N] each slot's index in its block
        top_ids: torch.Tensor,  # [N, K] the slot's K likeliest tokens
        top_logits: torch.Tensor,  # [N, K] their block logits
    ) -> torch.Tensor:  # [N, K] re-ranked logits (not normalised)
        return self.rescore(self.slot_part(hidden, slot), prev, top_ids, top_logits)

    def slot_part(self, hidden: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """What a slot's hidden state [N, H] and index [N] add to the first layer: [N, r]."""
        H = self.settings.hidden_size
        x = self.norm_h(hidden.to(self.up.weight.dtype))
        return F.linear(x, self.up.weight[:, :H], self.up.bias) + self.slot(
            slot.clamp(max=self.settings.block_size - 1)
        )

    def rescore(
        self, part: torch.Tensor, prev: torch.Tensor, top_ids: torch.Tensor, top_logits: torch.Tensor
    ):
        """The slots' first-layer part [N, r] (slot_part), the tokens before them ([N] or [N, context],
        nearest last) and their top K ([N, K] ids and logits) -> [N, K] re-ranked logits."""
        H, dtype = self.settings.hidden_size, self.up.weight.dtype
        prev = prev.reshape(part.shape[0], -1)  # [N, context]
        if prev.shape[1] != self.settings.context:
            raise ValueError(f"the head conditions on {self.settings.context} tokens, got {prev.shape[1]}")
        e = self.norm_prev(self.embed_in[prev].to(dtype)).flatten(1)  # [N, context * H]
        delta = self.down(F.silu(part + F.linear(e, self.up.weight[:, H:])))  # [N, H]
        cand = self.embed_out[top_ids].to(dtype)  # [N, K, H]
        return top_logits.float() + torch.einsum("nkh,nh->nk", cand, delta).float()

    @torch.no_grad()
    def chain(
        self,
        logits: torch.Tensor,  # [m, V] block logits of consecutive draft slots
        hidden: torch.Tensor,  # [m, H] their final hidden states
        first_slot: int,  # the first one's index in its block
        prev: int | list[int],  # the committed token(s) before the first (nearest last)
        choose: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Draw the drafts one slot at a time, each re-ranked given the one chosen before it: the
        likeliest (choose None, greedy), or by `choose` ([1, V] logits -> token [1], probs [1, V]).
        Returns (logits [m, V] the drafts were drawn from, tokens [m], probs [m, V] or None)."""
        m = logits.shape[0]
        top = logits.topk(min(self.settings.top_k, logits.shape[-1]), -1)  # [m, K]
        mass = top.values.logsumexp(-1, keepdim=True)  # [m, 1]
        part = self.slot_part(hidden, torch.arange(first_slot, first_slot + m))  # [m, r]
        c = self.settings.context
        before = [prev] if isinstance(prev, int) else list(prev)[-c:]
        before = before[:1] * (c - len(before)) + before  # a text shorter than the context: repeat its first
        out, tokens, probs = logits.clone(), [], []
        for i in range(m):
            score = self.rescore(
                part[i : i + 1], torch.tensor([before]), top.indices[i : i + 1], top.values[i : i + 1]
            )
            # The top K keep the block's mass among them; the tail stays as the block had it, so no
            # tail token can outrank the re-ranked top K.
            out[i, top.indices[i]] = (score - score.logsumexp(-1, keepdim=True) + mass[i])[0]
            if choose is None:
                token = top.indices[i, score[0].argmax()].view(1)
            else:
                token, p = choose(out[i : i + 1])
                probs.append(p)
            tokens.append(token)
            before = before[1:] + [int(token[0])]
        return out, torch.cat(tokens), torch.cat(probs) if probs else None


def candidate_rows(model, quantized: bool) -> torch.Tensor | None:
    """The output embedding's rows [V, H] the head scores its candidates against: the output head's own
    weight, or, where --quant packed that weight for its kernel, the input embeddings if the model ties
    the two (the packaged models do; its drafts then score against the weights the kernel's were
    rounded from, and verification stays the quantized model's). None where neither can be read."""
    if not quantized:
        return model.get_output_embeddings().weight
    if getattr(model.config, "tie_word_embeddings", False):
        return model.get_input_embeddings().weight
    return None


def head_sha256(folder: str | Path) -> str:
    """Of the head's weights file: a calibration fitted with this head records it."""
    path = Path(folder) / WEIGHTS
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def save(folder: str | Path, head: MarkovHead) -> Path:
    folder = Path(folder)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(folder / WEIGHTS))
    (folder / SETTINGS).write_text(json.dumps(asdict(head.settings), indent=1) + "\n")
    return folder / WEIGHTS


def load(adapter: Path | None, embed_in: torch.Tensor, embed_out: torch.Tensor) -> MarkovHead | None:
    """The head saved beside `adapter`, if any and if it was trained on these adapter weights."""
    if adapter is None or not (Path(adapter) / SETTINGS).is_file():
        return None
    folder = Path(adapter)
    try:
        settings = MarkovSettings(**json.loads((folder / SETTINGS).read_text()))
    except (json.JSONDecodeError, TypeError) as e:
        raise PardecError(f"corrupt Markov head settings in '{folder / SETTINGS}': {e}") from e
    if settings.adapter_sha256 != weights_sha256(folder):
        warnings.warn(
            f"ignoring '{folder / WEIGHTS}': it was trained for other adapter weights", stacklevel=2
        )
        return None
    if (settings.vocab_size, settings.hidden_size) != tuple(embed_out.shape):
        raise PardecError(
            f"'{folder / WEIGHTS}' was trained for a vocabulary of {settings.vocab_size} and hidden size "
            f"{settings.hidden_size}; this model has {tuple(embed_out.shape)}"
        )
    try:
        tensors = load_file(str(folder / WEIGHTS))
    except Exception as e:  # safetensors raises several types for truncated or garbled files
        raise PardecError(f"corrupt Markov head weights in '{folder / WEIGHTS}': {e}") from e
    head = MarkovHead(settings, embed_in, embed_out)
    try:
        head.load_state_dict(tensors)
    except RuntimeError as e:
        raise PardecError(f"Markov head weights in '{folder / WEIGHTS}' do not fit its settings: {e}") from e
    head.sha256 = head_sha256(folder)
    return head.eval()  # kept in float32: it is small, and its corrections are fine
