"""Where `spec --reveal` drafts from a revealed block (session 46's diagnostic, TPF only, not timed).

    python benchmarks/amx-reveal/reveal_stats.py "mtbench:0-1,mtbench:20-21,mtbench:40-41,mtbench:60-61" 3

Decodes the prompts with the bundled adapter, fixed shapes (--no-adaptive), 160 new tokens, bf16, and
records at every step that drafts next: the first block's place R (drafts before it), the chain's
accepted drafts n and committed path, whether the token committed at draft position R + 1 was among
the revealed ones, and whether a revealed block drafted next.
"""

import collections
import sys

import torch

from pardec.api import configure
from pardec.decoding import DecodeConfig, decode
from pardec.decoding.spec import Speculative
from pardec.model.loading import load_model
from pardec.tasks import load_tasks

lm = load_model(dtype=torch.bfloat16)
items = load_tasks(sys.argv[1])
reveal = int(sys.argv[2])
log = []
choose = Speculative.drafting_block


def recorded(self, row, n, commit):
    L, k = choose(self, row, n, commit)
    st, lengths = row.state, self.block_lengths(row)
    R = lengths[0]
    revealed = k is not None and k >= len(lengths)
    held = R <= n and commit[R] in self.reveal_tokens(row, R)
    log.append(dict(n=n, path=len(commit) - 1, R=R, revealed=revealed, held=held, reached=R <= n,
                    lookup=st.from_lookup))  # fmt: skip
    return L, k


Speculative.drafting_block = recorded
config, extras = configure(lm, DecodeConfig(method="spec", block_size=8, adaptive=False, reveal=reveal,
                                            max_new_tokens=160))  # fmt: skip
outs = decode(lm.decoder, [lm.encode(it.prompt, True) for it in items], config, lm.mask_id, extras=extras)
N = len(log)
share = lambda f: sum(map(f, log)) / N  # noqa: E731
print(f"TPF {sum(len(o.tokens) for o in outs) / sum(o.forwards for o in outs):.3f}, {N} steps drafting next")
print(f"drafted from a revealed block: {share(lambda e: e['revealed']):.2f}")
print(f"committed path = R: {share(lambda e: e['path'] == e['R']):.2f}")
print(f"committed path > R: {share(lambda e: e['path'] > e['R']):.2f}")
print(f"chain rejected before R: {share(lambda e: e['n'] < e['R']):.2f}")
reached = [e for e in log if e["reached"]]
print(f"token at R + 1 among the revealed (R reached): {sum(e['held'] for e in reached) / len(reached):.2f}")
print(f"looked-up chains: {share(lambda e: e['lookup']):.2f}")
print("R:", collections.Counter(e["R"] for e in log).most_common(5))
