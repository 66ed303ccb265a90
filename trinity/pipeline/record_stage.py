"""Stage `record` (`trinity record`): record every pool call the protocol can make on the chosen items.

For each item (train, validation and test, chosen from the prepared suites by the root seed) the tree of
trinity.record.tree is expanded through the pool client (its concurrency, retries, limits and budget
apply). Every finished call is kept at once in the recording's journal (a response cache), so a killed
recorder loses only the calls in flight; a rerun skips finished items and replays the journal for the
item it was in. Each finished item is written as its own compressed Parquet part and the manifest is
rewritten atomically after it, so finished parts can be committed while the recording goes on.

Failures: a call that fails for good with a request error (e.g. a prompt longer than the model's
context) is part of the dataset (the live pool fails the same way: a failed turn). A call that fails with
a transient error (timeout, connection, server error, after the client's retries) leaves its item
unwritten; the next run tries it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trinity import cpu_model
from trinity.config import as_written, with_values
from trinity.config_schema import TrinityConfig
from trinity.config_schema.choices import RecordOrder
from trinity.config_schema.pool import Retry
from trinity.config_schema.protocol import ProtocolConfig
from trinity.config_schema.record import RecordConfig
from trinity.errors import TrinityError
from trinity.pipeline.items import load_split, sample
from trinity.pool.agents import TurnContext, recorded_request, verify_tool
from trinity.pool.cache import canonical_digest
from trinity.record import store
from trinity.record.replay import RecordedReplies
from trinity.record.tree import ItemTree, Reply, TreeSettings, expand_item, request_hash
from trinity.tasks.types import TaskItem

log = logging.getLogger("trinity.record")

TRANSIENT_ERRORS = {"PoolTimeoutError", "PoolConnectionError", "RequestTimeoutError", "ConflictError",
                    "RateLimitError", "ServerError", "MalformedResponseError"}
SPLIT_ORDER = ("test", "validation", "train")


class RecordingStopped(TrinityError):
    """The recorder stopped before the last item (budget, max_calls): a rerun continues."""


def record_section(cfg: TrinityConfig) -> RecordConfig:
    return cfg.record


def recording_dir(cfg: TrinityConfig) -> Path:
    r = record_section(cfg)
    return Path(r.dir) / r.name


def tree_settings(cfg: TrinityConfig) -> TreeSettings:
    r = cfg.record
    return TreeSettings(agents=tuple(cfg.pool.models), roles=tuple(r.roles), max_turns=cfg.protocol.max_turns,
                        samples=r.samples, verifier_groups=verifier_groups(cfg))


def verifier_groups(cfg: TrinityConfig) -> int:
    """How many distinct Verifier requests one answer gets: agents that send the same Verifier request (one
    server and model, the same setup for the role) are one group."""
    from trinity.pool.providers import resolve_endpoint

    probe = [{"role": "system", "content": ""}, {"role": "user", "content": ""}]
    keys: set[tuple[Any, ...]] = set()
    pool = cfg.pool
    for name, m in pool.models.items():
        try:
            ep = resolve_endpoint(str(name), m, pool)
        except TrinityError:   # e.g. a key not set: count the model as its own group
            keys.add(("model", str(name)))
            continue
        model, messages, temperature, cap = recorded_request(ep, "verifier", probe, None, None)
        keys.add((ep.base_url, model, temperature, cap, messages[-1]["content"]))
    return len(keys)


def protocol_identity(cfg: TrinityConfig) -> dict[str, Any]:
    p = cfg.protocol
    from dataclasses import fields

    out = {f.name: _plain(getattr(p, f.name)) for f in fields(p)}
    out.pop("record_replies", None)
    out.pop("max_turns", None)   # part of the tree: a deeper recording serves any shallower protocol
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def pool_identity(cfg: TrinityConfig) -> dict[str, Any]:
    """Names (head order), model ids, file hashes of local models, and each model's effective sampling."""
    from trinity.pool.providers import resolve_endpoint

    models = []
    pool = cfg.pool
    for name, m in pool.models.items():
        ep = resolve_endpoint(str(name), m, pool)
        asset = m.asset
        digest = None
        if asset:
            from trinity.setup.assets import get_asset

            digest = get_asset(str(asset)).sha256
        models.append({"name": str(name), "model_id": ep.model_id, "asset": asset, "file_sha256": digest,
                       "temperature": ep.temperature, "max_tokens": ep.max_tokens})
    return {"models": models}


