"""The datastore of the model's own answers: what it proposes (against a brute-force reference), how it
is saved, refused when corrupt, and found."""

import random
from collections import Counter

import numpy as np
import pytest

from pardec.errors import PardecError
from pardec.model import checkpoint, datastore
from pardec.model.datastore import MAX_MATCH, MIN_MATCH


def brute_propose(answers, context, max_drafts, depth):
    """The longest suffix of context (MIN_MATCH .. MAX_MATCH) inside some answer, then token by token
    the most frequent continuation among the occurrences still following (ties: the smaller id), its
    support the share of them (an answer's end among them, continuing nothing)."""
    for n in range(min(MAX_MATCH, len(context), depth - 1), MIN_MATCH - 1, -1):
        q = context[-n:]
        pos = [(a, i + n) for a in answers for i in range(len(a) - n + 1) if a[i : i + n] == q]
        if pos:
            break
    else:
        return [], [], 0
    drafts, support = [], []
    while len(drafts) < max_drafts:
        if len(pos) == 1:  # one occurrence: its text, to the answer's end
            a, j = pos[0]
            rest = a[j : j + max_drafts - len(drafts)]
            return drafts + rest, support + [1.0] * len(rest), n
        if n + len(drafts) >= depth:
            break
        nxt = Counter(a[j] for a, j in pos if j < len(a))
        if not nxt:
            break
        tok = min(nxt, key=lambda t: (-nxt[t], t))
        drafts.append(tok)
        support.append(nxt[tok] / len(pos))
        pos = [(a, j + 1) for a, j in pos if j < len(a) and a[j] == tok]
    return drafts, support, n


@pytest.mark.parametrize("depth", [32, 6])
def test_propose_walks_the_most_frequent_continuation_of_the_longest_match(depth):
    rng = random.Random(depth)
    answers = [[rng.randrange(5) for _ in range(rng.randrange(0, 40))] for _ in range(30)]
    answers += [[7, 8, 9, 7, 8, 9, 6]]  # tokens found in one answer only
    store = datastore.build(answers, depth=depth)
    contexts = [[rng.randrange(10) for _ in range(rng.randrange(1, 16))] for _ in range(300)]
    contexts += [[1, 7, 8], [1, 8, 9, 7], [9, 9], [3]]
    for context in contexts:
        drafts, support, n = store.propose(context, 10)
        want = brute_propose([a for a in answers if a], context, 10, depth)
        assert (drafts, n) == (want[0], want[2]), context
        assert support == pytest.approx(want[1]), context
    assert store.propose([1, 8, 9, 7], 10) == ([8, 9, 6], [1.0, 1.0, 1.0], 3)  # copied past depth 6
    assert store.propose([1, 7, 8], 10)[0] == [9, 6]  # two occurrences: 9 after both, then a tie: 6 < 7
    assert store.propose([8, 9, 9], 4) == ([], [], 0)  # no answer holds 9 9
    assert store.propose([3], 4) == ([], [], 0)  # one token is too short a match


def test_save_and_load_keep_the_store_and_refuse_corrupt_files(tmp_path):
    store = datastore.build([[1, 2, 3, 4], [2, 3, 5]])
    path = datastore.save(store, tmp_path / "a", {"model": "m", "answers": 2})
    loaded = datastore.load(path, vocab_size=10)
    assert np.array_equal(loaded.tokens, store.tokens) and np.array_equal(loaded.order, store.order)
    assert loaded.propose([9, 2, 3], 4) == store.propose([9, 2, 3], 4) == ([4], [0.5], 2)
    assert datastore.meta(path) == {"model": "m", "answers": 2}
    with pytest.raises(PardecError, match="beyond this model's vocabulary"):
        datastore.load(path, vocab_size=5)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(PardecError, match="corrupt datastore"):
        datastore.load(cut)
    from safetensors.numpy import save_file

    bad = tmp_path / "bad.safetensors"  # an order that points outside the tokens
    save_file({"tokens": store.tokens, "order": store.order * 100}, str(bad),
              metadata={"format": datastore.FORMAT, "depth": str(store.depth)})  # fmt: skip
    with pytest.raises(PardecError, match="not a pardec-datastore"):
        datastore.load(bad)
    with pytest.raises(PardecError, match="at least one"):
        datastore.build([[], []])


def test_locate_prefers_the_adapters_store_then_the_bundled_one(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "BUNDLED", tmp_path / "bundled")
    store = datastore.build([[1, 2, 3]])
    bundled = datastore.save(store, tmp_path / "bundled" / "qwen2.5-coder-0.5b", {})
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    assert datastore.locate("qwen2.5-coder-0.5b", adapter) == bundled
    assert datastore.locate("qwen2.5-coder-0.5b", None) == bundled
    assert datastore.locate("some/hub-model", None) is None  # only packaged aliases have bundled stores
    own = datastore.save(store, adapter, {})
    assert datastore.locate("qwen2.5-coder-0.5b", adapter) == own
    # A model with the same tokenizer and no store of its own looks up the 0.5B's, until it has one.
    assert datastore.locate("qwen2.5-coder-1.5b", None) == bundled
    assert datastore.locate("smollm2-135m", None) is None  # another tokenizer: never another's store
    its_own = datastore.save(store, tmp_path / "bundled" / "qwen2.5-coder-1.5b", {})
    assert datastore.locate("qwen2.5-coder-1.5b", None) == its_own


def test_a_common_match_is_walked_by_sampling_with_exact_support(monkeypatch):
    monkeypatch.setattr(datastore, "SAMPLE", 8)  # every range below is longer: the sampled path
    answers = [[1, 2, 3, 5]] * 70 + [[1, 2, 4]] * 30 + [[1, 2]] * 10
    store = datastore.build(answers)
    assert store.propose([9, 1, 2], 5) == ([3, 5], [pytest.approx(70 / 110), 1.0], 2)
    assert store.propose([9, 1, 2], 5) == brute_propose(answers, [9, 1, 2], 5, datastore.DEPTH)


def test_bundled_stores_load_and_name_their_model():
    found = sorted(checkpoint.BUNDLED.glob(f"*/{datastore.FILE}"))
    assert found, "no datastore bundled"
    for path in found:
        assert datastore.meta(path)["model"] == path.parent.name
        store = datastore.load(path)
        assert store.size > 100_000 and datastore.locate(path.parent.name, None) == path
