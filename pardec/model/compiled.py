"""Decoding steps through `torch.compile` (inductor's CPU code): the forwards of a few tokens that
every step feeds, without eager PyTorch's per-op cost.

A one-token forward of a 0.5B model runs ~170 linears and ~25 small ops per layer (norms, rotary
embeddings, residual adds, cache appends); eagerly, each small op costs its dispatch, which is a
large share of a step once the weights are int4. Inductor fuses those ops into a few C++ kernels
and calls the same matmul kernels (the quantized ones included) as before.

Each new step shape compiles first. With dynamic sizes a decode settles on a handful of graphs: one
token, then 2-4, 5-8, 9-17, 18-32 and 33-64 tokens, split where a quantized layer's kernel gives way
to its dense copy (7-8 minutes on 2 cores for the 0.5B model on int4 weights; about 2 once inductor's
on-disk cache holds them: `core.cost.warm_up` compiles them all up front). Block steps with a gated
adapter on take graphs of their own (the gate on), one per size range as well: under compile the
adapter updates every row fed and masks it, so the block's place in the step is no constant of the
graph. Prompts (forwards into an empty cache, or of more than `STEP_TOKENS` tokens) run eagerly: they
are few and their ops' dispatch is a small share.
Compiled and eager forwards compute the same function up to float rounding, so `spec` stays
lossless with respect to the compiled model (tested in float32).
"""

from __future__ import annotations

import torch
from torch import nn

STEP_TOKENS = 64  # forwards of more tokens than this run eagerly
# Graphs one forward may compile before dynamo falls back to running it eagerly (its default, 8, was
# reached while layouts still varied; a decode now needs about 6).
RECOMPILE_LIMIT = 64


class CompiledSteps(nn.Module):
    """A causal LM whose forwards of up to `STEP_TOKENS` tokens run compiled. Every other attribute
    (config, device, dtype, submodules) is the model's own, so the decoding loop takes it in the
    model's place."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        self.compiled = torch.compile(model, dynamic=True)

    def forward(self, input_ids: torch.Tensor, *, cache=None, **kwargs):  # input_ids: [B, Q]
        if (
            input_ids.shape[1] > STEP_TOKENS
            or cache is None
            or cache.get_seq_length() == 0  # a prompt, however short: its own layout, once
        ):
            return self.model(input_ids=input_ids, cache=cache, **kwargs)
        # A graph is specialized to its inputs' memory layout: a prompt leaves each layer's keys and
        # values as views of its projections, every later step as a fresh contiguous tensor. One copy
        # after the prompt keeps every step on the contiguous graphs.
        for layer in cache.layers:
            if not layer.keys.is_contiguous() or not layer.values.is_contiguous():
                layer.keys, layer.values = layer.keys.contiguous(), layer.values.contiguous()
        return self.compiled(input_ids=input_ids, cache=cache, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)  # parameters, buffers, submodules (self.model, self.compiled)
        except AttributeError:
            return getattr(self.model, name)
