"""Thin Prefect flows, one per DVC stage. All logic lives in `trinity/`."""
