"""pardec inside transformers' generate (custom_generate): the same sequences as plain greedy
generate in fp32, batched with left padding, with eos and stopping criteria."""

import torch
from tiny import tiny_model
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

import pardec.hf


def test_custom_generate_equals_plain_greedy_generate_batched_with_eos():
    model, mask_id = tiny_model("llama")
    ids = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])  # row 0 left-padded
    attention = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    plain = model.generate(ids, attention_mask=attention, max_new_tokens=20, do_sample=False, pad_token_id=0)
    eos = int(plain[0, 9])  # a token row 0 produces: as eos, it stops there
    cfg = GenerationConfig(max_new_tokens=20, do_sample=False, eos_token_id=eos, pad_token_id=0)
    want = model.generate(ids, attention_mask=attention, generation_config=cfg)
    for gen in (
        pardec.hf.generate,
        pardec.hf.generator(block_size=3, adaptive=False),
        pardec.hf.generator("ar"),
    ):
        got = model.generate(ids, attention_mask=attention, generation_config=cfg, custom_generate=gen)
        assert torch.equal(got, want), gen


def test_custom_generate_honours_stopping_criteria_and_max_length():
    model, _ = tiny_model("qwen2")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    plain = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    stop_at = int(plain[0, 8])

    class StopOn(StoppingCriteria):
        def __call__(self, input_ids, scores, **kw):
            return input_ids[:, -1] == stop_at

    kw = dict(
        max_new_tokens=12, do_sample=False, pad_token_id=0, stopping_criteria=StoppingCriteriaList([StopOn()])
    )
    want = model.generate(ids, **kw)
    got = model.generate(ids, custom_generate=pardec.hf.generate, **kw)
    assert torch.equal(got, want[:, : got.shape[1]]) and got.shape[1] <= want.shape[1]
    assert int(got[0, -1]) == stop_at
    short = model.generate(
        ids, max_length=9, do_sample=False, pad_token_id=0, custom_generate=pardec.hf.generate
    )
    assert short.shape == (1, 9) and torch.equal(short, plain[:, :9])


def test_custom_generate_samples_with_the_generation_configs_temperature():
    model, _ = tiny_model("llama")
    ids = torch.tensor([[1, 2, 3]])
    torch.manual_seed(0)
    kw = dict(max_new_tokens=6, do_sample=True, temperature=1.5, pad_token_id=0)
    outs = {
        tuple(model.generate(ids, custom_generate=pardec.hf.generate, **kw)[0].tolist()) for _ in range(8)
    }
    assert len(outs) > 1  # sampled, not greedy
