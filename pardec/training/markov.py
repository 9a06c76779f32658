"""Training an adapter's Markov head (model/markov.py) on its own blocks over distilled answers.

Blocks of D [MASK] slots are fed after random positions of each answer, many per forward beside the
clean text (as retrofit's batches, without gradients); each slot's final hidden state and K likeliest
tokens are kept with the answer's tokens there. The head then learns, per draft slot k >= 1, to pick
the answer's token among the slot's top K given the answer's token at slot k - 1. That token is the
right condition: a draft counts only while every draft before it was accepted, i.e. equal to the text.
Slot 0 is never a draft (the bonus comes from the NTP logits), so it is not trained.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..core.masks import CLEAN, additive, block_attention
from ..core.step import head_input
from ..model import calibration
from ..model.adapters import gated
from ..model.markov import MarkovHead, MarkovSettings
from .data import Example


@dataclass(frozen=True)
class MarkovConfig:
    blocks_per_text: int = 32  # blocks fed beside each answer, at random positions of it
    rank: int = 256
    top_k: int = 32
    context: int = 1  # tokens before a slot the head conditions on: 1 or 2 (Blocks hold one before slot 0)
    epochs: int = 4
    batch_size: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.01
    heldout: float = 0.1  # share of blocks held out for the reported accuracies
    seed: int = 0


@dataclass
class Blocks:
    """Blocks fed over answers: per block, its slots' final hidden states, their top K and the text."""

    hidden: torch.Tensor  # [n, D, H] bf16
    top_ids: torch.Tensor  # [n, D, K] int32
    top_logits: torch.Tensor  # [n, D, K] float16
    text: torch.Tensor  # [n, D + 1] the token before the block, then the answer's token at each slot

    def __len__(self) -> int:
        return self.hidden.shape[0]

    def select(self, idx: torch.Tensor) -> Blocks:
        return Blocks(self.hidden[idx], self.top_ids[idx], self.top_logits[idx], self.text[idx])


@torch.no_grad()
def forward_blocks(
    model, mask_id: int, text: list[int], blocks: list[tuple[int, list[int]]], hidden: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Blocks (start s, slot tokens) fed after text[:s], all in one forward beside the clean text, each
    seeing only its own prefix and itself. Returns the slots' logits [N, V] (float32, [MASK]
    suppressed) and, with `hidden`, their final hidden states [N, H], block after block."""
    N = sum(len(slots) for _, slots in blocks)
    tok, pos = list(text), list(range(len(text)))
    blk, first = [CLEAN] * len(text), [0] * len(text)
    for b, (s, slots) in enumerate(blocks):
        tok += slots
        pos += range(s, s + len(slots))
        blk += [b] * len(slots)
        first += [s] * len(slots)
    tok_t, pos_t, blk_t, first_t = (torch.tensor([v]) for v in (tok, pos, blk, first))  # each [1, Q]
    allowed = block_attention(pos_t, blk_t, first_t, pos_t, blk_t, torch.ones_like(tok_t, dtype=torch.bool))
    with gated(model, tok_t == mask_id), head_input(model, hidden) as fed_head:
        out = model(
            input_ids=tok_t,
            attention_mask=additive(allowed, model.dtype),
            position_ids=pos_t,
            logits_to_keep=N,
        )
    logits = out.logits[0].float()  # [N, V]
    logits[:, mask_id] = float("-inf")
    return logits, fed_head["h"][0, -N:] if hidden else None


def feed_blocks(model, mask_id: int, ids: list[int], starts: list[int], D: int, K: int):
    """Blocks of D [MASK] after ids[:s] for each s in starts, in one forward beside the clean text:
    (hidden [n, D, H], top ids [n, D, K], top logits [n, D, K])."""
    n = len(starts)
    logits, hidden = forward_blocks(model, mask_id, ids, [(s, [mask_id] * D) for s in starts], hidden=True)
    top = logits.topk(K, -1)
    return hidden.reshape(n, D, -1), top.indices.reshape(n, D, K), top.values.reshape(n, D, K)


def collect(lm, examples: list[Example], D: int, cfg: MarkovConfig, progress: bool = True) -> Blocks:
    """Feed cfg.blocks_per_text blocks over each example's answer (positions drawn with cfg.seed)."""
    rng = random.Random(cfg.seed)
    parts = []
    for ex in tqdm(examples, desc="markov: feed blocks", unit="answer", disable=not progress):
        span = range(ex.response_start + 1, len(ex.ids) - D + 1)  # slot 0 after the answer's first token
        if len(span) < 1:
            continue
        starts = sorted(rng.sample(span, min(cfg.blocks_per_text, len(span))))
        h, i, v = feed_blocks(lm.model, lm.mask_id, ex.ids, starts, D, cfg.top_k)
        text = torch.tensor([ex.ids[s - 1 : s + D] for s in starts])  # [n, D + 1]
        parts.append((h.to(torch.bfloat16), i.int(), v.half(), text))
    if not parts:
        raise ValueError("no answer long enough for a block")
    return Blocks(*(torch.cat(p) for p in zip(*parts)))


