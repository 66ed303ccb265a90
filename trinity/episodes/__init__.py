"""Episodes: the Thinker/Worker/Verifier turn protocol and the async runner."""
