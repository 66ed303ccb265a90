"""What a configuration will cost before it runs (`trinity plan`): pool calls, tokens, dollars, wall time.

Pure functions of the composed config (plus the prepared Parquet files and a backbone's config.json when
they exist); nothing here starts a server, loads a model or needs an API key.

Workload (what the pipeline really runs; see trinity.evolve.loop, trinity.pipeline.*_stage):
- evolve: per generation, popsize candidates x `episodes_per_candidate` training items (balanced over
  the training suites) x `evolve.repeats`; the mean is validated on `evolve.validation.n_items` items every
  `validation.every` generations and after the last one, and x0 before generation 0 (generation -1),
  each validation in BOTH routing modes (sample, argmax). popsize null -> ceil(4 + 3 ln n), with n from
  the backbone's hidden size (its config.json when cached, else a table of known backbones) and the SVF
  matrices. Early stopping (`early_stop_patience`) and budgets are not modelled: a full run is assumed.
- frontier (`evolve.cost_weights`): every weight other than the main run's runs the same evolution at the
  main run's popsize; then every head (the main one too) and the baselines single_worker, random and moa on
  the test items (the baselines' chunks are the evaluate stage's: counted here, free there, not modelled).
- ablate (`ablations.enabled`): every selected variant runs the same evolution at the main run's popsize.
- evaluate: every method of `eval.methods` expanded as trinity.eval.methods expands it (groups to one per
  pool model; `ablations` to one per enabled variant; methods that need a trained coordinator count as if
  it existed) on the validation items evolution used plus `eval.items_per_suite` test items per suite
  (null: the whole test split), x `eval.repeats`.
- item counts come from the prepared Parquet files when `paths.prepared` holds them for this config's
  seed, splits and cap, else from DEFAULT_SUITES (rows measured on the offline packages, assumed for the
  hub-only suites) split by `tasks.splits`.

Calls per episode (expected, and the upper bound max_turns per episode):
- A router that picks (agent, role) at random is an exact Markov chain over the protocol's states
  (turn, Worker answers so far, pending Thinker advice), stepped by the rules run_episode plays
  (trinity.episodes.protocol.TurnState; no copy of them here): a Verifier
  before any answer ends the episode with no call; ACCEPT (assumed probability `accept`, default 0.5)
  ends it; a Thinker's suggestion sets the next turn's role (Worker with assumed probability
  `suggest_worker`, default 0.5, else Verifier). Every call is assumed to succeed and every Thinker reply
  to be valid. x0 (a zero head) samples every pool model and every role of `coordinator.roles` with equal
  probability; under argmax it picks the first model as a Worker on every turn (K calls).
- A trained coordinator (later validations, eval's `trinity*`, `roles:*`, `ablation:*`) is estimated as
  x0 (sample routing): its real routing is unknown before it is trained. `random`: uniform over all roles.
  `single:<m>`: 1 call. `loop:<m>`: Worker, Verifier, Worker, ... `moa:<m>`: n_models + 1 calls.
- A suite graded by a judge (MT-Bench) adds one judge call per episode that ends with an answer.

Tokens per call:
- prompt: (characters / 4) of the system prompt, the task prompt (the mean over the prepared items, else
  DEFAULT_SUITES) and the protocol's templates, + MESSAGE_OVERHEAD per message; plus the growing
  transcript: a Worker sees every earlier Worker reply's thought (and the Thinker's suggestion when it
  carries one), a Thinker or Verifier sees the current answer. A reply counts as output_fraction x its cap.
- completion: the output cap of that role, suite and model (protocol.max_tokens per role and suite, else
  pool.models.<m>.max_tokens, else pool.sampling.max_tokens, else UNCAPPED_TOKENS). Caps are an upper
  bound, so every figure is given twice: "at cap" and "typical" (replies at `output_fraction` of the cap,
  default 0.6, which also shortens the transcript the later prompts carry).

Dollars: pool.models.<m>.price_in_per_mtok / price_out_per_mtok. Wall time: per stage, each model's
decode tokens / throughput.decode_tok_s + prompt tokens / throughput.prefill_tok_s, combined as a
generation's floor is (trinity.evolve.efficiency.work_floor: hosted models in parallel, local servers
sharing this machine's cores); stages run one after another. It is an estimate, not a bound: the response
cache (candidates and, with evolve.train_items=fixed, generations share calls) and the servers' prompt
prefix cache make real runs shorter; queueing, the coordinator's own forward passes, grading and start-up
make them longer.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from trinity.config_schema import group
from trinity.config_schema.root import PlanAssumptions
from trinity.errors import ConfigError
from trinity.contracts import ROLES

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 8        # chat-template tokens per message (role markers)
UNCAPPED_TOKENS = 4096      # assumed output of a call that no config caps
JUDGE_PROMPT_TOKENS = 300   # FastChat's judge instructions around the question and the answer
ASSUMED_HIDDEN = 1024       # hidden size assumed for an unknown backbone (popsize only, through ln n)

# suite -> (rows after filtering, mean prompt characters, fixed test rows or None). The first block was
# measured on the offline packages (`prepare`, tasks=offline_mix options, no cap); the rest is assumed.
DEFAULT_SUITES: dict[str, tuple[int, int, int | None]] = {
    "mmlu": (14015, 633, None), "gsm8k": (1319, 341, None), "math500": (311, 285, None),
    "humaneval": (164, 639, None), "gpqa_diamond": (198, 727, None), "aime": (60, 450, None),
    "bigcodebench": (473, 1375, None), "mtbench": (80, 300, None),
    "aime2024": (30, 450, None), "aime2025": (30, 450, None), "math500_full": (500, 300, None),
    "livecodebench": (1055, 1800, 655), "rlpr": (77000, 500, None), "mbpp": (500, 250, None),
}
MEASURED_SUITES = ("mmlu", "gsm8k", "math500", "humaneval", "gpqa_diamond", "aime", "bigcodebench", "mtbench")
FALLBACK_SUITE = (500, 600, None)

# Architecture of known backbones (as in their config.json), for the SVF ranks and the head size.
KNOWN_BACKBONES: dict[str, dict[str, int]] = {
    "smollm2-135m-instruct": {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64},
    "qwen2.5-coder-0.5b-instruct": {"hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
                                    "head_dim": 64},
    "Qwen/Qwen3-0.6B": {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128},
    "gemma-3-270m": {"hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256},
}
SCENARIOS = ("typical", "at_cap")


# ----------------------------------------------------------------------------------------- assumptions

_PLAN = PlanAssumptions()   # the defaults live in the schema (the optional `plan` keys)


@dataclass(frozen=True)
class Assumptions:
    accept: float = _PLAN.accept_probability                # P(a Verifier says ACCEPT)
    suggest_worker: float = _PLAN.thinker_suggests_worker   # P(a Thinker suggests a Worker next; else a Verifier)
    output_fraction: float = _PLAN.typical_output_fraction  # typical reply length / its cap

    @classmethod
    def from_cfg(cls, cfg: DictConfig, **given: float | None) -> "Assumptions":
        """`plan.accept_probability`, `plan.thinker_suggests_worker`, `plan.typical_output_fraction` when
        the config has them (optional keys), overridden by the non-None keyword arguments."""
        plan = group(cfg, "plan")
        values = {"accept": plan.accept_probability, "suggest_worker": plan.thinker_suggests_worker,
                  "output_fraction": plan.typical_output_fraction}
        values.update({name: float(v) for name, v in given.items() if v is not None})
        out = cls(**values)
        out.check()
        return out

    def check(self) -> None:
        for name in ("accept", "suggest_worker"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"plan: {name} probability must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.output_fraction <= 1.0:
            raise ConfigError(f"plan: the typical output fraction must be in (0, 1], got {self.output_fraction}")


# ------------------------------------------------------------------------------ the episode Markov chain

@dataclass
class EpisodeShape:
    """Expected counts of one episode of the turn protocol."""
    calls: dict[str, float]             # role -> expected pool calls
    thoughts_seen: float = 0.0          # sum over Worker calls of the earlier Worker replies they carry
    suggestions: float = 0.0            # Worker calls carrying a Thinker's suggestion
    answers_seen: float = 0.0           # Thinker/Verifier calls that see a current answer
    blind_reviews: float = 0.0          # Thinker calls before any answer (they see no_answer_text)
    ends: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("accept", "turn_limit", "verifier_before_answer", "no_answer"), 0.0))

    @property
    def total_calls(self) -> float:
        return sum(self.calls.values())

    @property
    def answered(self) -> float:
        """P(the episode ends with an answer, so it is graded)."""
        return self.ends["accept"] + self.ends["turn_limit"]


def episode_shape(role_cycle: list[Mapping[str, float]], max_turns: int, accept: float,
                  suggest_worker: float) -> EpisodeShape:
    """The exact expectation over the protocol's states, stepped by the protocol's own turn rules
    (trinity.episodes.protocol.TurnState). `role_cycle[t % len]`: P(router role) at turn t; every call
    succeeds; a Verifier accepts with probability `accept`; a Thinker's advice is Worker with probability
    `suggest_worker`, else Verifier (every Thinker reply valid)."""
    from trinity.episodes.protocol import TurnState

    outcome_p = {"worker": {"answer": 1.0},
                 "thinker": {"advise_worker": suggest_worker, "advise_verifier": 1.0 - suggest_worker},
                 "verifier": {"accept": accept, "reject": 1.0 - accept}}
    shape = EpisodeShape(calls=dict.fromkeys(ROLES, 0.0))
    states: dict[TurnState, float] = {TurnState(): 1.0}
    for t in range(max_turns):
        nxt: dict[TurnState, float] = defaultdict(float)
        for state, p in states.items():
            router = {state.advised: 1.0} if state.advised else role_cycle[t % len(role_cycle)]   # advice decides
            for router_role, pr in router.items():
                if pr > 0:
                    _turn(shape, nxt, state, state.role(router_role), p * pr, outcome_p)
        states = nxt
    for state, p in states.items():
        shape.ends["turn_limit" if state.answers else "no_answer"] += p
    return shape


def _turn(shape: EpisodeShape, nxt: dict, state, role: str, w: float,
          outcome_p: Mapping[str, Mapping[str, float]]) -> None:
    end = state.end_before_call(role)
    if end is not None:
        shape.ends[end] += w
        return
    shape.calls[role] += w
    if role == "worker":      # what the call's prompt carries (the token model, not a rule)
        shape.thoughts_seen += w * state.answers
        shape.suggestions += w if state.advised == "worker" else 0.0
    elif state.answers:
        shape.answers_seen += w
    else:
        shape.blind_reviews += w
    for outcome, p in outcome_p[role].items():
        if p > 0:
            after, end = state.after_reply(role, outcome)
            if end is not None:
                shape.ends[end] += w * p
            else:
                nxt[after] += w * p


# ------------------------------------------------------------------------------------------- routes

@dataclass
class Route:
    """How one episode uses the pool: agent probabilities, role probabilities per turn (cycled), K."""
    agents: dict[str, float]
    roles: list[dict[str, float]]
    max_turns: int
    aggregator: str | None = None    # Mixture-of-Agents: every agent proposes, this one merges

    @classmethod
    def uniform(cls, agents: list[str], roles: list[str], max_turns: int) -> "Route":
        return cls({a: 1.0 / len(agents) for a in agents}, [{r: 1.0 / len(roles) for r in roles}], max_turns)

    @classmethod
    def fixed(cls, agent: str, roles: list[dict[str, float]], max_turns: int) -> "Route":
        return cls({agent: 1.0}, roles, max_turns)


def x0_route(cfg: DictConfig, agents: list[str], mode: str = "sample", max_turns: int | None = None) -> Route:
    k = int(max_turns or cfg.protocol.max_turns)
    if mode == "argmax":   # all logits 0: argmax is the first model and the first role (Worker)
        return Route.fixed(agents[0], [{"worker": 1.0}], k)
    roles = [str(r) for r in (group(cfg, "coordinator").roles or ROLES)]
    return Route.uniform(agents, roles, k)


def method_route(name: str, cfg: DictConfig, agents: list[str], max_turns: int | None) -> tuple[Route, str | None]:
    """The route of an expanded eval method name, and a note when it is only estimated."""
    kind, _, arg = name.partition(":")
    k = int(max_turns or cfg.protocol.max_turns)
    if kind == "single":
        return Route.fixed(arg, [{"worker": 1.0}], 1), None
    if kind == "loop":
        return Route.fixed(arg, [{"worker": 1.0}, {"verifier": 1.0}], k), None
    if kind == "random":
        return Route.uniform(agents, list(ROLES), k), None
    if kind == "moa":
        return Route({a: 1.0 for a in agents}, [{"worker": 1.0}], 1, aggregator=arg), None
    if kind == "roles":
        base = x0_route(cfg, agents, max_turns=k)
        return Route.fixed(arg, base.roles, k), None
    route = x0_route(cfg, agents, max_turns=k)
    return route, None if kind in ("trinity", "ablation") else f"method '{name}' is not modelled: estimated as x0"


# ------------------------------------------------------------------------------------------- suites

@dataclass(frozen=True)
class SuiteInfo:
    name: str
    counts: dict[str, int]      # split -> items
    prompt_chars: float
    source: str                 # where the figures come from: prepared | measured default | assumed default


def suite_infos(cfg: DictConfig, suites: list[str]) -> dict[str, SuiteInfo]:
    folder = Path(str(cfg.paths.prepared))
    manifest = _read_json(folder / "manifest.json")
    return {s: _suite_info(cfg, s, folder / f"{s}.parquet", manifest) for s in dict.fromkeys(suites)}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _suite_info(cfg: DictConfig, suite: str, parquet: Path, manifest: dict) -> SuiteInfo:
    rows, chars, fixed_test = DEFAULT_SUITES.get(suite, FALLBACK_SUITE)
    counts = _default_counts(cfg, suite, rows, fixed_test)
    source = "measured default" if suite in MEASURED_SUITES else "assumed default"
    if parquet.is_file():
        import polars as pl

        frame = pl.read_parquet(parquet, columns=["split", "prompt"])
        if frame.height:
            chars = float(frame["prompt"].str.len_chars().mean())
            source += ", prompt lengths prepared"
        if _manifest_matches(cfg, suite, manifest):
            counts = {s: int(n) for s, n in frame.group_by("split").len().iter_rows()}
            source = "prepared"
    return SuiteInfo(suite, {s: counts.get(s, 0) for s in ("train", "validation", "test")}, chars, source)


def _manifest_matches(cfg: DictConfig, suite: str, manifest: dict) -> bool:
    entry = (manifest.get("suites") or {}).get(suite)
    if not entry:
        return False
    splits = {k: float(v) for k, v in cfg.tasks.splits.items()}
    role = "train" if suite in list(cfg.tasks.train) else "transfer"
    return (manifest.get("seed") == int(cfg.seed) and manifest.get("splits") == splits
            and manifest.get("max_items_per_suite") == cfg.tasks.get("max_items_per_suite")
            and entry.get("role") == role)


def _default_counts(cfg: DictConfig, suite: str, rows: int, fixed_test: int | None) -> dict[str, int]:
    cap = cfg.tasks.get("max_items_per_suite")
    rows = min(rows, int(cap)) if cap is not None else rows
    if suite not in list(cfg.tasks.train):
        return {"test": rows}
    f = {k: float(v) for k, v in cfg.tasks.splits.items()}
    if fixed_test is not None:
        test = min(fixed_test, rows)
        rest = f.get("train", 0) + f.get("validation", 0)
        return {"test": test, **{s: round((rows - test) * f.get(s, 0) / rest) if rest else 0
                                 for s in ("train", "validation")}}
    return {s: round(rows * f.get(s, 0)) for s in ("train", "validation", "test")}


def balanced_counts(n: int | None, available: Mapping[str, int]) -> dict[str, int]:
    """How many items a balanced (round-robin) sample of n takes from each suite; n None = all."""
    out = dict.fromkeys(available, 0)
    left = sum(available.values()) if n is None else int(n)
    active = sorted(s for s, k in available.items() if k > 0)
    while left > 0 and active:
        share, extra = divmod(left, len(active))
        for i, s in enumerate(active):
            take = min(available[s] - out[s], share + (1 if i < extra else 0))
            out[s] += take
            left -= take
        active = [s for s in active if out[s] < available[s]]
    return out


# -------------------------------------------------------------------------------------- token model

def _tok(text: Any) -> float:
    return len(str(text or "")) / CHARS_PER_TOKEN


def _template_tok(template: str, *placeholders: str) -> float:
    for p in placeholders:
        template = template.replace(p, "")
    return _tok(template)


@dataclass(frozen=True)
class SuiteTokens:
    """The token figures of calls on one suite under one config."""
    query: float
    base: dict[str, float]             # role -> prompt tokens before any transcript
    thought_overhead: float
    suggestion_overhead: float
    no_answer: float
    proposal_overhead: float
    caps: dict[tuple[str, str], int]   # (role, model) -> output cap
    judge: tuple[str, int] | None      # (judge model, its output cap) when a judge grades the suite


def suite_tokens(cfg: DictConfig, suite: SuiteInfo, agents: list[str], notes: set[str]) -> SuiteTokens:
    from trinity.episodes.protocol_config import ProtocolConfig

    pc = ProtocolConfig.from_cfg(cfg.protocol)
    query = suite.prompt_chars / CHARS_PER_TOKEN
    review = _template_tok(pc.review_format, "{query}", "{answer}") + query + 2 * MESSAGE_OVERHEAD
    base = {"worker": _tok(pc.worker_system) + query + _tok(pc.collaboration_instructions) + 2 * MESSAGE_OVERHEAD,
            "thinker": _tok(pc.thinker_system) + review, "verifier": _tok(pc.verifier_system) + review}
    moa = (cfg.get("eval") or {}).get("moa") or {}   # read as written: an unset aggregator prompt counts 0 tokens
    base["aggregator"] = (_tok(moa.get("aggregator_system")) + query + 2 * MESSAGE_OVERHEAD
                          + _template_tok(str(moa.get("aggregator_format", "")), "{query}", "{proposals}"))
    caps = {(role, m): output_cap(cfg, pc, role, suite.name, m, notes) for role in ROLES for m in agents}
    return SuiteTokens(query, base, _template_tok(pc.thought_format, "{n}", "{text}"),
                       _template_tok(pc.suggestion_format, "{suggestion}"), _tok(pc.no_answer_text),
                       _template_tok(str(moa.get("proposal_format", "")), "{n}", "{text}") + 4,
                       caps, _judge(cfg, suite.name))


def model_setting(cfg: DictConfig, model: str, key: str) -> Any:
    """pool.models.<model>.<key> or None (model names hold dots, so no dotted select)."""
    settings = cfg.pool.models.get(model)
    return settings.get(key) if settings is not None else None


def output_cap(cfg: DictConfig, pc: Any, role: str, suite: str, model: str, notes: set[str]) -> int:
    """As a run resolves it: the protocol's cap for (role, suite) (ProtocolConfig.max_tokens_for), else the
    model's own (trinity.pool.providers.model_max_tokens: its max_tokens, else pool.sampling.max_tokens)."""
    from trinity.pool.providers import model_max_tokens

    cap = pc.max_tokens_for(role, suite)
    if cap is None:
        cap = model_max_tokens(model, cfg.pool.models.get(model), cfg.pool)
    if cap is None:
        notes.add(f"no output cap for some calls (e.g. {model} as {role}): assumed {UNCAPPED_TOKENS} tokens")
        return UNCAPPED_TOKENS
    return int(cap)


