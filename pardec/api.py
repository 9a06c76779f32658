"""The Python API: text prompts in, texts and statistics out.

    from pardec import load_model, generate, DecodeConfig
    model, tok, mask_id = load_model("smollm2-135m", dtype=torch.float32)
    outs = generate(model, tok, ["Write a haiku."], DecodeConfig(method="spec"), mask_id=mask_id)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import checkpoint, models
from .decoding import DecodeConfig, decode
from .errors import PardecError
from .surgery import add_mask_token

# End-of-turn tokens of the chat templates we know; used when present in the vocabulary.
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


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
            "text": self.text, "new_tokens": self.new_tokens, "forwards": self.forwards,
            "tokens_per_forward": round(self.tokens_per_forward, 4), "seconds": round(self.seconds, 4),
            "method": self.method, "finish": self.finish, "accepted_per_step": self.accepted_per_step,
        }


def load_model(model: str = models.DEFAULT_MODEL, dtype: torch.dtype = torch.bfloat16, adapter: str | None = "auto"):
    """Load a model by HF id, folder, GGUF file or packaged alias, with the `[MASK]` token added and
    an adapter applied: "auto" (the one bundled for this model, if any), "none", or a checkpoint folder.
    Returns (model, tokenizer, mask_id)."""
    lm, tok = models.load(model, dtype)
    mask_id = add_mask_token(lm, tok)
    path = checkpoint.resolve_adapter(model, adapter)
    if path is not None:
        checkpoint.apply(lm, path, model, mask_id)
    return lm, tok, mask_id


def load_drafter(model_name: str, model, mask_id: int, drafter: str | None = "auto"):
    """The DFlash drafter for `model` (loaded as `model_name`): "auto" = the one bundled for this
    model, if any; "none"; or a drafter checkpoint folder. Returns a Drafter or None."""
    from .dflash import checkpoint as dcheckpoint

    path = dcheckpoint.resolve(model_name, drafter)
    return None if path is None else dcheckpoint.load(path, model, model_name, mask_id)


def stop_token_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        ids.update([eos] if isinstance(eos, int) else (eos or []))
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return ids


def encode_prompt(tokenizer, prompt: str, chat: bool = True) -> list[int]:
    """The user message -> prompt token ids, through the chat template when the model has one."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise PardecError("empty prompt")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True,
            return_dict=False,
        )
        if hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding regardless
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer.encode(prompt, add_special_tokens=True)


class _TextTracker:
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
    model,
    tokenizer,
    prompts: list[str],
    config: DecodeConfig,
    *,
    mask_id: int | None = None,
    chat: bool = True,
    on_text: Callable[[int, str], None] | None = None,
    drafter=None,
) -> list[Output]:
    """Generate for a batch of user messages (any lengths). `on_text(i, delta)` streams text as tokens
    are committed. `drafter` (load_drafter) is needed by method dflash."""
    if mask_id is None:
        mask_id = add_mask_token(model, tokenizer)
    ids = [encode_prompt(tokenizer, p, chat) for p in prompts]
    tracker = _TextTracker(tokenizer, len(prompts), config.stop, on_text)
    results = decode(model, ids, config, mask_id, stop_token_ids(model, tokenizer), tracker.commit, drafter)
    outs = []
    for i, r in enumerate(results):
        tracker.flush(i)
        outs.append(Output(
            text=tracker.text(i, r.tokens), new_tokens=len(r.tokens), forwards=r.forwards,
            tokens_per_forward=r.tokens_per_forward, seconds=r.seconds, method=config.method,
            finish=r.finish, accepted_per_step=r.accepted_per_step, token_ids=r.tokens,
        ))
    return outs
