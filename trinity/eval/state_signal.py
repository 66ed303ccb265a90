"""What the coordinator's state can see on a recording: a probe of each agent's correctness from the state.

The hindsight bound counts the items where some agent is right and the best one is wrong; a coordinator can
only route to those items if its input tells them apart. For each agent the target is its recorded turn-0
Worker grade; a ridge probe on the standardised state predicts it, leave-one-out (exact, from the hat
matrix), at each strength of a small grid, each AUC at its best strength in hindsight (optimistic for the
probe). The AUC within suites counts pairs of items of one suite only: signal about the item beyond its
suite. Its p-value comes from shuffling the labels inside each suite and scoring each shuffle the same
best-in-hindsight way, so the selection's optimism is in the null too. Used by the evaluate report on a
recording and by benchmarks/routing_signal.py (docs/benchmarks/routing_signal/).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LAMBDAS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


def auc(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray | None = None) -> float:
    """Probability that a random positive outranks a random negative (ties half), pairs within one group
    only when `groups` is given. nan without both classes."""
    scores, labels = np.asarray(scores, float), np.asarray(labels, bool)
    groups = np.zeros(len(scores), int) if groups is None else np.asarray(groups)
    wins = pairs = 0.0
    for g in np.unique(groups):
        s, y = scores[groups == g], labels[groups == g]
        pos, neg = s[y], s[~y]
        if len(pos) and len(neg):
            diff = pos[:, None] - neg[None, :]
            wins += float((diff > 0).sum() + 0.5 * (diff == 0).sum())
            pairs += float(diff.size)
    return wins / pairs if pairs else float("nan")


class Ridge:
    """Leave-one-out predictions of ridge regression (unpenalised intercept) on fixed features, exact and
    fast for many targets and strengths: with the kernel K = Xc Xc^T = U diag(e) U^T of the centred
    features, the hat matrix is H = U diag(e / (e + lam)) U^T + 1/n, and the held-out prediction of item i is
    (yhat_i - H_ii y_i) / (1 - H_ii)."""

    def __init__(self, x: np.ndarray):
        x = np.asarray(x, dtype=np.float64)
        xc = x - x.mean(axis=0)
        e, self.u = np.linalg.eigh(xc @ xc.T)
        self.e = np.clip(e, 0.0, None)
        self.n = len(x)
        self._hat: dict[float, tuple[np.ndarray, np.ndarray]] = {}   # per strength: H and its diagonal

    def loo(self, y: np.ndarray, lam: float) -> np.ndarray:
        """Held-out predictions of `y`; H is built once per strength (permutation tests call this thousands of
        times with the same features)."""
        if lam not in self._hat:
            h = (self.u * (self.e / (self.e + lam))) @ self.u.T + 1.0 / self.n
            self._hat[lam] = (h, np.diag(h).copy())
        h, d = self._hat[lam]
        y = np.asarray(y, dtype=np.float64)
        return (h @ y - d * y) / (1.0 - d)


def loo_group_mean(y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each item's group mean without the item itself (what knowing the suite alone predicts)."""
    y = np.asarray(y, dtype=np.float64)
    out = np.empty(len(y))
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        out[idx] = (y[idx].sum() - y[idx]) / max(len(idx) - 1, 1)
    return out


def standardise(states: np.ndarray) -> np.ndarray:
    states = np.asarray(states, dtype=np.float64)
    sd = states.std(axis=0)
    return (states - states.mean(axis=0)) / np.where(sd > 1e-8 * sd.max(), sd, 1.0)


