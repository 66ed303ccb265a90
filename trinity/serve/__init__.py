"""Serving: the trained coordinator behind an OpenAI-compatible HTTP API (`trinity serve`).

settings.py (conf/serve, role policy) · schema.py (wire format, per-request overrides) · episode.py (one
request = one episode, routed by trinity.routers.masked; the answer a client reads) · limits.py (bearer
token, body size) · admission.py (episode slots, the FIFO wait queue, draining) · metrics.py
(prometheus_client, own registry) · app.py (FastAPI routes) · preflight.py (what is refused before anything
starts) · server.py (build from config, local pool, uvicorn with a draining shutdown).
"""
