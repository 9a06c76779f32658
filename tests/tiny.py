"""Tiny random Llama and Qwen2 models for fast, exact tests (fp32, a few layers, small vocab)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

VOCAB = 48


def tiny_model(kind: str = "llama", seed: int = 0, vocab: int = VOCAB):
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    cfg = LlamaConfig(**common) if kind == "llama" else Qwen2Config(**common)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")
    # Random init at std 0.02 gives nearly uniform logits; sharper weights give real preferences,
    # so greedy comparisons are not decided by float noise.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    model.eval()
    mask_id = vocab  # one row past the vocabulary, added like surgery does
    model.resize_token_embeddings(vocab + 1, mean_resizing=False)
    model.config.mask_token_id = mask_id  # where surgery records it
    return model, mask_id
