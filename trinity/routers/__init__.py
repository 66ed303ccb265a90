"""Routers: whatever picks (agent, role) each turn, in one place.

base.py (ROLES, the Router interface, Choice) · coordinator.py (the evolved coordinator's head) ·
baselines.py (single worker, random, worker/verifier loop, role-only) · masked.py (the serving router:
the head masked by the per-role model policy) · registry.py (name -> router class, ROUTER_CLS).

Nothing is imported here, so `trinity.routers.base` stays importable from the coordinator's head
without pulling the routers that import the head back.
"""
