"""Thin Prefect flows, one per DVC stage. All logic lives in `trinity/`.

`python -m flows.<stage>` imports this package first: importing trinity here pins the math libraries' CPU code
paths (trinity.pin_numerics) before a flow module imports Prefect or anything that could load numpy or torch,
whatever those import, so every stage computes the bytes an AVX2-only CPU computes."""

import trinity  # noqa: F401
