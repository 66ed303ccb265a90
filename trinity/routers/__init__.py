"""Routers: whatever picks (agent, role) each turn besides the evolved coordinator.

The Router interface, Choice and ROLES are core contracts (trinity.contracts); the evolved coordinator's
router lives with the coordinator (trinity.coordinator.router). Here: baselines.py (single worker,
random, worker/verifier loop, role-only) · masked.py (the serving router: the head masked by the
per-role model policy) · registry.py (name -> router class, ROUTER_CLS).
"""
