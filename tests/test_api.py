"""The text API: chat template, stop strings, streaming, batches."""

import dataclasses

import torch

from pardec import DecodeConfig, generate, load_model
from pardec.model.chat import encode_prompt, stop_token_ids


def test_load_adds_mask_token_and_generate_streams(tiny_dir):
    lm = load_model(tiny_dir, torch.float32)
    assert lm.tokenizer.convert_tokens_to_ids("[MASK]") == lm.mask_id == lm.model.config.mask_token_id
    deltas = []
    out = generate(
        lm,
        ["the cat sat"],
        DecodeConfig(method="spec", max_new_tokens=15),
        on_text=lambda i, d: deltas.append((i, d)),
    )[0]
    assert "".join(d for _, d in deltas) == out.text
    assert out.new_tokens == len(out.token_ids) and out.forwards >= 1


def test_chat_template_is_applied_unless_turned_off(tiny_dir):
    tok = load_model(tiny_dir, torch.float32).tokenizer
    chat = encode_prompt(tok, "hello world", chat=True)
    raw = encode_prompt(tok, "hello world", chat=False)
    assert tok.convert_tokens_to_ids("<|im_start|>") in chat
    assert tok.convert_tokens_to_ids("<|im_start|>") not in raw
    assert tok.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(_model_stub(), tok)


def _model_stub():
    class Cfg:
        eos_token_id = None

    class M:
        config = Cfg()
        generation_config = None

    return M()


def test_stop_strings_cut_the_text(tiny_dir):
    lm = load_model(tiny_dir, torch.float32)
    cfg = DecodeConfig(method="ar", max_new_tokens=20)
    full = generate(lm, ["one two"], cfg)[0]
    words = full.text.split()
    assert len(words) >= 3
    stop = words[2]
    cut = generate(lm, ["one two"], DecodeConfig(method="spec", max_new_tokens=20, stop=(stop,)))[0]
    assert cut.finish == "stop"
    assert stop not in cut.text and full.text.startswith(cut.text)
    assert cut.text == full.text[: full.text.find(stop)]


def test_batch_generate_equals_single(tiny_dir):
    lm = load_model(tiny_dir, torch.float32)
    prompts = ["hello", "the big red dog ran far to home and the cat sat on the mat", "one two three"]
    cfg = DecodeConfig(method="spec", max_new_tokens=12)
    batch = generate(lm, prompts, cfg)
    single = [generate(lm, [p], cfg)[0] for p in prompts]
    assert [b.text for b in batch] == [s.text for s in single]


def test_generate_without_extras_loads_what_configure_gives_the_markov_head_among_them(tiny_dir, tmp_path):
    """A caller of generate who passes no extras gets the adapter's Markov head (and the rest of what
    configure loads), as the CLI does; the output stays AR's."""
    from tiny import random_head, retrofit_tiny_adapter

    from pardec.model import markov
    from pardec.model.calibration import weights_sha256

    ck = retrofit_tiny_adapter(tiny_dir, tmp_path)
    lm = load_model(tiny_dir, torch.float32, str(ck))
    head = random_head(lm.model, block_size=3, adapter_sha256=weights_sha256(ck))
    markov.save(ck, head)
    lm = load_model(tiny_dir, torch.float32, str(ck))
    calls = []
    chain = lm.markov.chain
    lm.markov.chain = lambda *a: calls.append(1) or chain(*a)
    prompts = ["the cat sat", "one two three four"]
    cfg = DecodeConfig(method="spec", block_size=3, max_new_tokens=16, adaptive=False, lookup=0)
    spec = generate(lm, prompts, cfg)
    ar = generate(lm, prompts, DecodeConfig(method="ar", max_new_tokens=16))
    assert calls  # the head drew the drafts
    assert [s.token_ids for s in spec] == [a.token_ids for a in ar]
    # Compiled steps catch the head's input as eager ones do (tests/model/test_compiled.py)
    assert dataclasses.replace(lm, compile=True).markov is not None
