"""Evaluation: the trained coordinator and baselines on the same items, statistics and the report."""
