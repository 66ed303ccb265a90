"""Set-up's free-space checks: a full disk is one clear message before anything is written."""

import collections
import errno
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trinity.errors import AssetError, DiskSpaceError, TrinityError
from trinity.setup import assets, disk

Usage = collections.namedtuple("Usage", "total used free")
ROOT = Path(__file__).resolve().parents[2]


def _free(monkeypatch, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**12, 10**12 - free, free))


def test_existing_ancestor_is_where_a_new_path_lands(tmp_path):
    assert disk.existing_ancestor(tmp_path / "a" / "b" / ".venv") == tmp_path
    assert disk.existing_ancestor(tmp_path) == tmp_path


def test_require_free_names_the_need_the_place_and_what_is_free(monkeypatch, tmp_path):
    _free(monkeypatch, 300_000_000)  # shown in GB from 0.1 GB up, in MB below
    assert disk.require_free(tmp_path, 200_000_000, "x") == 300_000_000
    with pytest.raises(DiskSpaceError) as e:
        disk.require_free(tmp_path / "new", disk.GB, "the thing")
    assert isinstance(e.value, TrinityError)
    assert f"the thing: it needs about 1.0 GB free at {tmp_path}, and 0.3 GB is free" in str(e.value)
    _free(monkeypatch, 20_000_000)
    with pytest.raises(DiskSpaceError, match="and 20 MB is free"):
        disk.require_free(tmp_path, disk.GB, "the thing")


def test_needs_on_one_file_system_are_added(monkeypatch, tmp_path):
    _free(monkeypatch, 5 * disk.GB - 1)
    a, b = tmp_path / "venv", tmp_path / "tmp"
    disk.require_free_together([(a, 4 * disk.GB, "venv")])  # each alone fits
    disk.require_free_together([(b, 1 * disk.GB, "tmp")])
    with pytest.raises(DiskSpaceError, match="venv and tmp"):  # together they do not
        disk.require_free_together([(a, 4 * disk.GB, "venv"), (b, 1 * disk.GB, "tmp")])


def test_cli_exits_1_with_the_message_and_0_when_it_fits(monkeypatch, capsys, tmp_path):
    _free(monkeypatch, 2 * disk.GB)
    assert disk.main(["venv", str(tmp_path / ".venv")]) == 1
    assert "not enough disk space for the virtual environment" in capsys.readouterr().err
    _free(monkeypatch, 50 * disk.GB)
    assert disk.main(["venv", str(tmp_path / ".venv")]) == 0


def test_cli_runs_on_the_standard_library_alone(tmp_path):
    # the Makefile runs it with the system Python before the environment exists: no third-party import
    code = ("import sys, trinity.setup.disk as d; d.main(['venv', sys.argv[1]]); "
            "bad = sorted(m for m in ('torch', 'numpy', 'omegaconf', 'hydra', 'polars') if m in sys.modules); "
            "print(bad)")
    out = subprocess.run([sys.executable, "-I", "-B", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}",
                          str(tmp_path / ".venv")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _parts(tmp_path: Path) -> tuple[list[Path], str]:
    p = tmp_path / "part0.bin"
    p.write_bytes(b"GGUF" * 1000)
    return [p], hashlib.sha256(p.read_bytes()).hexdigest()


def test_assembly_refuses_before_writing_when_the_model_does_not_fit(monkeypatch, tmp_path):
    parts, digest = _parts(tmp_path)
    _free(monkeypatch, 100)
    cache = tmp_path / "cache"
    with pytest.raises(DiskSpaceError, match="model 'toy'"):
        assets.assemble(assets.ModelAsset("toy", "toy.gguf", ("x",), digest, 0, "t", "toy==0"), cache, parts=parts)
    assert not cache.exists()


def test_a_disk_that_fills_during_assembly_leaves_no_partial_file(monkeypatch, tmp_path):
    parts, digest = _parts(tmp_path)
    cache = tmp_path / "cache"
    real_open = open

    class FullFile:
        def __init__(self, f):
            self.f = f

        def write(self, block):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        return FullFile(f) if "w" in mode else f

    monkeypatch.setattr("builtins.open", fake_open)
    with pytest.raises(DiskSpaceError, match="disk filled up while writing model 'toy'") as e:
        assets.assemble(assets.ModelAsset("toy", "toy.gguf", ("x",), digest, 0, "t", "toy==0"), cache, parts=parts)
    assert not isinstance(e.value, AssetError)
    assert list(cache.iterdir()) == []


def test_backbone_conversion_refuses_before_writing_when_its_float32_folder_does_not_fit(monkeypatch, tmp_path):
    from trinity.coordinator.backbone import converted_folder

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"\0" * 1000)
    _free(monkeypatch, disk.FLOAT32_PER_Q4 * 1000 - 1)
    with pytest.raises(DiskSpaceError, match="float32 folder of m.gguf"):
        converted_folder(gguf, tmp_path / "hf" / "m")
    assert not (tmp_path / "hf").exists()
