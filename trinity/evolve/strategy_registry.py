"""Every way the evolve stage can train the coordinator's parameters, by name (`evolve.strategy`).

One registry for two kinds, each with its own interface; a class's `kind` says which, and the loop
(trinity.evolve.loop) runs the step of that kind:
- "black_box" (trinity.evolve.strategies.BlackBoxStrategy): ask for candidates, tell their fitness.
- "on_policy" (trinity.evolve.on_policy.OnPolicyMethod): run the current policy with its routing
  decisions recorded, update on those episodes.
Adding an algorithm is a class of one of those kinds and a line here; settings come from
`evolve.<name>` (e.g. `evolve.reinforce.learning_rate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity.errors import ConfigError
from trinity.evolve.on_policy import OnPolicyMethod, Reinforce
from trinity.evolve.strategies import BlackBoxStrategy, RandomSearch, SepCMA

Algorithm = BlackBoxStrategy | OnPolicyMethod
KINDS = ("black_box", "on_policy")

STRATEGIES: dict[str, type[BlackBoxStrategy] | type[OnPolicyMethod]] = {
    "sep_cma": SepCMA,
    "random_search": RandomSearch,
    "reinforce": Reinforce,
}


def make_strategy(name: str, n_params: int, *, popsize: int | None = None,
                   options: Mapping[str, Any] | None = None) -> Algorithm:
    """`popsize` None: the spec's rule (trinity.evolve.strategies.default_popsize)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"config key 'evolve.strategy': unknown strategy {name!r}; "
                          f"known: {sorted(STRATEGIES)}") from None
    return cls(n_params, popsize=popsize, options=options)
