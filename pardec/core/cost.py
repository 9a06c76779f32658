"""What a step costs on this machine: the time of one `block_step` by the number of tokens fed, with
and without a block of [MASK] slots, at a few context lengths. Measured in seconds at start-up for the
loaded model and dtype, and cached by model, adapter, dtype, device, CPU and threads.

The speedup of parallel decoding rides on this curve: where a 16-token forward costs about what a
1-token one does (AMX CPUs, GPUs), feeding many drafts pays; where it costs 1.5-1.8x (AVX-512 CPUs
without AMX), only likely drafts do.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import weakref
from bisect import bisect_left
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..machine import machine
from ..model.compiled import STEP_TOKENS
from .cache import BlockCache
from .step import Block, block_step

PENDING = (1, 2, 4, 8, 16, 32)  # pending tokens measured, with no block and with one block
CONTEXTS = (128, 512)  # committed tokens in the cache
SHORT_SLOTS = (2, 4)  # shorter blocks measured too (where below the block size), at few pending tokens
SHORT_PENDING = 4  # the first this many of PENDING: a short block follows few drafts
BUDGET_S = 30.0  # seconds a measurement may take beyond its first two rounds
# A context's rounds are settled when a typical shape's two fastest times agree within this fraction;
# while they do not, other work on the machine is still in them: up to twice the rounds and budget.
SETTLED = 0.05
# Two fastest times further apart than this (the worst context's median) leave a curve unfit to keep:
# it plans the run it was measured for and is measured again on the next one.
UNSETTLED = 0.15
# Steps shorter than this (tiny test models) differ by the timer's and the scheduler's jitter, not by
# other work: their gaps count against this much time instead
JITTER_S = 0.005


def _interp(xs: tuple[int, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear through (xs, ys), extended linearly beyond the ends."""
    i = min(max(bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class StepCost:
    """Seconds of one block_step at contexts[c] committed tokens: plain[c][i] feeding
    pending[i] tokens, block[c][i] feeding pending[i] tokens and a block of `block_size` [MASK] slots
    (gated adapters on), and short[s][c][i] with a block of short_slots[s] slots, at the first
    len(short[s][c]) pending counts."""

    pending: tuple[int, ...]
    contexts: tuple[int, ...]
    block_size: int
    plain: tuple[tuple[float, ...], ...]
    block: tuple[tuple[float, ...], ...]
    key: dict  # what it was measured for (model, adapter, dtype and the machine)
    short_slots: tuple[int, ...] = ()
    short: tuple[tuple[tuple[float, ...], ...], ...] = ()
    # How far apart a typical shape's two fastest times were (second / first - 1; the worst context's
    # median): the measurement's own noise
    spread: float = 0.0

    def _curve(self, rows, pending: int, context: int) -> float:
        per_context = tuple(_interp(self.pending[: len(row)], row, pending) for row in rows)
        if len(self.contexts) == 1:
            return per_context[0]
        return _interp(self.contexts, per_context, context)

    def seconds(self, pending: int, context: int, block: bool | int = False) -> float:
        """Time of a step feeding `pending` tokens and a block after `context` committed tokens. block:
        False (none), True (block_size slots) or a number of slots; between the measured block sizes
        the time is interpolated linearly in slots."""
        slots = self.block_size if block is True else min(int(block), self.block_size)
        if slots <= 0:
            return max(self._curve(self.plain, pending, context), 1e-6)
        if slots == self.block_size:
            return max(self._curve(self.block, pending, context), 1e-6)
        anchors = [(0, self.plain), *zip(self.short_slots, self.short), (self.block_size, self.block)]
        i = next(i for i, (s, _) in enumerate(anchors) if s >= slots)
        (s1, rows1), (s0, rows0) = anchors[i], anchors[i - 1]
        t1, t0 = self._curve(rows1, pending, context), self._curve(rows0, pending, context)
        return max(t0 + (t1 - t0) * (slots - s0) / (s1 - s0), 1e-6)

    @property
    def short_pending(self) -> tuple[int, ...]:
        """The pending counts the short blocks were measured at."""
        return self.pending[: len(self.short[0][0])] if self.short else ()

    def relative(self, pending: int, context: int, block: bool | int = False) -> float:
        """seconds(...) / the seconds of an AR step (1 pending token, no block) at the same context."""
        return self.seconds(pending, context, block) / self.seconds(1, context)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> StepCost:
        short = tuple(tuple(map(tuple, per_slots)) for per_slots in d["short"])
        return cls(tuple(d["pending"]), tuple(d["contexts"]), d["block_size"],
                   tuple(map(tuple, d["plain"])), tuple(map(tuple, d["block"])), d["key"],
                   tuple(d["short_slots"]), short, float(d.get("spread", 0.0)))  # fmt: skip


@torch.no_grad()
def measure(model, mask_id: int, block_size: int, pending: tuple[int, ...] = PENDING,
            contexts: tuple[int, ...] = CONTEXTS, rounds: int = 5, budget_s: float = BUDGET_S,
            key: dict | None = None, progress: bool = False,
            clock=time.perf_counter) -> StepCost:  # fmt: skip
    """Time every shape in interleaved rounds: at each context two rounds, then up to `rounds` in
    all while that context's share of `budget_s` lasts, so that a slow machine measures fewer rounds
    rather than for minutes. Each shape's time is its median ratio to the AR step of the same round,
    times the AR step's fastest: the machine's state in a round (its clock, other work) cancels from
    the ratio, which is all the schedule compares (benchmarks/step-cost-repeat.md). Where the
    rounds have not settled (a typical shape's two fastest times more than SETTLED apart: the
    machine is busy), up to twice the rounds in twice the budget. Each curve is made non-decreasing
    in tokens fed, with a block never cheaper than a shorter one or none. `progress`: a bar of the
    steps timed (minutes where bf16 is emulated); `clock`: seconds, for tests."""
    from tqdm import tqdm

    limit = getattr(model.config, "max_position_embeddings", None) or 1 << 30
    room = max(pending) + block_size + 1
    contexts = tuple(c for c in contexts if c + room < limit) or (max(1, (limit - room) // 2),)
    g = torch.Generator().manual_seed(0)
    vocab = min(mask_id, 1000)
    short_slots = tuple(s for s in SHORT_SLOTS if s < block_size)
    # (pending, slots): no block, the full block, and the short blocks at few pending tokens
    shapes = [(n, s) for n in pending for s in (0, block_size)]
    shapes += [(n, s) for s in short_slots for n in pending[:SHORT_PENDING]]
    times: dict[tuple[int, int, int], list[float]] = {(c, n, s): [] for c in contexts for n, s in shapes}
    bar = tqdm(total=len(contexts) * max(rounds, 2) * len(shapes), desc="step shapes timed", unit="step",
               disable=not progress, leave=False)  # fmt: skip
    spreads = []
    for c in contexts:
        cache = _prompted(model, mask_id, torch.randint(0, vocab, (c,), generator=g).tolist())
        if c == contexts[0]:  # one untimed block step: the adapters' first call, off the clock
            _discarded_step(model, cache, [0], block_size, mask_id)
        # and one untimed AR step: every shape is timed against its round's AR step, so that step's
        # first call at this context stays off the clock
        _discarded_step(model, cache, [0], 0, mask_id)
        start, share = clock(), budget_s / len(contexts)
        for r in range(2 * max(rounds, 2)):
            if r >= 2:
                stretch = 1 if _spread([times[(c, n, s)] for n, s in shapes]) <= SETTLED else 2
                if r >= stretch * rounds or clock() - start > stretch * share:
                    break
                if r >= rounds:
                    bar.total += len(shapes)  # a round beyond those planned
            for n, slots in shapes:
                ids = torch.randint(0, vocab, (n,), generator=g).tolist()
                blocks = [[Block(0, [mask_id] * slots)]] if slots else None
                t0 = clock()
                out = block_step(model, cache, [ids], blocks, n, mask_id)
                dt = clock() - t0
                # Nothing is kept: the cache returns to the same committed text for the next shape.
                cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), out.block_logits.shape[1])
                times[(c, n, slots)].append(dt)
                bar.update()
        spreads.append(_spread([times[(c, n, s)] for n, s in shapes]))
    bar.close()
    best = _per_round_typical(times)

    def curve(c: int, slots: int, floor: tuple[float, ...], n: int) -> tuple[float, ...]:
        """Times by pending count (the first n), non-decreasing and never below `floor` (a shorter
        block's, or no block's, where that was measured)."""
        return _rising([max([best[(c, p, slots)], *floor[i : i + 1]]) for i, p in enumerate(pending[:n])])

    plain = tuple(curve(c, 0, (), len(pending)) for c in contexts)
    floor, short = plain, []
    for s in short_slots:
        floor = tuple(curve(c, s, f, SHORT_PENDING) for c, f in zip(contexts, floor))
        short.append(floor)
    floor = tuple(f + p[len(f) :] for f, p in zip(floor, plain))  # the longest short block, then none
    block = tuple(curve(c, block_size, f, len(pending)) for c, f in zip(contexts, floor))
    return StepCost(tuple(pending), contexts, block_size, plain, block, key or {}, short_slots, tuple(short),
                    round(max(spreads), 4))  # fmt: skip


@torch.no_grad()
def warm_up(
    model, mask_id: int, pending: tuple[int, ...] = (*PENDING, STEP_TOKENS), context: int = 16,
    block_size: int = 0,
) -> float:  # fmt: skip
    """Feed one plain step of each pending count after a short prompt, and one with a block of
    `block_size` [MASK] slots where that fits a compiled step, nothing kept: the first calls of each
    step shape (compiling, with compiled steps; a gated adapter's block steps have graphs of their own)
    happen here rather than in a timed decode. Returns the seconds it took."""
    start = time.perf_counter()
    cache = _prompted(model, mask_id, list(range(context)))
    shapes = [(n, 0) for n in pending]
    shapes += [(n, block_size) for n in pending if block_size and n + block_size <= STEP_TOKENS]
    for n, slots in shapes:
        _discarded_step(model, cache, [0] * n, slots, mask_id)
    return time.perf_counter() - start


def _discarded_step(model, cache: BlockCache, ids: list[int], slots: int, mask_id: int) -> None:
    """Feed `ids` and, with `slots`, a block of that many [MASK] slots after them, keeping nothing:
    the cache returns to the same committed text."""
    blocks = [[Block(0, [mask_id] * slots)]] if slots else None
    out = block_step(model, cache, [ids], blocks, len(ids), mask_id)
    cache.commit(out.fed_pos, torch.zeros_like(out.pending_valid), out.block_logits.shape[1])


def _prompted(model, mask_id: int, ids: list[int]) -> BlockCache:
    """A cache of one row holding `ids`, fed as one prompt."""
    cache = BlockCache.empty(1, model.config, model.device)
    out = block_step(model, cache, [ids], None, 1, mask_id)
    cache.commit(out.fed_pos, torch.ones_like(out.pending_valid), 0)
    return cache


def _per_round_typical(times: dict[tuple[int, int, int], list[float]]) -> dict[tuple[int, int, int], float]:
    """Each shape's time: its median over rounds (the lower middle one of an even count) of its time
    over the AR step's (1 pending token, no block) in the same round and context, times the AR step's
    fastest. A round's shapes ran within seconds of each other, so the machine's state in that round
    (its clock, other work) cancels from the ratio, where fastest times taken shape by shape each come
    from their luckiest round."""
    out = {}
    for (c, n, s), ts in times.items():
        ar = times.get((c, 1, 0))  # measured unless `pending` left out 1 token
        ratios = sorted(t / a for t, a in zip(ts, ar or ()))
        out[(c, n, s)] = min(ar) * ratios[(len(ratios) - 1) // 2] if ratios else min(ts)
    return out


def _spread(per_shape: list[list[float]]) -> float:
    """The median over shapes of how far a shape's two fastest times are apart (second / first - 1)."""
    gaps = sorted((b - a) / max(a, JITTER_S) for a, b in (sorted(t)[:2] for t in per_shape if len(t) >= 2))
    return gaps[len(gaps) // 2] if gaps else 0.0


def _rising(xs: list[float]) -> tuple[float, ...]:
    out, top = [], 0.0
    for x in xs:
        top = max(top, x)
        out.append(top)
    return tuple(out)


def cache_path(root: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return root / "costs" / f"{digest}.json"


def load_or_measure(model, mask_id: int, block_size: int, key: dict, root: Path,
                    refresh: bool = False) -> StepCost:  # fmt: skip
    """The cached StepCost for `key` (plus this machine), else measured now and cached."""
    key = dict(key, block_size=block_size, **machine())
    path = cache_path(root, key)
    if path.is_file() and not refresh:
        try:
            return StepCost.from_json(json.loads(path.read_text()))
        except (json.JSONDecodeError, KeyError, TypeError):
            pass  # a corrupt cache entry is measured again
    print("pardec: measuring what a step costs on this machine (once, cached)", file=sys.stderr)
    cost = measure(model, mask_id, block_size, key=key, progress=True)
    if cost.spread > UNSETTLED:  # kept, such a curve would plan every later run here
        print(f"pardec: the machine was busy while measuring (a step's fastest times {cost.spread:.0%} "
              "apart): this run plans with it; not cached, measured again on the next run",
              file=sys.stderr)  # fmt: skip
        return cost
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cost.to_json(), indent=1) + "\n")
    tmp.replace(path)
    return cost


# The modules a step's time depends on: a change to any of them (a faster kernel path, a cheaper
# adapter) makes a cached curve stale, so their source is part of the cache key.
FORWARD_PATH = (
    "core/step.py",
    "core/cache.py",
    "core/masks.py",
    "model/adapters.py",
    "model/quant.py",
    "model/packed.py",
    "model/compiled.py",
    "model/invariant_attention.py",
)


def code_digest() -> str:
    """A digest of the forward path's source and the transformers version that runs it."""
    import transformers

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(transformers.__version__.encode())
    for name in FORWARD_PATH:
        h.update((root / name).read_bytes())
    return h.hexdigest()[:16]


def for_model(lm, block_size: int, refresh: bool = False) -> StepCost:
    """The step cost of a LoadedModel (as loaded: its adapter, dtype and device) on this machine and
    this code, cached under the pardec cache folder."""
    from ..machine import cache_dir

    model = lm.model
    key = dict(model=lm.name, adapter=str(lm.adapter), dtype=str(model.dtype), device=str(model.device),
               code=code_digest())  # fmt: skip
    if lm.quant != "none":
        from ..model.quant import crossovers

        key["quant"] = lm.quant
        # Where each layer's kernel gives way to its dense copy was timed at load: another choice
        # is another curve.
        key["kernel_tokens"] = crossovers(model)
    if lm.compile:  # compiled steps spend less per op: another curve
        key["compile"] = True
    return load_or_measure(lm.decoder, lm.mask_id, block_size, key, cache_dir(), refresh)


_MEASURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {block size: StepCost}


def given_or_measured(extras, model, mask_id: int, block_size: int) -> StepCost:
    """The StepCost a method's extras carry (from `for_model`), else this process's measurement."""
    return (extras or {}).get("cost") or measured(model, mask_id, block_size)


def measured(model, mask_id: int, block_size: int) -> StepCost:
    """This process's measurement for a model object (decode without a cost from `for_model`): once
    per model and block size, kept only as long as the model lives."""
    per_model = _MEASURED.setdefault(model, {})
    if block_size not in per_model:
        per_model[block_size] = measure(model, mask_id, block_size, rounds=2)
    return per_model[block_size]
