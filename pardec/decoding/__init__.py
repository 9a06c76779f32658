"""Decoding: the loop (engine.py) and one file per method, each a policy over the step primitive.
Methods register themselves in policy.METHODS; pardec.methods adds the ones with models of their own."""

from . import ar, eb, spec, threshold  # noqa: F401  (register the built-in methods)
from .config import DecodeConfig
from .engine import GenerationResult, decode
from .policy import METHODS, Method, Policy, register

__all__ = ["METHODS", "DecodeConfig", "GenerationResult", "Method", "Policy", "decode", "register"]
