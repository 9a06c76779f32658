"""The DFlash drafter: a few transformer layers that propose a whole block in one pass.

Input: the block [last committed token, MASK x (D - 1)] at positions p .. p + D - 1, embedded with
the target's own (frozen) embedding; attention inside the block is bidirectional. Conditioning: the
hidden states of a few target layers at every committed position before p, concatenated, projected
(`fc`) and normalised (`hidden_norm`), enter every drafter layer as extra keys and values through
that layer's own k/v projections (KV injection). Those context keys and values depend only on the
target's features, never on the block, so they are computed once per committed token and cached
(`ContextCache`). Output: the drafter's final norm, then the target's (frozen) output head.

Parameter names and the computation follow the public DFlash drafters (Qwen3-style layers with
q/k norms), so a trained drafter can be exported to their format (checkpoint.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import PardecError


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    target_layers: tuple[int, ...]  # target layers whose outputs condition the drafter
    n_target_layers: int
    block_size: int  # D: the block [anchor, MASK x (D - 1)] drafts D - 1 tokens
    mask_token_id: int
    vocab_size: int
    embed_scale: float = 1.0  # block embeddings are multiplied by this (DFlash's input_embedding_scale)
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    max_position_embeddings: int = 32768
    # Drafts come only from these most frequent tokens (0 = the whole vocabulary): the shared head is
    # most of a drafter forward's cost at 150k tokens. Verification stays exact either way.
    draft_vocab_size: int = 0

    def __post_init__(self):
        if self.n_layers < 1 or self.block_size < 2:
            raise PardecError("a drafter needs >= 1 layer and a block size >= 2")
        if not 0 <= self.draft_vocab_size <= self.vocab_size:
            raise PardecError(f"draft vocabulary size must lie in [0, {self.vocab_size}]")
        if not self.target_layers or not all(0 <= i < self.n_target_layers for i in self.target_layers):
            raise PardecError(f"target layers {self.target_layers} must lie in [0, {self.n_target_layers})")
        if self.n_heads % self.n_kv_heads:
            raise PardecError("attention heads must be a multiple of key/value heads")

    @property
    def feature_size(self) -> int:
        return self.hidden_size * len(self.target_layers)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> DrafterConfig:
        d = dict(d)
        d["target_layers"] = tuple(d["target_layers"])
        return cls(**d)

    @classmethod
    def for_target(
        cls,
        config,
        mask_id: int,
        n_layers: int = 2,
        block_size: int = 8,
        target_layers: tuple[int, ...] | None = None,
        vocab_size: int | None = None,
        embed_scale: float = 1.0,
        draft_vocab_size: int = 0,
    ) -> DrafterConfig:
        """Same widths as the target (so the shared embedding and head fit, and layers can start
        as copies of the target's); target layers spread from the second to the fourth-last."""
        L = config.num_hidden_layers
        if target_layers is None:
            k = max(1, min(3, L))
            lo, hi = min(1, L - 1), max(min(1, L - 1), L - 3)
            target_layers = tuple(sorted({round(lo + (hi - lo) * i / max(1, k - 1)) for i in range(k)}))
        heads = config.num_attention_heads
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta") if isinstance(rope, dict) else None
        return cls(
            hidden_size=config.hidden_size,
            n_layers=n_layers,
            n_heads=heads,
            n_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            intermediate_size=config.intermediate_size,
            target_layers=tuple(target_layers),
            n_target_layers=L,
            block_size=block_size,
            mask_token_id=mask_id,
            vocab_size=vocab_size or config.vocab_size,
            embed_scale=embed_scale,
            rope_theta=float(theta or getattr(config, "rope_theta", 10000.0)),
            rms_eps=float(getattr(config, "rms_norm_eps", 1e-6)),
            max_position_embeddings=getattr(config, "max_position_embeddings", 32768),
            draft_vocab_size=draft_vocab_size,
        )


def target_features(hidden_states, layers: tuple[int, ...]) -> torch.Tensor:
    """transformers' output_hidden_states (embeddings, then each layer's output) -> the drafter's
    conditioning [B, T, H * len(layers)]: the outputs of the chosen layers, concatenated."""
    return torch.cat([hidden_states[i + 1] for i in layers], -1)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotary(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding, half-split convention. x [B, h, T, d], pos [B, T]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))  # [d/2]
    ang = pos[:, None, :, None].float() * inv  # [B, 1, T, d/2]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x.float().chunk(2, -1)
    rot = torch.cat([-x2, x1], -1)
    return (x.float() * cos + rot * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        H, h, kv, d = cfg.hidden_size, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(H, h * d, bias=False)
        self.k_proj = nn.Linear(H, kv * d, bias=False)
        self.v_proj = nn.Linear(H, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, H, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_eps)
        self.k_norm = RMSNorm(d, cfg.rms_eps)

    def kv(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, H] at positions pos [B, T] -> keys, values [B, kv, T, d] (keys normed, rotated)."""
        B, T, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, T, self.cfg.n_kv_heads, self.cfg.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.cfg.n_kv_heads, self.cfg.head_dim).transpose(1, 2)
        return rotary(k, pos, self.cfg.rope_theta), v

    def forward(self, x, pos, ctx: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor):
        """x [B, T, H] block states; ctx: context keys, values [B, kv, S, d]; mask [B, T, S + T] bool."""
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.cfg.n_heads, self.cfg.head_dim)).transpose(1, 2)
        q = rotary(q, pos, self.cfg.rope_theta)  # [B, h, T, d]
        k_self, v_self = self.kv(x, pos)
        k = torch.cat([ctx[0].to(x.dtype), k_self], 2)  # [B, kv, S + T, d]
        v = torch.cat([ctx[1].to(x.dtype), v_self], 2)
        rep = self.cfg.n_heads // self.cfg.n_kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[:, None], scale=1 / math.sqrt(self.cfg.head_dim)
        )
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, pos, ctx, mask):
        x = x + self.self_attn(self.input_layernorm(x), pos, ctx, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Drafter(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.feature_size, cfg.hidden_size, bias=False)
        # A fixed per-channel scale on the target's features before `fc`. Residual streams carry a few
        # channels ~100x the median ("massive activations"); unscaled, they swamp fc's output and its
        # Adam updates for hundreds of steps. Set from data once (set_feature_scale); being linear
        # before a linear map, it folds into fc.weight on export.
        self.register_buffer("feature_scale", torch.ones(cfg.feature_size))
        if cfg.draft_vocab_size:
            # [Vd] sorted token ids the drafts may use (choose_draft_vocab)
            self.register_buffer("draft_vocab", torch.arange(cfg.draft_vocab_size))
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def context_kv(
        self, features: torch.Tensor, pos: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Target features [B, S, F] at positions pos [B, S] -> per layer, keys and values [B, kv, S, d]."""
        ctx = self.hidden_norm(
            self.fc(features.to(self.dtype) * self.feature_scale.to(self.dtype))
        )  # [B, S, H]
        return [layer.self_attn.kv(ctx, pos) for layer in self.layers]

    def forward(self, embeds: torch.Tensor, pos: torch.Tensor, ctx_kv, mask: torch.Tensor) -> torch.Tensor:
        """Block embeddings [B, T, H] at pos [B, T]; ctx_kv from context_kv (S slots); mask [B, T, S + T]
        bool (True = may attend). Returns final hidden states [B, T, H], for the target's head."""
        x = embeds.to(self.dtype) * self.cfg.embed_scale
        for layer, ctx in zip(self.layers, ctx_kv):
            x = layer(x, pos, ctx, mask)
        return self.norm(x)


@torch.no_grad()
def embedding_scale(target) -> float:
    """1 / RMS of the target's input embeddings. Many LMs embed tokens at RMS ~0.01, while the
    injected context is normalised to RMS 1: unscaled, the block's own tokens are drowned by the
    context's average and every slot predicts the same token."""
    w = target.get_input_embeddings().weight
    return float(torch.rsqrt(w.float().pow(2).mean()))


@torch.no_grad()
def set_feature_scale(drafter: Drafter, features: list[torch.Tensor], max_rows: int = 50_000) -> None:
    """feature_scale = 1 / RMS of each feature channel over (up to max_rows of) the training data."""
    rows = torch.cat([f.float() for f in features])[:max_rows]  # [N, F]
    drafter.feature_scale.copy_(torch.rsqrt(rows.pow(2).mean(0) + 1e-6).to(drafter.feature_scale.dtype))


@torch.no_grad()
def init_from_target(drafter: Drafter, target, layers: bool = True) -> int:
    """Start the drafter's final norm as the target's (its weights set the logit scale the shared
    head expects) and, with `layers`, its layers as copies of the target's last layers where names
    and shapes fit. Returns the number of tensors copied."""
    n = 0
    norm = getattr(target.get_decoder(), "norm", None)
    if (
        norm is not None
        and getattr(norm, "weight", None) is not None
        and norm.weight.shape == drafter.norm.weight.shape
    ):
        drafter.norm.weight.copy_(norm.weight.to(drafter.dtype))
        n += 1
    if not layers:
        return n
    try:
        layers = target.get_decoder().layers
    except AttributeError:
        return n
    offset = len(layers) - len(drafter.layers)
    for i, mine in enumerate(drafter.layers):
        theirs = dict(layers[offset + i].named_parameters())
        for name, p in mine.named_parameters():
            if name in theirs and theirs[name].shape == p.shape:
                p.copy_(theirs[name].to(p.dtype))
                n += 1
    return n


def choose_draft_vocab(sequences, size: int, vocab_size: int, always=(), exclude=()) -> torch.Tensor:
    """The `size` most frequent tokens of `sequences` (ties and the unseen: lowest id first), always
    holding `always` (stop tokens) and never `exclude` ([MASK]) -> sorted ids [size]."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for seq in sequences:
        counts += torch.bincount(torch.as_tensor(seq, dtype=torch.long), minlength=vocab_size)[:vocab_size]
    big = int(counts.max()) + 2 if len(counts) else 2
    for t in always:
        counts[t] = big  # ranked first
    for t in exclude:
        counts[t] = -1  # ranked last
    order = torch.argsort(-counts, stable=True)  # by count, then by id
    if size > vocab_size - len(set(exclude)):
        raise PardecError(
            f"draft vocabulary of {size} is larger than the {vocab_size - len(set(exclude))} usable tokens"
        )
    return order[:size].sort().values
