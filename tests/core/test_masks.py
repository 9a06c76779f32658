import itertools

import torch

from pardec.core.masks import CLEAN, additive, block_attention


def reference(cache_valid, p_real, P, D):
    """Brute force, written from the step's picture rather than the rule: [cache | P pending (left
    padded, p_real real) | D block slots]. Returns [P + D, S + P + D] bool."""
    S = len(cache_valid)
    Q, K = P + D, S + P + D
    out = torch.zeros(Q, K, dtype=torch.bool)
    pad = P - p_real
    for q in range(Q):
        for k in range(K):
            q_pending, q_block = q < P, q >= P
            if q_pending and q < pad:
                continue  # padding queries see nothing
            if k < S:
                out[q, k] = cache_valid[k]
            elif k < S + P:
                kp = k - S
                if kp < pad:
                    continue
                # pending keys: causal for pending queries, all visible to block slots
                out[q, k] = (q_pending and kp <= q) or q_block
            else:
                out[q, k] = q_block  # block keys: only the block, all of it
    return out


def descriptors(cache_valid, cache_pos, p_real, P, D):
    S = len(cache_valid)
    n_cached = sum(cache_valid)
    pad = P - p_real
    pend_pos = [0] * pad + [n_cached + i for i in range(p_real)]
    start = n_cached + p_real
    q_pos = torch.tensor(pend_pos + [start + j for j in range(D)])[None]
    q_block = torch.tensor([CLEAN] * P + [0] * D)[None]
    q_start = torch.full_like(q_pos, start)
    q_valid = torch.tensor([False] * pad + [True] * (p_real + D))[None]
    k_pos = torch.cat([torch.tensor(cache_pos, dtype=torch.long)[None], q_pos], 1)
    k_block = torch.cat([torch.full((1, S), CLEAN), q_block], 1)
    k_valid = torch.cat([torch.tensor(cache_valid, dtype=torch.bool)[None], q_valid], 1)
    return q_pos, q_block, q_start, k_pos, k_block, k_valid, q_valid


def test_block_attention_matches_brute_force_for_every_shape():
    checked = 0
    for S in range(0, 4):
        for cache_valid in itertools.product([True, False], repeat=S):
            # Valid cache slots hold positions 0.. in order; holes hold stale positions.
            pos, n = [], 0
            for v in cache_valid:
                pos.append(n if v else 99)
                n += v
            for P in range(0, 4):
                for p_real in range(0, P + 1):
                    for D in range(0, 4):
                        if P + D == 0:
                            continue
                        got = block_attention(*descriptors(list(cache_valid), pos, p_real, P, D))[0]
                        want = reference(list(cache_valid), p_real, P, D)
                        assert torch.equal(got, want), (cache_valid, P, p_real, D)
                        checked += 1
    assert checked > 500


def test_training_layout_blocks_see_clean_prefix_and_themselves():
    # Clean stream of 6 tokens, then two blocks: one starting at position 2 (2 slots), one at 4 (2 slots).
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 2, 3, 4, 5]])
    blk = torch.tensor([[CLEAN] * 6 + [0, 0, 1, 1]])
    start = torch.tensor([[0] * 6 + [2, 2, 4, 4]])
    allowed = block_attention(pos, blk, start, pos, blk, torch.ones_like(pos, dtype=torch.bool))[0]
    assert allowed[7].tolist() == [1, 1, 0, 0, 0, 0, 1, 1, 0, 0]  # block 0: clean 0-1, itself
    assert allowed[8].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 1, 1]  # block 1: clean 0-3, itself
    assert allowed[3].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]  # clean: causal, never a block


def test_additive_mask_never_leaves_a_row_fully_masked():
    allowed = torch.tensor([[[False, False], [True, False]]])
    m = additive(allowed, torch.float32)
    assert m.shape == (1, 1, 2, 2)
    assert (m[0, 0, 0] == 0).all()  # empty row: harmless zeros, no NaN in softmax
    assert m[0, 0, 1, 0] == 0 and m[0, 0, 1, 1] == torch.finfo(torch.float32).min
