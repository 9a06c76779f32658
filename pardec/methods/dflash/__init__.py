"""DFlash: a small block-diffusion drafter conditioned on the target's hidden states (KV injection).
Importing this package registers the `dflash` decoding method; its trainer is `training.py`."""

from .context import ContextCache
from .model import Drafter, DrafterConfig, target_features
from .policy import DFlash, load_drafter

__all__ = ["ContextCache", "DFlash", "Drafter", "DrafterConfig", "load_drafter", "target_features"]
