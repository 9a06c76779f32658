"""scripts/replay_lookup.py: the TPF looked-up drafts alone would give, replayed on known answers."""

from scripts_dir import load_script

from pardec.model import datastore as ds


def test_an_answer_the_store_holds_replays_at_the_drafts_it_copies():
    rl = load_script("replay_lookup")
    answer = list(range(10, 50))  # 40 tokens, none repeated: the in-context lookup finds nothing
    store = ds.build([answer])
    # Steps: 2 with no match of 2 tokens, then 16 drafts + 1 twice (to 36), then the last 4 + 1.
    got = rl.replay([([1, 2], answer)], store, ["ctx", "store", "priced", "either"])
    assert got["store"] == 40 / 5
    assert got["either"] == got["priced"] == got["store"]
    assert got["ctx"] == 1.0


def test_a_tree_keeps_the_branch_the_chain_walks_past():
    rl = load_script("replay_lookup")
    # After [5, 6, 7] the store went on with 3, 4 twice and with 8, 9 once: the chain drafts 3, 4.
    store = ds.build([[5, 6, 7, 3, 4], [5, 6, 7, 3, 4], [5, 6, 7, 8, 9]])
    assert store.propose([5, 6, 7], 4)[0] == [3, 4]
    nodes = rl.store_tree(store, [5, 6, 7], 4)
    assert nodes == {(3,), (3, 4), (8,), (8, 9)}
    answer = [7, 8, 9]  # after the prompt [5, 6]
    chain = rl.replay([([5, 6], answer)], store, ["store"])["store"]
    tree = rl.replay([([5, 6], answer)], store, ["tree@5"])["tree@5"]
    assert (chain, tree) == (3 / 2, 3 / 1)  # chain: 7 (+ 8), then 9 (+ one past the end); tree: 7 8 9
    assert rl.tree_matched(nodes, [3, 4, 0], 0) == 2 and rl.tree_matched(nodes, [1], 0) == 0
