"""DFlash: a small block-diffusion drafter conditioned on the target's hidden states."""

from .model import ContextCache, Drafter, DrafterConfig, target_features

__all__ = ["ContextCache", "Drafter", "DrafterConfig", "target_features"]