def _judge(cfg: DictConfig, suite: str) -> tuple[str, int] | None:
    from trinity.tasks.base import suite_options
    from trinity.tasks.registry import suite_class

    if getattr(suite_class(suite), "kind", None) != "judge":
        return None
    options = suite_options(cfg, suite)
    return str(options.get("judge_model")), int(options.get("judge_max_tokens", 512))


# ------------------------------------------------------------------------------------------ usage

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

    def add(self, other: "Usage", times: float = 1.0) -> None:
        self.episodes += other.episodes * times
        self.max_calls += other.max_calls * times
        for mine, theirs in ((self.calls, other.calls), (self.prompt, other.prompt), (self.completion, other.completion)):
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
    u.call(agg, 1.0, tk.base["aggregator"] + proposals, fraction * tk.caps[("worker", agg)])
    _judge_call(u, tk, 1.0, fraction * tk.caps[("worker", agg)], fraction)
    return u


def _judge_call(u: Usage, tk: SuiteTokens, graded: float, answer: float, fraction: float) -> None:
    if tk.judge is None:
        return
    model, cap = tk.judge
    u.max_calls += 1.0
    u.call(model, graded, graded * (JUDGE_PROMPT_TOKENS + tk.query + answer), graded * fraction * cap)


# ------------------------------------------------------------------------------------------ workload

