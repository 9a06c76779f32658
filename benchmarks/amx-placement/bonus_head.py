"""Session 47's offline check: a small head that drafts the token after the bonus from the base
model's last hidden state where the bonus was computed and the bonus's embedding (Hydra-like, one
step), against the hidden block's first draft. Not timed; the head is not part of pardec.

    D=data/distill-qwen2.5-coder-0.5b S=benchmarks/amx-placement/bonus_head.py
    python $S collect $D-chat-kinds.jsonl,$D-chat-kinds2.jsonl,$D-chat.jsonl,$D-math.jsonl,$D-code3.jsonl \
        150 runs/hid.pt
    python $S train runs/hid.pt 8192 1500 1024 runs/head.pt
    python $S eval runs/head.pt mtbench:0-79 benchmarks/amx-forks/mtbench80/samples.jsonl 16

collect: at every answer position t, h_t (final, normed), x_{t+1} (the bonus) and the model's greedy
token after it. train: z = h + B silu(A [h; s e(x_{t+1})]) scored by the output head's rows of the K
most frequent tokens, cross-entropy, AdamW 1e-3, batches of 512, 10% of positions held out. eval: the
positions of scripts/reveal_probe.py (seed 0, 24 per answer).
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from pardec.model.loading import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from reveal_probe import probe_texts  # noqa: E402


class Head(nn.Module):
    def __init__(self, d: int, hid: int):
        super().__init__()
        self.a, self.b = nn.Linear(2 * d, hid), nn.Linear(hid, d)
        nn.init.zeros_(self.b.weight)  # starts as the hidden state's own head
        nn.init.zeros_(self.b.bias)

    def forward(self, h, e):  # h, e: [N, d]
        return h + self.b(F.silu(self.a(torch.cat([h, e], -1))))


def collect(lm, files, per_file, out):
    H, X, Y, n, t0 = [], [], [], 0, time.time()
    for f in files.split(","):
        for r in [json.loads(line) for line in open(f)][:per_file]:
            p = lm.encode(r["prompt"], True)
            ids = (p + lm.tokenizer.encode(r["response"], add_special_tokens=False))[:640]
            with torch.no_grad():
                o = lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            idx = torch.arange(len(p) - 1, len(ids) - 1)
            H.append(o.hidden_states[-1][0][idx].to(torch.bfloat16))
            X.append(torch.tensor(ids)[idx + 1])
            Y.append(o.logits[0].argmax(-1)[idx + 1])
            n += len(idx)
        print(f, n, f"{n / (time.time() - t0):.0f} tok/s", flush=True)
    torch.save({"h": torch.cat(H), "x": torch.cat(X), "y": torch.cat(Y)}, out)


def train(lm, data, K, steps, hid, out):
    torch.manual_seed(0)
    d = torch.load(data)
    emb = lm.model.get_input_embeddings().weight.detach().float()
    W = lm.model.lm_head.weight.detach().float()
    h, x, y = d["h"].float(), d["x"], d["y"]
    perm = torch.randperm(len(y))
    te, tr = perm[: len(y) // 10], perm[len(y) // 10 :]
    vocab = torch.bincount(torch.cat([y[tr], x[tr]]), minlength=W.shape[0]).topk(K).indices
    where = torch.full((W.shape[0],), -1, dtype=torch.long)
    where[vocab] = torch.arange(K)
    Wk = W[vocab]
    covered = (where[y[te]] >= 0).float().mean().item()
    print("positions", len(y), "held-out targets in the vocabulary", covered)
    head = Head(h.shape[1], hid)
    scale = h.norm(dim=-1).mean() / emb.norm(dim=-1).mean()
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=0.0)

    def acc(idx):
        with torch.no_grad():
            right = [
                vocab[(head(h[j], emb[x[j]] * scale) @ Wk.T).argmax(-1)] == y[j] for j in idx.split(4096)
            ]
            return torch.cat(right).float().mean().item()

    t0 = time.time()
    for step in range(1, steps + 1):
        j = tr[torch.randint(len(tr), (512,))]
        t = where[y[j]]
        keep = t >= 0
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = head(h[j][keep], emb[x[j][keep]] * scale) @ Wk.to(torch.bfloat16).T
        loss = F.cross_entropy(logits.float(), t[keep])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 250 == 0:
            seen, held = acc(tr[:4000]), acc(te)
            print(
                step,
                f"loss {loss.item():.3f} train {seen:.3f} held-out {held:.3f} {time.time() - t0:.0f}s",
                flush=True,
            )
    torch.save({"head": head.state_dict(), "vocab": vocab, "scale": scale, "hid": hid}, out)


def evaluate(lm, ckpt, task, samples, n_items):
    ck = torch.load(ckpt)
    emb = lm.model.get_input_embeddings().weight.detach().float()
    W = lm.model.lm_head.weight.detach().float()
    head = Head(W.shape[1], ck["hid"])
    head.load_state_dict(ck["head"])
    vocab = ck["vocab"]
    Wk = W[vocab]
    hit = top4 = tot = 0
    for x, positions in probe_texts(lm, samples, task, n_items, 24, 8):
        with torch.no_grad():
            hs = lm.model(input_ids=torch.tensor([x]), output_hidden_states=True).hidden_states[-1][0].float()
            for t in positions:
                lg = head(hs[t - 1], emb[x[t]] * ck["scale"]) @ Wk.T
                hit += vocab[lg.argmax()].item() == x[t + 1]
                top4 += x[t + 1] in vocab[lg.topk(4).indices].tolist()
                tot += 1
    print(f"positions {tot}: the head's draft after the bonus right {hit / tot:.3f}, top 4 {top4 / tot:.3f}")


if __name__ == "__main__":
    lm = load_model("qwen2.5-coder-0.5b", dtype=torch.bfloat16)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "collect":
        collect(lm, args[0], int(args[1]), args[2])
    elif cmd == "train":
        train(lm, args[0], int(args[1]), int(args[2]), int(args[3]), args[4])
    else:
        evaluate(lm, args[0], args[1], args[2], int(args[3]))