def identity(cfg: TrinityConfig) -> dict[str, Any]:
    s = tree_settings(cfg)
    return {"pool": pool_identity(cfg), "protocol": protocol_identity(cfg),
            "tree": {"agents": list(s.agents), "roles": list(s.roles), "samples": s.samples}}


def chosen_items(cfg: TrinityConfig) -> list[TaskItem]:
    """The items to record, in `record.order`: `balanced` interleaves them so that every prefix is balanced
    (round after round, one item of each (split, suite) that still wants items, splits in SPLIT_ORDER);
    `test_first` does so over the test split's suites until they have all their items, then over validation's,
    then train's. Seeded by the root seed; raising a count later keeps the earlier choices (a seeded
    permutation's prefix), and either order chooses the same items."""
    r = cfg.record
    train, transfer = list(cfg.tasks.train), list(cfg.tasks.transfer)
    wanted = {"test": (train + transfer, r.items.test), "validation": (train, r.items.validation),
              "train": (train, r.items.train)}
    queues: dict[str, list[list[TaskItem]]] = {}
    for split in SPLIT_ORDER:
        suites, n = wanted[split]
        queues[split] = [sample(load_split(cfg, [suite], split), n, cfg.seed, "record", split, suite)
                         for suite in suites if n]
    groups = ([queues[split] for split in SPLIT_ORDER] if r.order == RecordOrder.test_first
              else [[q for split in SPLIT_ORDER for q in queues[split]]])
    out: list[TaskItem] = []
    for group in groups:
        while any(group):
            for q in group:
                if q:
                    out.append(q.pop(0))
    return out


def prompt_digest(item: TaskItem) -> str:
    import hashlib

    return hashlib.sha256(item.prompt.encode("utf-8")).hexdigest()[:16]


class Recorder:
    """Expands items through a pool client and writes parts; the journal makes it resumable."""

    def __init__(self, cfg: TrinityConfig, root: Path, pool: Any, grader: Callable, *,
                 progress: Callable[[str], None] = print):
        self.cfg = cfg
        self.root = root
        self.pool = pool
        self.grader = grader
        self.progress = progress
        self.protocol: ProtocolConfig = cfg.protocol
        self.settings = tree_settings(cfg)
        self.r = cfg.record
        self.new_calls = 0
        self.new_by_item: dict[str, int] = {}
        self.stopped: str | None = None

    async def call(self, item: TaskItem, model: str, role: str, messages: list[dict], sample_index: int,
                   context: TurnContext | None = None) -> tuple[str, Reply]:
        ep = self.pool.endpoint(model)
        cap = self.protocol.max_tokens_for(role, item.suite)
        temperature = self.protocol.temperature
        rhash = request_hash(*recorded_request(ep, role, messages, cap, temperature, context))
        result = await self.pool.chat(model, messages, sample_index=sample_index, max_tokens=cap,
                                      temperature=temperature, role=role, context=context)
        if not (result.cached or result.replayed) and result.ok:
            self.new_calls += 1
            self.new_by_item[item.uid] = self.new_by_item.get(item.uid, 0) + 1
        if not result.ok:
            if result.budget_exhausted:
                raise RecordingStopped(f"budget spent: {result.error}")
            if result.error_kind == "PoolConnectionError":
                # the server is not there (not started, crashed): every other item would fail the same way
                raise RecordingStopped(f"{model} cannot be reached: {result.error}; is the pool up?")
            if result.error_kind in TRANSIENT_ERRORS or result.error_kind == "CacheMissError":
                raise _TransientFailure(f"{model} ({role}): {result.error}")
        if self.r.max_calls is not None and self.new_calls >= self.r.max_calls:
            self.stopped = f"record.max_calls={self.r.max_calls} new calls made"
        return rhash, Reply(text=result.text, ok=result.ok, finish_reason=result.finish_reason,
                            prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                            latency_s=round(float(result.latency_s), 3),
                            cost_usd=float(result.price_usd or result.cost_usd),
                            error=result.error if not result.ok else None)

    async def record_item(self, item: TaskItem) -> ItemTree:
        async def call(model: str, role: str, messages: list[dict], s: int, context: TurnContext) -> tuple[str, Reply]:
            return await self.call(item, model, role, messages, s, context)

        return await expand_item(item, self.protocol, self.settings, call, self.grader)


