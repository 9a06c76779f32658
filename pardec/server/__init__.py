"""`pardec serve`: an OpenAI-compatible HTTP server with continuous batching (app.py, engine.py)."""