def probe(x: Ridge, y: np.ndarray, groups: np.ndarray, permutations: int, rng: np.random.Generator) -> dict:
    """The probe's leave-one-out AUC over all items and within groups, each at its best ridge strength in
    hindsight, the within-group AUC's permutation p-value (labels shuffled inside each group `permutations`
    times, each scored the same way) and the predictions at the overall best strength."""
    y = np.asarray(y, dtype=np.float64)
    labels = y >= 0.5

    def best_within(target: np.ndarray) -> float:
        return max(float(np.nan_to_num(auc(x.loo(target, lam), target >= 0.5, groups), nan=0.5)) for lam in LAMBDAS)

    overall = [(float(np.nan_to_num(auc(x.loo(y, lam), labels), nan=0.5)), lam) for lam in LAMBDAS]
    top, lam = max(overall, key=lambda t: (t[0], -t[1]))
    within = best_within(y)
    null = []
    for _ in range(permutations):
        shuffled = y.copy()
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            shuffled[idx] = y[rng.permutation(idx)]
        null.append(best_within(shuffled))
    p = (1 + sum(v >= within for v in null)) / (1 + permutations)
    return {"auc_probe": top, "ridge": lam, "auc_within_suite": within,
            "auc_within_suite_null_mean": float(np.mean(null)) if null else None, "p_within_suite": float(p),
            "predictions": x.loo(y, lam)}


def first_turn_signal(states: np.ndarray, grades: np.ndarray, suites: Sequence[str], agents: Sequence[str], *,
                      permutations: int = 200, seed: int = 0) -> dict:
    """Per agent (columns of `grades`, items x agents, each the agent's turn-0 Worker grade): its accuracy,
    the AUC of the suite alone, and the first-turn probe (`probe`); plus how well the state tells the suites
    apart (leave-one-out accuracy of one-vs-rest probes) and the predictions, for routers."""
    grades = np.asarray(grades, dtype=np.float64)
    names = sorted(set(suites))
    groups = np.array([names.index(s) for s in suites])
    ridge = Ridge(standardise(states))
    suite_scores = np.stack([ridge.loo((groups == g).astype(float), 10.0) for g in range(len(names))], axis=1)
    out: dict = {"items": len(suites), "suites": {s: list(suites).count(s) for s in names},
                 "suite_accuracy": float((suite_scores.argmax(axis=1) == groups).mean()),
                 "permutations": permutations, "agents": {}}
    predictions = np.zeros_like(grades)
    for a, name in enumerate(agents):
        y = grades[:, a]
        turn0 = probe(ridge, y, groups, permutations, np.random.default_rng([seed, a]))   # one stream per agent
        predictions[:, a] = turn0.pop("predictions")
        out["agents"][name] = {"right": float(y.mean()), "auc_suite_alone": auc(loo_group_mean(y, groups), y >= 0.5),
                               "first_turn": turn0}
    out["predictions"] = predictions
    out["groups"] = groups
    return out


def report_lines(signal: dict, *, alpha: float = 0.05, min_items: int = 20) -> list[str]:
    """The evaluate report's paragraph: does the coordinator's first-turn state tell, inside a suite, which
    items each agent gets right?"""
    n = int(signal["items"])
    head = ("What the coordinator's first-turn state can see (a ridge probe of each agent's recorded first answer "
            f"being right, leave-one-out over the {n} recorded items of every split; it chooses nothing the report "
            "scores; `benchmarks/routing_signal.py`, docs/RECORDINGS.md):")
    if n < min_items:
        return ["", f"{head} too few items (n={n}, need {min_items}).", ""]
    parts, seen = [], []
    for name, row in signal["agents"].items():
        t = row["first_turn"]
        if t["p_within_suite"] < alpha:
            seen.append(name)
        parts.append(f"{name} (right on {row['right']:.3f}) {t['auc_within_suite']:.3f}, permutation p = "
                     f"{t['p_within_suite']:.3g}: {'signal' if name in seen else 'no signal'}")
    close = (f"The state carries item-level signal for {', '.join(seen)} (at p < {alpha:g}; the agents are tested "
             "separately)." if seen else
             "No agent shows item-level signal: a head on this state can route by suite and by turn, not by "
             "item, whatever room the hindsight bound shows.")
    return ["", f"{head} it tells the suites apart with leave-one-out accuracy {signal['suite_accuracy']:.3f}; "
                f"within a suite the probe's AUC (0.5: chance; {signal['permutations']} shuffles of the labels "
                f"inside each suite) is " + "; ".join(parts) + ". " + close, ""]
