"""scripts/replay_forks.py: what lookups after the chain's first drafts would add to recorded steps."""

from scripts_dir import load_script

from pardec.model import datastore as ds


def test_a_lookup_after_the_chains_accepted_draft_carries_on_where_the_chain_failed():
    rf = load_script("replay_forks")
    store = ds.build([[8, 9] + list(range(20, 30))])  # after 8 9, the store went on 20 .. 29
    answer = list(range(20, 30))  # the same, after the prompt 7 8 9; nothing in it repeats
    runs = [([7, 8, 9], answer, [2] * 5)]  # recorded: each step one accepted draft and the bonus
    got = rf.replay(runs, store, forks=[1, 2], depths=[4, 16])
    assert got["spec"] == 2.0 and got["steps"] == 5
    # Steps start at t = 0, 2, 4, 6, 8. At fork 0 the store matches min(B, 10 - t) tokens, a branch
    # gains that less the chain's one accepted draft.
    assert got["F=1,B=4,store"] == (10 + 3 + 3 + 3 + 3 + 1) / 5
    assert got["F=1,B=16,store"] == (10 + 9 + 7 + 5 + 3 + 1) / 5
    # Fork 1 sits after the accepted draft: B more tokens from there, where the answer has them.
    assert got["F=2,B=4,store"] == (10 + 4 + 4 + 4 + 3 + 1) / 5
    assert got["F=2,B=16,store"] == got["F=1,B=16,store"]  # fork 0 already reached the end
    assert got["F=2,B=4,ctx"] == 2.0 and got["F=2,B=4,both"] == got["F=2,B=4,store"]
