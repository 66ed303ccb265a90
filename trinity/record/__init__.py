"""Recordings: every pool call the protocol can make on a set of items, made once and replayed."""
