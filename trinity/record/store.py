"""A recording on disk: a manifest plus one compressed Parquet part per item.

    <recording>/manifest.json      identity (pool, protocol, tree, backbone), items with their parts, runs
    <recording>/parts/*.parquet    one item's tree: a row per call on a path (trinity.record.tree.Node)
    <recording>/README.md          how it was made (written by the recorder from the manifest)
    <recording>/.journal.sqlite    the recorder's journal of finished calls (not part of the dataset)

The manifest names every part with its SHA-256; `open_recording` refuses a damaged recording (a part
missing, changed or unreadable) and `check_identity` a mismatched one (another pool, other prompts or
caps, another tree), each with a message naming what differs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from trinity.errors import TrinityError
from trinity.files import atomic_write_bytes, sha256_file
from trinity.record.tree import ItemTree

FORMAT = "trinity-recording"
VERSION = 1
MANIFEST = "manifest.json"
PARTS = "parts"
JOURNAL = ".journal.sqlite"
MAX_PART_BYTES = 2 * 1024 * 1024   # a part the repository tracks in git stays under this

NODE_SCHEMA = {
    "item": pl.Utf8, "node": pl.Int32, "parent": pl.Int32, "turn": pl.Int16, "model": pl.Utf8, "role": pl.Utf8,
    "sample": pl.Int16, "request_hash": pl.Utf8, "reply": pl.Utf8, "ok": pl.Boolean, "error": pl.Utf8,
    "finish_reason": pl.Utf8, "prompt_tokens": pl.Int32, "completion_tokens": pl.Int32, "latency_s": pl.Float64,
    "cost_usd": pl.Float64, "grade": pl.Float64, "verdict": pl.Utf8, "suggested_role": pl.Utf8,
}
# What must be equal for two recordings (or a recording and a config) to be the same dataset.
IDENTITY_KEYS = ("pool", "protocol", "tree")
ABSENT = "<absent>"   # how `differences` shows a key that one side lacks


class RecordingError(TrinityError):
    """A recording that cannot be used: damaged, mismatched, incomplete for a request."""


def part_name(index: int, uid: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", uid).strip("-")[:60]
    return f"{index:05d}-{safe}.parquet"


def tree_frame(tree: ItemTree) -> pl.DataFrame:
    rows = [{"item": tree.item.uid, "node": n.node_id, "parent": n.parent_id, "turn": n.turn, "model": n.model,
             "role": n.role, "sample": n.sample, "request_hash": n.request_hash, "reply": n.reply.text,
             "ok": n.reply.ok, "error": n.reply.error, "finish_reason": n.reply.finish_reason,
             "prompt_tokens": n.reply.prompt_tokens, "completion_tokens": n.reply.completion_tokens,
             "latency_s": n.reply.latency_s, "cost_usd": n.reply.cost_usd, "grade": n.grade,
             "verdict": n.verdict, "suggested_role": n.suggested_role}
             for n in sorted(tree.nodes, key=lambda n: n.node_id)]
    return pl.DataFrame(rows, schema=NODE_SCHEMA)


def write_part(root: Path, name: str, frame: pl.DataFrame) -> dict[str, Any]:
    """Write one part atomically; returns its manifest entry fields (file, sha256, bytes)."""
    import io

    buf = io.BytesIO()
    frame.write_parquet(buf, compression="zstd", compression_level=19, statistics=False)
    data = buf.getvalue()
    if len(data) > MAX_PART_BYTES:
        raise RecordingError(f"part {name} is {len(data)} bytes, over the {MAX_PART_BYTES}-byte limit of a "
                             f"tracked part; record fewer samples per node or shorter caps")
    path = root / PARTS / name
    atomic_write_bytes(path, data)
    return {"part": f"{PARTS}/{name}", "sha256": sha256_file(path), "bytes": len(data)}


def read_manifest(root: Path) -> dict[str, Any]:
    path = Path(root) / MANIFEST
    if not path.exists():
        raise RecordingError(f"{root} is not a recording: {MANIFEST} is missing (make one with `trinity record`)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RecordingError(f"recording manifest {path} is unreadable: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise RecordingError(f"{path} is not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise RecordingError(f"{path} has format version {manifest.get('version')}; this trinity reads {VERSION}")
    return manifest


def write_manifest(root: Path, manifest: Mapping[str, Any]) -> None:
    blob = json.dumps(manifest, indent=1, ensure_ascii=False, sort_keys=False) + "\n"
    atomic_write_bytes(Path(root) / MANIFEST, blob.encode("utf-8"))


def differences(expected: Mapping[str, Any], found: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ, each with both values (shortened). A key that one side lacks and the
    other holds as null is no difference: a setting added after a recording was made, left off (null), changes
    no request, so the recording still serves it (and a recording's null key serves a config without it)."""
    out: list[str] = []
    for key in sorted(set(expected) | set(found), key=str):
        a, b = expected.get(key, ABSENT), found.get(key, ABSENT)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += differences(a, b, name + ".")
        elif a != b and not (_or_absent(a) == ABSENT and _or_absent(b) == ABSENT):
            out.append(f"{name}: recording {_short(b)} vs config {_short(a)}")
    return out


