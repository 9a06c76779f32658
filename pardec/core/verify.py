"""The one verifier: which drafts the target accepts, and the bonus token it adds itself.

Terms as in vLLM's rejection sampler: the drafts are proposed tokens with the distributions q they
were drawn from (none when greedy); the target's NTP logits give p at the token before each draft and
after the last one. Accepted drafts plus the bonus are committed.
"""

from __future__ import annotations

import torch

from .sampling import distribution, draw


def accept_drafts(
    drafts: list[int],
    draft_probs: torch.Tensor | None,  # [m, V] distributions the drafts were drawn from; None = greedy
    target_logits: torch.Tensor,  # [m + 1, V] NTP logits at the token before each draft, then after the last
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """Verify drafts against the target; return (number accepted, bonus token).

    Greedy: accept while the draft equals the target's argmax; the bonus is the argmax at the first
    mismatch (or after the last draft). Sampling: speculative (rejection) sampling, so committed tokens
    are distributed exactly as the target's: accept draft d with probability min(1, p(d) / q(d)); on a
    rejection draw the bonus from the normalised residual max(p - q, 0).
    """
    m = len(drafts)
    if temperature == 0:
        target = target_logits.argmax(-1).tolist()  # [m + 1]
        n = 0
        while n < m and drafts[n] == target[n]:
            n += 1
        return n, target[n]
    p = distribution(target_logits, temperature, top_p)  # [m + 1, V]
    for i, d in enumerate(drafts):
        q_d = draft_probs[i, d].item()
        p_d = p[i, d].item()
        u = torch.rand((), generator=generator).item()
        if q_d > 0 and u * q_d < p_d:  # u < p/q, written without dividing
            continue
        residual = (p[i] - draft_probs[i]).clamp_min(0)
        if residual.sum() <= 0:  # p == q: any rejection is measure-zero; fall back to p
            residual = p[i]
        return i, int(draw((residual / residual.sum())[None], generator)[0])
    return m, int(draw(p[m : m + 1], generator)[0])


def accept_with_branches(
    drafts: list[int],
    draft_probs: torch.Tensor | None,  # [m, V]; None = greedy
    target_logits: torch.Tensor,  # [m + 1, V] as for accept_drafts
    forks: list[int],  # per branch: the draft (0-based) it is an alternative to; m: after the last draft
    branches: list[list[int]],  # each: an alternative to drafts[fork], then drafts after it
    branch_logits: list[torch.Tensor],  # each [len(branch), V]: the target's logits at each branch token
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    # Sampling: [len(branch) - 1, V] each, the proposals a branch's tokens after its first were drawn
    # from; None: the chain's after the fork (a branch that carries on with the chain's drafts)
    branch_probs: list[torch.Tensor | None] | None = None,
) -> tuple[int, list[int], int]:
    """Verify a tree: the chain of drafts, and branches that replace drafts[fork] by an alternative
    (or, at fork m, continue after the last draft) and go on with drafts of their own (the chain's
    after the fork, or another source's). Returns (chain drafts accepted, tokens to commit, the branch
    taken or -1). A branch is tried only where the chain's first rejection (or its end) is its fork.

    Greedy: the branch whose alternative is the target's token at the fork, verified like a chain.
    Sampling: after the chain's draft is rejected, the token must follow the residual r (past the last
    draft: the target's p there); each alternative a, a fixed proposal, is accepted with probability
    r(a), else r loses a and is renormalised (rejection sampling with point-mass proposals, so still
    exactly the target's distribution); a taken branch verifies its drafts against their own
    proposals q as a chain does.
    """
    m = len(drafts)
    if temperature == 0:
        n, bonus = accept_drafts(drafts, None, target_logits, 0.0, top_p, generator)
        for k, branch in enumerate(branches):
            if forks[k] == n and branch[0] == bonus:
                tail, tail_bonus = accept_drafts(branch[1:], None, branch_logits[k], 0.0, top_p, generator)
                return n, drafts[:n] + branch[: 1 + tail] + [tail_bonus], k
        return n, drafts[:n] + [bonus], -1
    p = distribution(target_logits, temperature, top_p)  # [m + 1, V]
    i, residual = m, p[m].clone()
    for j, d in enumerate(drafts):
        q_d, p_d = draft_probs[j, d].item(), p[j, d].item()
        u = torch.rand((), generator=generator).item()
        if q_d > 0 and u * q_d < p_d:
            continue
        i, residual = j, (p[j] - draft_probs[j]).clamp_min(0)
        if residual.sum() <= 0:
            residual = p[j]
        break
    residual = residual / residual.sum()
    for k, branch in enumerate(branches):
        if forks[k] != i:
            continue
        a = branch[0]
        if torch.rand((), generator=generator).item() < residual[a].item():
            own = branch_probs is not None and branch_probs[k] is not None
            rest = branch_probs[k] if own else draft_probs[i + 1 : i + len(branch)]
            tail, tail_bonus = accept_drafts(
                branch[1:], rest, branch_logits[k], temperature, top_p, generator
            )
            return i, drafts[:i] + branch[: 1 + tail] + [tail_bonus], k
        residual[a] = 0.0
        if residual.sum() <= 0:  # cannot happen: r(a) = 1 is always accepted
            break
        residual = residual / residual.sum()
    return i, drafts[:i] + [int(draw(residual[None], generator)[0])], -1
