"""The evaluate stage: the trained coordinator and the baselines on the same items.

Methods come from the registry in trinity.eval.methods (`eval.methods`); a method that cannot run
(no trained coordinator, no trained ablations) is skipped and listed in the report with the reason.
Two item sets: the validation items evolution used (so the report compares the evolved
coordinator's validation reward with every single pool model and random routing on exactly those
items) and the test split of the training suites plus the zero-shot transfer suites. Each
(set, method, suite) chunk is saved as soon as it finishes, so an interrupted evaluation resumes.
The report's wins and losses come from paired tests on shared items (trinity.eval.tables.paired_tests).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np
import polars as pl
from omegaconf import DictConfig, OmegaConf

from trinity.errors import ConfigError, TrinityError
from trinity.eval import methods as method_registry
from trinity.eval import report as report_mod
from trinity.eval.episode_functions import run_episode_fn_chunks
from trinity.eval.learning import evolution_x0_test, learning_section
from trinity.eval.tables import (RESULTS_SCHEMA, paired_tests, results_frame, summarize, trace_rows, truncation,
                                 write_results)
from trinity.pipeline import items as item_sel
from trinity.coordinator.saved import coordinator_file
from trinity.pipeline.rollouts import replay_misses, stop_on_replay_misses
from trinity.pipeline.ablation_folders import ablation_names, ablations_root
from trinity.pipeline.workspace import timings_dir
from trinity.coordinator.head import section_roles
from trinity.pipeline.rollouts import RolloutContext, config_key
from trinity.progress import Listener, Progress
from trinity.config_schema.eval import EvalConfig
from trinity.config_schema import group

log = logging.getLogger("trinity.evaluate")


def load_checked_params(coord, path: Path):
    """The saved parameters, refusing a coordinator saved for another pool, backbone, layout or feature
    normalisation; under standardize its routers use the statistics stored with it (Coordinator.read_params)."""
    return coord.read_params(path)


def min_items(cfg: DictConfig) -> int:
    """`eval.min_items` (default 20): below this many paired items the report gives no verdict. Checked
    before any pool call, so a typo fails at once instead of after the whole evaluation."""
    value = cfg.eval.get("min_items")
    if value is None:
        return EvalConfig().min_items
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config key 'eval.min_items' must be a positive integer (paired items needed "
                          f"for a verdict), got {value!r}")
    return value


EVAL_SETS = ("validation", "test")


def set_names(cfg: DictConfig) -> list[str]:
    """`eval.sets` (default both): `validation` = the items evolution validated on (they chose the kept
    coordinator, so they flatter it), `test` = the test split of the evaluated suites."""
    names = cfg.eval.get("sets")
    names = list(EVAL_SETS) if names is None else [str(n) for n in names]
    bad = [n for n in names if n not in EVAL_SETS]
    if bad or not names:
        raise ConfigError(f"config key 'eval.sets' must be a non-empty list of {', '.join(EVAL_SETS)}; got {names}")
    return names


def eval_sets(cfg: DictConfig) -> dict[str, dict[str, list]]:
    n = cfg.eval.items_per_suite
    wanted = set_names(cfg)
    sets: dict[str, dict[str, list]] = {"validation": {}, "test": {}}
    if "validation" in wanted:
        for it in item_sel.validation_items(cfg):
            sets["validation"].setdefault(it.suite, []).append(it)
    if "test" not in wanted:
        return sets
    for suite in item_sel.eval_suites(cfg):
        chosen = item_sel.sample(item_sel.load_split(cfg, [suite], "test"), n, int(cfg.seed), "eval", suite)
        if chosen:
            sets["test"][suite] = chosen
    return sets


def variant_config(cfg: DictConfig, overrides: dict) -> DictConfig:
    """`cfg` with an ablation variant's overrides (dotted key -> value) applied; new keys are allowed."""
    out = copy.deepcopy(cfg)
    OmegaConf.set_readonly(out, False)
    OmegaConf.set_struct(out, False)
    for key, value in (overrides or {}).items():
        OmegaConf.update(out, str(key), value, merge=False, force_add=True)
    return out


