"""Decoding: one block step primitive (step.py) and the policies over it."""

from .config import METHODS, DecodeConfig
from .engine import GenerationResult, decode

__all__ = ["METHODS", "DecodeConfig", "GenerationResult", "decode"]
