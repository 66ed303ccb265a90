"""The `trinity` command line. Every subcommand takes Hydra overrides (key=value) after its options.

  trinity run [STAGE...] [overrides]  the pipeline (or chosen stages and what they need) through `dvc repro`
  trinity setup                       assemble and verify the local model files (idempotent)
  trinity config [overrides]          print the composed config (`make params` writes params.yaml with it)
  trinity plan [--json] [overrides]   what the config will cost before it runs: episodes, pool calls, tokens,
                                      dollars and wall time per stage (estimates; trinity/plan/ says how)
  trinity pool up|down|status         start / stop / inspect the local pool's servers (llama.cpp or simulated)
  trinity pool calibrate [--items N]  measure the configured pool; write a simulated profile that plays it
  trinity eval --coordinator PATH --suite NAME   evaluate a trained coordinator and the baselines
  trinity serve --coordinator PATH    an OpenAI-compatible endpoint running one episode per request
  trinity serve --frontier PATH       the same over a cost-quality frontier: each request picks a head
  trinity serve --registry PATH       the registry's champion, swapped for a newly promoted one without a restart
  trinity models list|show V|promote V|rollback   the model registry (paths.registry): versions and the champion
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from trinity.errors import TrinityError


def _cmd_run(args) -> int:
    from trinity import repro

    return repro.run(list(args.overrides), force=args.force, dry=args.dry, keep_server=args.keep_server,
                     server=not args.no_server)


def _cmd_setup(args) -> int:
    import time

    from trinity import config
    from trinity.setup import assets

    cfg = config.load(None, args.overrides)
    keys = [m.asset for m in cfg.pool.models.values() if m.asset]
    backbone = cfg.coordinator.backbone
    if backbone.source == "asset":
        keys.append(backbone.id)
    keys += list(args.extra)
    cache = Path(cfg.paths.model_cache) if cfg.paths.model_cache else None
    for key in dict.fromkeys(keys):
        asset = assets.get_asset(key)
        path = assets.model_path(key, cache)
        if args.verify and path.parent == assets.model_cache_dir(cache):
            assets.verify(asset, cache)
        print(f"{key}: {path} ({asset.licence})")
    if backbone.source == "asset" and not args.no_convert:
        from trinity.coordinator.backbone_files import converted_dir, is_converted

        started = time.perf_counter()
        folder = converted_dir(cache, str(backbone.id))
        if not is_converted(folder):   # converted already: no torch or transformers to load
            from trinity.coordinator.backbone import asset_folder

            folder = asset_folder(str(backbone.id), cache)   # made once: later runs and tests load it directly
        print(f"backbone {backbone.id}: {folder} (Hugging Face folder; {time.perf_counter() - started:.1f} s)")
    return 0


def _cmd_config(args) -> int:
    from trinity import config

    if args.reference:
        from trinity.config_reference import render

        print(render(), end="")
        return 0
    print(config.to_yaml(config.compose(args.overrides)), end="")
    return 0


def _cmd_plan(args) -> int:
    import json

    from trinity import config
    from trinity.plan.assumptions import Assumptions
    from trinity.plan.build import build_plan
    from trinity.plan.render import render_table

    cfg = config.load(None, args.overrides)   # no API keys needed: nothing is called
    config.check_pool_choice(cfg, args.overrides, records=args.record)
    assumptions = Assumptions.from_config(cfg, accept=args.accept, suggest_worker=args.suggest_worker,
                                       output_fraction=args.output_fraction)
    if args.record:
        from trinity.plan.recording import recording_plan
        from trinity.plan.render import render_recording

        plan = recording_plan(cfg, assumptions, thinker_valid=args.thinker_valid)
        print(json.dumps(plan, indent=2) if args.json else render_recording(plan), end="\n" if args.json else "")
        return 0
    plan = build_plan(cfg, assumptions)
    print(json.dumps(plan, indent=2) if args.json else render_table(plan), end="\n" if args.json else "")
    return 0


def _cmd_pool(args) -> int:
    from trinity import config
    from trinity.assembly.local_pool import keep_up, local_servers

    cfg = config.load(None, args.overrides)
    if args.action == "calibrate":
        return _calibrate(cfg, args)
    pool = local_servers(cfg.pool, model_cache=cfg.paths.model_cache)
    if pool is None:
        print(f"pool '{cfg.pool.name}' has no local models to serve (hosted endpoints need no servers)")
        return 0
    if args.action == "up":
        try:
            statuses = keep_up(pool)
        except KeyboardInterrupt:
            print("interrupted: stopped the servers started by this command", file=sys.stderr)
            return 130
        for s in statuses:
            print(s.running_line(cfg.pool.host))
    elif args.action == "down":
        pool.down()
    else:
        for s in pool.status():
            print(s.status_line())
    return 0


def _calibrate(cfg, args) -> int:
    from trinity import config
    from trinity.pipeline.calibration import calibrate, calibration_calls, calibration_items

    if args.items < 1:
        print("error: --items must be >= 1", file=sys.stderr)
        return 2
    output = Path(args.output)
    if output.exists() and not args.force:
        print(f"error: {output} exists; pass --force to overwrite it, or write a new profile with "
              f"--output conf/pool/profile/<name>.yaml (then use pool/profile=<name>)", file=sys.stderr)
        return 2
    prepare = " ".join(["trinity run prepare", *args.overrides])   # the same tasks as this command's config
    items = calibration_items(cfg, args.items, prepare=prepare)
    config.check_api_keys(cfg)
    agents = list(cfg.pool.models)
    print(f"calibrate: pool '{cfg.pool.name}' ({', '.join(agents)}), {len(items)} items from "
          f"{', '.join(cfg.tasks.train)}; about {calibration_calls(len(agents), len(items))} calls")
    path = calibrate(cfg, items, output)
    print(f"profile: {path}  (use it with: pool=simulated pool/profile={output.stem})")
    return 0


def _cmd_eval(args) -> int:
    # only what checks the arguments is imported before they are checked: a bad one stops in about a second
    from trinity import config, repro
    from trinity.pipeline.eval_arguments import prepare_request

    overrides = list(args.overrides)
    if args.suite:
        overrides.append(f"eval.suites=[{','.join(args.suite)}]")
    if args.method:
        overrides.append(f"eval.methods=[{','.join(args.method)}]")
    cfg = config.load(None, overrides)
    config.check_pool_choice(cfg, overrides)
    config.check_api_keys(cfg)
    try:
        root = repro.project_root()
    except TrinityError:
        root = Path.cwd()
    # every argument is checked before the pool or the backbone loads; only the run's folder is made
    request = prepare_request(cfg, coordinator=args.coordinator, suites=args.suite or [],
                              methods=args.method or [], output=args.output, root=root, frontier=args.frontier)
    from trinity.assembly.local_pool import local_pool
    from trinity.pipeline import evaluate_stage
    from trinity.pipeline.workspace import apply_output_paths

    run_cfg = apply_output_paths(cfg, request.output_paths)
    print(f"trinity eval: writing to {request.output}", flush=True)
    with local_pool(run_cfg):
        out = evaluate_stage.run(run_cfg, coordinator_path=request.coordinator, progress=print,
                                 strict=bool(args.method), frontier_path=request.frontier)
    if out.get("frontier") is not None:
        from trinity.eval.frontier import text_table

        print(f"which head of {request.frontier} to serve for a budget per query:")
        print(text_table(out["frontier"]))
    print(f"report: {out['report']}")
    print(f"results: {request.output}")
    return 0


def _cmd_serve(args) -> int:
    from trinity import config
    from trinity.serve.server import serve

    overrides = list(args.overrides)
    if args.host:
        overrides.append(f"serve.host={args.host}")
    if args.port is not None:
        overrides.append(f"serve.port={args.port}")
    cfg = config.load(None, overrides)
    # serves a replayed pool live (its API keys checked then); refuses a wrong coordinator (or frontier head) or
    # a taken port before it starts the local pool
    serve(cfg, args.coordinator, frontier=args.frontier, registry=args.registry)
    return 0


def _cmd_record(args) -> int:
    import json

    from trinity import config
    from trinity.pipeline import record_stage

    cfg = config.load(None, list(args.overrides))
    config.check_pool_choice(cfg, args.overrides, records=True)
    if args.status:
        print(json.dumps(record_stage.status(cfg), indent=1))
        return 0
    if args.states:
        from trinity.pipeline import record_states

        print(json.dumps(record_states.run(cfg, progress=print, limit_items=args.limit), indent=1))
        return 0
    from trinity.assembly.local_pool import local_pool

    live = record_stage.live_config(cfg)   # pool=recorded records from the pool it replays
    config.check_api_keys(live)            # the live pool's keys: recording calls it
    try:
        out = record_stage.run(cfg, progress=print, limit_items=args.limit, pool_context=lambda: local_pool(live))
    except KeyboardInterrupt:
        print(f"record: interrupted; every finished item is written to {record_stage.recording_dir(cfg)} and every "
              "finished call is kept in its journal: `trinity record` with the same overrides resumes from there",
              file=sys.stderr)
        return 130
    print(json.dumps(out, indent=1))
    return 1 if out.get("failed") else 0


def _cmd_models(args) -> int:
    from trinity import config
    from trinity.models.listing import versions_table
    from trinity.models.store import ModelRegistry

    overrides = list(args.overrides)
    if args.version is not None and "=" in args.version:   # `trinity models list key=value`
        overrides.insert(0, args.version)
        args.version = None
    if args.action in ("show", "promote") and args.version is None:
        print(f"error: `trinity models {args.action}` needs a version, e.g. `trinity models {args.action} v2`",
              file=sys.stderr)
        return 2
    if args.action in ("list", "rollback") and args.version is not None:
        print(f"error: `trinity models {args.action}` takes no version (got {args.version!r})", file=sys.stderr)
        return 2
    cfg = config.load(None, overrides)
    root = args.registry or cfg.paths.registry
    registry = ModelRegistry(root)
    if args.action == "list":
        champion = registry.champion_name()
        versions = registry.list()
        if not versions:
            print(f"no versions in the registry at {root}")
            return 0
        print("\n".join(versions_table(versions, champion)))
        print(f"champion: {champion or 'none'} (registry: {root})")
    elif args.action == "show":
        import json

        assert args.version is not None  # checked above
        version = registry.show(args.version)
        events = [h for h in registry.history() if h["version"] == version.name]
        print(json.dumps({"version": version.name, "champion": version.name == registry.champion_name(),
                          "folder": str(version.folder), "meta": version.meta, "history": events},
                         indent=2, default=str))
    elif args.action == "promote":
        before = registry.champion_name()
        assert args.version is not None  # checked above
        version = registry.promote(args.version, args.reason or "promoted by hand (trinity models promote)")
        print(f"champion: {version.name} (was {before or 'none'})")
    else:
        before = registry.champion_name()
        version = registry.rollback(args.reason or "rolled back by hand (trinity models rollback)")
        print(f"champion: {version.name} (was {before})")

    if args.action in ("promote", "rollback") and args.dvc_track and cfg.retrain.dvc_track:
        from trinity.models.tracking import track

        print(track(root).message)
    return 0


OVERRIDES_HELP = ("Hydra overrides, key=value, applied to the composed config (conf/), e.g. "
                  "evolve.generations=5 experiment=paper; `trinity config [overrides]` prints the result")


def _version() -> str:
    import importlib.metadata as md

    try:
        return md.version("trinity")
    except md.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="trinity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"trinity {_version()}")
    ap.add_argument("--log-level", default="WARNING", type=str.upper,
                    choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="logging level (default WARNING)")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, example: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, epilog=f"example: {example}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    for add in COMMANDS:
        add(command)
    return ap


# Each command's parser: its arguments and the function that runs it (`func`), in the order `trinity --help` lists them.
CommandAdder = Callable[[str, str, str], argparse.ArgumentParser]


def _add_run(command: CommandAdder) -> None:
    p = command("run", "run the pipeline (or the named stages, and what they depend on) through `dvc repro`, "
                "with this environment's Python; writes params.yaml from the overrides when it changed",
                "trinity run evolve evolve.generations=8")
    p.add_argument("--force", action="store_true", help="rerun the stages even when DVC finds them up to date")
    p.add_argument("--dry", action="store_true", help="print what would run, run nothing")
    p.add_argument("--keep-server", action="store_true",
                   help="leave the run's Prefect server running afterwards (its UI shows every stage's flow run)")
    p.add_argument("--no-server", action="store_true",
                   help="no server for the run: each stage starts a temporary Prefect server of its own")
    p.add_argument("overrides", nargs="*", metavar="STAGE|OVERRIDE",
                   help="stage names (prepare, cache_states, evolve, frontier, ablate, evaluate) and " + OVERRIDES_HELP)
    p.set_defaults(func=_cmd_run)


def _add_setup(command: CommandAdder) -> None:
    p = command("setup", "assemble and verify the local model files", "trinity setup --verify")
    p.add_argument("--verify", action="store_true", help="re-hash assembled files (slow: ~1.7 GB)")
    p.add_argument("--extra", nargs="*", default=[], help="more asset keys (e.g. gemma-3-270m)")
    p.add_argument("--no-convert", action="store_true",
                   help="do not convert the asset backbone into its Hugging Face folder now (its first load will)")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_setup)


def _add_config(command: CommandAdder) -> None:
    p = command("config", "print the composed configuration", "trinity config experiment=paper")
    p.add_argument("--reference", action="store_true",
                   help="print the reference of every option of every config group (docs/CONFIG.md)")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_config)


def _add_plan(command: CommandAdder) -> None:
    p = command("plan", "estimate a configuration's pool calls, tokens, cost and wall time",
                "trinity plan --json evolve.generations=10")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--output-fraction", type=float, default=None,
                   help="typical reply length as a fraction of its output cap (default plan.typical_output_fraction "
                        "or 0.6)")
    p.add_argument("--accept", type=float, default=None,
                   help="assumed P(a Verifier accepts) (default plan.accept_probability or 0.5)")
    p.add_argument("--suggest-worker", type=float, default=None,
                   help="assumed P(a Thinker suggests a Worker next) (default plan.thinker_suggests_worker or 0.5)")
    p.add_argument("--record", action="store_true",
                   help="estimate `trinity record` instead: the recording's calls, tokens, dollars and wall time to go")
    p.add_argument("--thinker-valid", type=float, default=0.0,
                   help="--record: assumed share of Thinker replies with a valid suggestion (default 0)")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_plan)


def _add_pool(command: CommandAdder) -> None:
    p = command("pool", "manage the local pool's servers; calibrate a simulated profile from a pool",
                "trinity pool status")
    p.add_argument("action", choices=["up", "down", "status", "calibrate"])
    p.add_argument("--items", type=int, default=10, help="calibrate: validation items per training suite")
    p.add_argument("--output", default="conf/pool/profile/calibrated.yaml",
                   help="calibrate: the profile file to write (its name is the profile's name)")
    p.add_argument("--force", action="store_true", help="calibrate: overwrite an existing profile file")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_pool)


def _add_eval(command: CommandAdder) -> None:
    p = command("eval", "evaluate a trained coordinator and the baselines (outside the pipeline)",
                "trinity eval --coordinator data/evolve/coordinator --suite mmlu")
    p.add_argument("--coordinator", required=True, help="a trained coordinator folder or .safetensors file")
    p.add_argument("--suite", action="append", help="a task suite (repeatable); default: eval.suites or all")
    p.add_argument("--method", action="append",
                   help="a method or group of eval.methods (repeatable), e.g. trinity, random, single:<model>; "
                        "default: eval.methods. A method that cannot run is an error here, not a skip")
    p.add_argument("--output", help="folder for tables, metrics and the report (default: a new "
                                    "runs/<UTC time>-eval/, paths.ad_hoc_runs); never inside the pipeline's outputs")
    p.add_argument("--frontier", help="a cost-quality frontier folder (data/frontier): print, and add to the report, "
                                      "which of its heads to serve for a budget per query")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_eval)


def _add_serve(command: CommandAdder) -> None:
    p = command("serve", "serve the trained coordinator (or a cost-quality frontier of them) as an "
                "OpenAI-compatible endpoint", "trinity serve --coordinator data/evolve/coordinator --port 8000")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--coordinator", help="a trained coordinator folder or .safetensors file")
    which.add_argument("--frontier", help="a cost-quality frontier folder (data/frontier): each request picks a head "
                                          "with trinity.max_cost_usd or trinity.quality (low | medium | high)")
    which.add_argument("--registry", help="a model registry folder (paths.registry, e.g. models): serve its champion "
                                          "and swap to a newly promoted one without a restart (serve.registry_poll_s)")
    p.add_argument("--host", help="listen address (default serve.host, loopback); others need a token")
    p.add_argument("--port", type=int, help="listen port (default serve.port)")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_serve)


def _add_record(command: CommandAdder) -> None:
    p = command("record", "record every pool call the protocol can make on the chosen items (resumable: a rerun "
                "continues; a finished recording makes no call)", "trinity record --status record.items.train=20")
    p.add_argument("--limit", type=int, default=None, help="record at most the first N chosen items (in the "
                                                           "recording's balanced order)")
    p.add_argument("--status", action="store_true",
                   help="print what the recording holds and what is left; record nothing")
    p.add_argument("--states", action="store_true",
                   help="record no call: compute the coordinator's states of the recorded items that lack them and "
                        "ship them with the recording (<recording>/states/), so cache_states reads them (--limit: at "
                        "most N items)")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_record)


def _add_models(command: CommandAdder) -> None:
    p = command("models", "the model registry: list the versions, show one, promote one to champion, or roll the "
                "champion back to the one before it", "trinity models promote v3 --reason 'better on the new data'")
    p.add_argument("action", choices=["list", "show", "promote", "rollback"])
    p.add_argument("version", nargs="?", help="show / promote: the version (v3, or 3)")
    p.add_argument("--registry", help="the registry folder (default paths.registry)")
    p.add_argument("--reason", help="promote / rollback: why, recorded in the registry's history")
    p.add_argument("--no-dvc-track", dest="dvc_track", action="store_false",
                   help="promote / rollback: do not `dvc add` the registry afterwards (default: retrain.dvc_track)")
    p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    p.set_defaults(func=_cmd_models)


COMMANDS: list[Callable[[CommandAdder], None]] = [_add_run, _add_setup, _add_config, _add_plan, _add_pool, _add_eval,
                                                  _add_serve, _add_record, _add_models]


def _terminate_as_exit() -> None:
    """SIGTERM (how a service manager stops a process) unwinds like Ctrl-C does: SystemExit runs every
    `with LocalPool(...)` exit and `finally`, so the pool servers a command started are stopped. uvicorn
    (trinity serve) handles the signal itself, restores this handler and raises the signal again once it
    has shut down, which lands here."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may also come after a subcommand's options (`pool calibrate --items 4 pool=local`): argparse
    # would take the positional list before the options and refuse the rest, so leftovers that look like
    # Hydra overrides are added to it; anything else is still an error.
    args, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith("-") or "=" not in a]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if rest:
        if not hasattr(args, "overrides"):
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        args.overrides = list(args.overrides or []) + rest
    import logging

    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    _terminate_as_exit()
    try:
        return args.func(args)
    except TrinityError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