class _TransientFailure(TrinityError):
    pass


def new_manifest(cfg: TrinityConfig, ident: dict[str, Any]) -> dict[str, Any]:
    c = as_written(cfg)["coordinator"]   # the backbone as written
    return {"format": store.FORMAT, "version": store.VERSION, "name": cfg.record.name,
            **ident, "max_turns": cfg.protocol.max_turns,
            "backbone": _plain(c["backbone"]) if "backbone" in c else None,
            "suites": {"train": list(cfg.tasks.train), "transfer": list(cfg.tasks.transfer)},
            "items": [], "runs": []}


def pool_config(cfg: TrinityConfig) -> dict[str, Any]:
    """The live pool's section as recorded into the manifest: resolved, without `replay` and
    `from_recording` (what the recording is replayed with, not what it was made with). It holds no secret:
    API keys are read from the environment variables it names."""
    section = _plain(as_written(cfg)["pool"])
    for key in ("replay", "from_recording"):
        section.pop(key, None)
    return section


def setups_digest(pool_section: Mapping[str, Any] | None) -> str:
    """A digest of every agent's setup (instructions, caps, tool, checking procedure and its version, redo), by
    agent name: what makes an item's recorded tree stale when it changes."""
    models = (pool_section or {}).get("models") or {}
    return canonical_digest({str(name): _setup_identity((models[name] or {}).get("setup")) for name in models})


def _setup_identity(setup: Any) -> Any:
    """A setup as its requests know it: a checking procedure by its versioned tool (verify_tool)."""
    if isinstance(setup, Mapping) and setup.get("verify"):
        return {**setup, "verify": verify_tool(str(setup["verify"]))}
    return setup


def live_config(cfg: TrinityConfig) -> TrinityConfig:
    """The config with the live pool: a recording is always made (or extended) from the live models, so
    `pool=recorded` records from the pool it replays."""
    if cfg.pool.replay is None:
        return cfg
    return with_values(cfg, {}, drop=("pool.replay",), resolved=True)


def with_own_items(cfg: TrinityConfig, progress: Callable[[str], None] = lambda _m: None) -> TrinityConfig:
    """The config whose `paths.prepared` holds the items to record: with `record.prepared` set, that folder,
    prepared now from the tasks section (a suite whose source, options and split settings are unchanged is
    kept as it is; an item's split never changes); else the config as it is."""
    own = record_section(cfg).prepared
    if own is None:
        return cfg
    from trinity.pipeline.suites import prepare_from_config

    manifest = prepare_from_config(cfg, Path(own), reuse_from=[own])
    counts = ", ".join(f"{name} {entry.get('items')}" for name, entry in manifest["suites"].items())
    progress(f"record: items prepared in {own} ({counts})")
    return with_values(cfg, {"paths.prepared": str(own)}, resolved=True)


def status(cfg: TrinityConfig) -> dict[str, Any]:
    """What the recording holds and what a `trinity record` run would still add: the items the live config
    chooses (under pool=recorded the stages see only the recorded items, the recorder all of them)."""
    root = recording_dir(cfg)
    items = chosen_items(with_own_items(live_config(cfg)))
    if (root / store.MANIFEST).exists():
        summary = store.summarise(store.open_recording(root))
        done = set(store.item_entries(store.read_manifest(root)))
    else:
        summary, done = {"items": 0}, set()
    summary["chosen_items"] = len(items)
    summary["pending_items"] = sum(1 for it in items if it.uid not in done)
    summary["stale_items"] = len(stale_items(cfg))   # recorded with other agent setups: expanded again
    return {"recording": str(root), **summary}


