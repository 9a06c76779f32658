"""pardec: retrofit a causal LM to decode several tokens per forward pass."""

from .api import Output, configure, generate
from .decoding import DecodeConfig, GenerationResult, decode
from .errors import PardecError
from .model import LoadedModel, load_model

__all__ = [
    "DecodeConfig",
    "GenerationResult",
    "LoadedModel",
    "Output",
    "PardecError",
    "configure",
    "decode",
    "generate",
    "load_model",
]
__version__ = "0.2.0"