def _same_router_config(a: DictConfig, b: DictConfig) -> bool:
    """The coordinator of `b` would route exactly like that of `a` (same backbone, head, prompt)."""
    def part(c: DictConfig) -> tuple:
        return (OmegaConf.to_container(c.coordinator, resolve=True), str(c.protocol.coordinator_system),
                list(c.pool.models))
    return part(a) == part(b)


def load_ablation(cfg: DictConfig, ctx: RolloutContext, name: str) -> method_registry.Ablation:
    """The coordinator the ablation stage saved in `<paths.ablations>/<name>/`, routed with its variant's
    config (`variant.yaml`: dotted key -> value). A variant that changes the coordinator gets its own
    RolloutContext (its own backbone copy, e.g. for SVF or another token position); its router still
    runs on this context's loop and pool. Anything missing or mismatched skips it with the reason."""
    folder = ablations_root(cfg) / name
    path = folder / "coordinator.safetensors"
    if not path.is_file():
        raise method_registry.MethodSkipped(f"no {path} (its training has not finished)")
    overrides = {}
    if (folder / "variant.yaml").is_file():
        overrides = OmegaConf.to_container(OmegaConf.load(folder / "variant.yaml"), resolve=True) or {}
        if not isinstance(overrides, dict):
            raise method_registry.MethodSkipped(f"{folder / 'variant.yaml'} is not a mapping of config keys to values")
    variant = variant_config(cfg, overrides)
    own_context = not _same_router_config(cfg, variant)
    same_features = (variant.coordinator.backbone == cfg.coordinator.backbone
                     and group(variant, "coordinator").token_position == group(cfg, "coordinator").token_position)
    if own_context and not same_features:  # cache_states computed features for the main token position
        variant.paths.states = str(folder / "states")
    try:
        vctx = RolloutContext.get(variant) if own_context else ctx
        params = load_checked_params(vctx.coordinator, path)
    except TrinityError as e:
        raise method_registry.MethodSkipped(str(e)) from None
    protocol = variant.protocol if OmegaConf.to_container(variant.protocol) != OmegaConf.to_container(cfg.protocol) else None
    return method_registry.Ablation(router=lambda: vctx.router_for(params), protocol=protocol,
                                    fingerprint=fingerprint(params, overrides))


def fingerprint(params, extra=None) -> str:
    """A short digest of trained parameters (and a variant's overrides) for chunk file names."""
    h = hashlib.sha256(np.ascontiguousarray(params, dtype=np.float64).tobytes())
    h.update(json.dumps(extra or {}, sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]


@runtime_checkable
class ListPrices(Protocol):
    """A pool that knows its models' list prices (PoolClient); results are costed at them, else at what
    each trace paid."""

    def list_price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float: ...


@dataclass(frozen=True)
class Chunk:
    """One method on one suite of one item set: the unit that is run, saved and resumed."""

    set_name: str
    suite: str
    method: str
    path: Path                     # its saved results (under <paths.cache>/eval/<config key>/)
    specs: list                    # the episodes to run
    protocol: Any                  # the protocol config it runs under
    episode: Any = None            # a method's own episode function (Mixture-of-Agents), else None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.set_name, self.suite, self.method


def run(cfg: DictConfig, *, coordinator_path: Path | None = None, progress: Callable[[str], None] | None = None,
        strict: bool = False, on_work: Listener | None = None, frontier_path: Path | None = None) -> dict:
    """`strict` (an ad-hoc `trinity eval`): a requested method that cannot run is an error; the stage
    (strict=False) skips it and the report lists why. `progress` gets a line per finished chunk,
    `on_work(label, done, total)` the episodes done (trinity.progress). `frontier_path`: a frontier
    folder (the frontier stage's); when it holds a frontier the report says which head to serve for a budget."""
    say = progress or log.info
    frontier = load_frontier(frontier_path)
    needed = min_items(cfg)
    set_names(cfg)   # a typo in eval.sets fails before the backbone loads
    ctx = RolloutContext.get(cfg)
    coordinator_path = Path(coordinator_path or Path(cfg.paths.runs) / "coordinator")
    mctx = method_context(cfg, ctx, coordinator_path)
    methods, skipped = choose_methods(cfg, mctx, strict=strict, say=say)
    sets = eval_sets(cfg)
    finished, pending = plan_chunks(cfg, ctx, mctx, methods, sets)
    results = run_chunks(ctx, finished, pending, say=say, on_work=on_work)
    stop_on_replay_misses("evaluate", replay_misses(ctx))
    summary = summarize(results, samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed),
                        min_items=needed)
    paired = paired_tests(results, "trinity", samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed),
                          min_items=needed)
    write_tables(cfg, results, summary, paired)
    report = write_report(cfg, ctx, methods, skipped, sets, results, summary, paired, coordinator_path, needed,
                          frontier=frontier)
    return {"summary": summary, "paired": paired, "report": str(report), "skipped": skipped,
            "frontier": frontier[1] if frontier is not None else None}


