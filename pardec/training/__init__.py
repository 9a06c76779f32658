"""Retrofit training: self-distilled data, block layouts, objectives, the training loop."""
