"""pardec: retrofit a causal LM to decode several tokens per forward pass."""

from .api import Output, generate, load_model
from .decoding import DecodeConfig, GenerationResult, decode
from .errors import PardecError

__all__ = ["DecodeConfig", "GenerationResult", "Output", "PardecError", "decode", "generate", "load_model"]
__version__ = "0.1.0"