def slot_examples(blocks: Blocks, context: int = 1):
    """Teacher-forced examples of every draft slot k >= 1: (hidden [N, H], prev [N, context]: the
    answer's tokens before the slot, nearest last, slot [N], top ids [N, K], top logits [N, K], label
    [N]: the answer's token's index in the top K, -1 if absent)."""
    n, D = blocks.hidden.shape[:2]
    if not 1 <= context <= 2:
        raise ValueError(f"context must be 1 or 2 (blocks hold one token before slot 0), got {context}")
    ks = torch.arange(1, D)
    hidden = blocks.hidden[:, ks].reshape(-1, blocks.hidden.shape[-1])
    ids = blocks.top_ids[:, ks].reshape(-1, blocks.top_ids.shape[-1]).long()
    logits = blocks.top_logits[:, ks].reshape(-1, blocks.top_logits.shape[-1]).float()
    # text[:, j] is the answer's token at slot j - 1, so slot k's are text[:, k - context + 1 .. k]
    prev = torch.stack([blocks.text[:, ks - j] for j in reversed(range(context))], -1).reshape(-1, context)
    target = blocks.text[:, ks + 1].reshape(-1)
    hit = ids == target[:, None]
    label = torch.where(hit.any(-1), hit.float().argmax(-1), torch.full_like(target, -1))
    return hidden, prev, ks.repeat(n), ids, logits, label


@torch.no_grad()
def mean_run(head: MarkovHead | None, blocks: Blocks) -> float:
    """Drafts accepted in a row after slot 0, slot 0 taken as the answer's token (the bonus): each
    draft the slot's likeliest, re-ranked by `head` given the drafts before (None: the block alone)."""
    n, D = blocks.hidden.shape[:2]
    context = 1 if head is None else head.settings.context
    before = blocks.text[:, 2 - context : 2]  # [n, context] the tokens before slot 1, nearest last
    alive, run = torch.ones(n, dtype=torch.bool), torch.zeros(n)
    for k in range(1, D):
        ids, logits = blocks.top_ids[:, k].long(), blocks.top_logits[:, k].float()
        if head is not None:
            logits = head(blocks.hidden[:, k], before, torch.full((n,), k), ids, logits)
        draft = ids.gather(1, logits.argmax(-1, keepdim=True))[:, 0]
        alive &= draft == blocks.text[:, k + 1]
        run += alive.float()
        before = torch.cat([before[:, 1:], draft[:, None]], 1)
    return run.mean().item()


def train(
    lm, examples: list[Example], D: int, cfg: MarkovConfig, progress: bool = True
) -> tuple[MarkovHead, list[dict]]:
    """Collect blocks over `examples`, train a head on 1 - cfg.heldout of them; returns the head and a
    history with the held-out accuracy and mean run after every epoch."""
    blocks = collect(lm, examples, D, cfg, progress)
    return fit(lm, blocks, D, cfg, len(examples), progress)


def fit(
    lm, blocks: Blocks, D: int, cfg: MarkovConfig, answers: int, progress: bool = True
) -> tuple[MarkovHead, list[dict]]:
    """Train a head on 1 - cfg.heldout of collected `blocks` (over `answers` answers); see train()."""
    torch.manual_seed(cfg.seed)
    order = torch.randperm(len(blocks))
    n_held = max(1, int(len(blocks) * cfg.heldout)) if len(blocks) > 1 else 0
    held, kept = blocks.select(order[:n_held]), blocks.select(order[n_held:])
    embed_in, embed_out = lm.model.get_input_embeddings().weight, lm.model.get_output_embeddings().weight
    settings = MarkovSettings(
        hidden_size=embed_out.shape[1],
        vocab_size=embed_out.shape[0],
        block_size=D,
        rank=cfg.rank,
        top_k=cfg.top_k,
        context=cfg.context,
        adapter_sha256=calibration.weights_sha256(lm.adapter) if lm.adapter is not None else "",
        training={**asdict(cfg), "answers": answers, "blocks": len(blocks)},
    )
    head = MarkovHead(settings, embed_in, embed_out)
    *inputs, label = slot_examples(kept, cfg.context)
    known = label >= 0  # the answer's token among the top K: the head can only pick among those
    inputs, label = [t[known] for t in inputs], label[known]
    N = len(label)
    steps_per_epoch = max(1, N // cfg.batch_size)
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.epochs * steps_per_epoch)
    history = [dict(epoch=0, **_report(head, held))]
    bar = tqdm(total=cfg.epochs * steps_per_epoch, desc="markov: train", unit="step", disable=not progress)
    for epoch in range(1, cfg.epochs + 1):
        head.train()
        for _ in range(steps_per_epoch):
            b = torch.randint(0, N, (min(cfg.batch_size, N),))
            scores = head(*(t[b] for t in inputs))  # [batch, K]
            loss = F.cross_entropy(scores, label[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}")
        head.eval()
        history.append(dict(epoch=epoch, loss=round(loss.item(), 4), **_report(head, held)))
    bar.close()
    head.settings = MarkovSettings(
        **{**asdict(settings), "training": {**settings.training, "history": history}}
    )
    return head, history


@torch.no_grad()
def _report(head: MarkovHead, held: Blocks) -> dict:
    if not len(held):
        return {}
    *inputs, label = slot_examples(held, head.settings.context)
    right = (head(*inputs).argmax(-1) == label).float().mean().item()
    return dict(
        heldout_slot_accuracy=round(right, 4),
        heldout_run=round(mean_run(head, held), 4),
        heldout_run_block_alone=round(mean_run(None, held), 4),
    )