def load_frontier(path: Path | None) -> tuple[dict, pl.DataFrame] | None:
    """(manifest, table) of the frontier folder at `path`; None without one, or when it is off."""
    if path is None or not (Path(path) / "frontier.json").is_file():
        return None
    from trinity.eval.frontier import load_table

    manifest, table = load_table(path)
    return None if table is None else (manifest, table)


def method_context(cfg: DictConfig, ctx: RolloutContext, coordinator_path: Path) -> method_registry.MethodContext:
    """What the methods are built from: the trained coordinator (when saved), the pool, the ablations."""
    params = None
    if coordinator_file(coordinator_path).exists():
        params = load_checked_params(ctx.coordinator, coordinator_file(coordinator_path))
    return method_registry.MethodContext(
        agents=ctx.agents, strongest=0,
        coordinator_router=(lambda mode: ctx.router_for(params, mode)) if params is not None else None,
        no_coordinator=f"none at {coordinator_file(coordinator_path)}",
        coordinator_routing=str(cfg.coordinator.routing),
        coordinator_fingerprint=fingerprint(params) if params is not None else "",
        moa=cfg.eval.get("moa"),
        ablation_names=lambda: ablation_names(cfg),
        load_ablation=lambda name: load_ablation(cfg, ctx, name),
        roles=section_roles(group(cfg, "coordinator").roles),
    )


def choose_methods(cfg: DictConfig, mctx: method_registry.MethodContext, *, strict: bool,
                   say: Callable[[str], None]) -> tuple[list, list]:
    methods, skipped = method_registry.expand_with_skips(list(cfg.eval.methods), mctx)
    if strict and skipped:
        raise method_registry.MethodSkipped("; ".join(f"method '{s.method}' cannot run: {s.reason}" for s in skipped))
    for s in skipped:
        say(f"evaluate: skipping {s.method}: {s.reason}")
    return methods, skipped


