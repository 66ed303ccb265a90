"""The simulated pool: a loopback OpenAI-compatible server that plays L models from a profile with
known outcome probabilities (issue "Learning, proven"). A named experiment for measuring learning, never a default.

profile.py   the behaviour of each simulated model (worker accuracy per suite, verifier accept rates,
             thinker validity, tokens, latency) read from `pool.models.<name>.simulated`
replies.py   reply writers per suite: the item's reference or a plausible wrong answer, as real text
lookup.py    which prepared item and which protocol role a request is about
server.py    the HTTP server (`python -m trinity.simulated.server --world FILE --port N`)
oracle.py    exact expected rewards under the protocol: the best deterministic policy (oracle), the
             hindsight bound (no routing can beat it), single models, random
"""
