"""pardec inside transformers' `generate`: `model.generate(input_ids, custom_generate=pardec.hf.generate)`.

transformers prepares the inputs and the generation config, then calls the callable for the decoding
loop (its public `custom_generate` hook). pardec decodes with `spec` (or the method `generator`
names), honouring max_new_tokens / max_length, eos_token_id, do_sample / temperature / top_p, the
stopping criteria (stop strings included), left-padded batches, and returns the sequences as
`generate` does: prompt and new tokens, right-padded with pad_token_id. The model must come from
`pardec.load_model` (it carries the `[MASK]` token and the adapter). Logits processors other than
temperature and top-p are not applied.
"""

from __future__ import annotations

import dataclasses

import torch

from .decoding import DecodeConfig, decode
from .errors import PardecError


def generator(method: str = "spec", **settings):
    """A `custom_generate` callable decoding with `method` and these DecodeConfig settings, e.g.
    `generator(block_size=lm.trained_block_size)` for the block size an adapter was trained with
    (`generate` uses DecodeConfig's defaults)."""
    base = DecodeConfig(method=method, **settings)

    def run(model, input_ids: torch.LongTensor, logits_processor=None, stopping_criteria=None,
            generation_config=None, synced_gpus=False, streamer=None,
            **model_kwargs) -> torch.LongTensor:  # fmt: skip
        return _generate(model, input_ids, base, stopping_criteria, generation_config, model_kwargs)

    return run


def _generate(
    model, input_ids, base: DecodeConfig, stopping_criteria, gen_cfg, model_kwargs
) -> torch.LongTensor:
    mask_id = getattr(model.config, "mask_token_id", None)
    if mask_id is None:
        raise PardecError("pardec.hf.generate needs a model loaded with pardec.load_model (it has no [MASK])")
    B, T = input_ids.shape
    attention = model_kwargs.get("attention_mask")
    prompts = [
        row[attention[b].bool()].tolist() if attention is not None else row.tolist()
        for b, row in enumerate(input_ids)
    ]
    max_new = gen_cfg.max_new_tokens if gen_cfg.max_new_tokens is not None else gen_cfg.max_length - T
    eos = gen_cfg.eos_token_id
    stop_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
    sample = bool(gen_cfg.do_sample)
    temperature = float(gen_cfg.temperature or 1.0) if sample else 0.0
    top_p = float(gen_cfg.top_p if gen_cfg.top_p is not None else 1.0) if sample else 1.0
    config = dataclasses.replace(base, max_new_tokens=max(1, max_new), temperature=temperature, top_p=top_p)
    committed = [list(p) for p in prompts]

    def on_commit(i: int, new: list[int]) -> int | None:
        if not stopping_criteria:
            committed[i].extend(new)
            return None
        for k in range(1, len(new) + 1):
            seq = torch.tensor([committed[i] + new[:k]], device=input_ids.device)
            if bool(stopping_criteria(seq, None).any()):
                committed[i].extend(new[:k])
                return k
        committed[i].extend(new)
        return None

    results = decode(model, prompts, config, mask_id, stop_ids, on_commit)
    pad = gen_cfg.pad_token_id
    if pad is None:
        pad = next(iter(sorted(stop_ids)), 0)
    longest = max(len(r.tokens) for r in results)
    out = torch.full((B, T + longest), int(pad), dtype=torch.long, device=input_ids.device)
    out[:, :T] = input_ids
    for b, r in enumerate(results):
        out[b, T : T + len(r.tokens)] = torch.tensor(r.tokens, dtype=torch.long)
    return out


generate = generator()  # spec with the default settings