def stale_items(cfg: TrinityConfig) -> list[TaskItem]:
    """The recorded items whose agents' setups changed since they were recorded (the next `trinity record`
    expands them again, calling only for what the recording lacks)."""
    cfg = live_config(cfg)
    root = recording_dir(cfg)
    if not (root / store.MANIFEST).exists():
        return []
    stale = stale_uids(store.read_manifest(root), setups_digest(pool_config(cfg)))
    return [it for it in chosen_items(with_own_items(cfg)) if it.uid in stale]


def stale_uids(manifest: Mapping[str, Any], setups: str) -> set[str]:
    """The recorded items of `manifest` recorded with other agent setups than the digest `setups`. An entry
    written before entries kept their digest was recorded with the manifest's own pool_config."""
    kept = setups_digest(manifest["pool_config"]) if manifest.get("pool_config") is not None else setups
    return {e["uid"] for e in manifest.get("items", []) if e.get("setups_sha256", kept) != setups}


def new_calls_of(cfg: TrinityConfig, items: Sequence[TaskItem]) -> int:
    """How many pool calls expanding `items` again needs beyond what the recording holds, counted by a dry run:
    every call the recording answers is replayed, every other one is counted and fails at once (no request
    leaves the machine). A lower bound: the reply a new call would get can lead to further new calls."""
    import httpx

    from trinity.episodes.checks import PROCEDURES
    from trinity.pool.client import PoolClient

    cfg = live_config(cfg)
    root = recording_dir(cfg)
    sent: set[bytes] = set()   # distinct requests: paths that send the same one share a call

    def refuse(request: httpx.Request) -> httpx.Response:
        sent.add(request.content)
        return httpx.Response(400, json={"error": {"message": "dry run: not sent"}})   # final, not retried

    async def no_grade(_item: TaskItem, _answer: str) -> float:
        return 0.0

    async def expand_all() -> None:
        known = RecordedReplies(store.open_recording(root), on_miss="live", keep_live=False)
        pool = PoolClient.from_config(cfg.pool, replay=known, procedures=PROCEDURES,
                                      transport=httpx.MockTransport(refuse), retry=Retry(max_retries=0))
        recorder = Recorder(cfg, root, pool, no_grade, progress=lambda _m: None)
        for item in items:
            with contextlib.suppress(_TransientFailure, RecordingStopped):
                await recorder.record_item(item)
        await pool.aclose()

    if items:
        asyncio.run(expand_all())
    return len(sent)


def grown_items(cfg: TrinityConfig, new: dict[str, int]) -> dict[str, int]:
    """`record.items` raised so that every (split, suite) gets `new[split]` items beyond the most any suite of
    that split holds in the recording now (the configured counts when larger): what one retraining run
    asks of the recorder. The chosen items are a seeded prefix, so the ones already recorded stay chosen."""
    from collections import Counter

    root = recording_dir(cfg)
    held: Counter[tuple[str, str]] = Counter()
    if (root / store.MANIFEST).exists():
        held = Counter((it["split"], it["suite"]) for it in store.read_manifest(root).get("items", []))
    r = record_section(cfg)
    out = {}
    for split in ("train", "validation", "test"):
        most = max((n for (s, _), n in held.items() if s == split), default=0)
        out[split] = max(int(getattr(r.items, split)), most) + int(new.get(split, 0))
    return out


def extend(cfg: TrinityConfig, new: dict[str, int], *, progress: Callable[[str], None] = print,
           **kw: Any) -> tuple[TrinityConfig, dict[str, Any]]:
    """Record `new[split]` more items per suite and split into the recording (retrain.new_items), with the
    live pool and the run's budget; returns the config with the raised `record.items` and the recorder's
    summary. A run stopped by the budget keeps what it recorded (a later run resumes)."""
    items = grown_items(cfg, new)
    grown = with_values(cfg, {"record.items": items})
    progress(f"record: adding {dict(new)} items per suite and split to {recording_dir(cfg)} "
             f"(record.items now {dict(items)})")
    try:
        summary = run(grown, progress=progress, **kw)
    except RecordingStopped as e:
        summary = {"root": str(recording_dir(cfg)), "stopped": str(e)}
    return grown, summary