def plan_chunks(cfg: DictConfig, ctx: RolloutContext, mctx: method_registry.MethodContext, methods: list,
                sets: dict) -> tuple[dict[tuple, pl.DataFrame], list[Chunk]]:
    """Every (set, suite, method): its results when an earlier, interrupted run saved them, else a Chunk
    to run."""
    folder = Path(cfg.paths.cache) / "eval" / config_key(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    finished: dict[tuple, pl.DataFrame] = {}
    pending: list[Chunk] = []
    for set_name, by_suite in sets.items():
        for suite, items in by_suite.items():
            for m in methods:
                tag = f"__{m.fingerprint}" if m.fingerprint else ""
                path = folder / f"{set_name}__{m.name.replace(':', '_')}__{suite}{tag}.parquet"
                if path.exists():
                    frame = pl.read_parquet(path)
                    if frame.schema == pl.Schema(RESULTS_SCHEMA):  # else written by older code: run it again
                        finished[(set_name, suite, m.name)] = frame
                        continue
                protocol = m.protocol if m.protocol is not None else cfg.protocol
                if m.max_turns is not None:
                    protocol = OmegaConf.merge(protocol, {"max_turns": m.max_turns})
                router = m.build(mctx) if m.episode is None else None
                specs = ctx.specs_for(router, items, generation=-1, candidate=-1, repeats=int(cfg.eval.repeats))
                pending.append(Chunk(set_name, suite, m.name, path, specs, protocol, m.episode))
    return finished, pending


def run_chunks(ctx: RolloutContext, finished: dict[tuple, pl.DataFrame], pending: list[Chunk], *,
               say: Callable[[str], None], on_work: Listener | None) -> pl.DataFrame:
    """Run every pending chunk at once, saving each as it finishes; the results of all chunks."""
    total = sum(len(c.specs) for c in pending)
    say(f"evaluate: {len(finished)} chunks already done, {len(pending)} to run ({total} episodes)")
    price = ctx.pool.list_price if isinstance(ctx.pool, ListPrices) else None
    by_key = dict(finished)
    done = 0

    def save(i: int, traces) -> None:
        nonlocal done
        chunk = pending[i]
        frame = results_frame(trace_rows(chunk.set_name, chunk.method, traces, price=price))
        frame.write_parquet(chunk.path.with_suffix(".tmp"))
        chunk.path.with_suffix(".tmp").replace(chunk.path)
        by_key[chunk.key] = frame
        done += len(chunk.specs)
        bar.at_least(done)   # episodes of methods with their own episode function are counted here
        say(f"eval {done}/{total} episodes: {chunk.set_name}/{chunk.suite} {chunk.method} "
            f"mean reward {frame['reward'].mean():.3f}")

    with Progress("evaluate: episodes", total, listeners=[on_work]) as bar, ctx.counting_episodes(bar.advance):
        run_all(ctx, pending, save)
    frames = [by_key[k] for k in sorted(by_key)]
    return pl.concat(frames) if frames else results_frame([])


def write_tables(cfg: DictConfig, results: pl.DataFrame, summary: pl.DataFrame, paired: pl.DataFrame) -> None:
    out = Path(cfg.paths.eval)
    out.mkdir(parents=True, exist_ok=True)
    write_results(results, out / "results.parquet", timings_dir(cfg, "evaluate") / "results.parquet")
    summary.write_parquet(out / "summary.parquet")
    paired.write_parquet(out / "paired.parquet")


def write_report(cfg: DictConfig, ctx: RolloutContext, methods: list, skipped: list, sets: dict,
                 results: pl.DataFrame, summary: pl.DataFrame, paired: pl.DataFrame, coordinator_path: Path,
                 needed: int, frontier: tuple[dict, pl.DataFrame] | None = None) -> Path:
    """reports/report.md with its charts, and metrics/eval.json; returns the report's path. With a
    `frontier` (manifest, table) the report ends with which head to serve for a budget."""
    reports = Path(cfg.paths.reports)
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "eval").mkdir(exist_ok=True)
    pngs = [str(p.relative_to(reports)) for p in report_mod.charts(summary, reports / "eval")]
    if (reports / "evolution.png").exists():
        pngs.insert(0, "evolution.png")
    train = set(cfg.tasks.train)
    kinds = {s: ("in-distribution" if s in train else "zero-shot transfer") for s in sets["test"]}
    context = [
        f"Pool: {', '.join(ctx.agents)}. Backbone: {cfg.coordinator.backbone.id}. "
        f"K = {cfg.protocol.max_turns} turns. Methods: {', '.join(m.name for m in methods)}.",
        "",
        f"Every method ran on the same items with the same seeds, each item {cfg.eval.repeats} time(s) "
        f"(`eval.repeats`); every interval and test counts items, each item's repeats averaged first. 95% "
        f"intervals are Wilson score intervals when every item's mean reward is 0/1 and a percentile bootstrap "
        f"over items ({cfg.eval.bootstrap_samples} resamples) otherwise, none below {needed} items; wins "
        f"and losses come from paired tests on the shared items. Cost is at the models' list prices (a reply "
        f"shared through the response cache is counted for every method that used it).",
        "",
        f"Methods: `trinity` is the evolved coordinator (agent and role each turn), routed as configured "
        f"(`{cfg.coordinator.routing}`); `trinity:argmax` always takes its most likely agent and role, "
        f"`trinity:sample` draws them from its distribution; `single:<model>` that model "
        "as the only Worker (one turn); `roles:<model>` that model as the only agent with the coordinator "
        "choosing only the role; `random` uniformly random agent and role; `loop:<model>` a fixed "
        "Worker -> Verifier loop; `moa:<model>` Mixture-of-Agents (every pool model answers, that model "
        "merges the answers: L + 1 calls); `ablation:<name>` a coordinator trained by the ablation stage.",
        "",
        "Test suites: " + ", ".join(f"{s} ({k})" for s, k in kinds.items()) + "." if kinds else "",
    ]
    title, reference_section, reference_metrics = "TRINITY evaluation", [], {}
    simulated = simulated_references(cfg, summary, sets)
    if simulated is not None:
        from trinity.simulated.references import label

        title = f"TRINITY evaluation on the {label(group(cfg, 'pool'))}"
        context = [f"**This run used the {label(group(cfg, 'pool'))}: a benchmark with a known optimum, not real models.**", "",
                   *context]
        reference_section, reference_metrics = simulated
    cut_by_suite, cut_by_model = truncation(results, "suite"), truncation(results, "model")
    lead = learning_section(paired, evolution_x0(cfg, coordinator_path, needed), test_names=report_mod.TEST_NAMES,
                            select=str(group(cfg, "evolve").validation.select.value))
    recorded_metrics: dict = {}
    on_recording = recorded_verdict(cfg, ctx, sets, coordinator_path, needed)
    if on_recording is not None:
        from trinity.pipeline.recorded import describe_recording

        verdict_text, recorded_metrics = on_recording
        title = "TRINITY evaluation on real replies (replayed from a recording)"
        context = [f"**Pool replies {describe_recording(cfg)}.**", "", *context]
        lead = verdict_text + list(lead)
    text = report_mod.markdown(
        summary, paired, title=title, context=context, charts=pngs, lead=lead,
        skipped=[(s.method, s.reason) for s in skipped], suite_kinds=kinds, min_items=needed,
        truncated_by_suite=cut_by_suite, truncated_by_model=cut_by_model,
        truncated_worker_by_suite=truncation(results, "suite", role="worker"),
        truncated_worker_by_model=truncation(results, "model", role="worker"), not_run=not_run(cfg))
    if reference_section:
        text = text.rstrip("\n") + "\n\n" + "\n".join(reference_section) + "\n"
    if frontier is not None:
        text = text.rstrip("\n") + "\n\n" + "\n".join(frontier_section(frontier, reports)) + "\n"
    (reports / "report.md").write_text(text)
    mdir = Path(cfg.paths.metrics)
    mdir.mkdir(parents=True, exist_ok=True)
    metrics = {**eval_metrics(summary, paired, results), **reference_metrics, **recorded_metrics}
    (mdir / "eval.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return reports / "report.md"


def recorded_verdict(cfg: DictConfig, ctx: RolloutContext, sets: dict, coordinator_path: Path,
                     needed: int) -> tuple[list[str], dict] | None:
    """On a recording (pool=recorded): the opening verdict from exact per-item expected rewards on the test
    items, with the recording's bounds, and its metrics; None on a live pool or without test items."""
    from trinity.eval import recorded as recorded_report
    from trinity.pipeline.recorded import exact_item_values, replay_path

    path = replay_path(cfg)
    items = [it for suite_items in sets.get("test", {}).values() for it in suite_items]
    if path is None or not items or getattr(ctx.pool, "replay", None) is None:
        return None
    file = coordinator_file(coordinator_path)
    params = load_checked_params(ctx.coordinator, file) if file.is_file() else None
    from trinity.pipeline import items as item_sel

    train_val = [it for split in ("train", "validation") for it in item_sel.load_split(cfg, list(cfg.tasks.train), split)]
    result = exact_item_values(cfg, ctx, params, items, choose_on=train_val)
    lines = recorded_report.verdict_lines(result, recording=f"the recording `{path}`", min_items=needed,
                                          samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed))
    if "trinity" in result["values"]:
        lines += fit_lines(Path(cfg.paths.metrics) / "evolve.json", float(np.mean(result["values"]["trinity"])),
                           len(items))
    return lines, recorded_report.metrics(result)


