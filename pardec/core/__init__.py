"""The core every method runs on: the block attention rule, the ragged KV cache, the step primitive,
sampling and the one verifier."""