@dataclass
class Job:
    episodes: float
    route: Route
    suite: SuiteInfo
    cfg: DictConfig           # the config the episodes run under (a variant's for ablations)


@dataclass
class Part:
    stage: str
    name: str
    detail: str
    jobs: list[Job]
    note: str | None = None


def validations(cfg: DictConfig) -> int:
    """Validations of the mean after generations (x0's not counted): every `every` and after the last."""
    g, every = int(cfg.evolve.generations), group(cfg, "evolve").validation.every
    return sum(1 for i in range(g) if i == g - 1 or (every and (i + 1) % int(every) == 0))


def evolve_parts(cfg: DictConfig, agents: list[str], infos: dict[str, SuiteInfo], popsize: int,
                 stage: str = "evolve", prefix: str = "") -> list[Part]:
    train = list(cfg.tasks.train)
    per_gen = balanced_counts(int(cfg.evolve.episodes_per_candidate), {s: infos[s].counts["train"] for s in train})
    val = balanced_counts(int(cfg.evolve.validation.n_items), {s: infos[s].counts["validation"] for s in train})
    gens, reps, n_val = int(cfg.evolve.generations), group(cfg, "evolve").repeats, validations(cfg)
    sample, argmax = x0_route(cfg, agents), x0_route(cfg, agents, "argmax")
    times = popsize * gens * reps
    return [
        Part(stage, f"{prefix}train", f"{gens} gen x {popsize} cand x {sum(per_gen.values())} items x {reps} rep",
             [Job(k * times, sample, infos[s], cfg) for s, k in per_gen.items() if k]),
        Part(stage, f"{prefix}validate x0", f"gen -1: {sum(val.values())} items, sample + argmax",
             [Job(k, r, infos[s], cfg) for s, k in val.items() if k for r in (sample, argmax)]),
        Part(stage, f"{prefix}validate mean", f"{n_val} x {sum(val.values())} items x 2 modes",
             [Job(k * n_val * 2, sample, infos[s], cfg) for s, k in val.items() if k]),
    ]


