"""The Python API: text prompts in, texts and statistics out.

from pardec import DecodeConfig, configure, generate, load_model
lm = load_model("smollm2-135m", dtype=torch.float32)
config, extras = configure(lm, DecodeConfig(method="spec"))  # at the adapter's block size
outs = generate(lm, ["Write a haiku."], config, extras=extras)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import methods  # noqa: F401  (registers the methods with models of their own)
from .decoding import METHODS, DecodeConfig, decode
from .model import LoadedModel


@dataclass(frozen=True)
class Output:
    text: str
    new_tokens: int
    forwards: int
    tokens_per_forward: float
    seconds: float
    method: str
    finish: str
    accepted_per_step: list[int]
    token_ids: list[int]

    def as_json(self) -> dict:
        return {
            "text": self.text,
            "new_tokens": self.new_tokens,
            "forwards": self.forwards,
            "tokens_per_forward": round(self.tokens_per_forward, 4),
            "seconds": round(self.seconds, 4),
            "method": self.method,
            "finish": self.finish,
            "accepted_per_step": self.accepted_per_step,
        }


def settle(lm: LoadedModel, config: DecodeConfig, sets_block_size: bool = False) -> DecodeConfig:
    """The block sizes `configure` decodes with (before it loads or measures anything)."""
    if not sets_block_size and lm.trained_block_size is not None:
        config = dataclasses.replace(config, block_size=lm.trained_block_size)
    if config.min_block_size is None and lm.trained_min_block_size is not None:
        config = dataclasses.replace(config, min_block_size=max(2, lm.trained_min_block_size))
    return config


def configure(
    lm: LoadedModel,
    config: DecodeConfig,
    sets_block_size: bool = False,
    options: Mapping[str, Any] | None = None,
) -> tuple[DecodeConfig, dict]:
    """Settle a config for this model and load what its method needs: (config, extras for `generate`).

    Unless `sets_block_size`, decode at the block size the model's adapter was trained with (its
    block predictions beyond that are untrained), or the one its method's own model was (a drafter);
    and, unless set, let adaptive spec shorten blocks as far as the adapter was trained to.
    `options`: method options, e.g. {"drafter": "auto"}."""
    config = settle(lm, config, sets_block_size)
    method = METHODS[config.method]
    if method.prepare is None:
        return config, {}
    return method.prepare(lm, config, sets_block_size, dict(options or {}))


class TextTracker:
    """Incremental detokenization per prompt: finds stop strings and streams text deltas, holding back
    an incomplete UTF-8 character or what may be the start of a stop string."""

    def __init__(self, tokenizer, n: int, stop: tuple[str, ...], on_text):
        self.tok, self.stop, self.on_text = tokenizer, stop, on_text
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.shown = [0] * n
        self.hold = max((len(s) for s in stop), default=1) - 1

    def text(self, i: int, ids: list[int] | None = None) -> str:
        text = self.tok.decode(self.ids[i] if ids is None else ids, skip_special_tokens=True)
        cut = min((text.find(s) for s in self.stop if s in text), default=-1)
        return text if cut < 0 else text[:cut]

    def commit(self, i: int, new: list[int]) -> int | None:
        cut = None
        for k in range(1, len(new) + 1) if self.stop else ():
            full = self.tok.decode(self.ids[i] + new[:k], skip_special_tokens=True)
            if any(s in full for s in self.stop):
                cut = k
                break
        self.ids[i].extend(new if cut is None else new[:cut])
        if self.on_text is not None:
            text = self.text(i)
            visible = len(text) if cut is not None else max(self.shown[i], len(text) - self.hold)
            if text[:visible].endswith("\ufffd"):
                visible -= 1
            if visible > self.shown[i]:
                self.on_text(i, text[self.shown[i] : visible])
                self.shown[i] = visible
        return cut

    def flush(self, i: int) -> None:
        text = self.text(i)
        if self.on_text is not None and len(text) > self.shown[i]:
            self.on_text(i, text[self.shown[i] :])
            self.shown[i] = len(text)


def generate(
    lm: LoadedModel,
    prompts: list[str],
    config: DecodeConfig,
    *,
    chat: bool = True,
    on_text: Callable[[int, str], None] | None = None,
    extras: Mapping[str, Any] | None = None,
) -> list[Output]:
    """Generate for a batch of user messages (any lengths). `on_text(i, delta)` streams text as tokens
    are committed. `extras` (from `configure`) is what the method needs beyond the model; without it
    they are loaded here for `config` as given (its block size kept): the adapter's Markov head and
    calibration, the datastore, and this machine's step cost (measured on a first run, then cached).
    Pass `configure`'s result to decode at the adapter's trained block size, or to let the schedule's
    memory carry over from one call to the next."""
    if extras is None:
        config, extras = configure(lm, config, sets_block_size=True)
    ids = [lm.encode(p, chat) for p in prompts]
    tracker = TextTracker(lm.tokenizer, len(prompts), config.stop, on_text)
    results = decode(lm.decoder, ids, config, lm.mask_id, lm.stop_ids, tracker.commit, extras)
    outs = []
    for i, r in enumerate(results):
        tracker.flush(i)
        outs.append(
            Output(
                text=tracker.text(i, r.tokens),
                new_tokens=len(r.tokens),
                forwards=r.forwards,
                tokens_per_forward=r.tokens_per_forward,
                seconds=r.seconds,
                method=config.method,
                finish=r.finish,
                accepted_per_step=r.accepted_per_step,
                token_ids=r.tokens,
            )
        )
    return outs
