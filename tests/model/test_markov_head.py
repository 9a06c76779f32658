"""The Markov head: re-ranks a slot's top K given the token before it, saved beside its adapter."""

import pytest
import torch

from pardec.errors import PardecError
from pardec.model import markov
from pardec.model.calibration import weights_sha256

V, H, D, K = 40, 16, 4, 6


def head_for(adapter_sha: str = "", seed: int = 0, trained: bool = True, context: int = 1):
    g = torch.Generator().manual_seed(seed)
    embed_in, embed_out = torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
    settings = markov.MarkovSettings(
        hidden_size=H,
        vocab_size=V,
        block_size=D,
        rank=8,
        top_k=K,
        adapter_sha256=adapter_sha,
        context=context,
    )
    head = markov.MarkovHead(settings, embed_in, embed_out)
    if trained:  # its second layer starts at zero: give it an effect
        with torch.no_grad():
            for p in head.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    return head.eval()


def greedy(logits):
    return logits.argmax(-1), torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()


def test_an_untrained_head_leaves_the_block_drafts_as_they_were():
    head = head_for(trained=False)
    logits, hidden = torch.randn(3, V), torch.randn(3, H)
    out, tokens, _ = head.chain(logits, hidden, 1, prev=5, choose=greedy)
    assert torch.allclose(out, logits, atol=1e-5)
    assert tokens.tolist() == logits.argmax(-1).tolist()


def test_each_draft_is_re_ranked_given_the_one_chosen_before_it():
    head = head_for()
    logits, hidden = torch.randn(3, V), torch.randn(3, H)
    out, tokens, probs = head.chain(logits, hidden, 1, prev=5, choose=greedy)
    prev = 5
    for i in range(3):
        top = logits[i].topk(K)
        score = head(
            hidden[i : i + 1],
            torch.tensor([prev]),
            torch.tensor([1 + i]),
            top.indices[None],
            top.values[None],
        )[0]
        # The top K re-ranked by the head, keeping their total mass; the tail as the block had it.
        assert torch.allclose(out[i, top.indices].softmax(-1), score.softmax(-1), atol=1e-5)
        assert torch.allclose(out[i, top.indices].logsumexp(-1), top.values.logsumexp(-1), atol=1e-5)
        tail = torch.ones(V, dtype=torch.bool)
        tail[top.indices] = False
        assert torch.equal(out[i, tail], logits[i, tail])
        assert tokens[i] == top.indices[score.argmax()]  # never a tail token
        assert probs[i, tokens[i]] == 1.0
        prev = int(tokens[i])
    # It does depend on the token before: another first token changes the first slot's ranking.
    other, _, _ = head.chain(logits, hidden, 1, prev=6, choose=greedy)
    assert not torch.allclose(other[0], out[0])


def test_a_context_2_head_conditions_each_draft_on_the_two_tokens_before_it():
    head = head_for(context=2)
    logits, hidden = torch.randn(3, V), torch.randn(3, H)
    out, tokens, _ = head.chain(logits, hidden, 1, prev=[9, 7, 5], choose=greedy)
    before = [7, 5]  # the last two of the text given
    for i in range(3):
        top = logits[i].topk(K)
        score = head(hidden[i : i + 1], torch.tensor([before]), torch.tensor([1 + i]), top.indices[None],
                     top.values[None])[0]  # fmt: skip
        assert torch.allclose(out[i, top.indices].softmax(-1), score.softmax(-1), atol=1e-5)
        before = [before[1], int(tokens[i])]
    # The token two back matters; what lies further back does not.
    other, _, _ = head.chain(logits, hidden, 1, prev=[8, 5], choose=greedy)
    assert not torch.allclose(other[0], out[0])
    same, _, _ = head.chain(logits, hidden, 1, prev=[3, 7, 5], choose=greedy)
    assert torch.equal(same, out)
    # A text of one token stands in for both.
    one, _, _ = head.chain(logits, hidden, 1, prev=[5], choose=greedy)
    assert torch.equal(one, head.chain(logits, hidden, 1, prev=[5, 5], choose=greedy)[0])
    with pytest.raises(ValueError, match="conditions on 2 tokens"):
        head(
            hidden[:1],
            torch.tensor([5]),
            torch.tensor([1]),
            logits[:1].topk(K).indices,
            logits[:1].topk(K).values,
        )


def test_a_context_1_head_given_more_text_uses_only_its_last_token():
    head = head_for()
    logits, hidden = torch.randn(3, V), torch.randn(3, H)
    assert torch.equal(
        head.chain(logits, hidden, 1, prev=[1, 2, 5], choose=greedy)[0],
        head.chain(logits, hidden, 1, prev=5, choose=greedy)[0],
    )


def test_slots_beyond_the_trained_block_use_the_last_slot_embedding():
    head = head_for()
    top = torch.randn(1, V).topk(K)
    args = (torch.randn(1, H), torch.tensor([3]))
    far = head(*args, torch.tensor([D + 5]), top.indices, top.values)
    last = head(*args, torch.tensor([D - 1]), top.indices, top.values)
    assert torch.equal(far, last)


def fake_adapter(tmp_path, content=b"weights"):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter.safetensors").write_bytes(content)
    return folder


def test_a_saved_head_loads_with_the_same_outputs(tmp_path):
    folder = fake_adapter(tmp_path)
    head = head_for(weights_sha256(folder))
    markov.save(folder, head)
    got = markov.load(folder, head.embed_in, head.embed_out)
    assert got is not None and got.settings == head.settings
    logits, hidden = torch.randn(3, V), torch.randn(3, H)
    assert torch.equal(
        got.chain(logits, hidden, 1, 2, greedy)[0], head.chain(logits, hidden, 1, 2, greedy)[0]
    )


def test_no_head_beside_an_adapter_or_no_adapter_loads_none(tmp_path):
    head = head_for()
    assert markov.load(None, head.embed_in, head.embed_out) is None
    assert markov.load(fake_adapter(tmp_path), head.embed_in, head.embed_out) is None


def test_a_head_trained_for_other_adapter_weights_is_ignored_with_a_warning(tmp_path):
    folder = fake_adapter(tmp_path)
    head = head_for(weights_sha256(folder))
    markov.save(folder, head)
    (folder / "adapter.safetensors").write_bytes(b"retrained")
    with pytest.warns(UserWarning, match="other adapter weights"):
        assert markov.load(folder, head.embed_in, head.embed_out) is None


def test_corrupt_or_mismatched_heads_raise_clear_errors(tmp_path):
    folder = fake_adapter(tmp_path)
    head = head_for(weights_sha256(folder))
    markov.save(folder, head)
    with pytest.raises(PardecError, match="vocabulary"):
        markov.load(folder, head.embed_in[:-1], head.embed_out[:-1])
    (folder / markov.WEIGHTS).write_bytes(b"not safetensors")
    with pytest.raises(PardecError, match="corrupt Markov head weights"):
        markov.load(folder, head.embed_in, head.embed_out)
    (folder / markov.SETTINGS).write_text("{not json")
    with pytest.raises(PardecError, match="corrupt Markov head settings"):
        markov.load(folder, head.embed_in, head.embed_out)
