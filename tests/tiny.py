"""Tiny random Llama and Qwen2 models for fast, exact tests (fp32, a few layers, small vocab)."""

from __future__ import annotations

import json
from pathlib import Path

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


def retrofit_tiny_adapter(model_dir, where) -> Path:
    """A gated adapter for the tiny model folder `model_dir` from one retrofit step on four rows
    (block size 3), written under `where` -> its folder."""
    from pardec.cli import main

    data = Path(where) / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": "the cat", "response": "sat on the mat and ran far"}) + "\n"
                            for _ in range(4)))  # fmt: skip
    ck = Path(where) / "ck"
    args = (f"retrofit --model {model_dir} --data {data} --dtype float32 --heldout 1 --steps 1 "
            f"--eval-every 1 --rank 4 --alpha 8 --block-size 3 --out {ck}")  # fmt: skip
    assert main(args.split()) == 0
    return ck


def randomize_lora(model, seed: int = 0) -> None:
    """Give attached LoRA adapters a nonzero update (B starts at zero), so that they change outputs."""
    from pardec.model import adapters

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in adapters.lora_modules(model).values():
            m.lora_b.copy_(torch.randn(m.lora_b.shape, generator=g) * 0.5)


def counting_model(vocab: int = 32):
    """A tiny base model that has learned to count mod vocab (plain AR training, a few seconds), so
    that its own greedy outputs, the self-distilled data, follow a pattern blocks can learn."""
    model, mask_id = tiny_model("llama", vocab=vocab)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(0.1)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(80):
        ids = (torch.randint(0, vocab, (16, 1), generator=g) + torch.arange(24)) % vocab
        logits = model(ids).logits[:, :-1, :vocab]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    prompts = [
        ((torch.randint(0, vocab, (1,), generator=g) + torch.arange(5)) % vocab).tolist() for _ in range(40)
    ]
    return model, mask_id, prompts


def random_head(model, block_size=4, top_k=8, seed=0, scale=1.0, context=1, adapter_sha256=""):
    """A Markov head over `model`'s embeddings with random weights (its second layer starts at zero, so
    an untrained one would change nothing); `adapter_sha256` ties it to an adapter's weights for saving."""
    from pardec.model.markov import MarkovHead, MarkovSettings

    embed_in, embed_out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    V, H = embed_out.shape
    settings = MarkovSettings(hidden_size=H, vocab_size=V, block_size=block_size, rank=16, top_k=top_k,
                              context=context, adapter_sha256=adapter_sha256)  # fmt: skip
    head = MarkovHead(settings, embed_in, embed_out)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return head.eval()
