"""Training a DFlash drafter: target features cached on disk, random anchors, position-decayed loss.

The target never trains and never runs during training steps: its features (the chosen layers'
outputs at every position of every example) are computed once, without gradients, and stored as
safetensors shards, so many epochs cost only drafter forwards. Each training sequence contributes
K blocks at random anchors a in its response: the block [x_a, MASK x (D - 1)] at positions
a .. a + D - 1 sees the features of positions < a and itself, and learns x_{a+1} .. x_{a+D-1},
slot j weighted exp(-(j - 1) / decay) (early slots decide acceptance).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ...decoding import DecodeConfig
from ...errors import PardecError
from ...model import LoadedModel
from ...training import trainer
from ...training.data import Example
from ...training.run_state import heldout_tpf, write_checkpoint
from . import checkpoint as dcheckpoint
from .context import block_inputs
from .model import (
    Drafter,
    DrafterConfig,
    choose_draft_vocab,
    embedding_scale,
    init_from_target,
    set_feature_scale,
    target_features,
)


@dataclass(frozen=True)
class DrafterTrainConfig:
    block_size: int = 8  # D: the drafter proposes D - 1 tokens per forward
    layers: int = 2  # drafter depth
    target_layers: tuple[int, ...] | None = None  # None: 3 spread over the target's depth
    # "norm": random layers, the target's final norm (default; copies of the target's last layers,
    # "target", fed embeddings instead of a deep residual stream, trained worse); "random": all random
    init: str = "norm"
    anchors_per_sequence: int = 32  # K blocks per training sequence
    decay: float | None = 4.0  # slot j weighs exp(-(j - 1) / decay); None = flat
    lr: float = 6e-4
    weight_decay: float = 0.0
    warmup_steps: int = 20
    steps: int = 400  # optimizer steps
    grad_accum: int = 4  # sequences per step
    max_length: int = 768
    bf16: bool = True
    seed: int = 0
    eval_every: int = 100
    eval_prompts: int = 4
    eval_max_new_tokens: int = 64
    draft_vocab: int = 32768  # drafts use the N most frequent tokens of the data (0 = all); see DrafterConfig

    def __post_init__(self):
        if self.block_size < 2 or self.layers < 1 or self.anchors_per_sequence < 1:
            raise PardecError("drafter training needs block size >= 2, layers >= 1, anchors >= 1")
        if self.steps < 1 or self.grad_accum < 1 or self.lr <= 0:
            raise PardecError("steps and grad accum must be >= 1 and lr > 0")
        if self.init not in ("norm", "target", "random"):
            raise PardecError("init must be 'norm', 'target' or 'random'")
        if self.decay is not None and self.decay <= 0:
            raise PardecError("decay must be > 0")
        if self.draft_vocab < 0:
            raise PardecError("draft vocabulary size must be >= 0 (0 = the whole vocabulary)")


# ---------------------------------------------------------------- target features, cached on disk

SHARD = 64  # examples per shard file


def features_key(
    base_model: str, layers: tuple[int, ...], examples: list[Example], dtype: torch.dtype
) -> str:
    h = hashlib.sha256(json.dumps([base_model, list(layers), str(dtype)]).encode())
    for ex in examples:
        h.update(json.dumps(ex.ids).encode())
    return h.hexdigest()[:16]


@torch.no_grad()
def cache_features(
    target, examples: list[Example], layers: tuple[int, ...], folder: str | Path, progress: bool = True
) -> Path:
    """Run the target over every example once (no gradients) and store the chosen layers' outputs
    [len(ids), H * len(layers)] as safetensors shards in `folder`; shards already there are kept,
    so an interrupted run resumes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n_shards = math.ceil(len(examples) / SHARD)
    todo = [s for s in range(n_shards) if not (folder / f"shard-{s:05d}.safetensors").exists()]
    bar = tqdm(
        total=sum(len(ex.ids) for s in todo for ex in examples[s * SHARD : (s + 1) * SHARD]),
        desc="target features",
        unit="tok",
        disable=not progress,
    )
    for s in todo:
        tensors = {}
        for i in range(s * SHARD, min(len(examples), (s + 1) * SHARD)):
            ids = torch.tensor([examples[i].ids], device=target.device)
            hs = target(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states
            tensors[f"f{i}"] = target_features(hs, layers)[0].to(torch.bfloat16).cpu()
            bar.update(len(examples[i].ids))
        tmp = folder / f"shard-{s:05d}.tmp"
        save_file(tensors, str(tmp))
        tmp.rename(folder / f"shard-{s:05d}.safetensors")  # a killed run never leaves half a shard
    bar.close()
    return folder


def load_features(folder: str | Path, n: int) -> list[torch.Tensor]:
    out: dict[int, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("shard-*.safetensors")):
        out.update({int(k[1:]): v for k, v in load_file(str(f)).items()})
    missing = [i for i in range(n) if i not in out]
    if missing:
        raise PardecError(f"feature cache '{folder}' lacks example {missing[0]}; delete it to recompute")
    return [out[i] for i in range(n)]


# ---------------------------------------------------------------- the loss


def sample_anchors(ex: Example, k: int, gen: torch.Generator) -> torch.Tensor:
    """Up to k distinct anchors a with response_start <= a <= len - 2 (x_{a+1} exists), sorted."""
    lo, hi = ex.response_start, len(ex.ids) - 2
    if hi < lo:
        return torch.zeros(0, dtype=torch.long)
    perm = torch.randperm(hi - lo + 1, generator=gen)[:k] + lo
    return perm.sort().values


@dataclass
class DraftLoss:
    loss: torch.Tensor  # weighted mean cross-entropy (differentiable)
    tokens: int
    slot_loss: torch.Tensor  # [D - 1] summed CE by slot
    slot_correct: torch.Tensor  # [D - 1] argmax hits by slot
    slot_count: torch.Tensor  # [D - 1]


def drafter_loss(
    drafter: Drafter,
    target,
    ids: list[int],
    features: torch.Tensor,
    anchors: torch.Tensor,
    decay: float | None,
) -> DraftLoss:
    """One sequence: features [L, F] of the target, anchors [K] -> the loss over K blocks at once."""
    D, dev = drafter.cfg.block_size, features.device
    L, K = len(ids), len(anchors)
    x = torch.tensor(ids, device=dev)
    pos = torch.arange(L, device=dev)
    ctx = drafter.context_kv(features[None], pos[None])  # per layer [1, kv, L, d]
    blk = block_inputs(x[anchors], D, drafter.cfg.mask_token_id)  # [K, D]
    q_pos = anchors[:, None] + torch.arange(D, device=dev)  # [K, D]
    q_anchor = anchors.repeat_interleave(D)  # [K * D]
    q_block = torch.arange(K, device=dev).repeat_interleave(D)
    mask = torch.cat(
        [
            pos[None, :] < q_anchor[:, None],  # context strictly before the block's anchor
            q_block[:, None] == q_block[None, :],
        ],
        1,
    )  # [K * D, L + K * D]
    emb = target.get_input_embeddings()(blk.view(1, -1))
    h = drafter(emb, q_pos.view(1, -1), ctx, mask[None])[0].view(K, D, -1)[:, 1:]  # [K, D - 1, H]
    labels = x[q_pos[:, 1:].clamp(max=L - 1)]  # [K, D - 1]
    valid = q_pos[:, 1:] < L
    logits = target.get_output_embeddings()(h[valid]).float()  # [N, V]
    logits[:, drafter.cfg.mask_token_id] = float("-inf")
    ce = F.cross_entropy(logits, labels[valid], reduction="none")  # [N]
    slot = torch.arange(1, D, device=dev).expand(K, -1)[valid]  # [N] slot index 1 .. D - 1
    w = torch.ones_like(ce) if decay is None else torch.exp(-(slot - 1).float() / decay)
    loss = (w * ce).sum() / w.sum().clamp_min(1e-9)
    hit = (logits.argmax(-1) == labels[valid]).float()
    z = torch.zeros(D - 1, device=dev)
    return DraftLoss(
        loss,
        int(valid.sum()),
        z.index_add(0, slot - 1, ce.detach()),
        z.index_add(0, slot - 1, hit),
        z.index_add(0, slot - 1, torch.ones_like(hit)),
    )


# ---------------------------------------------------------------- the job for the training loop


class DrafterJob:
    """Train a drafter for the target `lm` on its cached features (a training.trainer.Job: run it with
    trainer.train); float32 weights under bf16 autocast, the target frozen, a held-out DFlash TPF
    at every checkpoint."""

    name = "train drafter"
    lr_floor = 0.05
    distributed = False  # the loss calls the drafter's parts directly, not through a DDP wrapper

    def __init__(
        self,
        lm: LoadedModel,
        drafter: Drafter,
        train: list[Example],
        features: list[torch.Tensor],
        heldout: list[list[int]],
        cfg: DrafterTrainConfig,
    ):
        target = lm.model
        self.lm, self.target, self.module, self.cfg = lm, target, drafter, cfg
        self.keep = [i for i, ex in enumerate(train) if len(ex.ids) - 2 >= ex.response_start]
        if not self.keep:
            raise PardecError("no training examples with a response to predict")
        self.train, self.features, self.heldout = train, features, heldout
        for p in target.parameters():
            p.requires_grad_(False)
        self.params = list(drafter.parameters())
        self.param_names = {id(p): n for n, p in drafter.named_parameters()}
        self.n_examples, self.n_slots = len(self.keep), cfg.block_size - 1
        self.autocast = torch.autocast(
            "cpu", dtype=torch.bfloat16, enabled=cfg.bf16 and target.device.type == "cpu"
        )

    def loss(self, example, gen, forward):
        ex = self.train[self.keep[example]]
        anchors = sample_anchors(ex, self.cfg.anchors_per_sequence, gen).to(self.target.device)
        with self.autocast:
            return drafter_loss(
                self.module,
                self.target,
                ex.ids,
                self.features[self.keep[example]].to(self.target.device),
                anchors,
                self.cfg.decay,
            )

    def evaluate(self):
        if not self.heldout:
            return None
        config = DecodeConfig(
            method="dflash", block_size=self.cfg.block_size, max_new_tokens=self.cfg.eval_max_new_tokens
        )
        return heldout_tpf(
            self.target,
            self.heldout,
            config,
            self.module.cfg.mask_token_id,
            self.lm.stop_ids,
            {"drafter": self.module},
        )

    def save(self, out, step, history, moments):
        training = dict(dataclasses.asdict(self.cfg), step=step)
        write_checkpoint(
            out,
            lambda folder: dcheckpoint.save(
                folder, self.module, self.lm.name, self.lm.base_sha256, training=training, extra=moments
            ),
            history,
            tpf_label="held-out dflash TPF",
            first_slot=1,
        )

    @torch.no_grad()
    def load(self, path):
        tensors = dcheckpoint.read_tensors(path)
        for n, p in self.module.state_dict().items():
            if n == "draft_vocab" and n not in tensors:
                continue  # a checkpoint from before draft vocabularies: keep the one chosen from the data
            if n not in tensors or tensors[n].shape != p.shape:
                raise PardecError(
                    f"cannot resume from '{path}': tensor '{n}' is missing or has another shape"
                )
            p.copy_(tensors[n])
        return dcheckpoint.read_settings(path).get("training"), tensors


def train_for(lm: LoadedModel, train: list[Example], heldout: list[list[int]], cfg: DrafterTrainConfig,
              out: str | Path, features: str | Path | None = None, resume: str | Path | None = None,
              progress: bool = True) -> list[dict]:  # fmt: skip
    """Everything `pardec train-drafter` does for a LoadedModel (its plain base): size the drafter
    for the target, cache the target's features (in `features`, default under the pardec cache),
    choose the draft vocabulary from the data, set the feature scale and initial weights (fresh runs),
    then train."""
    from ...model.loading import cache_dir

    model, mask_id = lm.model, lm.mask_id
    V = model.get_output_embeddings().weight.shape[0]
    n_vocab = cfg.draft_vocab if 0 < cfg.draft_vocab < V - 1 else 0  # V - 1: [MASK] is never drafted
    dcfg = DrafterConfig.for_target(
        model.config,
        mask_id,
        cfg.layers,
        cfg.block_size,
        cfg.target_layers,
        vocab_size=V,
        embed_scale=embedding_scale(model),
        draft_vocab_size=n_vocab,
    )
    folder = (
        Path(features)
        if features
        else (cache_dir() / "features" / features_key(lm.name, dcfg.target_layers, train, model.dtype))
    )
    cache_features(model, train, dcfg.target_layers, folder, progress)
    feats = load_features(folder, len(train))
    torch.manual_seed(cfg.seed)
    drafter = Drafter(dcfg)
    if n_vocab:  # from the data every run (a resumed older checkpoint may lack it)
        drafter.draft_vocab.copy_(
            choose_draft_vocab(
                [ex.ids[ex.response_start :] for ex in train],
                n_vocab,
                V,
                always=lm.stop_ids,
                exclude=[mask_id],
            )
        )
    if resume is None:
        set_feature_scale(drafter, feats)
        if cfg.init != "random":
            init_from_target(drafter, model, layers=cfg.init == "target")
    return trainer.train(DrafterJob(lm, drafter, train, feats, heldout, cfg), out, resume, progress)
