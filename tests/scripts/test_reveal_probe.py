"""scripts/reveal_probe.py: blocks packed into one forward beside the text each see only their own
prefix, so their logits are those of the block fed alone after it."""

import json

import torch
from scripts_dir import load_script
from tiny import tiny_model


def test_packed_blocks_see_only_their_own_prefix():
    rp = load_script("reveal_probe")
    model, mask_id = tiny_model("qwen2")
    x = torch.randint(0, mask_id, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    blocks = [(10, [mask_id] * 4), (10, [x[10]] + [mask_id] * 3), (11, [mask_id] * 4), (25, [mask_id] * 4)]
    packed = rp.block_logits(model, mask_id, x, blocks)
    for (start, slots), got in zip(blocks, packed):
        alone = rp.block_logits(model, mask_id, x[:start], [(start, slots)])[0]
        torch.testing.assert_close(got, alone, rtol=1e-4, atol=1e-4)
    # The revealed block's masks saw x[10]; the hidden one's did not
    assert not torch.allclose(packed[0][1:], packed[1][1:])


def test_probe_counts_runs_and_whether_the_bonus_was_held():
    rp = load_script("reveal_probe")
    assert rp.run_length([1, 2, 3], [1, 2, 4, 5]) == 2 and rp.run_length([], [1]) == 0
    model, mask_id = tiny_model("llama")
    x = torch.randint(0, mask_id, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    got = rp.probe(model, mask_id, x, [5, 12, 20], D=4)
    assert all(len(v) == 3 and all(0 <= n <= 3 for n in v) for v in got["runs"].values())
    held = [sum(got["held"][k]) for k in rp.TOPS]
    assert held == sorted(held)  # more of the likeliest tokens hold the bonus at least as often
    assert len(got["slot0"]) == 3 and all(isinstance(v, bool) for v in got["slot0"])


def test_slot0_records_whether_the_hidden_block_held_the_bonus():
    rp = load_script("reveal_probe")
    model, mask_id = tiny_model("qwen2")
    x = torch.randint(0, mask_id, (40,), generator=torch.Generator().manual_seed(2)).tolist()
    positions = [6, 14, 22, 30]
    got = rp.probe(model, mask_id, x, positions, D=4)
    hidden = rp.block_logits(model, mask_id, x, [(t, [mask_id] * 4) for t in positions])
    assert got["slot0"] == [h[0].argmax().item() == x[t] for h, t in zip(hidden, positions)]
    # Put the tiny model's own slot-0 guess at one position: that position must then count as held
    t = positions[1]
    guess = hidden[1][0].argmax().item()
    y = x[:t] + [guess] + x[t + 1 :]
    assert rp.probe(model, mask_id, y, [t], D=4)["slot0"] == [True]


def test_probe_texts_reads_the_first_ar_answers_and_their_positions(tmp_path):
    rp = load_script("reveal_probe")
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "p" * (i + 2)}) + "\n" for i in range(3)))
    samples = tmp_path / "samples.jsonl"
    rows = [("spec", "q0", 60), ("ar", "q0", 40), ("ar", "x", 40), ("ar", "q1", 12), ("ar", "q2", 50)]
    samples.write_text(
        "".join(json.dumps({"method": m, "id": i, "tokens": list(range(n))}) + "\n" for m, i, n in rows)
    )

    class Encoder:  # a prompt of n characters is n tokens
        def encode(self, text, chat):
            return [7] * len(text)

    got = rp.probe_texts(Encoder(), str(samples), f"jsonl:{task}", 2, 5, 4)
    # The spec answer and the one of an id outside the task are skipped; only the first 2 ar answers
    assert [len(x) for x, _ in got] == [2 + 40, 3 + 12]
    assert got[0][0] == [7] * 2 + list(range(40))
    (x0, pos0), (x1, pos1) = got
    assert len(pos0) == 5 and pos0 == sorted(set(pos0))
    assert all(2 + 2 <= t < len(x0) - 4 - 1 for t in pos0)  # a block before, and D tokens after t + 1
    assert pos1 == list(range(3 + 2, len(x1) - 4 - 1))  # fewer answer positions than asked: all of them
    assert rp.probe_texts(Encoder(), str(samples), f"jsonl:{task}", 2, 5, 4) == got  # seeded