def ablate_parts(cfg: DictConfig, agents: list[str], infos: dict[str, SuiteInfo], popsize: int) -> list[Part]:
    from trinity import config as trinity_config

    parts = []
    for name, variant in trinity_config.ablation_variants(cfg).items():
        size = int(variant.evolve.popsize) if variant.evolve.get("popsize") is not None else popsize
        runs = evolve_parts(variant, agents, infos, size, stage="ablate", prefix=f"{name}: ")
        parts.append(Part("ablate", name, f"{runs[0].detail} + {validations(variant) + 1} validations x 2 modes",
                          [j for p in runs for j in p.jobs]))
    return parts


def frontier_parts(cfg: DictConfig, agents: list[str], infos: dict[str, SuiteInfo], popsize: int) -> list[Part]:
    from trinity.pipeline import frontier_stage

    weights = frontier_stage.variants(cfg)
    parts = []
    for name, (_, variant) in weights.items():
        runs = evolve_parts(variant, agents, infos, popsize, stage="frontier", prefix=f"{name}: ")
        parts.append(Part("frontier", name, f"{runs[0].detail} + {validations(variant) + 1} validations x 2 modes",
                          [j for p in runs for j in p.jobs]))
    reps = group(cfg, "eval").repeats
    n = cfg.eval.get("items_per_suite")
    items = {s: infos[s].counts["test"] if n is None else min(int(n), infos[s].counts["test"]) for s in eval_suites(cfg)}
    mode = frontier_stage.routing_mode(cfg)
    heads = [frontier_stage.main_head(cfg)[0], *weights]
    for head in heads:   # estimated with x0's routing in the mode they are served with, as every coordinator
        route = x0_route(cfg, agents, mode)
        parts.append(Part("frontier", f"test {head}", f"{sum(items.values()):,} items x {reps} rep",
                          [Job(k * reps, route, infos[s], cfg) for s, k in items.items() if k]))
    from trinity.eval import methods as registry

    ctx = registry.MethodContext(agents=agents, strongest=0, moa=OmegaConf.select(cfg, "eval.moa"))
    for m in registry.expand_with_skips(list(frontier_stage.BASELINES), ctx)[0]:
        route, note = method_route(m.name, cfg, agents, m.max_turns)
        parts.append(Part("frontier", f"test {m.name}", f"{sum(items.values()):,} items x {reps} rep",
                          [Job(k * reps, route, infos[s], cfg) for s, k in items.items() if k], note))
    return parts


