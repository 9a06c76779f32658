import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # tests/tiny.py

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama saved with a word-level tokenizer and a chat template: a real model folder
    for CLI and API tests."""
    from tiny import tiny_model
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<eos>", "<|im_start|>", "<|im_end|>", "user", "assistant"] + [
        w
        for w in "the a cat dog sat on mat and ran far to home big red blue green one two three "
        "four five six seven eight nine ten hello world what is it yes no".split()
    ]
    vocab = {w: i for i, w in enumerate(words)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<eos>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = (
        "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
        "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
    )
    model, _ = tiny_model("llama", vocab=len(words))
    model.resize_token_embeddings(len(words), mean_resizing=False)  # surgery adds [MASK] at load
    model.config.max_position_embeddings = 64
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_adapter(tiny_dir, tmp_path_factory):
    """A gated adapter for `tiny_dir` from one retrofit step (block size 3): what threshold and eb need.
    Shared: tests that write beside an adapter (calibrate, datastore) retrofit their own."""
    from tiny import retrofit_tiny_adapter

    return str(retrofit_tiny_adapter(tiny_dir, tmp_path_factory.mktemp("tiny-adapter")))


@pytest.fixture(autouse=True)
def _private_cost_cache(request, tmp_path_factory, monkeypatch):
    """Step costs measured for tiny test models stay out of the user's cache (the slow tests on the
    packaged models keep it: they need its converted weights)."""
    if request.node.get_closest_marker("slow") is None and "PARDEC_CACHE" not in os.environ:
        monkeypatch.setenv("PARDEC_CACHE", str(tmp_path_factory.getbasetemp() / "pardec-cache"))
