"""The model layer: loading (HF id, folder, GGUF, packaged alias), surgery, adapters, checkpoints."""

from .loading import LoadedModel, load_base, load_model
from .packaged import DEFAULT_MODEL, PACKAGED

__all__ = ["DEFAULT_MODEL", "PACKAGED", "LoadedModel", "load_base", "load_model"]