def fit_lines(evolve_metrics: Path, test_reward: float, test_items: int) -> list[str]:
    """Train, validation and test rewards of the kept mean side by side (exact expected rewards on the
    recording), so over-fitting shows; [] when evolution recorded no exact fit (sampled fitness)."""
    metrics = json.loads(evolve_metrics.read_text()) if evolve_metrics.is_file() else {}
    fit = metrics.get("kept_mean_fit")
    if not fit:
        return []
    val = "-" if fit.get("validation") is None else f"{fit['validation']:.3f}"
    rule = metrics.get("validation_select")
    top = metrics.get("max_validation_generation")
    how = f"kept by the rule `{rule}` among {metrics.get('validations')} validations" if rule else "kept"
    if rule and top is not None and top != fit.get("generation"):
        how += f"; the highest validation, generation {top}, scored {metrics['max_validation_reward']:.3f}"
    return ["", "The kept mean's expected reward (exact, on the recording) by split, so over-fitting shows: "
                f"train {fit['train']:.3f} ({fit['train_items']} items), validation {val} "
                f"({fit['validation_items']} items; generation {fit.get('generation')}, {how}), "
                f"test {test_reward:.3f} ({test_items} items).", ""]


def frontier_section(frontier: tuple[dict, pl.DataFrame], reports: Path) -> list[str]:
    """The frontier's section, with its picture: the frontier stage's (reports/frontier.png) when it lies
    beside the report, else drawn here from the frontier's own table (a `trinity eval` folder)."""
    from trinity.eval import frontier as fr

    manifest, table = frontier
    chart = "frontier.png"
    if not (reports / chart).is_file():
        chart = "eval/frontier.png"
        fr.plot(table, reports / chart, title=f"cost-quality frontier\n({manifest.get('items', '?')} test items, "
                                              f"{manifest.get('routing', '?')} routing)")
    return fr.section(table, manifest=manifest, chart=chart)