def run(cfg: TrinityConfig, *, progress: Callable[[str], None] = print, pool_context: Callable[[], Any] | None = None,
        client_factory: Callable[[Path, Any], Any] | None = None, grader: Callable | None = None,
        limit_items: int | None = None) -> dict[str, Any]:
    """Record the pending items; returns a summary. `pool_context()` starts the live pool (the local
    servers) only when there is something to record; `client_factory(journal, known)` (known: the recording's
    replies so far, or None) and `grader` replace the pool client and the suite graders (tests)."""
    cfg = with_own_items(live_config(cfg), progress)
    root = recording_dir(cfg)
    ident = identity(cfg)
    if (root / store.MANIFEST).exists():
        manifest = store.read_manifest(root)
        store.check_identity(manifest, ident, str(root))
        if int(manifest.get("max_turns", 0)) != cfg.protocol.max_turns:
            raise store.RecordingError(f"recording {root} was made with protocol.max_turns="
                                       f"{manifest.get('max_turns')}, this config has {cfg.protocol.max_turns}")
    else:
        manifest = new_manifest(cfg, ident)
    # the live pool's own section, so that `pool=replay record.name=<this>` replays it with no config of its own
    kept_pool, manifest["pool_config"] = manifest.get("pool_config"), pool_config(cfg)
    items = chosen_items(cfg)
    if limit_items is not None:
        items = items[:limit_items]
    done = store.item_entries(manifest)
    for it in items:
        entry = done.get(it.uid)
        if entry is not None and entry.get("prompt_sha256") != prompt_digest(it):
            raise store.RecordingError(f"recording {root}: item {it.uid} was recorded with another prompt "
                                       f"(prepared data changed); record into a new recording name")
    # Agents' setups changed since an item was recorded (a checking Verifier, a redo mode): its tree is expanded
    # again with the recording as the source of every call it already holds, so only the new calls are made.
    stale = stale_uids({**manifest, "pool_config": kept_pool}, setups_digest(manifest["pool_config"]))
    if kept_pool is not None:   # entries keep the setups they were recorded with once the manifest's change
        for entry in done.values():
            entry.setdefault("setups_sha256", setups_digest(kept_pool))
    pending = [it for it in items if it.uid in stale] + [it for it in items if it.uid not in done]
    todo_stale = sum(it.uid in stale for it in pending)
    progress(f"record: {root}: {len(items) - len(pending)} of {len(items)} items recorded, {len(pending)} to go "
             + (f"({todo_stale} of them recorded with other agent setups: only their new calls are made) "
                if todo_stale else "")
             + f"(K={cfg.protocol.max_turns}, roles {','.join(tree_settings(cfg).roles)}, "
             f"samples {tree_settings(cfg).samples})")
    if not pending:
        if (root / store.MANIFEST).exists() and kept_pool != manifest["pool_config"]:
            store.write_manifest(root, manifest)   # a recording made before pool_config was kept gains it
        return {"root": str(root), "recorded": 0, "pending": 0, "items": len(items), "stopped": None}
    return asyncio.run(_record(cfg, root, manifest, items, pending, progress, pool_context, client_factory, grader))