def eval_items(cfg: DictConfig, infos: dict[str, SuiteInfo]) -> dict[str, int]:
    """Items per suite an evaluated method runs: the validation items evolution used + the test items."""
    train = list(cfg.tasks.train)
    out: dict[str, int] = defaultdict(int)
    sets = eval_set_names(cfg)
    if "validation" in sets:
        val = balanced_counts(int(cfg.evolve.validation.n_items), {s: infos[s].counts["validation"] for s in train})
        for s, k in val.items():
            out[s] += k
    if "test" not in sets:
        return dict(out)
    n = cfg.eval.get("items_per_suite")
    for s in eval_suites(cfg):
        test = infos[s].counts["test"]
        out[s] += test if n is None else min(int(n), test)
    return dict(out)


def eval_set_names(cfg: DictConfig) -> list[str]:
    from trinity.pipeline.evaluate_stage import set_names

    return set_names(cfg)


def eval_suites(cfg: DictConfig) -> list[str]:
    suites = cfg.eval.get("suites")
    return list(suites) if suites else list(cfg.tasks.train) + list(cfg.tasks.transfer)


def evaluate_parts(cfg: DictConfig, agents: list[str], infos: dict[str, SuiteInfo],
                   notes: set[str]) -> list[Part]:
    from trinity import config as trinity_config

    variants = trinity_config.ablation_variants(cfg)
    methods, skipped = expand_methods(cfg, agents, variants)
    for s in skipped:
        notes.add(f"evaluate: method {s.method} left out ({s.reason})")
    items, reps = eval_items(cfg, infos), group(cfg, "eval").repeats
    parts = []
    for m in methods:
        kind, _, arg = m.name.partition(":")
        mcfg = variants[arg] if kind == "ablation" else cfg   # an ablation routes with its variant's roles
        route, note = method_route(m.name, mcfg, agents, m.max_turns)
        parts.append(Part("evaluate", m.name, f"{sum(items.values()):,} items x {reps} rep",
                          [Job(k * reps, route, infos[s], mcfg) for s, k in items.items() if k], note))
    return parts


def expand_methods(cfg: DictConfig, agents: list[str], variants: Mapping[str, DictConfig]):
    """eval.methods expanded by the real registry, with a trained coordinator and the enabled ablation
    `variants` assumed to exist. Returns (methods, skipped)."""
    from trinity.eval import methods as registry

    def names() -> list[str]:
        if not variants:
            raise registry.MethodSkipped("ablations.enabled is false")
        return list(variants)

    def load(name: str) -> registry.Ablation:
        if name not in variants:
            raise registry.MethodSkipped(f"no enabled ablation variant '{name}'")
        return registry.Ablation(router=lambda: None, protocol=variants[name].protocol)

    ctx = registry.MethodContext(agents=agents, strongest=0, coordinator_router=lambda mode: None,
                                 coordinator_routing=str(OmegaConf.select(cfg, "coordinator.routing") or "sample"),
                                 moa=OmegaConf.select(cfg, "eval.moa"), ablation_names=names, load_ablation=load)
    return registry.expand_with_skips([str(n) for n in cfg.eval.methods], ctx)


# ------------------------------------------------------------------------------------------ popsize