# The standard baselines a configuration may leave out of eval.methods (each one config line away).
OPTIONAL_METHODS = ("trinity:argmax", "single_worker", "role_select", "random", "loop", "moa", "ablations")


def not_run(cfg: DictConfig) -> list[str]:
    """What this configuration leaves out and how to run it: the ablations, and baselines not listed."""
    lines = []
    if not group(cfg, "ablations").enabled:
        variants = ", ".join(f"`{v}`" for v in group(cfg, "ablations").variants or [])
        lines.append(f"The paper's ablations ({variants}) were not trained: `ablations.enabled=false` here. "
                     "Train them with `make run OVERRIDES='ablations.enabled=true'`, or see them on the "
                     "routing benchmark: `make run EXPERIMENT=routing_benchmark OVERRIDES='ablations.enabled=true'`.")
    listed = {str(m) for m in cfg.eval.methods}
    missing = [m for m in OPTIONAL_METHODS if m not in listed and not (m == "ablations" and lines)]
    if missing:
        lines.append("Baselines not in `eval.methods`: " + ", ".join(f"`{m}`" for m in missing)
                     + ". Add them with `make run OVERRIDES='eval.methods=[trinity,random,single_worker,moa]'` "
                     "(any list of names from trinity.eval.methods).")
    return lines


def evolution_x0(cfg: DictConfig, coordinator_path: Path, min_items: int) -> dict | None:
    """The kept mean against x0 on evolution's own validation episodes (trinity.eval.learning), when the
    evaluated coordinator is the one the evolve stage kept (its metadata names the generation)."""
    meta_path = coordinator_file(coordinator_path).with_suffix(".json")
    episodes = Path(cfg.paths.runs) / "episodes.parquet"
    if not meta_path.is_file() or not episodes.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("generation") == -1 and meta.get("x0_validation_reward") is not None:
        return {"kept_x0": True, "x0_mean": float(meta["x0_validation_reward"])}
    return evolution_x0_test(pl.read_parquet(episodes), meta.get("generation"),
                             str(meta.get("validation_routing") or cfg.coordinator.routing), min_items=min_items,
                             samples=int(cfg.eval.bootstrap_samples), seed=int(cfg.seed))


