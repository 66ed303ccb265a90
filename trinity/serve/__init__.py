"""Serving: the trained coordinator behind an OpenAI-compatible HTTP API (`trinity serve`).

settings.py (conf/serve, role policy) · schema.py (wire format, per-request overrides) · masked.py (the
head's probabilities masked by the role policy) · episode.py (one request = one episode) · limits.py
(bearer token, body size, concurrency gate) · metrics.py (Prometheus text) · app.py (FastAPI routes) ·
server.py (build from config, uvicorn).
"""
