"""Champion and challenger: does a newly trained coordinator replace the champion?

Both ran on the same items (same item, repeat and sampling seed), so their rewards are paired, and the
question is the evaluation's (trinity.stats): exact McNemar on 0/1 rewards, the sign-flip test
otherwise. `retrain.promote_rule`:
- paired_test: promote only when the challenger is better at `retrain.alpha` on at least
  `retrain.min_items` paired items; a tie, a loss, no significant difference or too few items keep the champion;
- always: promote (the run still records the test); never: keep (e.g. to review by hand, then
  `trinity models promote`).
With no champion yet, the challenger is promoted whatever the rule (there is nothing to keep), except `never`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trinity.config_schema.root import Retrain
from trinity.errors import ConfigError
from trinity.stats import PairedTest, paired_test

RULES = ("paired_test", "always", "never")


@dataclass(frozen=True)
class GateRule:
    rule: str = "paired_test"
    alpha: float = 0.05
    min_items: int = 20

    @classmethod
    def from_config(cls, r: Retrain) -> GateRule:
        """From the typed `retrain` section: promote_rule, alpha, min_items (schema:
        trinity.config_schema.root.Retrain)."""
        if not 0 < float(r.alpha) < 1:
            raise ConfigError(f"config key 'retrain.alpha' must be in (0, 1), got {r.alpha}")
        return cls(str(r.promote_rule.value), float(r.alpha), int(r.min_items))


@dataclass(frozen=True)
class GateDecision:
    promote: bool
    reason: str
    test: PairedTest | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"promote": self.promote, "reason": self.reason}
        if self.test is not None:
            t = self.test
            out.update(n=t.n, challenger_reward=t.mean_a, champion_reward=t.mean_b, test=t.test, p_value=t.p_value,
                       challenger_only_right=t.b, champion_only_right=t.c)
        return out


def decide(challenger: Sequence[float], champion: Sequence[float] | None, rule: GateRule, *,
           seed: int = 0, champion_unusable: str | None = None) -> GateDecision:
    """`challenger[i]` and `champion[i]` are the rewards of the same item (each averaged over the
    item's repeats, so n counts items); `champion` None: there
    is no champion yet, or, with `champion_unusable` (why), there is one that could not be evaluated: then
    only promote_rule=always promotes."""
    if champion_unusable is not None:
        if rule.rule == "always":
            return GateDecision(True, f"retrain.promote_rule is always; {champion_unusable}")
        return GateDecision(False, f"the champion stays: {champion_unusable}")
    if champion is None:
        if rule.rule == "never":
            return GateDecision(False, "no champion yet, but retrain.promote_rule is never: promote by hand")
        return GateDecision(True, "no champion yet: the first trained coordinator becomes the champion")
    test = paired_test(challenger, champion, seed=seed)
    figures = (f"challenger {test.mean_a:.4f} vs champion {test.mean_b:.4f} on {test.n} paired items, "
               f"{test.test} p = {test.p_value:.4g}")
    if rule.rule == "always":
        return GateDecision(True, f"retrain.promote_rule is always ({figures})", test)
    if rule.rule == "never":
        return GateDecision(False, f"retrain.promote_rule is never ({figures})", test)
    if test.n < rule.min_items:
        return GateDecision(False, f"too few paired items to tell them apart (n={test.n}, need {rule.min_items}); "
                                   f"the champion stays ({figures})", test)
    if test.difference > 0 and test.p_value < rule.alpha:
        return GateDecision(True, f"the challenger beats the champion at alpha = {rule.alpha} ({figures})", test)
    if test.difference < 0 and test.p_value < rule.alpha:
        why = "the challenger is worse than the champion"
    elif test.difference > 0:
        why = "the challenger is better but not significantly"
    else:
        why = "no better than the champion"
    return GateDecision(False, f"{why} at alpha = {rule.alpha}; the champion stays ({figures})", test)