SIMULATED_METHODS = ("trinity", "trinity:argmax", "trinity:sample", "random")


def simulated_references(cfg: DictConfig, summary: pl.DataFrame, sets: dict) -> tuple[list[str], dict] | None:
    """On the simulated pool: the report section with the exact reference lines for the test items
    (oracle, random, single models; weighted by the test items per suite) next to the measured rewards of
    `trinity` and `random`, and metrics `test/simulated/*` (the oracle, and each method's share of it)."""
    from trinity.simulated.references import is_simulated, markdown, references

    if not is_simulated(group(cfg, "pool")) or not sets.get("test"):
        return None
    weights = {suite: len(items) for suite, items in sets["test"].items()}
    refs = references(cfg.pool, list(weights), max_turns=int(cfg.protocol.max_turns),
                      roles=group(cfg, "coordinator").roles, weights=weights)
    test = summary.filter(pl.col("set") == "test")
    measured: dict[str, dict[str, float]] = {}
    for r in test.filter(pl.col("method").is_in(SIMULATED_METHODS)).iter_rows(named=True):
        measured.setdefault(r["method"], {})[r["suite"]] = r["mean_reward"]
    oracle = refs["pooled"]["oracle"]
    metrics = {"test/simulated/oracle": round(oracle, 4), "test/simulated/random_exact": round(refs["pooled"]["random"], 4)}
    for method, values in measured.items():
        if values.get("all") is not None and oracle:
            metrics[f"test/simulated/{method}_over_oracle"] = round(values["all"] / oracle, 4)
    return markdown(refs, measured), metrics


def eval_metrics(summary: pl.DataFrame, paired: pl.DataFrame, results: pl.DataFrame) -> dict[str, float]:
    """metrics/eval.json, all suites pooled: `<set>/all/<method>` mean reward (the original keys), plus
    `<set>/paired/<other>/difference|p_value` (trinity against it) and `<set>/truncated_share`, so
    `dvc metrics diff` shows a change in significance or truncation between runs. NaNs are left out
    (JSON has none)."""
    metrics = {f"{r['set']}/{r['suite']}/{r['method']}": round(r["mean_reward"], 4)
               for r in summary.filter(pl.col("suite") == "all").iter_rows(named=True)}
    for r in paired.filter(pl.col("suite") == "all").iter_rows(named=True):
        for key in ("difference", "p_value"):
            if r[key] is not None and not np.isnan(r[key]):
                metrics[f"{r['set']}/paired/{r['other']}/{key}"] = round(r[key], 6)
    pooled = results.with_columns(pl.lit("all").alias("suite"))
    for role, name in ((None, "truncated_share"), ("worker", "worker_truncated_share")):
        for r in truncation(pooled, "suite", role=role).iter_rows(named=True):
            metrics[f"{r['set']}/{name}"] = round(r["share"], 4)
    return metrics


def run_all(ctx: RolloutContext, pending: list[Chunk], on_chunk_done: Callable[[int, list], None]) -> None:
    """Every pending chunk at once on the context's loop: router chunks through ctx.run_chunks, chunks
    of methods with their own episode function (e.g. Mixture-of-Agents) alongside them on the same
    loop and pool, so the pool's slots stay busy across all of them."""
    routed = [i for i, c in enumerate(pending) if c.episode is None]
    own = [i for i, c in enumerate(pending) if c.episode is not None]
    side = None
    if own:
        coro = run_episode_fn_chunks(
            [(pending[i].episode, pending[i].specs, pending[i].protocol) for i in own], ctx.pool, ctx.agents, ctx.grader,
            max_concurrency=int(ctx.cfg.evolve.max_concurrent_episodes),
            on_chunk_done=lambda j, traces: on_chunk_done(own[j], traces))
        side = ctx.loop.submit(coro)
    try:
        ctx.run_chunks([(pending[i].specs, pending[i].protocol) for i in routed],
                       on_chunk_done=lambda j, traces: on_chunk_done(routed[j], traces))
        if side is not None:
            ctx.loop.run(_join(side))
    except BaseException:
        if side is not None:
            side.cancel()
        raise


async def _join(future) -> object:
    return await asyncio.wrap_future(future)