def backbone_arch(backbone: Any, model_cache: Any) -> dict[str, int] | None:
    """The backbone's config.json (cached asset conversion, local folder or the hub cache), else the table."""
    source, ident = str(backbone.get("source", "hub")), str(backbone.get("id"))
    paths = []
    if source == "asset":
        from trinity.setup.assets import model_cache_dir

        paths.append(model_cache_dir(model_cache) / "hf" / ident / "config.json")
    elif source == "hub":
        paths.append(Path(ident).expanduser() / "config.json")
        paths.append(_hub_cached_config(ident, backbone.get("revision")))
    for path in paths:
        if path is not None and Path(path).is_file():
            data = _read_json(Path(path))
            data = data.get("text_config", data)
            if data.get("hidden_size"):
                return data
    return KNOWN_BACKBONES.get(ident)


def _hub_cached_config(ident: str, revision: Any) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(ident, "config.json", revision=revision)
    except Exception:   # not a hub id, no hub library: the table decides
        return None
    return Path(found) if isinstance(found, str) else None


def _svf_rank(name: str, arch: Mapping[str, int]) -> int:
    d = int(arch["hidden_size"])
    heads = int(arch.get("num_attention_heads") or 1)
    head_dim = int(arch.get("head_dim") or d // heads)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "q_proj" or leaf == "o_proj":
        return min(d, heads * head_dim)
    if leaf in ("k_proj", "v_proj"):
        return min(d, int(arch.get("num_key_value_heads") or heads) * head_dim)
    return d


def resolve_popsize(cfg: DictConfig, n_agents: int, notes: set[str]) -> int:
    """evolve.popsize, or ceil(4 + 3 ln n) as the strategy computes it from the parameter count."""
    from trinity.evolve.strategies import default_popsize

    if cfg.evolve.get("popsize") is not None:
        return int(cfg.evolve.popsize)
    arch = backbone_arch(cfg.coordinator.backbone, OmegaConf.select(cfg, "paths.model_cache"))
    if arch is None:
        arch = {"hidden_size": ASSUMED_HIDDEN}
        notes.add(f"popsize: backbone {cfg.coordinator.backbone.id} unknown here; hidden size {ASSUMED_HIDDEN} assumed")
    n = (n_agents + len(ROLES)) * int(arch["hidden_size"])
    svf = group(cfg, "coordinator").svf
    if svf.enabled:
        n += sum(_svf_rank(str(m), arch) for m in svf.matrices)
    return default_popsize(n)


# ------------------------------------------------------------------------------------------ the plan

def part_usage(part: Part, a: Assumptions, fraction: float, notes: set[str]) -> Usage:
    total = Usage()
    tokens: dict[tuple[int, str], SuiteTokens] = {}   # a part's jobs share their config: its tokens per suite once
    for job in part.jobs:
        key = (id(job.cfg), job.suite.name)
        if key not in tokens:
            tokens[key] = suite_tokens(job.cfg, job.suite, [str(m) for m in job.cfg.pool.models], notes)
        total.add(episode_usage(job.route, tokens[key], a, fraction), job.episodes)
    return total


def cost_usd(u: Usage, cfg: DictConfig) -> float:
    total = 0.0
    for m in set(u.prompt) | set(u.completion):
        price_in = model_setting(cfg, m, "price_in_per_mtok") or 0.0
        price_out = model_setting(cfg, m, "price_out_per_mtok") or 0.0
        total += (u.prompt.get(m, 0.0) * float(price_in) + u.completion.get(m, 0.0) * float(price_out)) / 1e6
    return total


def wall_s(u: Usage, cfg: DictConfig) -> tuple[float | None, list[str], list[str]]:
    """(max over models of decode/decode_tok_s + prompt/prefill_tok_s, models without a measured decode
    rate, models without a prefill rate). None when a model with calls has no decode rate."""
    from trinity.evolve.efficiency import pool_throughputs, work_floor

    missing, no_prefill, per_model = [], [], {}
    for m, n in u.calls.items():
        if n <= 0:
            continue
        tp = model_setting(cfg, m, "throughput") or {}
        decode, prefill = tp.get("decode_tok_s"), tp.get("prefill_tok_s")
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
    shares = pool_throughputs(OmegaConf.select(cfg, "pool"))   # the cores local servers share
    return work_floor(per_model, shares)[0], missing, no_prefill


def build_plan(cfg: DictConfig, assumptions: Assumptions | None = None) -> dict[str, Any]:
    """The plan of `cfg` as one JSON-able dict: stages with their parts, totals, wall time, notes."""
    from trinity import config as trinity_config

    a = assumptions or Assumptions()
    notes: set[str] = set()
    agents = [str(m) for m in cfg.pool.models]
    variants = trinity_config.ablation_variants(cfg)
    suites = list(cfg.tasks.train) + list(cfg.tasks.transfer) + eval_suites(cfg)
    infos = suite_infos(cfg, suites)
    popsize = resolve_popsize(cfg, len(agents), notes)
    from trinity.pipeline.frontier_stage import cost_weights

    stages = {"evolve": evolve_parts(cfg, agents, infos, popsize),
              "frontier": frontier_parts(cfg, agents, infos, popsize) if cost_weights(cfg) else [],
              "ablate": ablate_parts(cfg, agents, infos, popsize) if variants else [],
              "evaluate": evaluate_parts(cfg, agents, infos, notes)}
    out_stages = [_stage_json(name, parts, cfg, a, notes) for name, parts in stages.items() if parts]
    return {"pool": str(cfg.pool.get("name") or ""), "models": agents, "max_turns": int(cfg.protocol.max_turns),
            "popsize": popsize, "assumptions": {**a.__dict__, "routing": "x0 (uniform) for every coordinator"},
            "suites": {s: {**i.counts, "prompt_tokens": round(i.prompt_chars / CHARS_PER_TOKEN), "source": i.source}
                       for s, i in infos.items()},
            "stages": out_stages, "total": _total_json(out_stages), "notes": sorted(notes | _fixed_notes(cfg))}


def _fixed_notes(cfg: DictConfig) -> set[str]:
    out = {"estimates ignore the response cache (candidates share calls through common random numbers; a rerun "
           "with a warm cache costs less), early stopping and budgets",
           "trained coordinators are estimated with x0's routing (uniform over models and roles)"}
    if group(cfg, "evolve").train_items.value == "fixed":
        out.add("evolve.train_items = fixed: later generations repeat generation 0's items, so most of their "
                "calls are response-cache hits; the training figures count them all")
    budget = group(cfg, "evolve").budget.max_cost_usd
    if budget is not None:
        out.add(f"evolve.budget.max_cost_usd = {budget}: a run stops there, whatever the plan says")
    return out


def _figures(u: Usage, cfg: DictConfig) -> dict[str, float]:
    return {"prompt_tokens": sum(u.prompt.values()), "completion_tokens": sum(u.completion.values()),
            "cost_usd": cost_usd(u, cfg)}


def _usage_json(u: dict[str, Usage], cfg: DictConfig) -> dict[str, Any]:
    typical = u["typical"]
    return {"episodes": typical.episodes, "calls": typical.total_calls, "max_calls": typical.max_calls,
            "calls_per_episode": typical.total_calls / typical.episodes if typical.episodes else 0.0,
            **{s: _figures(u[s], cfg) for s in SCENARIOS}}


def _stage_json(name: str, parts: list[Part], cfg: DictConfig, a: Assumptions, notes: set[str]) -> dict[str, Any]:
    fractions = {"typical": a.output_fraction, "at_cap": 1.0}
    totals = {s: Usage() for s in SCENARIOS}
    rows = []
    for p in parts:
        usage = {s: part_usage(p, a, f, notes) for s, f in fractions.items()}
        for s in SCENARIOS:
            totals[s].add(usage[s])
        rows.append({"part": p.name, "detail": p.detail, "note": p.note, **_usage_json(usage, cfg)})
    walls = {s: wall_s(totals[s], cfg) for s in SCENARIOS}
    return {"stage": name, "parts": rows, "totals": _usage_json(totals, cfg),
            "wall_s": {s: walls[s][0] for s in SCENARIOS}, "wall_unknown_models": walls["typical"][1],
            "wall_no_prefill_models": walls["typical"][2]}


def _total_json(stages: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("episodes", "calls", "max_calls")
    total: dict[str, Any] = {k: sum(s["totals"][k] for s in stages) for k in keys}
    total["calls_per_episode"] = total["calls"] / total["episodes"] if total["episodes"] else 0.0
    for sc in SCENARIOS:
        total[sc] = {k: sum(s["totals"][sc][k] for s in stages) for k in ("prompt_tokens", "completion_tokens", "cost_usd")}
    unknown = sorted({m for s in stages for m in s["wall_unknown_models"]})
    total["wall_s"] = {sc: None if unknown else sum(s["wall_s"][sc] for s in stages) for sc in SCENARIOS}
    total["wall_unknown_models"] = unknown
    total["wall_no_prefill_models"] = sorted({m for s in stages for m in s["wall_no_prefill_models"]})
    return total


# ------------------------------------------------------------------------------------------ rendering

def fmt_count(x: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= limit:
            return f"{x / limit:.1f}{suffix}"
    return f"{x:.0f}"


def fmt_usd(x: float) -> str:
    if x >= 100:
        return f"${x:,.0f}"
    if x >= 1 or x <= 0:
        return f"${x:.2f}"
    return f"${x:.{max(2, 1 - math.floor(math.log10(x)))}f}"   # two significant digits


def fmt_duration(seconds: float | None) -> str:
    from trinity.evolve.generation_report import hms

    if seconds is None:
        return "unknown"
    h, m, s = hms(seconds)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{s} s"


def _row(stage: str, part: str, detail: str, r: dict[str, Any]) -> list[str]:
    t, c = r["typical"], r["at_cap"]
    return [stage, part, detail, fmt_count(r["episodes"]), f"{fmt_count(r['calls'])} ({r['calls_per_episode']:.2f}/ep)",
            fmt_count(r["max_calls"]), f"{fmt_count(t['prompt_tokens'])} / {fmt_count(c['prompt_tokens'])}",
            f"{fmt_count(t['completion_tokens'])} / {fmt_count(c['completion_tokens'])}",
            f"{fmt_usd(t['cost_usd'])} / {fmt_usd(c['cost_usd'])}"]


def render_table(plan: dict[str, Any]) -> str:
    a = plan["assumptions"]
    head = ["stage", "part", "what", "episodes", "calls (expected)", "max calls", "prompt tok typ/cap",
            "completion tok typ/cap", "cost typ/cap"]
    rows = []
    for st in plan["stages"]:
        rows += [_row(st["stage"], p["part"], p["detail"], p) for p in st["parts"]]
        rows.append(_row(st["stage"], "= stage total", "", st["totals"]))
    rows.append(_row("TOTAL", "", "", plan["total"]))
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = [f"plan: pool '{plan['pool']}' ({', '.join(plan['models'])}), K = {plan['max_turns']}, "
             f"popsize {plan['popsize']}",
             f"assumptions: {a['routing']}; P(ACCEPT) = {a['accept']}; P(Thinker suggests Worker) = "
             f"{a['suggest_worker']}; typical reply = {a['output_fraction']} x its output cap", ""]
    for r in [head] + rows:
        lines.append("  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    lines += [""] + _wall_lines(plan) + [""] + _suite_lines(plan) + ["notes:"] + [f"- {n}" for n in plan["notes"]]
    lines += [f"- {p['part']}: {p['note']}" for st in plan["stages"] for p in st["parts"] if p.get("note")]
    return "\n".join(lines) + "\n"


def _wall_lines(plan: dict[str, Any]) -> list[str]:
    total = plan["total"]
    if total["wall_unknown_models"]:
        return [f"wall time: unknown (no measured throughput for {', '.join(total['wall_unknown_models'])}; "
                "run benchmarks/local_pool_throughput.py)"]
    per_stage = ", ".join(f"{s['stage']} {fmt_duration(s['wall_s']['typical'])}" for s in plan["stages"])
    lines = [f"wall time (estimate at the measured pool throughput, before the response cache and prompt-prefix "
             f"reuse, without queueing or start-up): {fmt_duration(total['wall_s']['typical'])} typical, {fmt_duration(total['wall_s']['at_cap'])} "
             f"at cap ({per_stage})"]
    if total["wall_no_prefill_models"]:
        lines.append(f"  prompt processing left out for {', '.join(total['wall_no_prefill_models'])} "
                     "(no throughput.prefill_tok_s)")
    return lines


def _suite_lines(plan: dict[str, Any]) -> list[str]:
    parts = [f"{s} {v['train']}/{v['validation']}/{v['test']} ~{v['prompt_tokens']} tok ({v['source']})"
             for s, v in plan["suites"].items()]
    return ["suites (train/validation/test items, prompt tokens): " + "; ".join(parts)]


# ------------------------------------------------------------------------------------------ a recording

def recording_plan(cfg: DictConfig, assumptions: Assumptions | None = None, *, thinker_valid: float = 0.0
                   ) -> dict[str, Any]:
    """What `trinity record` will cost before it starts: calls, tokens, dollars and wall time of the items
    still to record, from the tree's branching (trinity.record.tree.tree_size: every (model, role) at every
    turn) and the same token model as the pipeline's plan. Calls shared between paths (the same request
    twice) are counted twice, so this is an upper estimate of the calls; `measured` gives the recording's
    own figures so far when it has some."""
    from trinity.pipeline import record_stage
    from trinity.record import store
    from trinity.record.tree import tree_size

    a = assumptions or Assumptions()
    cfg = record_stage.live_config(cfg)
    notes: set[str] = set()
    settings = record_stage.tree_settings(cfg)
    agents = list(settings.agents)
    root = record_stage.recording_dir(cfg)
    done = set(store.item_entries(store.read_manifest(root))) if (root / store.MANIFEST).exists() else set()
    items = record_stage.chosen_items(cfg)
    pending = [it for it in items if it.uid not in done]
    per_role = tree_size(settings, thinker_valid=thinker_valid, accept=a.accept)
    first = {r: (0.0 if r == "verifier" else len(agents) * settings.samples) for r in settings.roles}
    infos = suite_infos(cfg, sorted({it.suite for it in items}))
    scenarios = {"typical": a.output_fraction, "at_cap": 1.0}
    usage = {s: Usage() for s in scenarios}
    for it in pending:
        tk = suite_tokens(cfg, infos[it.suite], agents, notes)
        for s, fraction in scenarios.items():
            u = Usage(episodes=1.0)
            for role, n in per_role.items():
                if not n:
                    continue
                later = n - first.get(role, 0.0)   # calls after the first turn read one earlier answer or thought
                for m in agents:
                    reply = fraction * tk.caps[("worker", m)]
                    u.call(m, n / len(agents), n / len(agents) * tk.base[role] + later / len(agents) * reply,
                           n / len(agents) * fraction * tk.caps[(role, m)])
            usage[s].add(u)
    walls = {s: wall_s(usage[s], cfg)[0] for s in scenarios}
    measured = None
    if done:
        rec = store.open_recording(root, verify=False)
        summary = store.summarise(rec)
        measured = {**summary, "wall_s_per_item": summary["wall_s"] / max(summary["items"], 1),
                    "calls_per_item": summary["calls"] / max(summary["items"], 1)}
    return {"recording": str(root), "items": len(items), "recorded": len(items) - len(pending),
            "pending": len(pending), "max_turns": settings.max_turns, "roles": list(settings.roles),
            "samples": settings.samples, "thinker_valid_assumed": thinker_valid,
            "calls_per_item": sum(per_role.values()), "calls_per_item_by_role": per_role,
            **{s: {**_figures(usage[s], cfg), "calls": usage[s].total_calls, "wall_s": walls[s]} for s in scenarios},
            "measured": measured, "notes": sorted(notes)}


def render_recording(plan: dict[str, Any]) -> str:
    t, c = plan["typical"], plan["at_cap"]
    lines = [f"recording {plan['recording']}: {plan['recorded']} of {plan['items']} items recorded, "
             f"{plan['pending']} to go (K = {plan['max_turns']}, roles {', '.join(plan['roles'])}, "
             f"{plan['samples']} sample(s) per call)",
             f"tree: {plan['calls_per_item']:.0f} calls per item (" + ", ".join(
                 f"{r} {n:.0f}" for r, n in plan["calls_per_item_by_role"].items() if n) + ")",
             f"to go: {fmt_count(t['calls'])} calls, {fmt_count(t['prompt_tokens'])} prompt + "
             f"{fmt_count(t['completion_tokens'])} completion tokens typical ({fmt_count(c['completion_tokens'])} at "
             f"cap), ${t['cost_usd']:.2f} typical (${c['cost_usd']:.2f} at cap)",
             f"wall time at the measured pool throughput: {fmt_duration(t['wall_s'])} typical, "
             f"{fmt_duration(c['wall_s'])} at cap"]
    m = plan.get("measured")
    if m:
        lines.append(f"measured so far: {m['items']} items, {m['calls']} calls ({m['calls_per_item']:.1f} per item), "
                     f"{m['prompt_tokens']} prompt + {m['completion_tokens']} completion tokens, "
                     f"{fmt_duration(m['wall_s'])} ({fmt_duration(m['wall_s_per_item'])} per item)")
    lines += [f"- {n}" for n in plan.get("notes", [])]
    return "\n".join(lines) + "\n"
