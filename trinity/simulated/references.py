"""Reference lines for reports of a run on the simulated pool: the best deterministic policy (oracle), the
hindsight bound, random routing (= x0) and every single model, exactly (oracle.py), pooled with the
weights of the items a report averages over. Every report of such a run says plainly that the pool was
simulated and which profile it played, and that only the hindsight bound is an upper bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trinity.config_schema.pool import PoolConfig
from trinity.contracts import ROLES
from trinity.simulated.oracle import profile_references
from trinity.simulated.profile import parse_profile


def is_simulated(pool: PoolConfig) -> bool:
    """`pool` (the typed pool section) is the routing benchmark's simulated pool."""
    return pool.provider == "simulated"


def label(pool: PoolConfig) -> str:
    return f"SIMULATED POOL (profile '{pool.profile or '?'}')"


def references(pool: PoolConfig, suites: Sequence[str], *, max_turns: int,
               roles: Sequence[str] | None = None, weights: Mapping[str, float] | None = None) -> dict | None:
    """The exact references of the simulated profile in the typed pool section (its models' profiles) for
    `suites`, with K = `max_turns` and the router's `roles` (None: all); None for a real pool."""
    if not is_simulated(pool) or not suites:
        return None
    refs = profile_references(parse_profile(pool), list(suites), int(max_turns),
                              roles=list(roles) if roles else ROLES, weights=dict(weights or {}))
    refs["profile"] = str(pool.profile or "?")
    return refs


ORACLE = "best deterministic policy (oracle)"
HINDSIGHT = "hindsight bound"


def markdown(refs: Mapping, measured: Mapping[str, Mapping[str, float]] | None = None) -> list[str]:
    """A report section: per suite and pooled, the best deterministic policy (oracle), the hindsight bound,
    random routing and the best single model, then each measured method (method -> suite or 'all' ->
    mean reward) and its share of the oracle."""
    measured = measured or {}
    out = [f"## Reference lines of the simulated pool (profile '{refs['profile']}')", "",
           "This run used the SIMULATED pool, a benchmark with known outcome probabilities, not real models. "
           "Expected rewards below are exact under the protocol (K = {k}). The *{o}* is the best routing that "
           "depends only on what the coordinator reads here (per suite, the number of reference thoughts in "
           "its transcript) and chooses one (agent, role) for it: it bounds argmax routing in expectation, "
           "not sampled routing (a randomised choice can beat it, because a Thinker or rejected Verifier turn "
           "leaves the transcript unchanged), and a measured reward, one draw of the outcomes, can exceed it. "
           "The *{h}* is the expected best reward of a routing that knows every outcome in advance (some "
           "model's Worker answer at some turn is right): no routing, sampled or not, exceeds it. *random* is "
           "a uniform agent and role every turn (also x0 = 0, the untrained coordinator), *single* is one "
           "model as the only Worker for one turn.".format(k=refs["max_turns"], o=ORACLE, h=HINDSIGHT), ""]
    methods = list(measured)
    head = (f"| suite | {ORACLE}, exact | {HINDSIGHT}, exact | random (exact) | best single (exact, model) | "
            + " | ".join(f"{m} (measured) | {m} / oracle" for m in methods) + " |")
    out += [head, "|---" * (head.count("|") - 1) + "|"]
    rows = [(s["suite"], s["oracle"], s["hindsight"], s["random"], s["single_worker"]) for s in refs["suites"]]
    pooled = refs["pooled"]
    rows.append(("all (pooled)", pooled["oracle"], pooled["hindsight"], pooled["random"], pooled["single_worker"]))
    for suite, oracle, bound, rand, single in rows:
        best = max(single, key=single.get)
        key = "all" if suite.startswith("all") else suite
        cells = []
        for m in methods:
            value = measured[m].get(key)
            cells.append("n/a | n/a" if value is None else f"{value:.3f} | {value / oracle:.2f}" if oracle
                         else f"{value:.3f} | n/a")
        out.append(f"| {suite} | {oracle:.3f} | {bound:.3f} | {rand:.3f} | {single[best]:.3f} ({best}) | "
                   + " | ".join(cells) + " |")
    out += ["", "Routing of the best deterministic policy per suite (reference thoughts so far -> agent, role): "
            + "; ".join(f"{s['suite']}: "
                        + ", ".join(f"{r['thoughts']}->{r['agent']}/{r['role']}" for r in s["routing"])
                        for s in refs["suites"]), ""]
    return out