def _or_absent(value: Any) -> Any:
    return ABSENT if value is None else value


def _short(value: Any, n: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def check_identity(manifest: Mapping[str, Any], identity: Mapping[str, Any], where: str) -> None:
    """Refuse a recording made with another pool, protocol or tree than `identity` (what the config says)."""
    diffs = differences({k: identity[k] for k in IDENTITY_KEYS if k in identity},
                        {k: manifest.get(k) for k in IDENTITY_KEYS if k in identity})
    if diffs:
        shown = "; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise RecordingError(f"recording {where} does not match this configuration: {shown}")


@dataclass(frozen=True)
class Recording:
    root: Path
    manifest: dict[str, Any]
    nodes: pl.DataFrame

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.root.name)

    def items(self, split: str | None = None) -> list[dict[str, Any]]:
        return [it for it in self.manifest["items"] if split is None or it["split"] == split]

    def describe(self) -> str:
        """One line naming the recording for reports: which, when, which model files."""
        runs = self.manifest.get("runs") or []
        when = runs[0]["date"][:10] if runs else "?"
        models = ", ".join(f"{m['name']} ({(m.get('file_sha256') or m.get('model_id') or '?')[:12]})"
                           for m in self.manifest["pool"]["models"])
        return (f"recording `{self.name}` ({len(self.manifest['items'])} items, {self.nodes.height} recorded calls, "
                f"recorded {when}; models: {models})")


def open_recording(root: str | Path, *, verify: bool = True) -> Recording:
    """Read a recording; with `verify`, every part's SHA-256 is checked against the manifest."""
    root = Path(root)
    manifest = read_manifest(root)
    frames = []
    for entry in list(manifest.get("items", [])) + list(manifest.get("extra_parts", [])):
        what = f"of item {entry['uid']}" if "uid" in entry else "(live additions)"
        path = root / entry["part"]
        if not path.exists():
            raise RecordingError(f"recording {root} is damaged: part {entry['part']} {what} is missing")
        if verify and sha256_file(path) != entry["sha256"]:
            raise RecordingError(f"recording {root} is damaged: part {entry['part']} {what} "
                                 f"does not match its SHA-256 in the manifest (changed or truncated)")
        try:
            frame = pl.read_parquet(path)
        except Exception as e:
            raise RecordingError(f"recording {root} is damaged: part {entry['part']} is unreadable: {e}") from None
        missing = set(NODE_SCHEMA) - set(frame.columns)
        if missing:
            raise RecordingError(f"recording {root}: part {entry['part']} lacks columns {sorted(missing)}")
        frames.append(frame.select(list(NODE_SCHEMA)))
    nodes = pl.concat(frames) if frames else pl.DataFrame(schema=NODE_SCHEMA)
    return Recording(root, manifest, nodes)


def replies_by_request(nodes: pl.DataFrame) -> dict[str, dict[int, dict[str, Any]]]:
    """request hash -> sample -> the recorded reply (first node of that request and sample)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    cols = ["request_hash", "sample", "reply", "ok", "error", "finish_reason", "prompt_tokens",
            "completion_tokens", "latency_s", "cost_usd"]
    for row in nodes.select(cols).iter_rows(named=True):
        out.setdefault(row["request_hash"], {}).setdefault(int(row["sample"]), row)
    return out


def summarise(recording: Recording) -> dict[str, Any]:
    """Size, calls, tokens and wall time of a recording (README, notes, `trinity record --status`)."""
    nodes = recording.nodes
    distinct = nodes.unique(subset=["item", "request_hash", "sample"]) if nodes.height else nodes
    runs = recording.manifest.get("runs") or []
    by_split: dict[str, int] = {}
    by_suite: dict[str, int] = {}
    for it in recording.items():
        by_split[it["split"]] = by_split.get(it["split"], 0) + 1
        by_suite[it["suite"]] = by_suite.get(it["suite"], 0) + 1
    size = sum(int(it.get("bytes", 0)) for it in recording.items())
    return {
        "items": len(recording.items()), "by_split": by_split, "by_suite": by_suite,
        "nodes": nodes.height, "calls": distinct.height,
        "prompt_tokens": int(distinct["prompt_tokens"].sum() or 0) if distinct.height else 0,
        "completion_tokens": int(distinct["completion_tokens"].sum() or 0) if distinct.height else 0,
        "failed_calls": int((~distinct["ok"]).sum()) if distinct.height else 0,
        "bytes": size, "wall_s": float(sum(float(r.get("wall_s", 0.0)) for r in runs)),
    }


def item_entries(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {it["uid"]: it for it in manifest.get("items", [])}