async def _record(cfg: TrinityConfig, root: Path, manifest: dict, items: Sequence[TaskItem], pending: list[TaskItem],
                  progress, pool_context, client_factory, grader) -> dict[str, Any]:
    from trinity.assembly.pool_client import run_budget
    from trinity.episodes.checks import PROCEDURES
    from trinity.pipeline.rollouts import make_grader
    from trinity.pool.client import PoolClient

    journal = root / store.JOURNAL
    root.mkdir(parents=True, exist_ok=True)
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    order = {it.uid: i for i, it in enumerate(items)}
    ctx = pool_context() if pool_context is not None else contextlib.nullcontext()
    recorded, failed = 0, []
    run_entry = {"date": started_at, "machine": machine(), "command": " ".join(shlex.quote(a) for a in sys.argv),
                 "wall_s": 0.0, "items": 0, "new_calls": 0}
    manifest["runs"] = list(manifest.get("runs", [])) + [run_entry]
    with ctx:
        # the calls the recording already holds are served from it (a tree expanded again after a setup
        # changed, an item that shares requests with recorded ones); everything else is a live call, journaled
        known = None
        if any(it.uid in store.item_entries(manifest) for it in pending):
            known = RecordedReplies(store.open_recording(root), on_miss="live", keep_live=False)
        if client_factory is not None:
            pool = client_factory(journal, known)
        else:
            pool = PoolClient.from_config(cfg.pool, cache_path=journal, cache_mode="read_write",
                                          procedures=PROCEDURES, budget=run_budget(cfg), replay=known)
        recorder = Recorder(cfg, root, pool, grader or make_grader(cfg, judge=pool), progress=progress)
        queue: asyncio.Queue[TaskItem] = asyncio.Queue()
        for it in pending:
            queue.put_nowait(it)
        lock = asyncio.Lock()
        in_flight: dict[str, float] = {}   # uid -> when its expansion began

        async def worker() -> None:
            nonlocal recorded
            while not queue.empty() and recorder.stopped is None:
                item = queue.get_nowait()
                t_item = time.monotonic()
                in_flight[item.uid] = t_item
                try:
                    tree = await recorder.record_item(item)
                except _TransientFailure as e:
                    failed.append(item.uid)
                    progress(f"record: {item.uid}: not written, a call failed for now ({e}); a rerun retries it")
                    continue
                except RecordingStopped as e:
                    recorder.stopped = str(e)
                    return
                finally:
                    in_flight.pop(item.uid, None)
                frame = store.tree_frame(tree)
                async with lock:
                    entry = store.write_part(root, store.part_name(order[item.uid], item.uid), frame)
                    entry = {"uid": item.uid, "suite": item.suite, "item_id": item.item_id, "split": item.split,
                             "prompt_sha256": prompt_digest(item),
                             "setups_sha256": setups_digest(manifest["pool_config"]),
                             "nodes": frame.height, "calls": tree.calls,
                             "new_calls": recorder.new_by_item.get(item.uid, 0),
                             "wall_s": round(time.monotonic() - t_item, 1),
                             "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **entry}
                    manifest["items"] = sorted([e for e in manifest["items"] if e["uid"] != item.uid] + [entry],
                                               key=lambda e: order.get(e["uid"], 1 << 30))
                    recorded += 1
                    run_entry.update(wall_s=round(time.monotonic() - t0, 1), items=recorded,
                                     new_calls=recorder.new_calls)
                    store.write_manifest(root, manifest)
                    write_readme(root)
                    elapsed = time.monotonic() - t0
                    left = len(pending) - recorded - len(failed)
                    # items run concurrently and finish in waves: the ETA comes from the rate of new calls
                    done_items = manifest["items"]
                    per_item = sum(e.get("calls", 0) for e in done_items) / max(len(done_items), 1)
                    in_progress = recorder.new_calls - sum(recorder.new_by_item.get(e["uid"], 0) for e in done_items)
                    rate = recorder.new_calls / max(elapsed, 1e-9)
                    eta = max(left * per_item - max(in_progress, 0), 0) / rate if rate > 0 else float("inf")
                    progress(f"record: {len(manifest['items'])}/{len(items)} {item.uid} ({item.split}): "
                             f"{tree.calls} calls ({entry['new_calls']} new) in {entry['wall_s']:.0f}s; "
                             f"{recorded} this run in {_hms(elapsed)}, ETA {_hms(eta)} for {left} more")

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(float(cfg.record.heartbeat_s))
                if in_flight:
                    progress(heartbeat_line(recorder, in_flight, time.monotonic() - t0))

        beat = asyncio.create_task(heartbeat())
        try:
            workers = [asyncio.create_task(worker()) for _ in range(cfg.record.concurrent_items)]
            await asyncio.gather(*workers)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
            run_entry.update(wall_s=round(time.monotonic() - t0, 1), items=recorded, new_calls=recorder.new_calls)
            if recorded:
                store.write_manifest(root, manifest)
                write_readme(root)
            await pool.aclose()
    stopped = recorder.stopped
    if stopped:
        progress(f"record: stopped: {stopped}; rerun `trinity record` to continue")
    return {"root": str(root), "recorded": recorded, "failed": failed, "pending": len(pending) - recorded,
            "items": len(items), "stopped": stopped, "new_calls": recorder.new_calls}


def heartbeat_line(recorder: Recorder, in_flight: dict[str, float], elapsed: float) -> str:
    """How far the items in flight are: new calls so far in this run and per hour, and each item's own new calls
    and minutes (an item's line comes only when its whole tree is recorded)."""
    now = time.monotonic()
    items = ", ".join(f"{uid} ({recorder.new_by_item.get(uid, 0)} new calls, {_hms(now - since)})"
                      for uid, since in in_flight.items())
    rate = recorder.new_calls / elapsed * 3600 if elapsed > 0 else 0.0
    return (f"record: {recorder.new_calls} new calls in {_hms(elapsed)} ({rate:.0f}/h); "
            f"in flight: {items}")


def shown_command(command: str) -> str:
    """A run's command as a reader would type it: `trinity <arguments>` with the machine's own folders left
    out (an argument `key=/abs/path/data/x` shows as `key=data/x` when the path runs through a checkout)."""
    words = shlex.split(command) if command else []
    if not words:
        return ""
    shown = ["trinity"]
    for word in words[1:]:
        key, eq, value = word.partition("=")
        path = value if eq else key
        if path.startswith("/"):
            for marker in ("/data/", "/.trinity/", "/conf/"):
                if marker in path:
                    path = path[path.index(marker) + 1:]
                    break
        shown.append(f"{key}={path}" if eq else path)
    return " ".join(shlex.quote(w) for w in shown)


def machine() -> dict[str, Any]:
    return {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "accelerator": None}


def _hms(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def write_readme(root: Path) -> None:
    """The recording's README: how it was made, from its manifest (command, dates, wall time, calls, tokens)."""
    rec = store.open_recording(root, verify=False)
    s = store.summarise(rec)
    m = rec.manifest
    lines = [f"# Recording `{rec.name}`", "",
             "Real replies of real models, made by `trinity record` (trinity.pipeline.record_stage). Every pool",
             "call the turn protocol can make on each item, up to K turns; one Parquet part per item;",
             "`manifest.json` holds the pool's identity, the prompts and caps, the items and every run.", "",
             f"- items: {s['items']} ({', '.join(f'{k} {v}' for k, v in sorted(s['by_split'].items()))}; "
             f"{', '.join(f'{k} {v}' for k, v in sorted(s['by_suite'].items()))})",
             f"- K = {m.get('max_turns')}, roles {', '.join(m['tree']['roles'])}, "
             f"{m['tree']['samples']} sample(s) per call",
             f"- calls: {s['calls']} distinct ({s['nodes']} tree nodes), {s['failed_calls']} failed for good",
             f"- tokens: {s['prompt_tokens']} prompt, {s['completion_tokens']} completion",
             f"- size: {s['bytes'] / 1e6:.2f} MB in {s['items']} parts",
             f"- recording wall time: {_hms(s['wall_s'])} over {len(m.get('runs', []))} run(s)", "",
             "| model | model id | file SHA-256 |", "|---|---|---|"]
    lines += [f"| {x['name']} | {x['model_id']} | {x.get('file_sha256') or '-'} |" for x in m["pool"]["models"]]
    lines += ["", "Runs:", ""]
    for r in m.get("runs", []):
        mach = r.get("machine") or {}
        where = mach.get("cpu") or mach.get("host", "?")
        lines.append(f"- {r['date']}: {r.get('items', 0)} items, {r.get('new_calls', 0)} new calls, "
                     f"{_hms(r.get('wall_s', 0))} on {where} ({mach.get('cpus', '?')} CPUs); "
                     f"`{shown_command(r.get('command', ''))}`")
    store.atomic_write_bytes(root / "README.md", ("\n".join(lines) + "\n").encode("utf-8"))
