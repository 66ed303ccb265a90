"""Versions of trained coordinators and which one is the champion (trinity.models.store)."""
