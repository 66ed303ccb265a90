"""Expected episodes, calls and tokens per pool model, their price and the wall time they take."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from trinity.config_schema import TrinityConfig
from trinity.contracts import ROLES
from trinity.pipeline.workload import Part, Route
from trinity.plan.assumptions import Assumptions
from trinity.plan.chain import episode_shape
from trinity.plan.tokens import JUDGE_PROMPT_TOKENS, SuiteTokens, model_setting, suite_tokens

SCENARIOS = ("typical", "at_cap")


@dataclass
class Usage:
    """Expected episodes, calls and tokens (by pool model); additive."""
    episodes: float = 0.0
    max_calls: float = 0.0
    calls: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    prompt: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    completion: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def call(self, model: str, n: float, prompt: float, completion: float) -> None:
        self.calls[model] += n
        self.prompt[model] += prompt
        self.completion[model] += completion

    def add(self, other: Usage, times: float = 1.0) -> None:
        self.episodes += other.episodes * times
        self.max_calls += other.max_calls * times
        for mine, theirs in ((self.calls, other.calls), (self.prompt, other.prompt),
                             (self.completion, other.completion)):
            for m, v in theirs.items():
                mine[m] += v * times

    @property
    def total_calls(self) -> float:
        return sum(self.calls.values())


def episode_usage(route: Route, tk: SuiteTokens, a: Assumptions, fraction: float) -> Usage:
    """One episode's expected usage, replies at `fraction` of their caps."""
    if route.aggregator is not None:
        return _moa_usage(route, tk, fraction)
    shape = episode_shape(route.roles, route.max_turns, a.accept, a.suggest_worker)
    reply = {r: fraction * sum(w * tk.caps[(r, m)] for m, w in route.agents.items()) for r in ROLES}
    transcript = (shape.thoughts_seen * (reply["worker"] + tk.thought_overhead)
                  + shape.suggestions * (reply["thinker"] + tk.suggestion_overhead)
                  + shape.answers_seen * reply["worker"] + shape.blind_reviews * tk.no_answer)
    u = Usage(episodes=1.0, max_calls=float(route.max_turns))
    for m, w in route.agents.items():
        for role, n in shape.calls.items():
            u.call(m, w * n, w * n * tk.base[role], w * n * fraction * tk.caps[(role, m)])
        u.prompt[m] += w * transcript
    _judge_call(u, tk, shape.answered, reply["worker"], fraction)
    return u


def _moa_usage(route: Route, tk: SuiteTokens, fraction: float) -> Usage:
    u = Usage(episodes=1.0, max_calls=float(len(route.agents) + 1))
    proposals = 0.0
    for m in route.agents:
        u.call(m, 1.0, tk.base["worker"], fraction * tk.caps[("worker", m)])
        proposals += fraction * tk.caps[("worker", m)] + tk.proposal_overhead
    agg = route.aggregator
    assert agg is not None  # episode_usage comes here only for a route with an aggregator
    u.call(agg, 1.0, tk.base["aggregator"] + proposals, fraction * tk.caps[("worker", agg)])
    _judge_call(u, tk, 1.0, fraction * tk.caps[("worker", agg)], fraction)
    return u


def _judge_call(u: Usage, tk: SuiteTokens, graded: float, answer: float, fraction: float) -> None:
    if tk.judge is None:
        return
    model, cap = tk.judge
    u.max_calls += 1.0
    u.call(model, graded, graded * (JUDGE_PROMPT_TOKENS + tk.query + answer), graded * fraction * cap)


def part_usage(part: Part, a: Assumptions, fraction: float, notes: set[str]) -> Usage:
    total = Usage()
    tokens: dict[tuple[int, str], SuiteTokens] = {}   # a part's jobs share their config: its tokens per suite once
    for job in part.jobs:
        key = (id(job.cfg), job.suite.name)
        if key not in tokens:
            tokens[key] = suite_tokens(job.cfg, job.suite, list(job.cfg.pool.models), notes)
        total.add(episode_usage(job.route, tokens[key], a, fraction), job.episodes)
    return total


def cost_usd(u: Usage, cfg: TrinityConfig) -> float:
    total = 0.0
    for m in sorted(set(u.prompt) | set(u.completion)):   # a fixed order: the same sum to the last digit
        price_in = model_setting(cfg, m, "price_in_per_mtok") or 0.0
        price_out = model_setting(cfg, m, "price_out_per_mtok") or 0.0
        total += (u.prompt.get(m, 0.0) * float(price_in) + u.completion.get(m, 0.0) * float(price_out)) / 1e6
    return total


def wall_s(u: Usage, cfg: TrinityConfig) -> tuple[float | None, list[str], list[str]]:
    """(max over models of decode/decode_tok_s + prompt/prefill_tok_s, models without a measured decode
    rate, models without a prefill rate). None when a model with calls has no decode rate."""
    from trinity.evolve.efficiency import pool_throughputs, work_floor

    missing, no_prefill, per_model = [], [], {}
    for m, n in u.calls.items():
        if n <= 0:
            continue
        tp = model_setting(cfg, m, "throughput")
        decode, prefill = (tp.decode_tok_s, tp.prefill_tok_s) if tp is not None else (None, None)
        if not decode:
            missing.append(m)
            continue
        seconds = u.completion.get(m, 0.0) / float(decode)
        if prefill:
            seconds += u.prompt.get(m, 0.0) / float(prefill)
        else:
            no_prefill.append(m)
        per_model[m] = seconds
    if missing:
        return None, missing, no_prefill
    shares = pool_throughputs(cfg.pool)   # the cores the local servers (those naming n_threads) share
    return work_floor(per_model, shares)[0], missing, no_prefill
