"""The text API: chat template, stop strings, streaming, batches."""

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
