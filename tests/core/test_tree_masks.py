"""The tree rule: a causal block (a branch) sees the clean prefix before its start and its own earlier
tokens, checked against ancestors computed from explicit parent links."""

import itertools

import torch

from pardec.core.masks import CLEAN, block_attention


def tree_reference(n_cached, pending, blocks):
    """Queries: the pending chain, then each block's slots. A chain token's parent is the token before
    it; a branch token's is the branch's previous token, or for its first token the chain token before
    the branch's start; a mask block's slot sees its block's prefix and all of its block. Returns
    [Q, n_cached + Q] bool from ancestor sets."""
    nodes = []  # (kind, group, index in group, start)
    for i in range(pending):
        nodes.append(("chain", None, i, None))
    for g, (start, size, causal) in enumerate(blocks):
        for j in range(size):
            nodes.append(("branch" if causal else "block", g, j, start))
    Q = len(nodes)
    out = torch.zeros(Q, n_cached + Q, dtype=torch.bool)
    chain_key = {i: n_cached + i for i in range(pending)}

    def chain_ancestors(upto):  # chain tokens at pending indices < upto, and every cached token
        return set(range(n_cached)) | {chain_key[i] for i in range(upto)}

    for q, (kind, g, j, start) in enumerate(nodes):
        if kind == "chain":
            seen = chain_ancestors(j) | {n_cached + q}
        else:
            group = [n_cached + k for k, nd in enumerate(nodes) if nd[1] == g and nd[0] != "chain"]
            own = group[: j + 1] if kind == "branch" else group
            seen = chain_ancestors(start) | set(own)
        for k in seen:
            out[q, k] = True
    return out


def descriptors(n_cached, pending, blocks):
    q_pos = list(range(n_cached, n_cached + pending))
    q_block, q_start, q_causal = [CLEAN] * pending, [0] * pending, [False] * pending
    for g, (start, size, causal) in enumerate(blocks):
        q_pos += [n_cached + start + j for j in range(size)]
        q_block += [g] * size
        q_start += [n_cached + start] * size
        q_causal += [causal] * size
    t = lambda x: torch.tensor(x)[None]  # noqa: E731
    k_pos = torch.cat([torch.arange(n_cached)[None], t(q_pos)], 1)
    k_block = torch.cat([torch.full((1, n_cached), CLEAN), t(q_block)], 1)
    k_valid = torch.ones_like(k_pos, dtype=torch.bool)
    return dict(q_pos=t(q_pos), q_block=t(q_block), q_block_start=t(q_start), k_pos=k_pos, k_block=k_block,
                k_valid=k_valid, q_causal=t(q_causal))  # fmt: skip


def test_tree_attention_matches_ancestors_for_every_small_tree():
    checked = 0
    for n_cached, pending in itertools.product(range(3), range(1, 4)):
        # A mask block after the chain, and branches forking at every chain position, of sizes 1-3.
        for fork, size, with_block in itertools.product(range(pending), range(1, 4), (False, True)):
            blocks = [(pending, 2, False)] if with_block else []
            blocks += [(fork, size, True), (fork, size, True)]
            got = block_attention(**descriptors(n_cached, pending, blocks))[0]
            assert torch.equal(got, tree_reference(n_cached, pending, blocks)), (n_cached, pending, blocks)
            checked += 1
    assert checked > 100


def test_without_causal_flags_the_rule_is_the_block_rule():
    d = descriptors(2, 3, [(1, 3, False)])
    with_flags = block_attention(**d)
    d.pop("q_causal")
    assert torch.equal(block_attention(**d), with_flags)
