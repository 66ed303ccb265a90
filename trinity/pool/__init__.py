"""The pool: local llama.cpp servers (servers.py) and one async client for every pool model (client.py)."""
