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
