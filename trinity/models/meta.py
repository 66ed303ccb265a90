"""What a registered version records about the run that trained it, and how two versions' runs differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trinity.files import sha256_file
from trinity.models.store import sha256_text


def data_versions(prepared: str | Path) -> dict[str, Any]:
    """sha256 of the prepare stage's manifest (in `prepared`, paths.prepared) and each suite's source entry
    (None when not prepared)."""
    manifest = Path(prepared) / "manifest.json"
    if not manifest.is_file():
        return {"manifest_sha256": None, "suites": {}}
    suites = (json.loads(manifest.read_text()).get("suites") or {})
    return {"manifest_sha256": sha256_file(manifest),
            "suites": {name: sha256_text(json.dumps(entry, sort_keys=True)) for name, entry in suites.items()}}


def run_meta(*, source_run: str, pool_models: list[str], backbone_id: str, prepared: str | Path, config_sha256: str,
             metrics: dict[str, Any] | None = None, parent: str | None = None,
             coordinator_meta: dict[str, Any] | None = None,
             warm_start: dict[str, Any] | None = None) -> dict[str, Any]:
    """A version's meta.json (the registry adds created time, version and the file's sha256): the run's pool
    models, backbone (the saved coordinator's own when `coordinator_meta` names it), prepared data, config hash."""
    cm = coordinator_meta or {}
    return {
        "source_run": source_run,
        "pool_models": [str(m) for m in pool_models],
        "backbone": {"id": cm.get("backbone_id", str(backbone_id)), "revision": cm.get("backbone_revision")},
        "metrics": dict(metrics or {}),
        "data": data_versions(prepared),
        "config_sha256": config_sha256,
        "parent": parent,
        "warm_start": warm_start,
    }


def differences(champion: dict[str, Any], challenger: dict[str, Any]) -> list[str]:
    """Lines naming what differs between the champion's run and the challenger's: data versions, pool, config."""
    lines = []
    a, b = champion.get("data") or {}, challenger.get("data") or {}
    changed = sorted(s for s in set(a.get("suites") or {}) | set(b.get("suites") or {})
                     if (a.get("suites") or {}).get(s) != (b.get("suites") or {}).get(s))
    if a.get("manifest_sha256") != b.get("manifest_sha256"):
        lines.append("data: the prepared data changed" + (f" (suites: {', '.join(changed)})" if changed else ""))
    pa, pb = list(champion.get("pool_models") or []), list(challenger.get("pool_models") or [])
    if pa != pb:
        added = [m for m in pb if m not in pa]
        removed = [m for m in pa if m not in pb]
        parts = (([f"added {', '.join(added)}"] if added else [])
                 + ([f"removed {', '.join(removed)}"] if removed else []))
        lines.append(f"pool: {' '.join(pa)} -> {' '.join(pb)}"
                     + (f" ({'; '.join(parts)})" if parts else " (reordered)"))
    if champion.get("backbone") != challenger.get("backbone"):
        lines.append(f"backbone: {champion.get('backbone')} -> {challenger.get('backbone')}")
    if champion.get("config_sha256") != challenger.get("config_sha256"):
        lines.append("config: the training config changed (config_sha256 "
                     f"{str(champion.get('config_sha256'))[:12]} -> {str(challenger.get('config_sha256'))[:12]})")
    return lines
