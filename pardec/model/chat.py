"""The chat template and end-of-turn tokens: user messages in, prompt token ids out."""

from __future__ import annotations

from ..errors import PardecError

# End-of-turn tokens of the chat templates we know; used when present in the vocabulary.
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


def stop_token_ids(model, tokenizer=None) -> set[int]:
    """The model's end-of-sequence ids, and the tokenizer's end-of-turn tokens (when there is one)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        ids.update([eos] if isinstance(eos, int) else (eos or []))
    if tokenizer is None:
        return ids
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return ids


def encode_messages(tokenizer, messages: list[dict]) -> list[int]:
    """A chat (role/content dicts, the last one the user's) -> prompt token ids through the model's
    chat template, or the contents joined by newlines when it has none."""
    if not messages or not any(str(m.get("content", "")).strip() for m in messages):
        raise PardecError("empty prompt: no message has content")
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer.encode("\n".join(str(m["content"]) for m in messages), add_special_tokens=True)


def encode_prompt(tokenizer, prompt: str, chat: bool = True) -> list[int]:
    """The user message -> prompt token ids, through the chat template when the model has one."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise PardecError("empty prompt")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding regardless
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer.encode(prompt, add_special_tokens=True)
